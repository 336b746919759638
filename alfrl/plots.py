"""Figures for training runs: the curves people would rather look at than read."""

from __future__ import annotations

from pathlib import Path

CURVES = (("reward", "reward"), ("success", "success rate"), ("invalid_per_episode", "invalid actions / episode"),
          ("clip_fraction", "PPO clip fraction"))


def plot_training(metrics: list[dict], path: str | Path | None = None, title: str = ""):
    """Reward, success, invalid actions per episode and clip fraction against the update step.

    Saves to ``path`` when given (and closes the figure, so scripts do not pile them up);
    returns the figure (``display(fig)`` shows it in a notebook).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3), constrained_layout=True)
    steps = [m["step"] for m in metrics]
    for ax, (key, label) in zip(axes, CURVES):
        points = [(s, m[key]) for s, m in zip(steps, metrics) if m.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o")
        ax.set_title(label)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=90)
        plt.close(fig)
    return fig
