"""Rewards, group-relative advantages and per-token advantages.

GRPO needs no value network: the K trajectories of one game are each other's baseline.

- episode reward = won - ``invalid_penalty`` x invalid actions (1 - 0.1 x 2 = 0.8 for a
  win with two invalid replies; 0 - 0.1 x 3 = -0.3 for a loss with three); with a
  ``subgoal_reward`` alpha > 0 (notebook 07), + alpha x subgoals reached, so that a group with no
  win can still rank the branch that took and cleaned the spoon above the one that wandered;
- advantage = reward - mean reward of the group (optionally divided by the group's std);
- a group whose rewards are all equal has advantage 0 everywhere: it carries no signal,
  so it is counted and left out of the update;
- per-token advantage = advantage x mask: only tokens the model sampled are pushed;
- with step-level credit (``credit="gigpo"``, :mod:`alfrl.rl.gigpo`), each turn's tokens get the episode
  advantage plus ``omega`` x that turn's step advantage against the group's turns in the same state.

Taught in notebook 04 (group advantages and the mask); used by 03 and 05.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from statistics import fmean, pstdev

import torch

from alfrl.rl.gigpo import assign_turn_advantages, token_advantage_values
from alfrl.rl.rollout import END_REASONS, Trajectory

CREDITS = ("grpo", "gigpo")
"""How an episode's advantage reaches its tokens: the same for all (grpo), or per turn (gigpo)."""


@dataclass
class AdvantageConfig:
    """How trajectories are scored."""

    invalid_penalty: float = 0.1
    """Reward lost per invalid action (bad format or not in the list)."""
    normalize_std: bool = False
    """Divide advantages by the group's reward std (GRPO's original form); off in the reference run."""
    std_eps: float = 1e-6
    """Added to the std before dividing."""
    subgoal_reward: float = 0.0
    """Reward per subgoal reached (alpha; 0 = the reference reward, won - 0.1 x invalid)."""
    credit: str = "grpo"
    """"grpo": every sampled token of an episode gets its advantage; "gigpo": plus step-level credit per turn
    (alfrl.rl.gigpo)."""
    omega: float = 1.0
    """With credit "gigpo": the weight of the step advantage beside the episode's."""
    gamma: float = 0.95
    """With credit "gigpo": the discount of the step returns."""

    def __post_init__(self):
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {', '.join(CREDITS)} (got {self.credit!r})")
        if self.credit == "gigpo" and self.subgoal_reward:
            raise ValueError("step-level credit (gigpo) locates the reference reward's terms (the win, each invalid "
                             "reply) on their turns; it has no place for a subgoal reward: use one or the other")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1] (got {self.gamma})")

    def reward(self, trajectory: Trajectory) -> float:
        """This config's :func:`episode_reward` of ``trajectory``."""
        return episode_reward(trajectory, self.invalid_penalty, self.subgoal_reward)


def episode_reward(trajectory: Trajectory, invalid_penalty: float = 0.1, subgoal_reward: float = 0.0) -> float:
    """won + subgoal_reward x subgoals reached - invalid_penalty x invalid actions (the subgoals are read
    only when they count, so anything with ``won`` and ``invalid`` has the reference reward)."""
    bonus = subgoal_reward * trajectory.subgoals if subgoal_reward else 0.0
    return float(trajectory.won) + bonus - invalid_penalty * trajectory.invalid


def progress_spread(group: list[Trajectory]) -> bool:
    """Whether the branches differ in how far they got: won, or subgoals reached (invalid actions aside)."""
    return len({(t.won, t.subgoals) for t in group}) > 1


def is_degenerate(rewards: list[float], tol: float = 1e-9) -> bool:
    """All rewards equal: every advantage would be 0."""
    return max(rewards) - min(rewards) <= tol


def group_advantages(rewards: list[float], normalize_std: bool = False, std_eps: float = 1e-6) -> list[float]:
    """reward - group mean (divided by the group's population std + eps when asked)."""
    mean = fmean(rewards)
    scale = pstdev(rewards) + std_eps if normalize_std else 1.0
    return [(r - mean) / scale for r in rewards]


def assign_advantages(groups: list[list[Trajectory]], config: AdvantageConfig | None = None) -> list[Trajectory]:
    """Set ``reward`` and ``advantage`` on every trajectory (and, with ``credit="gigpo"``, the
    ``turn_advantages`` of the groups kept); return those of non-degenerate groups (the ones worth training on)."""
    config = config or AdvantageConfig()
    keep = []
    for group in groups:
        rewards = [config.reward(t) for t in group]
        if is_degenerate(rewards):
            advantages = [0.0] * len(group)
        else:
            advantages = group_advantages(rewards, config.normalize_std, config.std_eps)
            keep.extend(group)
        for t, r, a in zip(group, rewards, advantages):
            t.reward, t.advantage, t.turn_advantages = r, a, None
        if config.credit == "gigpo" and not is_degenerate(rewards):
            assign_turn_advantages(group, config.omega, config.invalid_penalty, config.gamma)
    return keep


def token_advantages(trajectory: Trajectory) -> torch.Tensor:
    """advantage x mask, one value per token (zero outside the sampled tokens); with step-level credit,
    each sampled token gets its turn's advantage."""
    if trajectory.advantage is None:
        raise ValueError("this trajectory has no advantage yet; call assign_advantages on its group first")
    return torch.tensor(token_advantage_values(trajectory), dtype=torch.float32)


def batch_stats(groups: list[list[Trajectory]], config: AdvantageConfig | None = None) -> dict[str, float]:
    """What a training log wants to know about a batch of groups.

    The learning signal: ``success`` is the win rate at the rollout temperature; ``win_group_rate`` the
    share of groups with at least one win (only those can teach winning: with p the win rate, a group of
    K has one with probability 1 - (1-p)^K); ``spread_group_rate`` the share whose rewards differ at all
    (the rest have advantage 0 everywhere and teach nothing); ``progress_group_rate`` the share whose
    branches differ in wins or subgoals reached (what a subgoal reward can learn from, beyond invalid
    actions); ``subgoal_rate`` the share of their games' subgoals the episodes reached. ``entropy``: the sampling distribution's
    mean entropy per sampled token (nats; falling fast means the policy stops exploring);
    ``reply_tokens``: sampled tokens per reply."""
    config = config or AdvantageConfig()
    trajectories = [t for g in groups for t in g]
    if not trajectories:
        raise ValueError("no trajectories to summarise")
    rewards = [config.reward(t) for t in trajectories]
    degenerate = sum(is_degenerate([config.reward(t) for t in g]) for g in groups)
    counted = [t for t in trajectories if t.subgoals_total]
    ends = Counter(t.end_reason for t in trajectories)
    turns = [turn for t in trajectories for turn in t.turns]
    stats = {
        "groups": len(groups),
        "trajectories": len(trajectories),
        "success": fmean(t.won for t in trajectories),
        "reward": fmean(rewards),
        "invalid_per_episode": fmean(t.invalid for t in trajectories),
        "valid_format_rate": fmean(turn.valid_format for turn in turns) if turns else 0.0,
        "admissible_rate": fmean(turn.admissible for turn in turns) if turns else 0.0,
        "degenerate_groups": degenerate,
        "degenerate_rate": degenerate / len(groups),
        "spread_group_rate": 1 - degenerate / len(groups),
        "win_group_rate": fmean(any(t.won for t in g) for g in groups),
        "progress_group_rate": fmean(progress_spread(g) for g in groups),
        "subgoal_rate": fmean(t.subgoals / t.subgoals_total for t in counted) if counted else 0.0,
        "mean_steps": fmean(t.steps for t in trajectories),
        "mean_tokens": fmean(len(t.tokens) for t in trajectories),
        "reply_tokens": sum(t.sampled for t in trajectories) / max(1, sum(t.steps for t in trajectories)),
        "entropy": (sum(t.entropy for t in trajectories) / sum(t.sampled for t in trajectories)
                    if any(t.sampled for t in trajectories) else 0.0),
        "sampled_tokens": sum(t.sampled for t in trajectories),
        "prefilled_tokens": sum(t.prefilled for t in trajectories),
        "model_seconds": sum(t.model_seconds for t in trajectories),
        "env_seconds": sum(t.env_seconds for t in trajectories),
    }
    stats.update({f"end_{reason}": ends.get(reason, 0) / len(trajectories) for reason in END_REASONS})
    return stats
