"""The scale run read back: every checkpoint played on its pre-registered panel (data/scale/PREREGISTRATION.md),
paired against the warm start and against the other arm, the learning curve, and the run's costs.

Reads committed files only: the panel results of ``scripts/scale_panel.py`` (``data/scale/panel/NAME_PART.jsonl``;
NAME is ``start`` or ``ARM_uN``, PART ``greedy``, ``official`` or ``sampled``) and each arm's
``data/scale/ARM/metrics.jsonl``. Every test is two-sided: the exact sign test on rooms gained and lost (greedy),
the exact sign-flip test on each room's change in its share of the sampled episodes won; every rate has its Wilson
95% interval. ``scripts/scale_report.py`` writes the report. Taught in notebook 06 (section 7), which draws the same
tables and curve.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alfrl import TASK_TYPES
from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.eval.eval_report import SHORT_TASK_NAMES, p_text
from alfrl.eval.eval_stats import paired_outcomes, sign_flip_test, wilson_interval
from alfrl.eval.failures import first_stop, goal_receptacle

if TYPE_CHECKING:
    from alfrl.rl.trajectory import Trajectory

ARMS = ("grpo", "gigpo")
LABELS = {"grpo": "GRPO", "gigpo": "GiGPO"}
PARTS = ("greedy", "official", "sampled")
NAME = re.compile(r"^(start|(grpo|gigpo)_u(\d+))$")
ORIGINS = {"_s1_": "123 earlier rooms (seed 1)", "_s3_": "202 new rooms (seed 3)"}
"""The panel's two parts, told apart by the game id: the earlier rooms were played when the warm starts were
compared (the pre-registration's caveat); the new ones had never been played before the run."""


@dataclass(frozen=True)
class ScaleRun:
    """The committed state of the scale run under ``root`` (``data/scale``): its arms' metrics and its panel."""

    root: Path = REPO_ROOT / "data/scale"

    def checkpoints(self) -> list[str]:
        """Every checkpoint with a greedy panel result: the start first, then each arm by update."""
        names = [p.name[:-len("_greedy.jsonl")] for p in (self.root / "panel").glob("*_greedy.jsonl")]
        return sorted((n for n in names if NAME.match(n)), key=_order)

    def results(self, name: str, part: str) -> list[dict]:
        """One checkpoint's records on one part of the panel ([] where it was not played)."""
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS} (got {part!r})")
        path = self.root / "panel" / f"{name}_{part}.jsonl"
        return read_jsonl(path) if path.is_file() else []

    def lost_room(self, name: str) -> list[Trajectory]:
        """The start's won episode and ``name``'s lost one on the room of :func:`lost_room`, as trajectories
        (kept by ``scripts/scale_panel.py`` in ``panel/NAME_lost_room.jsonl.xz``)."""
        import lzma

        from alfrl.rl.trajectory import Trajectory
        path = self.root / "panel" / f"{name}_lost_room.jsonl.xz"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: python scripts/scale_panel.py {name} ADAPTER --parts lost_room")
        with lzma.open(path, "rt") as f:
            return [Trajectory.from_json(line) for line in f]

    def metrics(self, arm: str) -> list[dict]:
        """An arm's metrics, one line per update ([] before its first update)."""
        path = self.root / arm / "metrics.jsonl"
        return read_jsonl(path) if path.is_file() else []

    def episodes(self, name: str) -> tuple[int, int]:
        """(episodes trained, episodes played) before checkpoint ``name``: (0, 0) for the start."""
        match = NAME.match(name)
        if match is None:
            raise ValueError(f"not a scale checkpoint: {name!r} (start, or ARM_uN with ARM in {ARMS})")
        if name == "start":
            return 0, 0
        metrics = [m for m in self.metrics(match.group(2)) if m["step"] <= int(match.group(3))]
        return sum(m.get("trajectories_trained") or 0 for m in metrics), sum(m["trajectories"] for m in metrics)


def _order(name: str) -> tuple:
    match = NAME.match(name)
    return (0, 0, 0) if name == "start" else (1, ARMS.index(match.group(2)), int(match.group(3)))


def rate(won: int, n: int) -> str:
    """``won/n (percent, Wilson 95% interval)``."""
    low, high = wilson_interval(won, n)
    return f"{won}/{n} ({100 * won / n:.1f}%, {100 * low:.0f}-{100 * high:.0f})"


def net_change(before: list[dict], after: list[dict]) -> tuple[int, dict]:
    """(rooms won after minus before, :func:`paired_outcomes`: gained, lost and the exact two-sided sign test)."""
    return sum(r["won"] for r in after) - sum(r["won"] for r in before), paired_outcomes(before, after)


def greedy_change(before: list[dict], after: list[dict]) -> str:
    """Points gained, rooms gained/lost and the exact two-sided sign test, paired by room."""
    net, paired = net_change(before, after)
    return (f"{100 * net / len(after):+.1f} pts, +{paired['gained']}/-{paired['lost']}, "
            f"p = {p_text(paired['p_value'])}")


def sampled_change(before: list[dict], after: list[dict]) -> str:
    """The mean change in each room's share of episodes won, and the exact two-sided sign-flip test."""
    share = {r["game_id"]: r["wins"] / r["k"] for r in before}
    test = sign_flip_test([r["wins"] / r["k"] - share[r["game_id"]] for r in after if r["game_id"] in share],
                          alternative="two-sided")
    return f"{100 * test['mean']:+.1f} pts, p = {p_text(test['p_value'])}"


def _greedy(records: list[dict]) -> str:
    return rate(sum(r["won"] for r in records), len(records)) if records else "not played"


def _sampled(records: list[dict]) -> str:
    return rate(sum(r["wins"] for r in records), sum(r["k"] for r in records)) if records else "not played"


def summary_rows(run: ScaleRun) -> list[dict]:
    """One row per checkpoint: the panel greedy, official valid_seen and the sampled subset, each against the start."""
    start = {part: run.results("start", part) for part in PARTS}
    rows = []
    for name in run.checkpoints():
        greedy, official, sampled = (run.results(name, part) for part in PARTS)
        later = name != "start"
        rows.append({"checkpoint": name,
                     "episodes trained (played)": "{} ({})".format(*run.episodes(name)) if later else "",
                     "panel, greedy": _greedy(greedy),
                     "panel vs start": greedy_change(start["greedy"], greedy) if later else "",
                     "official valid_seen": _greedy(official),
                     "official vs start": greedy_change(start["official"], official) if later and official else "",
                     "100 rooms x 4 sampled": _sampled(sampled),
                     "sampled vs start": sampled_change(start["sampled"], sampled) if later and sampled else ""})
    return rows


def task_rows(run: ScaleRun) -> list[dict]:
    """Panel rooms won greedily per task type, and the failure column: rooms the start won and the checkpoint lost."""
    greedy = {name: run.results(name, "greedy") for name in run.checkpoints()}
    types = [t for t in TASK_TYPES if any(r["task_type"] == t for r in greedy["start"])]
    won_at_start = {r["game_id"] for r in greedy["start"] if r["won"]}
    rows = []
    for name, records in greedy.items():
        row = {"checkpoint": name}
        for t in types:
            row[f"{SHORT_TASK_NAMES[t]} ({sum(r['task_type'] == t for r in greedy['start'])})"] = \
                sum(r["won"] for r in records if r["task_type"] == t)
        row["rooms the start won, lost here"] = "" if name == "start" else \
            sum(r["game_id"] in won_at_start and not r["won"] for r in records)
        rows.append(row)
    return rows


def origin_rows(run: ScaleRun) -> list[dict]:
    """The greedy panel against the start on each of its two parts (a secondary split the plan did not make)."""
    start = run.results("start", "greedy")
    rows = []
    for name in run.checkpoints():
        row = {"checkpoint": name}
        for tag, label in ORIGINS.items():
            part = [r for r in run.results(name, "greedy") if tag in r["game_id"]]
            row[f"{label}: won"] = rate(sum(r["won"] for r in part), len(part))
            row[f"{label}: vs start"] = "" if name == "start" else \
                greedy_change([r for r in start if tag in r["game_id"]], part)
        rows.append(row)
    return rows


def arm_rows(run: ScaleRun) -> list[dict]:
    """GiGPO against GRPO at every update both played: the pre-registration's secondary head-to-head, paired by
    room (two-sided, as against the start)."""
    names = run.checkpoints()
    updates = sorted({int(n.split("_u")[1]) for n in names if n != "start"})
    rows = []
    for update in updates:
        grpo, gigpo = f"grpo_u{update}", f"gigpo_u{update}"
        if grpo not in names or gigpo not in names:
            continue
        row = {"update": update}
        for part in PARTS:
            first, second = run.results(grpo, part), run.results(gigpo, part)
            if not (first and second):
                row[f"{part}: GiGPO vs GRPO"] = "not played"
                continue
            change = sampled_change if part == "sampled" else greedy_change
            won = "wins" if part == "sampled" else "won"
            row[f"{part}: GiGPO vs GRPO"] = (f"{sum(r[won] for r in second)} vs {sum(r[won] for r in first)}, "
                                             + change(first, second))
        rows.append(row)
    return rows


def cost_lines(run: ScaleRun) -> list[str]:
    """Each arm's wall time (rollouts and updates), episodes, and the share of played groups that taught."""
    lines = []
    for arm in ARMS:
        metrics = run.metrics(arm)
        if not metrics:
            continue
        seconds = sum(m["rollout_seconds"] + m["update_seconds"] for m in metrics)
        trained = sum(m.get("trajectories_trained") or 0 for m in metrics)
        played = sum(m["trajectories"] for m in metrics)
        groups = sum(m["groups"] for m in metrics)
        taught = groups - sum(m["groups_dropped"] for m in metrics)
        lines.append(f"{arm}: {len(metrics)} updates, {trained} episodes trained of {played} played, "
                     f"{seconds / 3600:.1f} h ({seconds / 60 / max(trained, 1) * 1000:.0f} min per 1,000 trained "
                     f"episodes, {seconds / 60 / max(played, 1) * 1000:.0f} per 1,000 played); "
                     f"{taught} of {groups} played groups taught ({100 * taught / max(groups, 1):.0f}%); "
                     f"training success at the rollout temperature {metrics[0]['success']:.2f} (update 1) -> "
                     f"{metrics[-1]['success']:.2f} (update {metrics[-1]['step']})")
    return lines


SCREEN_UPDATE, PRIMARY_UPDATE = 40, 80
"""The plan's update where the arms are compared (the falsifier, the choice of the continued arm) and its primary test's."""
TARGET_POINTS, ALPHA = 5, 0.05


def continued_arm(run: ScaleRun) -> str | None:
    """The arm the plan continues past update 40: more panel rooms won greedily there; a tie broken by more
    sampled panel episodes won, then GiGPO. None until both arms have played the panel at update 40."""
    names = run.checkpoints()
    if any(f"{arm}_u{SCREEN_UPDATE}" not in names for arm in ARMS):
        return None

    def standing(arm: str) -> tuple[int, int, bool]:
        name = f"{arm}_u{SCREEN_UPDATE}"
        return (sum(r["won"] for r in run.results(name, "greedy")),
                sum(r["wins"] for r in run.results(name, "sampled")), arm == "gigpo")
    return max(ARMS, key=standing)


def _against_start(run: ScaleRun, name: str, part: str) -> tuple[int, dict]:
    """:func:`net_change` of checkpoint ``name`` against the start on ``part``."""
    return net_change(run.results("start", part), run.results(name, part))


def verdict_lines(run: ScaleRun) -> list[str]:
    """The pre-registered tests read off the committed panel: the falsifier at update 40, the continued arm, and
    the primary test at update 80 with its target (at least 5 points net with two-sided p < 0.05, and no
    significant loss on the official rooms). Says which are not played yet rather than guessing."""
    names, lines = run.checkpoints(), []
    gains = []
    for arm in ARMS:
        name = f"{arm}_u{SCREEN_UPDATE}"
        if name in names:
            net, paired = _against_start(run, name, "greedy")
            gains.append(net > 0 and paired["p_value"] < ALPHA)
            lines.append(f"{LABELS[arm]} at update {SCREEN_UPDATE}: {net:+d} rooms net, +{paired['gained']}/"
                         f"-{paired['lost']}, two-sided p = {p_text(paired['p_value'])}")
    if len(gains) < len(ARMS):
        lines.append(f"Falsifier: not decided yet (not every arm has played the panel at update {SCREEN_UPDATE}).")
        return lines
    lines.append("Falsifier (neither arm gains on the greedy panel by update 40, two-sided p < 0.05): "
                 + ("does not hold." if any(gains) else "**holds**: neither arm gained."))
    arm = continued_arm(run)
    lines.append(f"Continued arm, by the plan's rule (more panel rooms won greedily at update {SCREEN_UPDATE}): "
                 f"{LABELS[arm]}.")
    final = f"{arm}_u{PRIMARY_UPDATE}"
    if final not in names:
        lines.append(f"Primary test ({LABELS[arm]} at update {PRIMARY_UPDATE} against the start): not played yet.")
        return lines
    net, paired = _against_start(run, final, "greedy")
    rooms = paired["games"]
    needed = math.ceil(TARGET_POINTS * rooms / 100)
    gain_met = net >= needed and paired["p_value"] < ALPHA
    lines.append(f"**Primary test** ({LABELS[arm]} at update {PRIMARY_UPDATE} against the start, greedy panel, "
                 f"exact two-sided sign test): {net:+d} rooms net of {rooms} ({100 * net / rooms:+.1f} points), "
                 f"+{paired['gained']}/-{paired['lost']}, p = {p_text(paired['p_value'])}.")
    if run.results(final, "official") and run.results("start", "official"):
        official_net, official = _against_start(run, final, "official")
        guard = not (official_net < 0 and official["p_value"] < ALPHA)
        guard_text = (f"official rooms {official_net:+d} net, +{official['gained']}/-{official['lost']}, two-sided "
                      f"p = {p_text(official['p_value'])}: " + ("no significant loss" if guard else "a significant loss"))
    else:
        guard, guard_text = False, "official rooms not played here, so the guard is unchecked"
    verdict = "**met**" if gain_met and guard else "**not met**"
    lines.append(f"Target (at least {needed} rooms net with p < {ALPHA}, and no significant loss on the official "
                 f"rooms): {verdict}; gain {'met' if gain_met else 'not met'}, {guard_text}.")
    return lines


DETOUR_TASK = "pick_and_place_simple"
STOPS = {"goal": "then to the goal", "sinkbasin": "then to a sinkbasin", "elsewhere": "then elsewhere",
         "stayed": "took, never moved", "never took": "took nothing"}
"""The columns of :func:`detour_rows`, one per outcome of :func:`alfrl.eval.failures.first_stop`."""


def detour_rows(run: ScaleRun, part: str) -> list[dict]:
    """On one part's pick-and-place rooms, where each checkpoint first went with the object it took (counts of
    :func:`alfrl.eval.failures.first_stop`), beside the rooms won: RL's habit of taking a picked-up object to a
    sinkbasin, the clean task's next stop, shows here. Checkpoints whose committed records keep no ``actions``
    are left out."""
    rows = []
    for name in run.checkpoints():
        records = [r for r in run.results(name, part) if r["task_type"] == DETOUR_TASK]
        if not records or any("actions" not in r for r in records):
            continue
        stops = [first_stop(r["actions"], goal_receptacle(r["game_id"])) for r in records]
        rows.append({"checkpoint": name, "rooms": len(records), "won": sum(r["won"] for r in records),
                     **{label: stops.count(stop) for stop, label in STOPS.items()}})
    return rows


def markdown_table(rows: list[dict]) -> str:
    """Rows of equal keys as a markdown table."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def lost_room(start: list[dict], after: list[dict]) -> tuple[dict, dict]:
    """The first room, in panel order, that the start won and the later checkpoint lost: both full records
    (each with its ``trajectory``), for reading turn by turn what RL unlearned."""
    won_at_start = {r["game_id"]: r for r in start if r["won"]}
    for record in after:
        if not record["won"] and record["game_id"] in won_at_start:
            return won_at_start[record["game_id"]], record
    raise ValueError("the later checkpoint lost no room the start won")


def curve(run: ScaleRun, arm: str) -> list[tuple[int, int, int]]:
    """(episodes trained, panel rooms won greedily, rooms) at the start and each of ``arm``'s checkpoints."""
    points = []
    for name in ["start"] + [n for n in run.checkpoints() if n.startswith(arm + "_")]:
        records = run.results(name, "greedy")
        points.append((run.episodes(name)[0], sum(r["won"] for r in records), len(records)))
    return points


def plot_curve(run: ScaleRun, ax=None):
    """Held-out panel success by episodes trained, both arms, with Wilson 95% bars; returns the axes."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for arm, colour, shift in zip(ARMS, ("tab:blue", "tab:orange"), (-6, 6)):
        points = curve(run, arm)
        rates = [won / n for _, won, n in points]
        bounds = [wilson_interval(won, n) for _, won, n in points]
        ax.errorbar([x + shift for x, _, _ in points], [100 * r for r in rates],
                    yerr=[[100 * (r - b[0]) for r, b in zip(rates, bounds)],
                          [100 * (b[1] - r) for r, b in zip(rates, bounds)]],
                    marker="o", capsize=3, color=colour, label=LABELS[arm])
    start = 100 * points[0][1] / points[0][2]
    ax.axhline(start + 5, color="grey", linestyle=":", label="target: start + 5 points")
    ax.set(xlabel="episodes trained (points nudged apart)",
           ylabel=f"held-out panel won, greedy (%, of {points[0][2]})",
           title="RL at the reference run's scale: rooms never trained on")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return ax
