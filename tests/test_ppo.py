"""alfrl.ppo: the clipped loss by hand, logprob recomputation, where gradients go, and that one update
moves the policy the way the advantages say."""

from __future__ import annotations

import copy

import pytest
import torch

from alfrl.models import load_policy
from alfrl.ppo import PPOConfig, make_optimizer, ppo_step, ppo_token_loss, ppo_update, sequence_logprobs
from alfrl.protocol import ChatFormat, build_next_prompt
from alfrl.rollout import RolloutConfig, Trajectory, rollout_group
from alfrl.sampler import SampleConfig, new_session

SPLIT = "valid_seen"


def test_clipped_loss_by_hand():
    new = torch.log(torch.tensor([1.1, 1.5, 0.5, 0.5, 1.5, 1.0]))
    old = torch.zeros(6)
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, 2.0])
    loss, ratio = ppo_token_loss(new, old, adv, 0.8, 1.2)
    # A>0: min(r, clip(r)) -> 1.1 (inside), 1.2 (clipped above), 0.5 (below: the unclipped value is smaller)
    # A<0: min(-r, -clip(r)) -> -0.8 (r=0.5 clipped up to 0.8), -1.5 (r=1.5: the unclipped value is smaller)
    assert torch.allclose(loss, torch.tensor([-1.1, -1.2, -0.5, 0.8, 1.5, -2.0]), atol=1e-6)
    assert torch.allclose(ratio, torch.tensor([1.1, 1.5, 0.5, 0.5, 1.5, 1.0]), atol=1e-6)


def test_config_errors():
    with pytest.raises(ValueError, match="clip_low"):
        PPOConfig(clip_low=1.2, clip_high=0.8)
    with pytest.raises(ValueError, match="temperature"):
        PPOConfig(temperature=0)
    with pytest.raises(ValueError, match="LoRA"):
        make_optimizer(load_policy(), PPOConfig())


def short_trajectory(policy, seed: int, advantage: float) -> Trajectory:
    """A two-turn conversation sampled by the real model (short, so updates run in seconds): prompt,
    reply, tool result, reply; mask 1 on the replies only."""
    fmt = ChatFormat(policy.tokenizer)
    history = [{"role": "user", "content": "Say hi."}]
    prompt = fmt.encode(fmt.render(history, True))
    first = len(prompt)
    session, cfg = new_session(policy, seed=seed), SampleConfig(temperature=1.0, max_new_tokens=8)
    mask, logprobs = [0] * len(prompt), [0.0] * len(prompt)
    for turn in range(2):
        sample = session.sample(prompt, cfg)
        mask, logprobs = mask + [1] * len(sample.tokens), logprobs + sample.logprobs
        if turn == 0:
            history = history + [{"role": "assistant", "content": policy.tokenizer.decode(sample.tokens,
                                                                                          skip_special_tokens=True)}]
            nxt = build_next_prompt(fmt, prompt, sample.tokens, history, "Observation: nothing.")
            mask, logprobs = mask + [0] * (len(nxt) - len(prompt) - len(sample.tokens)), \
                logprobs + [0.0] * (len(nxt) - len(prompt) - len(sample.tokens))
            prompt = nxt
        else:
            prompt = prompt + sample.tokens
    return Trajectory(game_id="g", task_type="t", branch=seed, seed=seed, tokens=prompt, mask=mask,
                      logprobs=logprobs, turns=[], won=advantage > 0, steps=2, invalid=0, end_reason="won",
                      prompt_tokens=first, prefilled=0, sampled=sum(mask), model_seconds=0.0, env_seconds=0.0,
                      advantage=advantage)


@pytest.fixture(scope="module")
def group(policy):
    return [short_trajectory(policy, 1, 1.0), short_trajectory(policy, 2, -1.0)]


def test_recomputed_logprobs_match_a_real_rollout(policy, tiny_games):
    game = next(g for g in tiny_games.games(SPLIT) if g.task_type == "pick_and_place_simple")
    real = rollout_group(policy, game, RolloutConfig(k=2, max_steps=2, max_new_tokens=12, seed=1))
    with torch.no_grad():
        logp = sequence_logprobs(policy.model, [t.tokens for t in real])
    for i, t in enumerate(real):
        assert sum(t.mask) == t.sampled > 0
        assert max(abs(float(logp[i, j]) - t.logprobs[j]) for j, m in enumerate(t.mask) if m) < 1e-4


def test_masked_head_gives_the_same_logprobs_and_gradient(policy, group):
    """With masks the LM head runs only on sampled tokens: same values there, 0 elsewhere, same gradient."""
    seqs, masks = [t.tokens for t in group], [t.mask for t in group]
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grads = []
    for kwargs in ({}, {"masks": masks}):
        policy.model.zero_grad(set_to_none=True)
        logp = sequence_logprobs(policy.model, seqs, logit_chunk=5, **kwargs)
        weight = torch.zeros_like(logp)
        for i, m in enumerate(masks):
            weight[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
        (logp * weight).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in params]))
        if kwargs:
            masked = logp.detach()
    policy.model.zero_grad(set_to_none=True)
    for i, t in enumerate(group):
        for j, m in enumerate(t.mask):
            if m:
                assert abs(float(masked[i, j]) - t.logprobs[j]) < 1e-4
            else:
                assert masked[i, j] == 0
    assert float((grads[0] - grads[1]).norm() / grads[0].norm()) < 1e-4, float((grads[0] - grads[1]).norm() / grads[0].norm())
    with pytest.raises(ValueError, match="mask has"):
        sequence_logprobs(policy.model, seqs, masks=[m[:-1] for m in masks])


def sampled_logprob(policy, t) -> float:
    with torch.no_grad():
        logp = sequence_logprobs(policy.model, [t.tokens])[0]
    return float(sum(logp[i] for i, m in enumerate(t.mask) if m))


def test_recomputed_logprobs_match_the_sampler_and_chunking(policy, group):
    assert all(0 in t.mask[t.prompt_tokens:] for t in group)  # a masked-out tool turn between the replies
    with torch.no_grad():
        whole = sequence_logprobs(policy.model, [t.tokens for t in group], logit_chunk=4096)
        chunked = sequence_logprobs(policy.model, [t.tokens for t in group], logit_chunk=7)
    assert torch.allclose(whole, chunked, atol=1e-5)
    for i, t in enumerate(group):
        assert whole[i, len(t.tokens):].abs().sum() == 0  # padding is zero
        for j, m in enumerate(t.mask):
            if m:
                assert abs(float(whole[i, j]) - t.logprobs[j]) < 1e-4


def test_first_step_ratio_is_one_loss_is_the_token_mean_and_only_lora_learns(policy, group):
    policy = copy.deepcopy(policy)
    optimizer = make_optimizer(policy, PPOConfig(lr=0.0))
    metrics = ppo_step(policy, optimizer, group, PPOConfig(lr=0.0))
    n0, n1 = sum(group[0].mask), sum(group[1].mask)
    assert metrics["tokens_trained"] == n0 + n1
    assert abs(metrics["ratio_mean"] - 1) < 1e-4 and metrics["ratio_max"] < 1 + 1e-3
    assert metrics["clip_fraction"] == 0.0 and abs(metrics["approx_kl"]) < 1e-6
    # ratio 1: loss = -(sum of A over sampled tokens) / tokens = -(n0 - n1) / (n0 + n1)
    assert metrics["loss"] == pytest.approx(-(n0 - n1) / (n0 + n1), abs=1e-4)
    grads = {name: p.grad for name, p in policy.model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in name for name in grads)
    assert any(g.abs().sum() > 0 for g in grads.values())
    assert not any(p.requires_grad for name, p in policy.model.named_parameters() if "lora_" not in name)


def test_micro_batches_and_checkpointing_give_the_full_batch_gradient(policy, group):
    grads = []
    for micro, checkpointing in ((1, False), (100_000, False), (100_000, True)):
        p = copy.deepcopy(policy)
        config = PPOConfig(lr=0.0, micro_batch_tokens=micro, gradient_checkpointing=checkpointing)
        ppo_step(p, make_optimizer(p, config), group, config)
        grads.append(torch.cat([q.grad.flatten() for q in p.model.parameters() if q.grad is not None]))
    assert float((grads[0] - grads[1]).norm() / grads[0].norm()) < 1e-4, float((grads[0] - grads[1]).norm() / grads[0].norm())
    assert torch.allclose(grads[1], grads[2], atol=1e-6, rtol=1e-4)


def test_one_update_moves_logprobs_with_the_advantage(policy, group):
    p = copy.deepcopy(policy)
    before = [sampled_logprob(p, t) for t in group]
    config = PPOConfig(lr=1e-3)
    steps = ppo_update(p, make_optimizer(p, config), group, config)
    after = [sampled_logprob(p, t) for t in group]
    assert len(steps) == 1 and steps[0]["grad_norm"] > 0
    assert after[0] > before[0] and after[1] < before[1]


def test_missing_advantages_are_an_error(policy, group):
    fresh = [copy.copy(t) for t in group]
    fresh[0].advantage = None
    with pytest.raises(ValueError, match="assign_advantages"):
        ppo_step(policy, make_optimizer(policy, PPOConfig()), fresh, PPOConfig())
