"""The candidate games of the practice pool: training games that a committed cpu run played as a group
with both a win and a loss (so the warm start, or a policy near it, wins them some of the time).

    python scripts/practice_candidates.py > data/practice/candidates.txt

Reads every ``data/results/*trajectories.jsonl.xz`` (the committed training runs' episodes), groups the
episodes by (run, update, game) and prints, sorted, the id of every game with a group of mixed outcome,
with a comment line saying where they came from. ``python -m alfrl profile --games
data/practice/candidates.txt`` then measures each of them afresh with the warm start.
"""

from __future__ import annotations

import json
import lzma
from collections import defaultdict
from pathlib import Path

from alfrl.base.paths import REPO_ROOT


def mixed_games(paths: list[Path]) -> tuple[list[str], int]:
    """The sorted ids of games with a group holding a win and a loss, and how many distinct games the
    files hold."""
    groups: dict[tuple[str, int, str], list[bool]] = defaultdict(list)
    for path in paths:
        with lzma.open(path, "rt") as f:
            for line in f:
                row = json.loads(line)
                groups[(path.name, row["step"], row["game_id"])].append(bool(row["won"]))
    mixed = {game for (_, _, game), won in groups.items() if any(won) and not all(won)}
    return sorted(mixed), len({game for _, _, game in groups})


def main() -> None:
    paths = sorted((REPO_ROOT / "data" / "results").glob("*trajectories.jsonl.xz"))
    mixed, total = mixed_games(paths)
    print(f"# {len(mixed)} of the {total} training games in {len(paths)} committed runs' trajectories "
          "(data/results/*trajectories.jsonl.xz) had a group with a win and a loss")
    print("# made by: python scripts/practice_candidates.py > data/practice/candidates.txt")
    for game in mixed:
        print(game)


if __name__ == "__main__":
    main()
