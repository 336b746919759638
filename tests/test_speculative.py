"""Speculative decoding by prompt lookup (alfrl.agent.sampler, SampleConfig.draft_tokens) and the sampler's
grouped-query attention (alfrl.agent.attention): the same replies as plain decoding (greedy: token for token;
sampling: the same distribution), logprobs a full forward pass reproduces, rejected drafts unread."""

from __future__ import annotations

import collections
import math

import pytest
import torch

from alfrl.agent.attention import gqa_attention
from alfrl.agent.protocol import ChatFormat
from alfrl.agent.sampler import GroupSession, SampleConfig, lookup_draft, new_group_session
from test_sampler import ACTIONS, OBS, TASK, full_logprobs, play_group


@pytest.fixture(scope="module")
def fmt(policy):
    return ChatFormat(policy.tokenizer)


def test_lookup_draft_by_hand():
    # the latest earlier occurrence of the last 3 tokens (7 8 9) is followed by 1 2
    assert lookup_draft([7, 8, 9, 1, 2, 5, 7, 8, 9], 2) == [1, 2]
    assert lookup_draft([7, 8, 9, 1, 2, 5, 7, 8, 9], 5) == [1, 2, 5, 7, 8]
    # no 3- or 2-token match: the last token alone (9 -> 4, its latest occurrence)
    assert lookup_draft([9, 3, 9, 4, 6, 9], 2) == [4, 6]
    assert lookup_draft([1, 2, 3], 4) == [] and lookup_draft([5], 3) == [] and lookup_draft([5, 5], 0) == []


def tiny_llama(vocab: int = 6):
    """A random 2-layer model with grouped heads (4 query heads share 2 key/value heads): cheap enough to
    sample thousands of replies, so the sampled distribution itself can be compared."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def reply_counts(model, prompt: list[int], draft_tokens: int, n: int, length: int = 3) -> collections.Counter:
    session = GroupSession(model, stop_ids={0}, seeds=list(range(n)), pad_id=0)
    cfg = SampleConfig(temperature=1.0, max_new_tokens=length, draft_tokens=draft_tokens)
    return collections.Counter(tuple(s.tokens) for s in session.sample({b: prompt for b in range(n)}, cfg).values())


def test_speculative_sampling_keeps_the_distribution_of_plain_sampling():
    """3-token replies of a tiny random model, 3,000 each way: the frequency of every reply agrees with
    plain sampling's within 5 standard errors, and with the model's own probability of that reply."""
    model = tiny_llama()
    prompt = [1, 2, 3, 4, 5, 2, 3, 4, 1, 2, 3]  # repeats, so the lookup finds drafts
    n = 3000
    plain, spec = reply_counts(model, prompt, 0, n), reply_counts(model, prompt, 4, n)
    with torch.no_grad():
        for reply in set(plain) | set(spec):
            logits = model(input_ids=torch.tensor([prompt + list(reply)])).logits[0]
            logp = torch.log_softmax(logits, -1)
            p = math.exp(sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(reply)))
            se = math.sqrt(p * (1 - p) / n) + 1e-3
            assert abs(spec[reply] / n - p) < 5 * se, (reply, spec[reply] / n, p)
            assert abs(plain[reply] / n - p) < 5 * se, (reply, plain[reply] / n, p)
    assert sum(spec.values()) == n


def forward_passes(model, play) -> tuple[int, dict]:
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        result = play()
    finally:
        handle.remove()
    return len(calls), result


def test_greedy_speculative_replies_equal_plain_greedy_and_the_cache_holds_no_rejected_draft(policy, fmt):
    """Greedy replies token for token as without drafts, in fewer forward passes; afterwards each branch's
    cache holds exactly its prompt and reply but the last token, at consecutive positions."""
    base = policy.model.get_base_model()
    n_plain, plain = forward_passes(base, lambda: play_group(
        policy, fmt, new_group_session(policy, [0, 1, 2]), 2, SampleConfig(temperature=0, max_new_tokens=12)))
    session = new_group_session(policy, [0, 1, 2])
    n_spec, spec = forward_passes(base, lambda: play_group(
        policy, fmt, session, 2, SampleConfig(temperature=0, max_new_tokens=12, draft_tokens=6)))
    assert n_spec < n_plain, (n_spec, n_plain)
    for b in plain:
        assert [s.tokens for _, s in spec[b]] == [s.tokens for _, s in plain[b]]
        prompt, sample = spec[b][-1]
        assert session.read[b] == prompt + sample.tokens[:-1]
        assert int(session.caches[0].positions[session.branches.index(b)]) == len(session.read[b])


def test_speculative_logprobs_match_a_full_forward_pass(policy, fmt):
    """Sampled at temperature 0.7 with drafts, one branch batched and one alone: every logprob is the
    full forward pass's at that temperature (the trainer's recomputation), and batched = alone."""
    cfg = SampleConfig(temperature=0.7, max_new_tokens=12, draft_tokens=8)
    batched = play_group(policy, fmt, new_group_session(policy, [5, 6]), 2, cfg)
    alone = play_group(policy, fmt, new_group_session(policy, [5, 6], batched=False), 2, cfg)
    for b in batched:
        assert [s.tokens for _, s in batched[b]] == [s.tokens for _, s in alone[b]]
        for prompt, sample in batched[b]:
            ref = full_logprobs(policy, prompt, sample.tokens, temperature=0.7)
            assert max(abs(a - r) for a, r in zip(sample.logprobs, ref)) < 1e-4
            assert len(sample.entropies) == len(sample.tokens)


def test_gqa_attention_equals_sdpa_with_holes(policy):
    """The sampler's attention (each key/value head read once) against transformers' sdpa on a masked
    batch: logits equal within 1e-4 (float32: the same products, summed in another order; through 30 layers
    that moved logits of up to 34 by 4e-5 on an AVX2 CPU, under 1e-5 on AVX-512; a wrong mask or hole
    moves them by whole units)."""
    from alfrl.agent.kvcache import GroupCache
    rows = [[1] + list(range(200, 260)), [1] + list(range(300, 330))]
    out = {}
    for name, use in (("sdpa", False), ("gqa", True)):
        cache = GroupCache(policy.model, 2)
        if use:
            cache.forward(rows, 0)
            logits = cache.forward([[7, 8, 9], [5]], 0, every_position=True)
        else:
            import contextlib

            import alfrl.agent.kvcache as kvcache
            original = kvcache.gqa_attention
            kvcache.gqa_attention = lambda model: contextlib.nullcontext()
            try:
                cache.forward(rows, 0)
                logits = cache.forward([[7, 8, 9], [5]], 0, every_position=True)
            finally:
                kvcache.gqa_attention = original
        out[name] = logits
    assert policy.model.config._attn_implementation == "sdpa"  # switched only inside the sampler's forward
    assert torch.allclose(out["sdpa"], out["gqa"], rtol=0, atol=1e-4)
    with gqa_attention(policy.model):
        assert policy.model.config._attn_implementation == "alfrl_gqa"
    assert policy.model.config._attn_implementation == "sdpa"
