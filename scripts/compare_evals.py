"""Compare evaluated checkpoints (folders of ``python -m alfrl eval``) and write what to commit.

    python scripts/compare_evals.py "warm start=runs/eval/warm" "GRPO=runs/eval/grpo" --out data/results/NAME

Writes ``NAME.md`` (the table: success, Wilson interval, invalid actions, gained/lost against the
first with the exact sign test's p), ``NAME.png`` (the figure), ``NAME_summaries.json`` (each
evaluation's summary) and ``NAME_outcomes.jsonl`` (each game's outcome per checkpoint, without
trajectories: a later checkpoint can be paired with these without evaluating the first again).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from alfrl.eval_report import write_comparison


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", metavar="NAME=FOLDER", help="evaluation folders, the first the baseline")
    parser.add_argument("--out", required=True, help="path prefix of the files written (e.g. data/results/NAME)")
    parser.add_argument("--note", default="", help="a line put above the table (the commands behind it)")
    args = parser.parse_args()
    results = {}
    for item in args.results:
        name, sep, folder = item.partition("=")
        if not sep or not (Path(folder) / "summary.json").is_file():
            parser.error(f"{item!r}: give NAME=FOLDER, FOLDER an evaluation folder with summary.json")
        results[name] = Path(folder)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(write_comparison(results, Path(f"{out}.md"), Path(f"{out}.png"), Path(f"{out}_summaries.json"),
                           Path(f"{out}_outcomes.jsonl"), note=args.note))
    print(f"wrote {out}.md, {out}.png, {out}_summaries.json, {out}_outcomes.jsonl")


if __name__ == "__main__":
    main()
