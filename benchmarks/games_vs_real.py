"""Do generated games look like real ALFWorld games? Per task type, side by side.

Prints, for each task type: games, receptacles per game, objects per game (placed in
receptacles), and the expert's walkthrough length (mean / median / max), for the
generated games and for official games in ALFWorld's layout.

    python benchmarks/games_vs_real.py --generated data/games \
        --real ../shared/alfworld-real/json_2.1.1 --splits valid_seen valid_unseen train

Note: official pick-two walkthroughs are long because ALFWorld 0.4's stock expert
misreads its own "move" commands; generated games use the fixed expert.
"""

from __future__ import annotations

import argparse
import json
import statistics as st
from pathlib import Path

from alfrl import TASK_TYPES
from alfrl.world.games import find_game_files, read_game


def game_stats(path: Path) -> tuple[int, int]:
    problem = json.loads(path.read_text())["pddl_problem"]
    init = problem[problem.index("(:init"):problem.index("(:goal")]
    return init.count("(receptacleType "), init.count("(inReceptacle ")


def collect(root: Path, splits: list[str]) -> dict[str, list[tuple[int, int, int]]]:
    rows: dict[str, list[tuple[int, int, int]]] = {t: [] for t in TASK_TYPES}
    for split in splits:
        if not (root / split).is_dir():
            continue
        for f in find_game_files(root / split):
            game = read_game(f, split)
            if game is None:
                continue
            n_recep, n_obj = game_stats(f)
            rows[game.task_type].append((n_recep, n_obj, len(game.walkthrough)))
    return rows


def summary(values: list[int]) -> str:
    return f"{st.mean(values):5.1f} / {st.median(values):4.0f} / {max(values):3d}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generated", type=Path, default=Path("data/games"))
    parser.add_argument("--real", type=Path, default=Path("../shared/alfworld-real/json_2.1.1"))
    parser.add_argument("--splits", nargs="+", default=["train", "valid_seen", "valid_unseen", "valid_train"])
    args = parser.parse_args()
    sources = {"generated": collect(args.generated, args.splits)}
    if args.real.is_dir():
        sources["real"] = collect(args.real, args.splits)
    else:
        print(f"(no real games at {args.real}: showing generated games only)")
    print("| task type | source | games | receptacles mean/median/max | objects mean/median/max "
          "| walkthrough mean/median/max |")
    print("|---|---|---|---|---|---|")
    for task in [*TASK_TYPES, "all"]:
        for name, rows in sources.items():
            data = [r for t in TASK_TYPES for r in rows[t]] if task == "all" else rows[task]
            cols = [summary([r[i] for r in data]) for i in range(3)]
            print(f"| {task} | {name} | {len(data)} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
