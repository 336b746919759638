"""Grouped-query attention that reads each key/value head once, whatever the mask.

SmolLM2-135M (like Qwen3 and Llama 3) has fewer key/value heads than query heads: 3 against 9, so
three query heads share each cached key/value head. transformers' ``sdpa`` attention hands PyTorch's
kernel the shared heads as they are only when there is no mask (or, for one query token, by packing
the queries). A group's KV cache has a mask (the pad columns of branches that diverged, see
:mod:`alfrl.agent.kvcache`), and every turn reads a tool result of 100-300 tokens against it: there
``sdpa`` first copies every cached key and value three times (``repeat_kv``), in every layer. On
2 CPU cores that copy was a quarter of a rollout's time.

:func:`gqa_sdpa` gives the kernel each key/value head once, with the query heads that share it
stacked along the query axis, and the mask repeated to match. The products are the same numbers
summed in the same order per head, so the result equals ``sdpa``'s up to float rounding (a test
states the tolerance). :func:`gqa_attention` switches a model to it for a block of code; models whose
heads are not grouped fall through to ``sdpa`` unchanged.

Taught in notebook 03 (what a rollout's time goes to).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "alfrl_gqa"
"""The attention implementation's name in transformers' registry (``config._attn_implementation``)."""
ENABLED = True
"""False: the sampler attends with plain ``sdpa`` (benchmarks/episodes_per_minute.py's "before")."""


def gqa_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
             is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """``sdpa`` attention without copying shared key/value heads (same arguments and result layout:
    ``query`` [batch, heads, q, dim], ``key``/``value`` [batch, kv_heads, kv, dim] -> [batch, q, heads, dim])."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    # No grouping, no mask (sdpa passes the heads as they are), or a mask per head: nothing to save.
    if (groups == 1 or attention_mask is None or attention_mask.shape[1] != 1 or dropout
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    kv_heads = key.shape[1]
    # Query head h uses key/value head h // groups (transformers' repeat_kv order): stack each key/value
    # head's query heads along the query axis, and repeat the mask (one copy per shared head) to match.
    stacked = query.reshape(batch, kv_heads, groups * q_len, dim)
    mask = attention_mask[:, :, None].expand(-1, -1, groups, -1, -1).reshape(
        attention_mask.shape[0], 1, groups * q_len, attention_mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(stacked, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, gqa_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the same masks sdpa gets


@contextmanager
def gqa_attention(model):
    """Within the block, ``model`` (a transformers model, or a peft model around one) attends with
    :func:`gqa_sdpa` where it used ``sdpa``; other implementations (eager, flash attention) stay. The
    sampler reads through it (:class:`alfrl.agent.kvcache.GroupCache`); the trainer's passes do not."""
    config = model.config
    was = config._attn_implementation
    if was == "sdpa" and ENABLED:
        config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = was
