"""alfrl.rl.advantage: rewards, group-relative advantages, per-token advantages and batch statistics,
against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from alfrl.rl.advantage import (AdvantageConfig, assign_advantages, batch_stats, episode_reward, group_advantages,
                                is_degenerate, token_advantages)
from alfrl.rl.rollout import Trajectory, Turn


def traj(won: bool, invalid: int, mask=(0, 0, 1, 1, 0, 1), steps: int = 5, end: str | None = None,
         game: str = "g") -> Trajectory:
    turns = [Turn(reply="r", action="look", valid_format=True, admissible=i >= invalid, reason="",
                  observation="o", sampled=1, stopped_on="eos") for i in range(steps)]
    return Trajectory(game_id=game, task_type="t", branch=0, seed=0, tokens=list(range(len(mask))),
                      mask=list(mask), logprobs=[0.0] * len(mask), turns=turns, won=won, steps=steps,
                      invalid=invalid, end_reason=end or ("won" if won else "max_steps"), prompt_tokens=2,
                      prefilled=10, sampled=sum(mask), model_seconds=1.0, env_seconds=0.1)


def test_reference_rewards():
    assert math.isclose(episode_reward(traj(True, 2)), 0.8)
    assert math.isclose(episode_reward(traj(False, 3)), -0.3)
    assert episode_reward(traj(True, 0)) == 1.0
    assert math.isclose(episode_reward(traj(False, 3), invalid_penalty=0.5), -1.5)


def test_group_advantages_by_hand():
    rewards = [1.0, 0.8, -0.3, 0.0]  # mean 0.375
    assert group_advantages(rewards) == pytest.approx([0.625, 0.425, -0.675, -0.375])
    std = math.sqrt(sum((r - 0.375) ** 2 for r in rewards) / 4)  # population std
    assert group_advantages(rewards, normalize_std=True, std_eps=0.0) == pytest.approx(
        [(r - 0.375) / std for r in rewards])
    assert sum(group_advantages(rewards)) == pytest.approx(0.0)


def test_degenerate_groups_are_counted_and_skipped():
    assert is_degenerate([0.0] * 8) and is_degenerate([-0.2, -0.2]) and not is_degenerate([0.0, 1.0])
    flat = [traj(False, 2, game="a") for _ in range(4)]  # all -0.2: no signal
    mixed = [traj(True, 0, game="b"), traj(False, 0, game="b"), traj(False, 1, game="b"), traj(True, 1, game="b")]
    keep = assign_advantages([flat, mixed])
    assert keep == mixed
    assert [t.advantage for t in flat] == [0.0] * 4 and [t.reward for t in flat] == pytest.approx([-0.2] * 4)
    # mixed rewards 1, 0, -0.1, 0.9: mean 0.45
    assert [t.advantage for t in mixed] == pytest.approx([0.55, -0.45, -0.55, 0.45])
    stats = batch_stats([flat, mixed])
    assert stats["degenerate_groups"] == 1 and stats["degenerate_rate"] == 0.5


def test_signal_metrics_by_hand():
    """Win rate at the rollout temperature, share of groups with a win, share with any reward spread."""
    no_win_spread = [traj(False, 0, game="a"), traj(False, 2, game="a")]  # 0 vs -0.2: a spread, no win
    flat = [traj(False, 1, game="b"), traj(False, 1, game="b")]  # -0.1 twice: nothing to learn
    all_won = [traj(True, 0, game="c"), traj(True, 0, game="c")]  # wins, but all equal: no spread either
    one_win = [traj(True, 1, game="d"), traj(False, 0, game="d")]
    s = batch_stats([no_win_spread, flat, all_won, one_win])
    assert s["success"] == 3 / 8
    assert s["win_group_rate"] == 2 / 4
    assert s["spread_group_rate"] == 2 / 4 and s["degenerate_groups"] == 2


def test_token_advantages_are_zero_off_the_mask():
    (t,) = [traj(True, 0, mask=(0, 0, 1, 1, 0, 1))]
    t.advantage = 0.5
    assert torch.equal(token_advantages(t), torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0, 0.5]))
    fresh = traj(True, 0)
    with pytest.raises(ValueError, match="assign_advantages"):
        token_advantages(fresh)


def test_batch_stats_by_hand():
    groups = [[traj(True, 2, steps=4), traj(False, 3, steps=6, end="max_tokens")],
              [traj(False, 0, steps=2), traj(False, 1, steps=8)]]
    s = batch_stats(groups, AdvantageConfig(invalid_penalty=0.1))
    assert s["trajectories"] == 4 and s["groups"] == 2
    assert s["success"] == 0.25
    assert s["reward"] == pytest.approx((0.8 - 0.3 + 0.0 - 0.1) / 4)
    assert s["invalid_per_episode"] == 1.5
    assert s["mean_steps"] == 5.0
    assert s["admissible_rate"] == pytest.approx((2 + 3 + 2 + 7) / 20)  # turns past the invalid ones
    assert (s["end_won"], s["end_max_steps"], s["end_max_tokens"]) == (0.25, 0.5, 0.25)
    assert s["degenerate_groups"] == 0
    assert s["model_seconds"] == 4.0 and s["env_seconds"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no trajectories"):
        batch_stats([])


def test_batch_stats_entropy_and_reply_length_by_hand():
    """entropy = summed entropies / sampled tokens; reply_tokens = sampled tokens / replies."""
    from dataclasses import replace as with_

    a = with_(traj(True, 0, steps=2), sampled=10, entropy=5.0)
    b = with_(traj(False, 1, steps=3), sampled=20, entropy=4.0)
    stats = batch_stats([[a, b]])
    assert math.isclose(stats["entropy"], 9.0 / 30)
    assert math.isclose(stats["reply_tokens"], 30 / 5)


def test_subgoal_shaped_reward_by_hand():
    """won + alpha x subgoals - 0.1 x invalid: a group with no win still ranks its branches by progress."""
    from dataclasses import replace

    from alfrl.rl.advantage import progress_spread
    lost = [replace(traj(False, 1), subgoals=n, subgoals_total=3) for n in (0, 2, 1, 0)]
    assert [episode_reward(t) for t in lost] == pytest.approx([-0.1] * 4)  # the reference reward ignores them
    assert [episode_reward(t, subgoal_reward=0.2) for t in lost] == pytest.approx([-0.1, 0.3, 0.1, -0.1])
    config = AdvantageConfig(subgoal_reward=0.2)
    assert assign_advantages([lost], AdvantageConfig()) == []  # no spread without the subgoals
    assert assign_advantages([lost], config) == lost
    assert [t.advantage for t in lost] == pytest.approx([-0.15, 0.25, 0.05, -0.15])  # mean 0.05
    won = replace(traj(True, 0), subgoals=3, subgoals_total=3)
    assert config.reward(won) == pytest.approx(1.6)
    assert progress_spread(lost) and not progress_spread([lost[0], lost[3]])
    assert progress_spread([lost[0], replace(lost[0], won=True)])
    stats = batch_stats([lost, [lost[0], lost[3]]], config)
    assert stats["progress_group_rate"] == 0.5
    assert stats["subgoal_rate"] == pytest.approx((0 + 2 + 1 + 0 + 0 + 0) / 3 / 6)
    assert batch_stats([[traj(False, 0)]])["subgoal_rate"] == 0.0  # files from before subgoals were counted
