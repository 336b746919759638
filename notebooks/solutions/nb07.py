"""Worked solutions of notebook 07's exercises (try them first)."""

from __future__ import annotations

import math


def shaped_advantages(group, alpha):
    """Reward minus the group's mean reward, reward = won + alpha x subgoals reached - 0.1 x invalid."""
    rewards = [float(t.won) + alpha * t.subgoals - 0.1 * t.invalid for t in group]
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def dpo_pair(s_w, s_l, ref_w, ref_l, beta):
    """(loss, dloss/ds_w, dloss/ds_l) of one pair: loss = -log sigmoid(z), z = beta((s_w - ref_w) - (s_l - ref_l))."""
    z = beta * ((s_w - ref_w) - (s_l - ref_l))
    loss = math.log1p(math.exp(-z)) if z > -30 else -z  # -log sigmoid(z), without overflow
    weight = beta / (1 + math.exp(z))  # beta x sigmoid(-z): how wrong the pair is still ranked
    return loss, -weight, weight
