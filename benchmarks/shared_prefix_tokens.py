"""How many tokens the update runs with and without the shared prefix (alfrl.rl.prefix), on a committed
run's trajectories: a count, not a timing, so it needs no idle machine and no model.

    python benchmarks/shared_prefix_tokens.py                                   # the 12-update cpu run
    python benchmarks/shared_prefix_tokens.py data/results/cpu_T0.7_trajectories.jsonl.xz

Per update it takes the groups the update trained on (``--keep win``, the cpu preset's rule: a win and
a loss; ``spread``: any reward spread), groups them as ``alfrl.rl.ppo.shared_passes`` does, and counts the
tokens each trajectory runs (up to its last sampled token) in full, and with each group's shared
prefix run once.
"""

from __future__ import annotations

import argparse
import json
import lzma
from collections import defaultdict
from pathlib import Path

from alfrl.rl.ppo import trained_length
from alfrl.rl.prefix import prefix_groups
from alfrl.rl.trajectory import Trajectory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trajectories", nargs="?", default="data/results/cpu_12updates_seed0_trajectories.jsonl.xz")
    parser.add_argument("--keep", choices=("win", "spread"), default="win", help="which groups were trained")
    args = parser.parse_args()
    by_step = defaultdict(list)  # a training run's lines carry the update's step
    path = Path(args.trajectories)
    with (lzma.open(path, "rt") if path.suffix == ".xz" else path.open()) as f:
        for line in f:
            if line.strip():
                by_step[json.loads(line).get("step", 0)].append(Trajectory.from_json(line))
    full = shared = groups = trained = 0
    prefixes = []
    for step, trajectories in sorted(by_step.items()):
        games = defaultdict(list)
        for t in trajectories:
            games[t.game_id].append(t)
        batch = [t for g in games.values() if (any(t.won for t in g) and not all(t.won for t in g)
                                                if args.keep == "win" else any(t.advantage for t in g)) for t in g]
        if not batch:
            continue
        lengths = [trained_length(t) for t in batch]
        full += sum(lengths)
        for group, n in prefix_groups(batch, lengths):
            run = sum(trained_length(t) for t in group) - (len(group) - 1) * n
            shared += run
            groups += n > 0
            prefixes += [n] if n else []
        trained += len(batch)
    print(f"{args.trajectories}: {trained} trajectories trained in {len(by_step)} updates; {groups} groups share a prefix "
          f"of {min(prefixes, default=0)}-{max(prefixes, default=0)} tokens (mean {sum(prefixes) / max(len(prefixes), 1):.0f})")
    print(f"tokens the update runs: {full} in full, {shared} with the shared prefix run once: "
          f"{1 - shared / max(full, 1):.1%} fewer")


if __name__ == "__main__":
    main()
