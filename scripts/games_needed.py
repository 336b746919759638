"""How many held-out games a gain of a given size needs before the paired sign test can show it.

    python scripts/games_needed.py --changed 0.18 --gains 0.04 0.1 --seconds-per-game 9
    python scripts/games_needed.py --outcomes data/results/beyond_grpo_outcomes.jsonl \\
        --before "warm start" --after "GRPO replayed" --seconds-per-game 9

Two checkpoints evaluated greedily on the same games disagree on a share of them (``--changed``, or
measured from a committed outcomes file): a game won by one and lost by the other. A gain is the
gained minus the lost share. For each gain this prints how many games give the exact sign test a
50% and an 80% chance of p < 0.05 (:func:`alfrl.eval.eval_stats.games_needed`), and what evaluating one
checkpoint on that many games costs at ``--seconds-per-game``.
"""

from __future__ import annotations

import argparse

from alfrl.base.checkpoint import read_jsonl
from alfrl.eval.eval_stats import games_needed, paired_outcomes


def changed_share(path: str, before: str, after: str) -> tuple[float, dict]:
    """The share of games on which two checkpoints of an outcomes file disagree, and their paired test."""
    rows = read_jsonl(path)
    sides = [[r for r in rows if r["checkpoint"] == name] for name in (before, after)]
    for name, side in zip((before, after), sides):
        if not side:
            names = sorted({r["checkpoint"] for r in rows})
            raise SystemExit(f"{path} has no outcomes of checkpoint {name!r}; it has {names}")
    paired = paired_outcomes(*sides)
    return (paired["gained"] + paired["lost"]) / paired["games"], paired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changed", type=float, help="share of games whose outcome changes between checkpoints")
    parser.add_argument("--outcomes", help="a committed outcomes file to measure --changed from")
    parser.add_argument("--before", default="warm start")
    parser.add_argument("--after")
    parser.add_argument("--gains", type=float, nargs="+", default=[0.02, 0.04, 0.06, 0.08, 0.10, 0.15])
    parser.add_argument("--seconds-per-game", type=float, default=None,
                        help="evaluation cost of one game (9 on a 2-core CPU for the small rooms)")
    args = parser.parse_args()
    if args.outcomes:
        if not args.after:
            parser.error("--outcomes needs --after (and --before, default 'warm start')")
        changed, paired = changed_share(args.outcomes, args.before, args.after)
        print(f"{args.before} -> {args.after}: {paired['gained']} gained, {paired['lost']} lost of "
              f"{paired['games']} games (p={paired['p_value']:.2f}): changed share {changed:.3f}")
    elif args.changed is not None:
        changed = args.changed
    else:
        parser.error("give --changed or --outcomes with --after")
    costed = args.seconds_per_game is not None
    header = ["gain (success points)", "games for 50% power", "games for 80% power"]
    print("\n| " + " | ".join(header + ["evaluation of one checkpoint at 80%"] * costed) + " |")
    print("|" + "---|" * (len(header) + costed))
    for gain in args.gains:
        if gain > changed:
            print(f"| {gain:.2f} | - | - |{' - |' * costed}  (a gain above the changed share {changed:.3f} is impossible)")
            continue
        half, most = games_needed(gain, changed, power=0.5), games_needed(gain, changed, power=0.8)
        row = [f"{gain:.2f}", str(half or "> 20,000"), str(most or "> 20,000")]
        if costed:
            row.append(f"{most * args.seconds_per_game / 3600:.1f} h" if most else "-")
        print("| " + " | ".join(row) + " |")

if __name__ == "__main__":
    main()
