"""How often a group with no win spread still has a subgoal spread: the signal a subgoal-shaped reward
(issue 18: ``won + alpha * subgoals reached - 0.1 * invalid``) would add to GRPO's groups.

    python scripts/subgoal_spread.py data/results/cpu_12updates_seed0_trajectories.jsonl.xz

Replays every trajectory's actions in the real engine (with the engine's facts), counts the subgoals
of its game reached (:mod:`alfrl.world.subgoals`), and groups the trajectories as they were played: K
consecutive branches of one game. Games are looked up in ``--data-dir`` (default: the generated games
the cpu preset trains on). Prints one table; ``--out FILE`` also writes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.base.paths import games_dir
from alfrl.rl.rollout import load_trajectories
from alfrl.rl.trajectory import groups_of
from alfrl.world.engine import make_fast_engine
from alfrl.world.subgoals import replay_progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trajectories", nargs="+", help="trajectories.jsonl(.xz) files of training runs")
    parser.add_argument("--data-dir", default=None, help="games folder (default: the generated games)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--k", type=int, default=8, help="branches per group")
    parser.add_argument("--out", default=None, help="also write the table to this Markdown file")
    args = parser.parse_args()
    root = Path(args.data_dir) if args.data_dir else games_dir()
    engine = make_fast_engine(facts=True)
    lines = ["| trajectories | groups | with a win spread | without one | of those, with a subgoal spread "
             "| subgoals reached: won / lost episodes |", "|---|---|---|---|---|---|"]
    for path in args.trajectories:
        groups = groups_of(load_trajectories(path), args.k)
        win_spread = no_win_spread = subgoal_spread = 0
        fractions = {True: [], False: []}
        for group in tqdm(groups, desc=Path(path).name, unit="group"):
            reached = []
            for t in group:
                count, total = replay_progress(engine, root / args.split / t.game_id / "game.tw-pddl",
                                                [turn.action for turn in t.turns])
                reached.append(count)
                fractions[t.won].append(count / total)
            if len({t.won for t in group}) > 1:
                win_spread += 1
            else:
                no_win_spread += 1
                subgoal_spread += len(set(reached)) > 1
        mean = {won: sum(v) / len(v) if v else float("nan") for won, v in fractions.items()}
        lines.append(f"| {Path(path).name} | {len(groups)} | {win_spread} | {no_win_spread} | {subgoal_spread} "
                     f"| {mean[True]:.0%} / {mean[False]:.0%} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(f"$ python scripts/subgoal_spread.py {' '.join(args.trajectories)}\n\n{table}\n")


if __name__ == "__main__":
    main()
