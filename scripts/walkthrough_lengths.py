"""Expert walkthrough lengths of game packs against ALFWorld's official games: the table of data/long/README.md.

    .venv/bin/python scripts/walkthrough_lengths.py data/packs/train.jsonl.xz data/long/train.jsonl.xz
    .venv/bin/python scripts/walkthrough_lengths.py data/long/train.jsonl.xz --official ../shared/alfworld-real/json_2.1.1

Each pack's games by the length of the expert's walkthrough (its ``walkthrough`` field: ALFWorld's handcoded
expert, as the generator stored it), in the README's bins, with the median; then each pack's task types and the
walkthroughs of at most ``--max-steps`` steps. With ``--official DIR``, the solvable valid_seen games there first
(the same expert's walkthrough, as :func:`alfrl.world.games.load_games` reads it).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from pathlib import Path

from alfrl.world.pack import read_pack

BINS = ((1, 9), (10, 19), (20, 29), (30, 39), (40, 50))


def row(name: str, lengths: list[int]) -> str:
    """One table row: games per bin, over 50, and the median."""
    counts = [sum(lo <= n <= hi for n in lengths) for lo, hi in BINS] + [sum(n > 50 for n in lengths)]
    return f"| {name} ({len(lengths):,}) | " + " | ".join(map(str, counts)) + f" | {statistics.median(lengths):g} |"


def official_lengths(folder: Path) -> list[int]:
    """Expert steps of the solvable official valid_seen games in ``folder`` (ALFWorld's layout)."""
    from alfrl.world.games import load_games
    return [len(game.walkthrough) for game in load_games("valid_seen", folder)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packs", nargs="+", help="<split>.jsonl.xz packs")
    parser.add_argument("--official", help="ALFWorld's official games (a json_2.1.1 folder)")
    parser.add_argument("--max-steps", type=int, default=50, help="walkthroughs counted as fitting (default 50)")
    args = parser.parse_args()
    print("| games | " + " | ".join(f"{lo}-{hi}" for lo, hi in BINS) + " | over 50 | median |")
    print("|---|" + "---|" * (len(BINS) + 2))
    if args.official:
        print(row("official valid_seen", official_lengths(Path(args.official))))
    packs = {pack: read_pack(Path(pack)) for pack in args.packs}
    for pack, records in packs.items():
        print(row(f"`{pack.removesuffix('.jsonl.xz')}`", [len(r["walkthrough"]) for r in records]))
    print()
    for pack, records in packs.items():
        fit = sum(len(r["walkthrough"]) <= args.max_steps for r in records)
        types = Counter(r["task_type"] for r in records).most_common()
        scenes = sorted({int(r["scene"]) for r in records})
        print(f"{pack}: {len(records):,} games, {fit:,} walkthroughs of at most {args.max_steps} steps; "
              f"{len(scenes)} floor plans; " + ", ".join(f"{t} {n}" for t, n in types))


if __name__ == "__main__":
    main()
