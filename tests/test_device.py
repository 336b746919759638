"""Every tensor and RNG follows the model's device, and ``--device auto`` / ``--dtype auto`` resolve.

No GPU is needed to catch a tensor built on the wrong device: the sampler, a rollout, a PPO step and
an SFT step run here with torch's default device set to "meta" while the model sits on the CPU. A
tensor made without an explicit device then lands on meta, and the first mix with the model's tensors
(or any read of its value) fails loudly, as the same code would on a GPU. The results must equal a
run with the ordinary default device: the CPU path is unchanged.
"""

from __future__ import annotations

import argparse
import copy
from contextlib import contextmanager

import pytest
import torch

from alfrl.agent.models import resolve_device, resolve_dtype
from alfrl.agent.protocol import ChatFormat
from alfrl.agent.sampler import SampleConfig, new_group_session, new_session
from alfrl.base.cli import add_dataclass_args, build_dataclass
from alfrl.rl.logprobs import sequence_logprobs
from alfrl.rl.ppo import PPOConfig, make_optimizer, ppo_step
from alfrl.rl.rollout import RolloutConfig, rollout_group

TASK, OBS, ACTIONS = "put a mug in cabinet", "You are in the middle of a room.", ["go to cabinet 1", "look"]


@contextmanager
def default_device(device: str):
    """Tensors made without a device land on ``device`` inside; the previous default is restored after."""
    before = torch.get_default_device()
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None if before == torch.device("cpu") else before)


def on_meta(fn, *args, **kwargs):
    with default_device("meta"):
        return fn(*args, **kwargs)


def test_default_device_is_restored():
    with pytest.raises(RuntimeError), default_device("meta"):
        int(torch.zeros(1))  # the trap works: a value on meta cannot be read
    assert torch.zeros(1).device == torch.device("cpu")


# --- resolving --device / --dtype -----------------------------------------------------------------------

def test_auto_device_and_dtype(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype("auto", "auto") == torch.float32
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")
    assert resolve_dtype("auto", torch.device("mps")) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a T4 or V100
    assert resolve_dtype("auto", "cuda") == torch.float32


def test_explicit_device_and_dtype(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("float32", "cpu") == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16  # an explicit dtype wins on any device
    assert resolve_dtype(torch.float16, "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("float33", "cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        resolve_device("cuda")


@pytest.mark.parametrize("module, name", [("alfrl.training.train", "TrainConfig"), ("alfrl.eval.evaluate", "EvalConfig"),
                                          ("alfrl.imitation.sft", "SFTConfig")])
def test_every_command_has_device_and_dtype_flags_defaulting_to_auto(module, name):
    import importlib
    cls = getattr(importlib.import_module(module), name)
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, cls)
    assert build_dataclass(cls, parser.parse_args([])).device == "auto"
    assert build_dataclass(cls, parser.parse_args([])).dtype == "auto"
    config = build_dataclass(cls, parser.parse_args(["--device", "cpu", "--dtype", "float32"]))
    assert (config.device, config.dtype) == ("cpu", "float32")


# --- the sampler, a rollout, a PPO step and an SFT step with tensors on the model's device ----------------

@pytest.fixture(scope="module")
def fmt(policy):
    return ChatFormat(policy.tokenizer)


def play_group(policy, fmt, batched: bool, temperature: float, top_p: float = 1.0) -> list:
    """Two turns of two branches (different first prompts), compaction forced after each turn."""
    session = new_group_session(policy, [1, 2], batched=batched)
    session.compact_at = 0.0
    prompts = {0: fmt.initial_prompt(TASK, OBS, ACTIONS), 1: fmt.initial_prompt(TASK, OBS, ACTIONS[::-1])}
    cfg = SampleConfig(temperature=temperature, top_p=top_p, max_new_tokens=4)
    out = []
    for turn in range(2):
        samples = session.sample(prompts, cfg)
        out.append({b: (s.tokens, s.logprobs, s.stopped_on) for b, s in samples.items()})
        prompts = {b: prompts[b] + s.tokens + fmt.encode(f"\nturn {turn}\n") for b, s in samples.items()}
        if turn == 0:
            session.drop([1])
            prompts.pop(1)
    return out


@pytest.mark.parametrize("batched, temperature, top_p", [(True, 1.0, 1.0), (True, 0.0, 1.0), (False, 1.0, 0.9)])
def test_sampler_keeps_its_tensors_on_the_model_device(policy, fmt, batched, temperature, top_p):
    expected = play_group(policy, fmt, batched, temperature, top_p)
    assert on_meta(play_group, policy, fmt, batched, temperature, top_p) == expected


def test_session_generators_follow_the_model(policy):
    session = new_session(policy, seed=3)
    assert {g.device for g in session.group.generators.values()} == {torch.device("cpu")}


def test_a_rollout_runs_on_the_model_device(policy, tiny_games):
    game = next(g for g in tiny_games.games("valid_seen") if g.task_type == "pick_and_place_simple")
    config = RolloutConfig(k=2, max_steps=2, max_new_tokens=6, seed=1, workers=0)
    expected = rollout_group(policy, game, config)
    got = on_meta(rollout_group, policy, game, config)
    assert [(t.tokens, t.logprobs, t.mask) for t in got] == [(t.tokens, t.logprobs, t.mask) for t in expected]


@pytest.fixture(scope="module")
def trajectories(policy, tiny_games):
    game = next(g for g in tiny_games.games("valid_seen") if g.task_type == "pick_and_place_simple")
    group = rollout_group(policy, game, RolloutConfig(k=2, max_steps=1, max_new_tokens=6, seed=2, workers=0))
    for t, a in zip(group, (1.0, -1.0)):
        t.advantage = a
    return group


def test_sequence_logprobs_on_the_model_device(policy, trajectories):
    seqs, masks = [t.tokens for t in trajectories], [t.mask for t in trajectories]
    with torch.no_grad():
        expected = sequence_logprobs(policy.model, seqs, masks=masks)
        got = on_meta(sequence_logprobs, policy.model, seqs, masks=masks)
    assert got.device == torch.device("cpu")
    assert torch.equal(got, expected)


def test_a_ppo_step_runs_on_the_model_device(policy, trajectories):
    config = PPOConfig(lr=1e-3)
    metrics = []
    for meta in (False, True):
        p = copy.deepcopy(policy)
        optimizer = make_optimizer(p, config)
        # torch's (non-fused) Adam keeps its step counter on the default device: on a GPU that is the
        # CPU, as torch intends, but here it would be meta. Make the optimizer's state off meta first.
        for q in optimizer.param_groups[0]["params"]:
            q.grad = torch.zeros_like(q)
        optimizer.step()
        metrics.append(on_meta(ppo_step, p, optimizer, trajectories, config) if meta
                       else ppo_step(p, optimizer, trajectories, config))
    same = [{k: v for k, v in m.items() if not k.endswith("_seconds")} for m in metrics]  # timings differ
    assert same[1] == pytest.approx(same[0], rel=1e-6, abs=1e-9)


def test_an_sft_step_runs_on_the_model_device(policy, tiny_games):
    from alfrl.imitation.sft import SFTConfig, expert_trajectories, nll_loss
    game = min(tiny_games.games("train"), key=lambda g: len(g.walkthrough))
    expert = on_meta(expert_trajectories, policy, [game], SFTConfig(max_steps=2), progress=False)
    again = expert_trajectories(policy, [game], SFTConfig(max_steps=2), progress=False)
    assert [(t.tokens, t.logprobs, t.mask) for t in expert] == [(t.tokens, t.logprobs, t.mask) for t in again]
    losses = []
    for meta in (False, True):
        p = copy.deepcopy(policy)
        loss, tokens = on_meta(nll_loss, p.model, expert) if meta else nll_loss(p.model, expert)
        grads = [q.grad for q in p.model.parameters() if q.requires_grad]
        assert all(g is not None and g.device == torch.device("cpu") for g in grads)
        losses.append((loss, tokens, float(sum(g.norm() for g in grads))))
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
