"""Figures for training runs: the curves people would rather look at than read.

Taught in notebook 05 (the training curves).
"""

from __future__ import annotations

from pathlib import Path

CURVES = (("reward", "reward", "mean episode reward"),
          ("invalid_per_episode", "invalid actions / episode", "invalid actions"),
          ("signal", "the learning signal", "share"),
          ("clip_fraction", "PPO clip fraction (steps after the first)", "share of sampled tokens"))
SIGNAL = (("success", "win rate at the rollout temperature"), ("win_group_rate", "groups with a win"),
          ("spread_group_rate", "groups with a reward spread"),
          ("progress_group_rate", "groups differing in wins or subgoals"))
"""The signal panel: a group teaches only if its rewards differ, and teaches winning only if it has a win."""


def plot_training(metrics: list[dict], path: str | Path | None = None, title: str = "",
                  evals: list[dict] | None = None):
    """Reward, invalid actions, the learning signal (win rate, groups with a win, groups with a reward
    spread; with ``evals``, the lines of a run's eval.jsonl: held-out success, near-greedy) and the
    clip fraction, against the update step.

    Saves to ``path`` when given (and closes the figure, so scripts do not pile them up);
    returns the figure (``display(fig)`` shows it in a notebook).
    """
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.2), constrained_layout=True)
    steps = [m["step"] for m in metrics]
    for ax, (key, label, ylabel) in zip(axes, CURVES):
        series = SIGNAL if key == "signal" else ((key, None),)
        for name, legend in series:
            points = [(s, m[name]) for s, m in zip(steps, metrics) if m.get(name) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=legend)
        if key == "signal" and evals:
            ax.plot([e["step"] for e in evals], [e["eval_success"] for e in evals], marker="s", color="black",
                    label=f"held-out success ({evals[-1]['eval_games']} games, T=0.01)")
        if key == "signal":
            ax.set_ylim(-0.05, 1.05)
            ax.legend(fontsize=7, loc="best")
        elif key == "reward":  # the reward lies in [-0.1 x steps, 1]: a fixed scale, so noise looks like noise
            low = min([-1.0] + [m["reward"] for m in metrics if m.get("reward") is not None])
            ax.set_ylim(low - 0.05, 1.05)
        elif key == "invalid_per_episode":
            ax.set_ylim(bottom=0, top=max([1.0] + [1.1 * m[key] for m in metrics if m.get(key) is not None]))
        if key == "clip_fraction" and not any(m.get(key) is not None for m in metrics):
            ax.text(0.5, 0.5, "one optimizer step per update:\nthe ratio is 1 when the gradient\n"
                    "is taken, the clip never acts\n(group-baseline REINFORCE)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("update")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # updates are whole numbers
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=90)
        plt.close(fig)
    return fig
