"""Figures for training runs: the curves people would rather look at than read.

Taught in notebook 05 (the training curves, and wins at each visit of a practised game).
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
    clip fraction, against the update step. When the run comes back to its games (a practice pool), a fifth
    panel shows each game's wins at every visit (:func:`plot_visits`).

    Saves to ``path`` when given (and closes the figure, so scripts do not pile them up);
    returns the figure (``display(fig)`` shows it in a notebook).
    """
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    from alfrl.eval.practice import visit_curves
    revisited = {g: c for g, c in visit_curves(metrics).items() if len(c) > 1}
    panels = len(CURVES) + bool(revisited)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.2), constrained_layout=True)
    if revisited:
        plot_visits(revisited, axes[-1])
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


def short_game_name(game_id: str) -> str:
    """``pick_and_place_simple-CD-None-Drawer-317/trial_alfrl_s0_train_00063`` -> ``CD-Drawer #00063``."""
    task, _, trial = game_id.partition("/")
    parts = [p for p in task.split("-")[1:-1] if p != "None"]
    return f"{'-'.join(parts)} #{trial.rsplit('_', 1)[-1]}"


def plot_visits(curves: dict[str, list[tuple[int, int, int]]], ax=None):
    """Wins out of K at each visit of every revisited game (:func:`alfrl.eval.practice.visit_curves`): one
    line per game, and their mean in black. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
    for game, visits in sorted(curves.items()):
        ax.plot(range(1, len(visits) + 1), [w / k for _, w, k in visits], marker=".", alpha=0.6,
                linewidth=1, label=short_game_name(game))
    longest = max(len(v) for v in curves.values())
    means = []
    for visit in range(longest):  # the mean over the games visited this many times
        shares = [v[visit][1] / v[visit][2] for v in curves.values() if len(v) > visit]
        means.append(sum(shares) / len(shares))
    ax.plot(range(1, longest + 1), means, color="black", linewidth=2.5, marker="o", label="mean")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("wins / K at each visit of a practised game", fontsize=10)
    ax.set_xlabel("visit")
    ax.set_ylabel("share of the group won")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside: lines end at 1
    return ax
