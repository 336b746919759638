"""The scale run's report: every checkpoint played on the pre-registered panel, with the tests
data/scale/PREREGISTRATION.md fixed, the learning curve and the run's costs.

    python scripts/scale_report.py            # writes data/results/scale.md and data/results/scale.png

Reads only committed files: the panel results of ``scripts/scale_panel.py`` (``data/scale/panel/NAME_*.jsonl``;
NAME is ``start`` or ``ARM_uN``) and each arm's ``data/scale/ARM/metrics.jsonl``. Every test is two-sided: the exact
sign test on rooms gained and lost (greedy), the exact sign-flip test on each room's change in its share of 4
sampled episodes won; every rate has its Wilson 95% interval.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from alfrl import TASK_TYPES
from alfrl.checkpoint import read_jsonl
from alfrl.eval_report import SHORT_TASK_NAMES, p_text
from alfrl.eval_stats import paired_outcomes, sign_flip_test, wilson_interval
from alfrl.paths import REPO_ROOT

SCALE = REPO_ROOT / "data/scale"
PANEL = SCALE / "panel"
ARMS = ("grpo", "gigpo")
NAME = re.compile(r"^(start|(grpo|gigpo)_u(\d+))$")


def checkpoints() -> list[str]:
    """Every checkpoint with a greedy panel result: the start first, then each arm by update."""
    names = [p.name[:-len("_greedy.jsonl")] for p in PANEL.glob("*_greedy.jsonl")]
    names = [n for n in names if NAME.match(n)]
    return sorted(names, key=lambda n: (n != "start", ARMS.index(n.split("_")[0]) if n != "start" else 0,
                                        int(n.split("_u")[1]) if n != "start" else 0))


def read(name: str, part: str) -> list[dict]:
    path = PANEL / f"{name}_{part}.jsonl"
    return read_jsonl(path) if path.is_file() else []


def trained_episodes(arm: str, update: int) -> tuple[int, int]:
    """(episodes trained, episodes played) by ``arm`` through ``update``, from its metrics."""
    metrics = [m for m in read_jsonl(SCALE / arm / "metrics.jsonl") if m["step"] <= update] \
        if (SCALE / arm / "metrics.jsonl").is_file() else []
    return (sum(m.get("trajectories_trained") or 0 for m in metrics), sum(m["trajectories"] for m in metrics))


def interval(won: int, n: int) -> str:
    low, high = wilson_interval(won, n)
    return f"{won}/{n} ({100 * won / n:.1f}%, {100 * low:.0f}-{100 * high:.0f})"


def greedy_cell(before: list[dict], after: list[dict]) -> str:
    paired = paired_outcomes(before, after)
    won_b, won_a = sum(r["won"] for r in before), sum(r["won"] for r in after)
    return (f"{100 * (won_a - won_b) / len(after):+.1f} pts, +{paired['gained']}/-{paired['lost']}, "
            f"p = {p_text(paired['p_value'])}")


def sampled_cell(before: list[dict], after: list[dict]) -> str:
    share = {r["game_id"]: r["wins"] / r["k"] for r in before}
    diffs = [r["wins"] / r["k"] - share[r["game_id"]] for r in after if r["game_id"] in share]
    test = sign_flip_test(diffs, alternative="two-sided")
    return f"{100 * test['mean']:+.1f} pts, p = {p_text(test['p_value'])}"


def table(names: list[str]) -> str:
    start = {part: read("start", part) for part in ("greedy", "official", "sampled")}
    head = ("| checkpoint | episodes trained (played) | panel, greedy | vs start | official valid_seen | vs start "
            "| 100 rooms x 4 sampled | vs start |\n|---|---|---|---|---|---|---|---|")
    rows = [head]
    for name in names:
        greedy, official, sampled = (read(name, part) for part in ("greedy", "official", "sampled"))
        match = NAME.match(name)
        episodes = "" if name == "start" else "{} ({})".format(*trained_episodes(match.group(2), int(match.group(3))))
        cells = [name, episodes,
                 interval(sum(r["won"] for r in greedy), len(greedy)),
                 greedy_cell(start["greedy"], greedy) if name != "start" else "",
                 interval(sum(r["won"] for r in official), len(official)) if official else "not played",
                 greedy_cell(start["official"], official) if name != "start" and official else "",
                 interval(sum(r["wins"] for r in sampled), sum(r["k"] for r in sampled)) if sampled else "not played",
                 sampled_cell(start["sampled"], sampled) if name != "start" and sampled else ""]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def task_table(names: list[str]) -> str:
    """Panel rooms won greedily per task type, and a failure row: rooms the start won and the checkpoint lost."""
    greedy = {name: read(name, "greedy") for name in names}
    types = [t for t in TASK_TYPES if any(r["task_type"] == t for r in greedy["start"])]
    head = "| checkpoint | " + " | ".join(f"{SHORT_TASK_NAMES[t]} ({sum(r['task_type'] == t for r in greedy['start'])})"
                                         for t in types) + " | rooms the start won, lost here |"
    rows = [head, "|---" * (len(types) + 2) + "|"]
    won_at_start = {r["game_id"] for r in greedy["start"] if r["won"]}
    for name, records in greedy.items():
        lost = "" if name == "start" else str(sum(r["game_id"] in won_at_start and not r["won"] for r in records))
        rows.append(f"| {name} | " + " | ".join(str(sum(r["won"] for r in records if r["task_type"] == t))
                                                for t in types) + f" | {lost} |")
    return "\n".join(rows)


ORIGINS = {"_s1_": "the 123 earlier rooms (seed 1)", "_s3_": "the 202 new rooms (seed 3)"}
"""The panel's two parts, told apart by the game id: the earlier rooms were played when the warm starts were
compared (the pre-registration's caveat); the new ones had never been played before the run."""


def origin_table(names: list[str]) -> str:
    """Greedy panel rooms won against the start, on each part of the panel (a secondary, unplanned split)."""
    start = read("start", "greedy")
    rows = ["| checkpoint | " + " | ".join(f"{label}: won | vs start" for label in ORIGINS.values()) + " |",
            "|---" * (1 + 2 * len(ORIGINS)) + "|"]
    for name in names:
        cells = [name]
        for tag in ORIGINS:
            part = [r for r in read(name, "greedy") if tag in r["game_id"]]
            before = [r for r in start if tag in r["game_id"]]
            cells += [interval(sum(r["won"] for r in part), len(part)),
                      greedy_cell(before, part) if name != "start" else ""]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def costs() -> str:
    lines = []
    for arm in ARMS:
        path = SCALE / arm / "metrics.jsonl"
        if not path.is_file():
            continue
        metrics = read_jsonl(path)
        seconds = sum(m["rollout_seconds"] + m["update_seconds"] for m in metrics)
        trained = sum(m.get("trajectories_trained") or 0 for m in metrics)
        played = sum(m["trajectories"] for m in metrics)
        groups = sum(m["groups"] for m in metrics)
        taught = groups - sum(m["groups_dropped"] for m in metrics)
        lines.append(f"- {arm}: {len(metrics)} updates, {trained} episodes trained of {played} played, "
                     f"{seconds / 3600:.1f} h ({seconds / 60 / max(trained, 1) * 1000:.0f} min per 1,000 trained "
                     f"episodes, {seconds / 60 / max(played, 1) * 1000:.0f} per 1,000 played); "
                     f"{taught} of {groups} played groups taught ({100 * taught / max(groups, 1):.0f}%); "
                     f"training success at the rollout temperature {metrics[0]['success']:.2f} (update 1) -> "
                     f"{metrics[-1]['success']:.2f} (update {metrics[-1]['step']})")
    return "\n".join(lines) or "- no update yet"


def figure(names: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    start = read("start", "greedy")
    for arm, colour in zip(ARMS, ("tab:blue", "tab:orange")):
        points = [(0, start)] + [(trained_episodes(arm, int(n.split("_u")[1]))[0], read(n, "greedy"))
                                 for n in names if n.startswith(arm + "_")]
        xs = [x for x, _ in points]
        rates = [sum(r["won"] for r in rs) / len(rs) for _, rs in points]
        bounds = [wilson_interval(sum(r["won"] for r in rs), len(rs)) for _, rs in points]
        ax.errorbar(xs, [100 * r for r in rates], yerr=[[100 * (r - b[0]) for r, b in zip(rates, bounds)],
                                                        [100 * (b[1] - r) for r, b in zip(rates, bounds)]],
                    marker="o", capsize=3, color=colour, label=arm.upper())
    ax.set(xlabel="episodes trained", ylabel=f"held-out panel won, greedy (%, of {len(start)})",
           title="RL at the reference run's scale: rooms never trained on")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO_ROOT / "data/results/scale"), help="path prefix of the files")
    args = parser.parse_args()
    names = checkpoints()
    if "start" not in names:
        raise SystemExit("the warm start has not played the panel yet: python scripts/scale_panel.py start warmstart_epoch")
    out = Path(args.out)
    figure(names, out.with_suffix(".png"))
    text = f"""# The scale run on its pre-registered panel

Made by `python scripts/scale_report.py` from `data/scale/panel/` and `data/scale/ARM/metrics.jsonl`; the plan,
the tests and their sidedness are in `data/scale/PREREGISTRATION.md`. Panel: 325 generated held-out rooms, greedy
(temperature 0.01), 10 turns; official: ALFWorld's 27 small valid_seen rooms, the same way; sampled: 100 panel rooms x
4 episodes at temperature 0.6, sampling seed 1. "vs start": points gained, rooms gained/lost and the exact two-sided
sign test (greedy), or the exact two-sided sign-flip test over rooms of each room's change in its share won
(sampled). Intervals: Wilson 95%.

{table(names)}

Panel rooms won greedily per task type (the last column: rooms the start won and this checkpoint lost):

{task_table(names)}

The same greedy panel in its two parts (a split the pre-registration did not plan, shown for its caveat: the earlier
rooms were played when the warm starts were compared; the new ones never before the run; two-sided sign tests):

{origin_table(names)}

![panel success by episodes trained]({out.with_suffix('.png').name})

Costs (from each arm's metrics; wall time of rollouts and updates on 2 cores):

{costs()}
"""
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
