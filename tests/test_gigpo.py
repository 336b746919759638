"""alfrl.rl.gigpo: step rewards, discounted returns, anchor states and step-level advantages on a hand-built
group, against values computed by hand; and on a committed training run's real groups."""

from __future__ import annotations

from collections import defaultdict

import pytest

from alfrl.base.paths import REPO_ROOT
from alfrl.rl.advantage import AdvantageConfig, assign_advantages, token_advantages
from alfrl.rl.gigpo import (START, anchor_stats, discounted_returns, state_keys, step_advantages, step_rewards,
                            token_advantage_values, turn_of_token)
from alfrl.rl.ppo import padded_tensors
from alfrl.rl.trajectory import Trajectory, Turn, groups_of, load_trajectories

CLOSED = "You arrive at drawer 1. The drawer 1 is closed."


def turn(action: str, observation: str, ok: bool = True, sampled: int = 1) -> Turn:
    return Turn(reply=action, action=action, valid_format=True, admissible=ok, reason="" if ok else "not admissible",
                observation=observation, sampled=sampled, stopped_on="eos")


def trajectory(turns: list[Turn], won: bool, branch: int) -> Trajectory:
    mask = [0, 0]  # the prompt
    for t in turns:
        mask += [1] * t.sampled + [0, 0]  # the reply, then the template's closing token and the tool result
    return Trajectory(game_id="g", task_type="pick_and_place_simple", branch=branch, seed=0,
                      tokens=list(range(len(mask))), mask=mask, logprobs=[0.0] * len(mask), turns=turns, won=won,
                      steps=len(turns), invalid=sum(not t.admissible for t in turns),
                      end_reason="won" if won else "max_steps", prompt_tokens=2, prefilled=len(mask),
                      sampled=sum(mask), model_seconds=0.0, env_seconds=0.0)


def hand_group() -> list[Trajectory]:
    """A wins in three turns; B reaches the same closed drawer, wastes a turn on an invalid action and loses;
    C goes to the shelf first, so it meets the closed drawer one turn later, after other actions."""
    a = trajectory([turn("go to drawer 1", CLOSED, sampled=2), turn("open drawer 1", "You open the drawer 1."),
                    turn("take key 1 from drawer 1", "You pick up the key 1.", sampled=3)], won=True, branch=0)
    b = trajectory([turn("go to drawer 1", CLOSED), turn("open drawer 2", "Nothing happens.", ok=False),
                    turn("open drawer 1", "You open the drawer 1.")], won=False, branch=1)
    c = trajectory([turn("go to shelf 1", "On the shelf 1, you see a pen 1."), turn("go to drawer 1", CLOSED),
                    turn("open drawer 1", "You open the drawer 1.")], won=False, branch=2)
    return [a, b, c]


def test_step_rewards_and_returns_by_hand():
    a, b, c = hand_group()
    assert step_rewards(a) == [0.0, 0.0, 1.0] and step_rewards(b) == [0.0, -0.1, 0.0] and step_rewards(c) == [0.0] * 3
    assert sum(step_rewards(b, invalid_penalty=0.5)) == pytest.approx(-0.5)  # they add up to the episode reward
    assert discounted_returns([0.0, 0.0, 1.0]) == pytest.approx([0.9025, 0.95, 1.0])
    assert discounted_returns([0.0, -0.1, 0.0]) == pytest.approx([-0.095, -0.1, 0.0])
    assert discounted_returns([0.0, 0.0, 1.0], gamma=1.0) == [1.0, 1.0, 1.0]


def test_state_keys_pool_only_matching_histories():
    a, b, c = hand_group()
    assert state_keys(a)[0] == state_keys(b)[0] == state_keys(c)[0] == (START, ())
    assert state_keys(a)[1] == state_keys(b)[1] == (CLOSED, ("go to drawer 1",))
    # C sees the same closed drawer at turn 2, but after the shelf: another state
    assert state_keys(c)[2] == (CLOSED, ("go to shelf 1", "go to drawer 1")) != state_keys(a)[1]


def test_step_advantages_by_hand():
    a, b, c = hand_group()
    start_mean = (0.9025 - 0.095 + 0.0) / 3  # the reset: all three turns 0
    drawer_mean = (0.95 - 0.1) / 2  # A's and B's turn 1 at the closed drawer after "go to drawer 1"
    expected = [[0.9025 - start_mean, 0.95 - drawer_mean, 0.0],  # A's last turn: a state of its own
                [-0.095 - start_mean, -0.1 - drawer_mean, 0.0],
                [0.0 - start_mean, 0.0, 0.0]]
    got = step_advantages([a, b, c])
    for row, want in zip(got, expected):
        assert row == pytest.approx(want)


def test_gigpo_token_advantages_by_hand():
    group = hand_group()
    keep = assign_advantages([group], AdvantageConfig(credit="gigpo", omega=1.0))
    assert keep == group
    # rewards 1, -0.1, 0: mean 0.3
    assert [t.advantage for t in group] == pytest.approx([0.7, -0.4, -0.3])
    start_mean, drawer_mean = (0.9025 - 0.095) / 3, 0.425
    a, b, c = group
    assert a.turn_advantages == pytest.approx([0.7 + 0.9025 - start_mean, 0.7 + 0.95 - drawer_mean, 0.7])
    assert c.turn_advantages == pytest.approx([-0.3 - start_mean, -0.3, -0.3])
    # A's mask: prompt, 2 tokens of turn 0, closing + tool, 1 of turn 1, closing + tool, 3 of turn 2, closing + tool
    assert turn_of_token(a) == [-1, -1, 0, 0, -1, -1, 1, -1, -1, 2, 2, 2, -1, -1]
    t0, t1, t2 = a.turn_advantages
    assert token_advantages(a).tolist() == pytest.approx([0, 0, t0, t0, 0, 0, t1, 0, 0, t2, t2, t2, 0, 0])
    # the update reads the same per-token values
    adv = padded_tensors([a], len(a.tokens) + 2, "cpu")[2]
    assert adv[0].tolist() == pytest.approx([0, 0, t0, t0, 0, 0, t1, 0, 0, t2, t2, t2, 0, 0, 0, 0])


def test_omega_zero_is_grpo():
    grpo, gigpo = hand_group(), hand_group()
    assign_advantages([grpo], AdvantageConfig())
    assign_advantages([gigpo], AdvantageConfig(credit="gigpo", omega=0.0))
    for x, y in zip(grpo, gigpo):
        assert x.turn_advantages is None
        assert token_advantages(x).tolist() == pytest.approx(token_advantages(y).tolist())


def test_degenerate_groups_get_no_step_credit():
    """All rewards equal: the group is not trained, whatever its turns did."""
    group = [trajectory([turn("look", "o")], won=False, branch=i) for i in range(3)]
    assert assign_advantages([group], AdvantageConfig(credit="gigpo")) == []
    assert all(t.turn_advantages is None and t.advantage == 0.0 for t in group)


def test_bad_settings_and_records_are_refused():
    with pytest.raises(ValueError, match="credit must be one of"):
        AdvantageConfig(credit="step")
    with pytest.raises(ValueError, match="subgoal"):
        AdvantageConfig(credit="gigpo", subgoal_reward=0.1)
    a = hand_group()[0]
    a.mask[0] = 1  # a sampled token no turn owns
    with pytest.raises(ValueError, match="damaged"):
        turn_of_token(a)


def test_anchor_stats_by_hand():
    stats = anchor_stats([hand_group()])
    # 9 turns: the 3 at the reset and A1, B1 share a state (5); the step advantage is nonzero on those 5
    assert stats == pytest.approx({"anchored_turn_rate": 5 / 9, "step_credit_rate": 5 / 9})


def test_real_groups_of_a_training_run():
    """A committed run's groups: every sampled token has a turn, and in every anchor group the step
    advantages add up to 0 (each is its return minus the anchor group's mean)."""
    trajectories = load_trajectories(REPO_ROOT / "data/results/rl_epoch_seed0_trajectories.jsonl.xz")
    groups = groups_of(trajectories, 8)
    assert len(groups) >= 10
    for group in groups:
        for t in group:
            owners = turn_of_token(t)
            assert [owners.count(i) for i in range(len(t.turns))] == [x.sampled for x in t.turns]
            assert sum(step_rewards(t)) == pytest.approx(float(t.won) - 0.1 * t.invalid)
        sums: dict[tuple, float] = defaultdict(float)
        for t, row in zip(group, step_advantages(group)):
            for key, value in zip(state_keys(t), row):
                sums[key] += value
        assert all(abs(v) < 1e-9 for v in sums.values())
    stats = anchor_stats(groups)
    assert 0 < stats["step_credit_rate"] <= stats["anchored_turn_rate"] < 1
