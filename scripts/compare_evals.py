"""Compare evaluated checkpoints (folders of ``python -m alfrl eval``) and write what to commit.

    python scripts/compare_evals.py "warm start=runs/eval/warm" "GRPO=runs/eval/grpo" --out data/results/NAME

A committed checkpoint's outcomes stand in for its folder as ``"NAME=FILE_outcomes.jsonl@CHECKPOINT"``
(the rows of that checkpoint, on the games the folders played), so it need not be evaluated again:

    python scripts/compare_evals.py \
        "warm start=data/results/cpu_learning_lr3e-4_outcomes.jsonl@warm start" "RFT=runs/eval_rft" --out ...

Writes ``NAME.md`` (the table: success, Wilson interval, invalid actions, gained/lost against the
first with the exact sign test's p), ``NAME.png`` (the figure), ``NAME_summaries.json`` (each
evaluation's summary) and ``NAME_outcomes.jsonl`` (each game's outcome per checkpoint, without
trajectories: a later checkpoint can be paired with these without evaluating the first again).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from alfrl.base.checkpoint import read_jsonl
from alfrl.eval.eval_report import write_comparison
from alfrl.eval.eval_stats import read_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", metavar="NAME=FOLDER", help="evaluation folders, the first the baseline")
    parser.add_argument("--out", required=True, help="path prefix of the files written (e.g. data/results/NAME)")
    parser.add_argument("--note", default="", help="a line put above the table (the commands behind it)")
    args = parser.parse_args()
    results, committed = {}, {}
    for item in args.results:
        name, sep, folder = item.partition("=")
        path, at, checkpoint = folder.partition("@")
        if sep and at and Path(path).is_file():
            committed[name] = (path, checkpoint)
            results[name] = []
        elif sep and (Path(folder) / "summary.json").is_file():
            results[name] = Path(folder)
        else:
            parser.error(f"{item!r}: give NAME=FOLDER (an evaluation folder with summary.json) or "
                         "NAME=OUTCOMES.jsonl@CHECKPOINT")
    played = {(r["split"], r["game_id"]) for f in results.values() if f for r in read_records(f)}
    for name, (path, checkpoint) in committed.items():
        results[name] = [r for r in read_jsonl(path) if r["checkpoint"] == checkpoint
                         and (not played or (r["split"], r["game_id"]) in played)]
        if not results[name]:
            parser.error(f"{path} has no outcomes of checkpoint {checkpoint!r} on the games compared")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(write_comparison(results, Path(f"{out}.md"), Path(f"{out}.png"), Path(f"{out}_summaries.json"),
                           Path(f"{out}_outcomes.jsonl"), note=args.note))
    print(f"wrote {out}.md, {out}.png, {out}_summaries.json, {out}_outcomes.jsonl")


if __name__ == "__main__":
    main()
