"""alfrl.rl.prefix: a group's shared tokens run once in the update give the plain loss and gradient (fp32:
within 1e-5; bf16: the tolerance test_ppo states for bf16), on real rollouts of the real model."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from alfrl.rl.ppo import PPOConfig, make_optimizer, ppo_step, recompute_old_logprobs, shared_passes, trained_length
from alfrl.rl.prefix import common_prefix_length, prefix_groups
from alfrl.rl.rollout import RolloutConfig, Trajectory, rollout_group

SPLIT = "valid_seen"


def hand_built(tokens: list[int], first_sampled: int) -> Trajectory:
    """A trajectory whose tokens from ``first_sampled`` on were sampled."""
    n = len(tokens)
    return Trajectory(game_id="g", task_type="t", branch=0, seed=0, tokens=tokens,
                      mask=[0] * first_sampled + [1] * (n - first_sampled), logprobs=[0.0] * n, turns=[],
                      won=False, steps=1, invalid=0, end_reason="steps", prompt_tokens=first_sampled, prefilled=0,
                      sampled=n - first_sampled, model_seconds=0.0, env_seconds=0.0, advantage=1.0)


def test_common_prefix_and_groups_by_hand():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 7]]) == 2
    assert common_prefix_length([[5, 6], [5, 6, 7]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    a = hand_built([1, 2, 3, 4, 5, 6], 3)   # prompt 1 2 3, then replies
    b = hand_built([1, 2, 3, 4, 5, 7], 3)   # same prompt, same first reply token
    c = hand_built([9, 2, 3, 4, 5, 6], 3)   # another game
    d = hand_built([1, 2, 3, 4, 5, 6], 3)   # a copy of a: shares all but its last token
    groups = prefix_groups([a, c, b, d], [trained_length(t) for t in (a, c, b, d)], min_shared=2)
    assert [(len(g), shared) for g, shared in groups] == [(3, 5), (1, 0)]
    assert groups[0][0] == [a, b, d] and groups[1][0] == [c]
    # fewer shared tokens than min_shared: nothing is shared
    assert prefix_groups([a, b], [6, 6], min_shared=6) == [([a, b], 0)]
    # only the tokens the update runs count: cut after 4 tokens, at most 3 are shared
    assert prefix_groups([a, b], [4, 4], min_shared=2) == [([a, b], 3)]


@pytest.fixture(scope="module")
def trained_policy(policy):
    """The test policy with its LoRA B matrices moved off zero, so every LoRA weight gets a gradient."""
    p = copy.deepcopy(policy)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, q in p.model.named_parameters():
            if "lora_B" in name:
                q.normal_(0, 0.02)
    return p


@pytest.fixture(scope="module")
def rollouts(trained_policy, tiny_games):
    """Real rollouts with advantages: a group of 3 branches of one game (they share its prompt of
    several hundred tokens; the third copies the first, so it shares a reply too), and a lone
    trajectory of another game (nothing to share: it runs in full beside the group)."""
    first, second = tiny_games.games(SPLIT)[:2]
    group = rollout_group(trained_policy, first, RolloutConfig(k=2, max_steps=2, max_new_tokens=12, seed=0))
    group = group + [replace(group[0], branch=2)]
    lone = rollout_group(trained_policy, second, RolloutConfig(k=1, max_steps=1, max_new_tokens=12, seed=1))
    for t, a in zip(group + lone, (1.0, -0.5, -0.5, 0.7)):
        t.advantage = a
    return group + lone


def step_gradient(policy, trajectories, **settings) -> tuple[dict, torch.Tensor]:
    """One PPO step's metrics and gradient (of every LoRA weight), the policy left as it was."""
    p = copy.deepcopy(policy)
    config = PPOConfig(lr=0.0, **settings)
    metrics = ppo_step(p, make_optimizer(p, config), trajectories, config, own_old=True)
    return metrics, torch.cat([q.grad.flatten() for q in p.model.parameters() if q.grad is not None])


@pytest.fixture(scope="module")
def plain(trained_policy, rollouts) -> tuple[dict, torch.Tensor]:
    """The plain computation (fp32, every branch in full)."""
    return step_gradient(trained_policy, rollouts, share_prefix=False)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_the_rollouts_share_a_long_prefix(trained_policy, rollouts):
    (prefix, batches), (alone, lone) = shared_passes(trained_policy.model, rollouts, PPOConfig())
    assert prefix is not None and prefix.length >= 300
    members = [t for b in batches for t in b]
    assert len(members) == 3 and all(t.tokens[:prefix.length] == prefix.tokens for t in members)
    cut = [t.tokens[:trained_length(t)] for t in members]
    assert prefix.length == min(common_prefix_length(cut), min(len(c) for c in cut) - 1)
    assert alone is None and lone == [[rollouts[3]]]


def test_shared_prefix_gives_the_plain_loss_and_gradient(trained_policy, rollouts, plain):
    """fp32. (With one micro-batch per branch the prefix's gradient accumulates over several backward
    passes before it runs back through the prefix: test_ppo's micro-batch test does that, on shorter
    conversations sharing their 33-token prompt.)"""
    plain_metrics, plain_grad = plain
    shared, shared_grad = step_gradient(trained_policy, rollouts)
    assert plain_grad.norm() > 0 and relative(shared_grad, plain_grad) < 1e-5, relative(shared_grad, plain_grad)
    assert shared["loss"] == pytest.approx(plain_metrics["loss"], abs=1e-6)
    assert shared["tokens_trained"] == plain_metrics["tokens_trained"]
    # the group's prefix runs once, not three times
    lengths = [trained_length(t) for t in rollouts]
    assert plain_metrics["tokens_run"] == sum(lengths)
    assert shared["tokens_run"] == sum(lengths) - 2 * common_prefix_length([t.tokens[:n] for t, n in
                                                                            zip(rollouts[:3], lengths)])
    assert shared["sampler_ratio_mean"] == pytest.approx(plain_metrics["sampler_ratio_mean"], abs=1e-6)


@pytest.mark.slow
def test_shared_prefix_in_bf16(trained_policy, rollouts, plain):
    """bf16: within the tolerance test_ppo states for bf16 against fp32 (relative difference under 10%,
    cosine above 0.995). Slow: a whole update in bfloat16, emulated (26x slower) on CPUs without native
    bf16 such as CI's; test_ppo checks the same tolerance on short trajectories in the default run."""
    _, fp32 = plain
    _, shared = step_gradient(trained_policy, rollouts, bf16=True)
    assert relative(shared, fp32) < 0.1, relative(shared, fp32)
    assert float(torch.nn.functional.cosine_similarity(shared, fp32, dim=0)) > 0.995


def test_shared_prefix_in_the_recomputed_old_logprobs(trained_policy, rollouts):
    """The no-grad recomputation with the shared prefix: the sampler's float32 logprobs."""
    recomputed, gap = recompute_old_logprobs(trained_policy, rollouts, PPOConfig())
    for t, r in zip(rollouts, recomputed):
        assert max(abs(a - b) for a, b, m in zip(t.logprobs, r.logprobs, t.mask) if m) < 1e-4
    assert abs(gap["sampler_ratio_mean"] - 1) < 1e-4


def test_gradient_checkpointing_turns_sharing_off(trained_policy, rollouts):
    config = PPOConfig(gradient_checkpointing=True)
    assert [prefix for prefix, _ in shared_passes(trained_policy.model, rollouts, config)] == [None]
