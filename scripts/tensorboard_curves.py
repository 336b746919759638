"""Draw what a run's TensorBoard log holds, read back from its event files (not from metrics.jsonl): the
curves TensorBoard shows for `--log tensorboard`, as one PNG, for a README or a report.

    python scripts/tensorboard_curves.py runs/tracking_demo data/results/tensorboard_curves.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alfrl.base.tracking import read_tensorboard  # noqa: E402

PANELS = [("success", "win rate at the rollout temperature", "share of episodes"),
          ("eval_success", "held-out success (greedy)", "share of games"),
          ("reward", "mean episode reward", "won - 0.1 x invalid"),
          ("invalid_per_episode", "invalid actions", "per episode"),
          ("entropy", "policy entropy on sampled tokens", "nats / token"),
          ("episodes_per_minute", "episodes per minute", "episodes / min")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("out")
    args = parser.parse_args()
    curves = read_tensorboard(args.run_dir)
    print(f"{args.run_dir}/tensorboard: {len(curves)} scalars: {', '.join(sorted(curves))}")
    shown = [p for p in PANELS if p[0] in curves]
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.axis("off")
    for ax, (name, title, unit) in zip(axes.flat, shown):
        steps, values = zip(*curves[name])
        ax.plot(steps, values, "o-")
        ax.set_title(f"{title}\n({name})", fontsize=9)
        ax.set_xlabel("update")
        ax.set_ylabel(unit)
        ax.set_xticks(sorted(set(steps)))
    fig.suptitle(f"read back from TensorBoard's event files: {Path(args.run_dir).name}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
