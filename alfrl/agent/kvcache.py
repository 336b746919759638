"""A batched key/value cache for a group of trajectories that read different tokens.

The branches of a group share the model, so decoding them together reads the weights
once per step instead of once per branch: on a CPU, where a small model's decode step
is bound by memory bandwidth, eight branches step in about twice the time of one.

Batching branches that diverge needs three things this module adds to transformers'
``DynamicCache``:

- **Holes.** Each step appends one column to every row of the cache; a row with
  nothing to read that step (its reply ended, or its new prompt is shorter) gets a
  pad column that a per-row mask hides from attention. Positions are counted per row,
  over real tokens only, and rotary embeddings are applied before keys are cached, so
  a row's keys do not depend on where its columns sit.
- **Compaction.** Now and then each row's real columns are gathered to the left and
  the holes dropped (:meth:`GroupCache.compact`).
- **Growth without copying.** ``DynamicCache`` concatenates every step, copying the
  whole cache each time (at 8K tokens that copy costs as much as the model's weights);
  :class:`GrowingLayer` appends into a buffer with spare room instead.

Optionally, reads of many tokens at once (a first prompt, a tool result) run under
bfloat16 autocast (``prefill_dtype``): on a CPU with AMX or avx512_bf16 that read is
compute-bound and about 1.7x faster, while a decode step (one token per row, bound by
reading the weights) stays in the model's own precision. The cache keeps the model's
dtype either way. The sampled distribution then differs slightly from the float32
trainer's, so train with the trainer's own old logprobs (``old_logprobs="trainer"``).

Models whose cache is not plain attention (sliding windows, linear-attention layers)
cannot have holes: for them :func:`supports_holes` is false and the sampler runs each
branch on its own.

Taught in notebook 03 (decoding a group's branches together).
"""

from __future__ import annotations

from dataclasses import fields

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.modeling_outputs import BaseModelOutputWithPast

from alfrl.agent.attention import gqa_attention

CACHE = "cache" if "cache" in {f.name for f in fields(BaseModelOutputWithPast)} else "past_key_values"
"""What transformers calls the KV cache, as a forward's argument and on its output: ``cache`` from 5.24,
``past_key_values`` before (5.17 on the GPU machine's image)."""
MIN_SPARE = 256
"""Spare columns allocated when a layer's buffer grows (or half the length, if more)."""
PREFILL_MIN = 16
"""A forward that reads at least this many tokens in some row counts as a prefill (``prefill_dtype``)."""


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views into a buffer with spare columns."""

    _buffers: tuple[torch.Tensor, torch.Tensor] | None = None
    store_dtype: torch.dtype | None = None
    """The dtype keys and values are stored in (the model's): a read under autocast is cast to it."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.store_dtype is not None:
            key_states, value_states = key_states.to(self.store_dtype), value_states.to(self.store_dtype)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        m = n + key_states.shape[-2]
        if self._buffers is None or m > self._buffers[0].shape[-2] or self._stale():
            self._regrow(key_states, value_states, n, m)
        kbuf, vbuf = self._buffers
        kbuf[:, :, n:m] = key_states
        vbuf[:, :, n:m] = value_states
        self.keys, self.values = kbuf[:, :, :m], vbuf[:, :, :m]
        return self.keys, self.values

    def _stale(self) -> bool:
        """True when something outside ``update`` replaced the keys (batch select, repeat, crop)."""
        return self.keys.numel() > 0 and self.keys.data_ptr() != self._buffers[0].data_ptr()

    def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, n: int, m: int) -> None:
        capacity = m + max(MIN_SPARE, m // 2)
        buffers = []
        for old, new in ((self.keys, key_states), (self.values, value_states)):
            shape = list(new.shape)
            shape[-2] = capacity
            buf = new.new_empty(shape)
            if n:
                buf[:, :, :n] = old
            buffers.append(buf)
        self._buffers = (buffers[0], buffers[1])

    def replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Set the cached keys/values outright (used by compaction)."""
        self.keys, self.values = keys, values
        self._buffers = None


def new_cache(model) -> DynamicCache:
    """A cache for ``model`` whose plain attention layers grow without copying."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    dtype = next(model.parameters()).dtype
    for layer in cache.layers:
        if isinstance(layer, GrowingLayer):
            layer.store_dtype = dtype
    return cache


def model_device(model) -> torch.device:
    """Where the model's weights are: every tensor fed to it, and every RNG sampling from it, goes there."""
    return next(model.parameters()).device


def supports_holes(cache: DynamicCache) -> bool:
    """Whether every layer is plain attention, so masked pad columns leave the results unchanged."""
    return all(isinstance(layer, GrowingLayer) for layer in cache.layers)


class GroupCache:
    """The KV cache of several rows (branches), with a mask of which columns are real tokens.
    Its tensors are on the model's device."""

    def __init__(self, model, rows: int, prefill_dtype: torch.dtype | None = None):
        self.model = model
        self.prefill_dtype = prefill_dtype
        """Autocast dtype for reads of at least :data:`PREFILL_MIN` tokens in a row (None: off)."""
        self.device = model_device(model)
        self.cache = new_cache(model)
        self.mask = torch.zeros(rows, 0, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=self.device)
        """Real tokens read so far per row: the position of the next one."""

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def holes(self) -> int:
        """Pad columns in the cache (all rows together)."""
        return int((~self.mask).sum())

    @torch.inference_mode()
    def forward(self, tokens: list[list[int]], pad_id: int, every_position: bool = False) -> torch.Tensor:
        """Read ``tokens[r]`` into row ``r`` (rows may read different numbers, or none);
        returns each row's logits after its last new token (rows that read nothing: zeros), or with
        ``every_position`` the logits after each new token, [rows, width, vocab] (pad columns: zeros)."""
        if len(tokens) != self.rows:
            raise ValueError(f"got tokens for {len(tokens)} rows; the cache has {self.rows}")
        width = max(len(t) for t in tokens)
        counts = torch.tensor([len(t) for t in tokens], device=self.device)
        ids = torch.tensor([list(row) + [pad_id] * (width - len(row)) for row in tokens], dtype=torch.long,
                           device=self.device)  # one copy to the device, not one per row
        columns = torch.arange(width, device=self.device)[None, :]
        new_mask = columns < counts[:, None]
        positions = self.positions[:, None] + columns
        mask = torch.cat([self.mask, new_mask], dim=1)
        last = (counts - 1).clamp(min=0)
        # the language-model head runs only where a row's next token is sampled (or everywhere: 0)
        keep = 0 if every_position else torch.unique(last)
        prefill = self.prefill_dtype is not None and width >= PREFILL_MIN
        with torch.autocast(self.device.type, dtype=self.prefill_dtype, enabled=prefill), gqa_attention(self.model):
            out = self.model(input_ids=ids, attention_mask=None if bool(mask.all()) else mask.long(),
                             position_ids=positions, use_cache=True, logits_to_keep=keep, **{CACHE: self.cache})
        self.cache = getattr(out, CACHE)
        self.mask = mask
        self.positions = self.positions + counts
        if every_position:
            return out.logits.float().masked_fill(~new_mask[:, :, None], 0.0)
        logits = out.logits[torch.arange(self.rows, device=self.device), torch.searchsorted(keep, last)].float()
        return logits.masked_fill((counts == 0)[:, None], 0.0)

    @torch.inference_mode()
    def unread(self, drop: list[int]) -> None:
        """Forget the last ``drop[r]`` tokens row ``r`` read: their columns become holes and the row's next
        position moves back, so the next token read takes the first forgotten one's position (used for
        draft tokens that speculative decoding rejected)."""
        for row, n in enumerate(drop):
            if n:
                real = torch.nonzero(self.mask[row]).flatten()[-n:]
                self.mask[row, real] = False
                self.positions[row] -= n

    def keep(self, rows: list[int]) -> None:
        """Keep the rows listed, in that order: drops finished branches; a row listed twice is
        copied (branches that share a first prompt)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.mask = self.mask[index]
        self.positions = self.positions[index]

    def compact(self) -> None:
        """Gather each row's real columns to the left and drop the columns that are holes in every row."""
        counts = self.mask.sum(1)
        width = int(counts.max()) if self.rows else 0
        # Row r's real columns in order, then column 0 where the row has fewer than ``width`` (masked
        # out): a stable sort puts the real columns first, all rows at once, on the model's device.
        real_first = torch.sort((~self.mask).to(torch.uint8), dim=1, stable=True).indices[:, :width]
        columns = torch.arange(width, device=self.device)[None, :]
        index = torch.where(columns < counts[:, None], real_first, 0)
        for layer in self.cache.layers:
            if not layer.is_initialized or layer.keys.numel() == 0:
                continue
            b, h, _, d = layer.keys.shape
            gather = index[:, None, :, None].expand(b, h, width, d)
            layer.replace(layer.keys.gather(2, gather), layer.values.gather(2, gather))
        self.mask = columns < counts[:, None]
