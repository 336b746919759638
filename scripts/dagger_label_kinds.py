"""What the expert's DAgger labels ask for, by action kind, against what its walkthroughs do.

    python scripts/dagger_label_kinds.py data/results/dagger/round_01_played.jsonl \
        data/results/dagger/round_02_played.jsonl --walkthroughs data/expert/train.jsonl.xz --max-expert-steps 20

Counts each label's kind ("go to", "take", "move", "open", ...) among all the labelled turns of a round,
and among the labels that differ from what the policy did there (the branches it is trained on), beside
the kinds of every action in the walkthroughs of the games the expert wins in at most
``--max-expert-steps`` steps. Prints a markdown table: a kind's share of each column.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from collections import Counter
from pathlib import Path

from alfrl.imitation.label_kinds import action_kind, kind_counts


def label_kinds(played: Path) -> tuple[Counter, Counter]:
    """(kinds of every label, kinds of the labels that differ from the policy's action) in one round's file."""
    every, branches = Counter(), Counter()
    for line in played.read_text().splitlines():
        record = json.loads(line)
        for action, label in zip(record["actions"], record["labels"]):
            if label is None:
                continue
            every[action_kind(label)] += 1
            if (action or "").strip() != label:
                branches[action_kind(label)] += 1
    return every, branches


def pack_walkthrough_kinds(pack: Path, max_expert_steps: int | None) -> Counter:
    """Kinds of every action in a game pack's walkthroughs (those at most ``max_expert_steps`` long)."""
    with lzma.open(pack, "rt") if pack.suffix == ".xz" else pack.open() as lines:
        walkthroughs = [json.loads(line)["walkthrough"] for line in lines]
    return kind_counts(a for w in walkthroughs if max_expert_steps is None or len(w) <= max_expert_steps for a in w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("played", nargs="+", type=Path, help="rounds' round_NN_played.jsonl files")
    parser.add_argument("--walkthroughs", type=Path, required=True, help="a game pack (train.jsonl.xz)")
    parser.add_argument("--max-expert-steps", type=int, default=None)
    args = parser.parse_args()
    columns = {"walkthroughs": pack_walkthrough_kinds(args.walkthroughs, args.max_expert_steps)}
    for path in args.played:
        every, branches = label_kinds(path)
        columns[f"{path.stem}: labels"] = every
        columns[f"{path.stem}: branches"] = branches
    kinds = sorted(set().union(*columns.values()), key=lambda k: (-columns["walkthroughs"][k], k))
    print("Made by `python scripts/dagger_label_kinds.py " + " ".join(sys.argv[1:]) + "`: each kind's share of the\n"
          "walkthroughs' actions, of a round's labels, and of its branches (labels that differ from the policy's "
          "action).\n")
    print("| kind | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    print("| actions | " + " | ".join(str(sum(c.values())) for c in columns.values()) + " |")
    for kind in kinds:
        cells = [f"{c[kind] / max(1, sum(c.values())):.0%} ({c[kind]})" for c in columns.values()]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
