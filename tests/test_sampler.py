"""alfrl.agent.sampler: KV-cached sampling across turns, one branch or a batched group; logprobs that a full
forward pass reproduces."""

from __future__ import annotations

import math

import pytest
import torch

from alfrl.agent.protocol import ChatFormat, build_next_prompt, tool_result_message
from alfrl.agent.sampler import SampleConfig, new_group_session, new_session, token_distribution

TASK, OBS, ACTIONS = "put a mug in cabinet", "You are in the middle of a room.", ["go to cabinet 1", "look"]


@pytest.fixture(scope="module")
def fmt(policy):
    return ChatFormat(policy.tokenizer)


def full_logprobs(policy, prompt: list[int], completion: list[int], temperature: float = 1.0) -> list[float]:
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion)]


def test_token_distribution_by_hand():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    p = [math.exp(x) for x in (2, 1, 0, -1)]
    z = sum(p)
    assert torch.allclose(token_distribution(logits, 1.0, 1.0), torch.log(torch.tensor(p) / z))
    # top_p 0.7: 0.644 alone is short of 0.7, so the nucleus is the first two tokens, renormalised
    nucleus = token_distribution(logits, 1.0, 0.7)
    assert math.isclose(float(nucleus[0]), math.log(p[0] / (p[0] + p[1])), rel_tol=1e-6)
    assert math.isclose(float(nucleus[1]), math.log(p[1] / (p[0] + p[1])), rel_tol=1e-6)
    assert torch.isinf(nucleus[2:]).all()
    halved = [math.exp(x / 2) for x in (2, 1, 0, -1)]
    assert math.isclose(float(token_distribution(logits, 2.0, 1.0)[3]), math.log(halved[3] / sum(halved)),
                        rel_tol=1e-6)


def test_cached_turns_match_a_full_forward_pass(policy, fmt):
    cfg = SampleConfig(temperature=1.0, max_new_tokens=12)
    session = new_session(policy, seed=1)
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    history = fmt.messages(TASK, OBS, ACTIONS)
    for turn in range(2):
        sample = session.sample(prompt, cfg)
        assert len(sample.tokens) == len(sample.logprobs) <= 12
        assert max(abs(a - b) for a, b in zip(sample.logprobs, full_logprobs(policy, prompt, sample.tokens))) < 1e-4
        # the cache holds exactly the prompt and the sampled tokens but the last (read next turn)
        assert session.cached == prompt + sample.tokens[:-1]
        history = history + [{"role": "assistant", "content": policy.tokenizer.decode(sample.tokens,
                                                                                      skip_special_tokens=True)}]
        result = tool_result_message("Action executed.", f"Observation {turn}.", ACTIONS)
        nxt = build_next_prompt(fmt, prompt, sample.tokens, history, result)
        history = history + [{"role": "tool", "content": result}]
        expected_new = len(nxt) - len(session.cached)
        prompt = nxt
    assert session.sample(prompt, SampleConfig(max_new_tokens=1)).prefilled == expected_new


def test_greedy_is_reproducible_and_stops(policy, fmt):
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    a = new_session(policy, seed=0).sample(prompt, SampleConfig(temperature=0, max_new_tokens=200))
    b = new_session(policy, seed=5).sample(prompt, SampleConfig(temperature=0, max_new_tokens=200))
    assert a.tokens == b.tokens  # greedy ignores the seed
    assert a.stopped_on == "eos" and a.tokens[-1] == policy.tokenizer.eos_token_id
    short = new_session(policy).sample(prompt, SampleConfig(temperature=0, max_new_tokens=3))
    assert short.stopped_on == "budget" and short.tokens == a.tokens[:3]


def test_sampling_is_seeded(policy, fmt):
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    cfg = SampleConfig(temperature=1.0, top_p=0.95, max_new_tokens=16)
    one, again = (new_session(policy, seed=7).sample(prompt, cfg) for _ in range(2))
    assert one.tokens == again.tokens and one.logprobs == again.logprobs
    others = [new_session(policy, seed=s).sample(prompt, cfg).tokens for s in range(8, 11)]
    assert any(o != one.tokens for o in others)


def test_prompt_must_extend_the_history(policy, fmt):
    session = new_session(policy)
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    session.sample(prompt, SampleConfig(temperature=0, max_new_tokens=2))
    with pytest.raises(ValueError, match="prefix extension"):
        session.sample([prompt[0] + 1] + prompt[1:] + [5], SampleConfig(max_new_tokens=1))
    with pytest.raises(ValueError, match="adds no token"):
        session.sample(list(session.cached), SampleConfig(max_new_tokens=1))


def play_group(policy, fmt, session, turns: int, cfg: SampleConfig, drop_after: dict[int, list[int]] | None = None):
    """Play ``turns`` turns on every live branch; tool results differ in length per branch, so the
    batched cache gets holes. Returns {branch: [(prompt, sample), ...]}."""
    prompt0 = fmt.initial_prompt(TASK, OBS, ACTIONS)
    prompts = {b: prompt0 for b in session.branches}
    history = {b: fmt.messages(TASK, OBS, ACTIONS) for b in session.branches}
    played = {b: [] for b in session.branches}
    for turn in range(turns):
        samples = session.sample(prompts, cfg)
        for b, sample in samples.items():
            played[b].append((prompts[b], sample))
            text = policy.tokenizer.decode(sample.tokens, skip_special_tokens=True)
            history[b] = history[b] + [{"role": "assistant", "content": text}]
            result = tool_result_message("Action executed.", f"Observation {turn}." + " more" * (5 * b), ACTIONS)
            prompts[b] = build_next_prompt(fmt, prompts[b], sample.tokens, history[b], result)
            history[b] = history[b] + [{"role": "tool", "content": result}]
        for b in (drop_after or {}).get(turn, []):
            session.drop([b])
            del prompts[b]
    return played


def test_group_branches_match_a_full_forward_pass(policy, fmt):
    """Batched branches with holes, compaction every turn and a dropped branch: every logprob is what
    a fresh forward pass over that branch alone gives."""
    session = new_group_session(policy, seeds=[0, 1, 2])
    session.compact_at = 0.0
    played = play_group(policy, fmt, session, 3, SampleConfig(temperature=1.0, max_new_tokens=12),
                        drop_after={0: [1]})
    assert [len(played[b]) for b in (0, 1, 2)] == [3, 1, 3] and session.branches == [0, 2]
    for b, turns in played.items():
        for prompt, sample in turns:
            ref = full_logprobs(policy, prompt, sample.tokens)
            assert max(abs(a - r) for a, r in zip(sample.logprobs, ref)) < 1e-4
        prompt, sample = turns[-1]
        assert session.read[b] == prompt + sample.tokens[:-1]


def test_batched_and_one_by_one_agree(policy, fmt):
    cfg = SampleConfig(temperature=0, max_new_tokens=10)
    batched = play_group(policy, fmt, new_group_session(policy, [0, 1, 2]), 2, cfg)
    alone = play_group(policy, fmt, new_group_session(policy, [0, 1, 2], batched=False), 2, cfg)
    for b in batched:
        assert [s.tokens for _, s in batched[b]] == [s.tokens for _, s in alone[b]]
        for (_, x), (_, y) in zip(batched[b], alone[b]):
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4


def test_group_reads_a_shared_prompt_once_and_seeds_each_branch(policy, fmt):
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    cfg = SampleConfig(temperature=1.0, max_new_tokens=8)
    session = new_group_session(policy, seeds=[3, 4, 5, 6])
    samples = session.sample({b: prompt for b in range(4)}, cfg)
    longest = max(len(s.tokens) for s in samples.values())
    # the prompt once, then one column per branch for each decode step but the last
    assert session.forward_tokens == len(prompt) + 4 * (longest - 1)
    assert all(s.prefilled == len(prompt) for s in samples.values())
    for b, seed in zip(range(4), (3, 4, 5, 6)):
        assert samples[b].tokens == new_session(policy, seed=seed).sample(prompt, cfg).tokens
    assert len({tuple(s.tokens) for s in samples.values()}) > 1


def test_two_groups_in_one_batch_read_each_first_prompt_once(policy, fmt):
    first = fmt.initial_prompt(TASK, OBS, ACTIONS)
    second = fmt.initial_prompt("put a hot apple in fridge", OBS + " You see a fridge 1.", ACTIONS)
    prompts = {0: first, 1: first, 2: second, 3: second}
    cfg = SampleConfig(temperature=1.0, max_new_tokens=6)
    session = new_group_session(policy, seeds=[3, 4, 5, 6])
    samples = session.sample(prompts, cfg)
    longest = max(len(s.tokens) for s in samples.values())
    assert session.forward_tokens == 2 * max(len(first), len(second)) + 4 * (longest - 1)
    for b, seed in zip(range(4), (3, 4, 5, 6)):
        alone = new_session(policy, seed=seed).sample(prompts[b], cfg)
        assert samples[b].tokens == alone.tokens
        assert max(abs(p - q) for p, q in zip(samples[b].logprobs, alone.logprobs)) < 1e-4


def test_group_wants_a_prompt_per_live_branch(policy, fmt):
    session = new_group_session(policy, seeds=[0, 1])
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    with pytest.raises(ValueError, match="drop"):
        session.sample({0: prompt}, SampleConfig(max_new_tokens=1))
    session.drop([0, 1])
    assert session.sample({}, SampleConfig(max_new_tokens=1)) == {}


def test_bf16_prefill_reads_long_prompts_in_bfloat16_and_keeps_the_cache_in_float32(policy):
    """``prefill_dtype``: a read of PREFILL_MIN or more tokens runs under bfloat16 autocast, a shorter one
    (a decode step) in float32 exactly; the cache stays float32, even when its first read is a prefill;
    the logprobs move by bfloat16 rounding only."""
    from alfrl.agent.kvcache import PREFILL_MIN, GroupCache

    model = policy.model
    short = [1] + list(range(300, 300 + PREFILL_MIN - 2))  # PREFILL_MIN - 1 tokens: below the threshold
    long = list(range(500, 500 + 3 * PREFILL_MIN))
    plain, bf16 = GroupCache(model, 1), GroupCache(model, 1, prefill_dtype=torch.bfloat16)
    assert torch.equal(plain.forward([short], 0), bf16.forward([short], 0))  # below the threshold: float32
    exact, rounded = plain.forward([long], 0), bf16.forward([long], 0)
    assert all(layer.keys.dtype == layer.values.dtype == torch.float32 for layer in bf16.cache.layers)
    gap = (torch.log_softmax(exact, -1) - torch.log_softmax(rounded, -1)).abs()
    assert 0 < float(gap.max())  # autocast did act
    # the stated tolerance: bfloat16 keeps 8 bits of mantissa; over the likely tokens the logprobs agree
    # to about a tenth of a nat (measured: 0.12-0.13 at most over tokens with p > 1e-3, 0.22-0.25 over all)
    likely = torch.softmax(exact, -1) > 1e-3
    assert float(gap[likely].max()) < 0.25
    step = plain.forward([[7]], 0), bf16.forward([[7]], 0)  # a decode step after it: float32 on both
    assert float((step[0] - step[1]).abs().max()) < 1.0
    # a cache whose first read is a prefill (a rollout's first prompt) still stores float32 and decodes
    first = GroupCache(model, 2, prefill_dtype=torch.bfloat16)
    first.forward([long, long[:-1]], 0)
    first.forward([[7], [8]], 0)
    assert all(layer.keys.dtype == layer.values.dtype == torch.float32 for layer in first.cache.layers)


def test_each_sampled_token_carries_the_entropy_of_its_distribution(policy, fmt):
    """Sample.entropies[i] = -sum p log p of the distribution token i was drawn from (a full forward pass
    recomputes it), at the sampling temperature."""
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    session = new_session(policy, seed=3)
    sample = session.sample(prompt, SampleConfig(temperature=0.7, max_new_tokens=4))
    assert len(sample.entropies) == len(sample.tokens) == 4
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt + sample.tokens])).logits[0].float()
    for i in range(4):
        logp = torch.log_softmax(logits[len(prompt) - 1 + i] / 0.7, dim=-1)
        expected = float(-(logp.exp() * logp).sum())
        assert math.isclose(sample.entropies[i], expected, rel_tol=1e-3, abs_tol=1e-4)


def test_every_eos_of_the_generation_config_stops_a_reply(policy, fmt, monkeypatch):
    """Qwen3's generation config lists two end tokens (``<|im_end|>`` and ``<|endoftext|>``): the sampler stops on
    each. Here the token the model says first becomes a second eos, and the reply ends right after it."""
    from transformers import GenerationConfig

    from alfrl.agent.sampler import policy_stop_ids, stop_ids
    eos = policy.tokenizer.eos_token_id
    assert stop_ids(policy.tokenizer, GenerationConfig(eos_token_id=[eos, 7])) == {eos, 7}
    assert stop_ids(policy.tokenizer, GenerationConfig(eos_token_id=eos)) == stop_ids(policy.tokenizer) == {eos}
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    greedy = SampleConfig(temperature=0, max_new_tokens=20)
    first = new_session(policy).sample(prompt, greedy).tokens[0]
    assert first != eos
    monkeypatch.setattr(policy.model.generation_config, "eos_token_id", [eos, first])
    assert policy_stop_ids(policy) == {eos, first}
    replies = [new_session(policy).sample(prompt, greedy),
               *new_group_session(policy, [0, 1]).sample({0: prompt, 1: prompt}, greedy).values()]
    assert [(r.tokens, r.stopped_on) for r in replies] == [([first], "eos")] * 3
