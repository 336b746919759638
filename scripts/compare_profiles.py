"""Several samples a game: compare checkpoints profiled on the same games (folders of ``python -m alfrl profile``).

Greedy evaluation plays each game once, so a game is won or lost; sampling it several times at the rollout
temperature measures how often each checkpoint wins it, and pairs the checkpoints game by game with the same
sampling seeds (common random numbers). Two steps:

    python scripts/compare_profiles.py games --data-dir data/heldout --split valid_unseen --limit 32 \\
        --out runs/rl_epoch/heldout32.txt          # the first 32 games of eval --limit's seeded order
    python -m alfrl profile --data-dir data/heldout --split valid_unseen --games runs/rl_epoch/heldout32.txt \\
        --k 4 --temperature 0.6 --seed 1 --adapter ADAPTER --out runs/rl_epoch/sampled_NAME   # each checkpoint
    python scripts/compare_profiles.py report "start=runs/rl_epoch/sampled_start" \\
        "GRPO seed 0=runs/rl_epoch/sampled_seed0" --out data/results/NAME --note "..."

``report`` writes ``NAME.md`` (episodes won with a Wilson interval, games won at least once, the gain in points
of win rate against the first checkpoint with the sign-flip test's p over games, per task type) and
``NAME_profiles.jsonl`` (each game's line of each profile, with its checkpoint's name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from alfrl import TASK_TYPES
from alfrl.eval.eval_report import SHORT_TASK_NAMES, p_text
from alfrl.eval.eval_stats import wilson_interval
from alfrl.eval.practice import paired_gain, read_profile


def write_games(split: str, data_dir: str | None, limit: int, out: Path, max_expert_steps: int | None,
                max_receptacles: int | None) -> list[str]:
    """Write the ids of the first ``limit`` games of ``python -m alfrl eval --limit``'s seeded order."""
    from alfrl.eval.evaluate import EvalConfig, selected_games
    config = EvalConfig(split=split, data_dir=data_dir, limit=limit, max_expert_steps=max_expert_steps,
                        max_receptacles=max_receptacles)
    ids = [g.game_id for _, g in selected_games(config)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{i}\n" for i in ids))
    return ids


def _cell(won: int, n: int) -> str:
    low, high = wilson_interval(won, n)
    return f"{won}/{n} ({100 * won / n:.0f}%, {100 * low:.0f}-{100 * high:.0f}%)"


def compare(profiles: dict[str, list[dict]]) -> dict:
    """Each checkpoint's totals and per task type wins, and its paired gain against the first checkpoint."""
    names = list(profiles)
    games = [r["game_id"] for r in profiles[names[0]]]
    for name in names[1:]:
        if sorted(r["game_id"] for r in profiles[name]) != sorted(games):
            raise ValueError(f"{name} was profiled on other games than {names[0]}: profile both on the same --games")
    rows = {}
    for name in names:
        lines = profiles[name]
        tasks = {}
        for r in lines:
            won, played = tasks.get(r["task_type"], (0, 0))
            tasks[r["task_type"]] = (won + r["wins"], played + r["k"])
        rows[name] = {"won": sum(r["wins"] for r in lines), "episodes": sum(r["k"] for r in lines),
                      "games": len(lines), "games_won": sum(r["wins"] > 0 for r in lines),
                      "games_always_won": sum(r["wins"] == r["k"] for r in lines), "tasks": tasks,
                      "k": sorted({r["k"] for r in lines})}
        if name != names[0]:
            gain = paired_gain(profiles[names[0]], lines, games)
            rows[name]["against_first"] = {k: gain[k] for k in ("gain_points", "p_value", "p_two_sided")}
            rows[name]["against_first"]["games_up"] = sum(d > 0 for d in gain["differences"])
            rows[name]["against_first"]["games_down"] = sum(d < 0 for d in gain["differences"])
    return rows


def markdown(rows: dict, note: str = "") -> str:
    names = list(rows)
    first = rows[names[0]]
    lines = [note, ""] if note else []
    lines += [f"| checkpoint | episodes won | games won at least once (of {first['games']}) | won every time | "
              f"against {names[0]}: points | games up/down | p (one-sided; two-sided) |",
              "|---|---|---|---|---|---|---|"]
    for name in names:
        r = rows[name]
        a = r.get("against_first")
        against = (f"{a['gain_points']:+.1f} | {a['games_up']}/{a['games_down']} | "
                   f"{p_text(a['p_value'])}; {p_text(a['p_two_sided'])}") if a else " | | "
        lines.append(f"| {name} | {_cell(r['won'], r['episodes'])} | {r['games_won']} | {r['games_always_won']} | "
                     f"{against} |")
    tasks = [t for t in TASK_TYPES if t in first["tasks"]]
    lines += ["", "Episodes won per task type:", "",
              "| checkpoint | " + " | ".join(f"{SHORT_TASK_NAMES[t]} ({first['tasks'][t][1]})" for t in tasks) + " |",
              "|---|" + "---|" * len(tasks)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(str(rows[name]["tasks"][t][0]) for t in tasks) + " |")
    lines += ["", "p: the sign-flip test over games of each game's difference in win share (one-sided: gained)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("games", help="write the ids of the first --limit games of eval --limit's seeded order")
    g.add_argument("--data-dir", default=None)
    g.add_argument("--split", default="valid_unseen")
    g.add_argument("--limit", type=int, required=True)
    g.add_argument("--max-expert-steps", type=int, default=8)
    g.add_argument("--max-receptacles", type=int, default=20)
    g.add_argument("--out", required=True, type=Path)
    r = sub.add_parser("report", help="compare profiles of the same games; the first is the baseline")
    r.add_argument("profiles", nargs="+", metavar="NAME=FOLDER")
    r.add_argument("--out", required=True, help="path prefix of the files written (e.g. data/results/NAME)")
    r.add_argument("--note", default="", help="a line put above the table (the commands behind it)")
    args = parser.parse_args()
    if args.command == "games":
        ids = write_games(args.split, args.data_dir, args.limit, args.out, args.max_expert_steps, args.max_receptacles)
        print(f"{args.out}: {len(ids)} games")
        return
    profiles = {}
    for item in args.profiles:
        name, sep, folder = item.partition("=")
        if not sep:
            parser.error(f"{item}: expected NAME=FOLDER (a folder of python -m alfrl profile)")
        profiles[name] = read_profile(folder)
    rows = compare(profiles)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, args.note)
    Path(f"{out}.md").write_text(text)
    with open(f"{out}_profiles.jsonl", "w") as f:
        for name, lines in profiles.items():
            for line in lines:
                f.write(json.dumps({"checkpoint": name, **line}) + "\n")
    print(text)


if __name__ == "__main__":
    main()
