"""The learning signal of training runs, from their metrics.jsonl: episodes, wins at the rollout
temperature, groups with a win, groups whose rewards differ, groups trained.

    python scripts/signal_table.py data/results/cpu_seed0_metrics.jsonl data/results/cpu_T0.3_keepwin_metrics.jsonl

Prints a Markdown table, one row per file (older files lack the per-group win count: "-").
"""

from __future__ import annotations

import sys
from pathlib import Path

from alfrl.base.checkpoint import read_jsonl


def row(path: Path) -> str:
    updates = read_jsonl(path)
    episodes = sum(m["trajectories"] for m in updates)
    wins = round(sum(m["success"] * m["trajectories"] for m in updates))
    groups = sum(m["groups"] for m in updates)
    spread = sum(m["groups"] - m["degenerate_groups"] for m in updates)
    with_win = (str(round(sum(m["win_group_rate"] * m["groups"] for m in updates)))
                if all("win_group_rate" in m for m in updates) else "-")
    trained = sum((m["groups"] - m["groups_dropped"] if m.get("groups_dropped") else m["groups"] - m["degenerate_groups"])
                  if m["optimizer_steps"] else 0 for m in updates)
    return (f"| {path.name} | {len(updates)} | {episodes} | {wins} ({wins / episodes:.0%}) | {with_win} / {groups} "
            f"| {spread} / {groups} | {trained} |")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| metrics | updates | episodes | won | groups with a win | groups with a reward spread | groups trained |")
    print("|---|---|---|---|---|---|---|")
    for name in sys.argv[1:]:
        print(row(Path(name)))


if __name__ == "__main__":
    main()
