"""A group's shared prefix, run through the model once in the update instead of once per branch.

The K branches of a group start from the same prompt (the system message, the tool, the first
observation), and at a low temperature they often write the same first replies too: in the
12-update cpu run the branches of a group shared their first 540-1,200 tokens, about a third of
the tokens the update runs. The model is causal, so those tokens' hidden states and keys/values are
the same in every branch. The update computes them once (with gradient), the branches' remaining
tokens attend to them through a KV cache, and the gradient that flows back into the shared keys,
values and hidden states from every branch runs back through the prefix once. The loss and the
gradient are the plain ones, up to float rounding (``tests/test_prefix.py``).

How: the prefix's outputs are detached into leaf tensors that the branches' micro-batches read
(their gradients accumulate there, micro-batch after micro-batch); :meth:`SharedPrefix.backward`
then sends the accumulated gradients through the prefix's own graph to the LoRA weights.

Taught in notebook 05 (what an update costs); used by :mod:`alfrl.rl.ppo`, and by :func:`alfrl.imitation.sft.tree_nll`
for DAgger's examples, whose branches share an episode's history up to different turns (:meth:`SharedPrefix.head`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from alfrl.agent.kvcache import CACHE
from alfrl.rl.trajectory import Trajectory

MIN_SHARED = 32
"""Shared prefixes shorter than this are not worth a separate pass: the branches run them themselves."""


def common_prefix_length(sequences: list[list[int]]) -> int:
    """How many leading tokens all ``sequences`` have in common."""
    first, n = sequences[0], min(len(s) for s in sequences)
    for other in sequences[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return n


def prefix_groups(trajectories: list[Trajectory], lengths: list[int],
                  min_shared: int = MIN_SHARED) -> list[tuple[list[Trajectory], int]]:
    """``trajectories`` bucketed by their prompt (the tokens before the first sampled one: one bucket per
    group of a game), each bucket with the number of leading tokens its members share within their
    first ``lengths`` tokens (what the update runs), at most one less than the shortest so every
    branch keeps a token of its own; 0 where nothing worth sharing is (one branch, or fewer than
    ``min_shared`` tokens). The buckets keep the trajectories' order, first seen first, except that every
    trajectory with nothing to share goes into one last bucket, so those still pack together."""
    buckets: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        first = next((j for j, m in enumerate(t.mask) if m), len(t.tokens))
        buckets[tuple(t.tokens[:first])].append(i)
    out, alone = [], []
    for members in buckets.values():
        shared = 0
        if len(members) > 1:
            shared = min(common_prefix_length([trajectories[i].tokens[:lengths[i]] for i in members]),
                         min(lengths[i] for i in members) - 1)
        if shared >= min_shared:
            out.append(([trajectories[i] for i in members], shared))
        else:
            alone += members
    return out + ([([trajectories[i] for i in sorted(alone)], 0)] if alone else [])


def can_share(model) -> bool:
    """Whether every layer of ``model`` is plain attention with a plain (growing) KV cache (a sliding-window
    layer would need the prefix trimmed per layer), and no layer recomputes itself in the backward pass
    (gradient checkpointing would append the branches' keys to the cache a second time). Otherwise
    every branch runs in full."""
    if any(getattr(m, "gradient_checkpointing", False) for m in model.modules()):
        return False
    cache = DynamicCache(config=model.config)
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


@dataclass
class SharedPrefix:
    """The prefix's last hidden states ([1, P, hidden]) and per-layer keys/values ([1, heads, P, dim]),
    as float32 leaf tensors the branches read (requiring grad when the prefix was run with gradient
    on), so the gradients of many branches add up in float32 even under bf16 autocast."""

    tokens: list[int]
    hidden: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    config: object
    dtypes: list[torch.dtype] = field(default_factory=list)
    """The dtype each leaf had when the prefix made it (under autocast, bfloat16 for the values):
    the branches read it in that dtype, as they would have computed it themselves."""
    outputs: list[torch.Tensor] = field(default_factory=list)
    """The tensors the leaves were detached from, holding the graph back to the weights."""

    @property
    def length(self) -> int:
        return len(self.tokens)

    def head(self, n: int) -> "SharedPrefix":
        """The first ``n`` tokens of this prefix, read through views of the same leaves, so the gradients
        of what reads them add up here too (a DAgger branch off an episode, :func:`alfrl.imitation.sft.tree_nll`)."""
        if not 0 < n <= self.length:
            raise ValueError(f"a prefix of {self.length} tokens has no head of {n}")
        return SharedPrefix(self.tokens[:n], self.hidden[:, :n], [k[:, :, :n] for k in self.keys],
                            [v[:, :, :n] for v in self.values], self.config, self.dtypes)

    def leaves(self) -> list[torch.Tensor]:
        return [self.hidden, *self.keys, *self.values]

    def cache(self, rows: int) -> DynamicCache:
        """A fresh KV cache holding the prefix for ``rows`` branches (views, no copy): the branches'
        forward appends their own tokens to it."""
        cache = DynamicCache(config=self.config)
        n = len(self.keys)
        for i, (layer, k, v) in enumerate(zip(cache.layers, self.keys, self.values)):
            layer.update(k.expand(rows, -1, -1, -1).to(self.dtypes[1 + i]),
                         v.expand(rows, -1, -1, -1).to(self.dtypes[1 + n + i]))
        return cache

    def hidden_for(self, rows: int, dtype: torch.dtype) -> torch.Tensor:
        """The prefix's hidden states for ``rows`` branches, in ``dtype`` (the branches' own)."""
        return self.hidden.expand(rows, -1, -1).to(dtype)

    def backward(self) -> None:
        """Send the gradients the branches left on the leaves through the prefix to the weights."""
        pairs = [(out, leaf.grad.to(out.dtype)) for out, leaf in zip(self.outputs, self.leaves())
                 if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        self.outputs = []


def run_prefix(decoder, config, tokens: list[int]) -> SharedPrefix:
    """Run ``tokens`` through the decoder stack once; with gradient on, the returned leaves collect the
    branches' gradients for :meth:`SharedPrefix.backward`."""
    device = next(decoder.parameters()).device
    ids = torch.tensor([tokens], dtype=torch.long, device=device)
    cache = DynamicCache(config=config)
    out = decoder(input_ids=ids, use_cache=True, **{CACHE: cache})
    layers = cache.layers
    if not layers or layers[0].keys is None:  # a model that took the cache under another argument name
        raise RuntimeError(f"the decoder did not fill the KV cache passed as {CACHE}=; this transformers version "
                           "names it otherwise (alfrl.agent.kvcache.CACHE)")
    outputs = [out.last_hidden_state, *[layer.keys for layer in layers], *[layer.values for layer in layers]]
    grad = torch.is_grad_enabled()
    leaves = [o.detach().float().requires_grad_(grad) for o in outputs]
    n = len(layers)
    return SharedPrefix(tokens=list(tokens), hidden=leaves[0], keys=leaves[1:1 + n], values=leaves[1 + n:],
                        config=config, dtypes=[o.dtype for o in outputs], outputs=outputs if grad else [])
