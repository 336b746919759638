"""Token-level sampling with one KV cache per trajectory, kept across turns.

A multi-turn episode's prompt grows by prefix extension (:mod:`alfrl.protocol`): turn
t+1's prompt is turn t's prompt plus the sampled completion plus a few template and
tool-result tokens. A stateless loop re-reads the whole history every turn (the
reference run prefilled 843M tokens to sample 14M). A :class:`Session` keeps the
model's key/value cache of everything it has read, so each turn prefills only the
tokens that are new.

Logprobs are those of the distribution actually sampled from: ``softmax(logits / T)``,
renormalised over the top-p nucleus when ``top_p < 1``. Temperature 0 is greedy; its
logprobs are reported at temperature 1.

Taught in notebook 02 (KV-cached sampling across turns) and 03 (a group's branches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alfrl.kvcache import GroupCache, model_device, supports_holes


@dataclass
class SampleConfig:
    """How to sample one reply."""

    temperature: float = 1.0
    """Sampling temperature; 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    max_new_tokens: int = 256
    """Budget of sampled tokens per reply."""


@dataclass
class Sample:
    """One reply: its token ids and their logprobs, and why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stopped_on: str
    """"eos" (an end-of-turn token) or "budget" (max_new_tokens)."""
    prefilled: int
    """Tokens run through the model to read the prompt this turn."""


def token_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probabilities of the next token under the sampling settings (``-inf`` outside the nucleus)."""
    logits = logits.float()
    logp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    if top_p < 1.0 and temperature > 0:
        sorted_logp, order = torch.sort(logp, descending=True)
        cum = sorted_logp.exp().cumsum(-1)
        drop = cum - sorted_logp.exp() >= top_p  # keep the smallest prefix reaching top_p
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_logp)
        logp = logp - torch.logsumexp(logp, dim=-1, keepdim=True)
    return logp


class GroupSession:
    """The branches of one group: the tokens each has read, one batched KV cache, one RNG each.

    Every call to :meth:`sample` gives each live branch a prompt that extends what it has
    read; the new tokens are prefilled together and the replies decoded together, one
    batched forward pass per step. A first prompt shared by several branches (a group's) is
    read once and its cache row copied. Branches whose episode ended are removed with
    :meth:`drop`. With ``batched=False`` (or a model whose cache cannot have holes, see
    :mod:`alfrl.kvcache`) each branch runs alone; results are the same either way, up to
    float rounding.
    """

    def __init__(self, model, stop_ids: set[int], seeds: list[int], pad_id: int, batched: bool = True,
                 compact_at: float = 0.25, prefill_dtype: str | None = None):
        self.model, self.stop_ids, self.pad_id, self.compact_at = model, set(stop_ids), pad_id, compact_at
        self.branches = list(range(len(seeds)))
        """Live branch ids, in cache row order."""
        self.read: dict[int, list[int]] = {b: [] for b in self.branches}
        """Tokens whose keys/values are cached, per branch."""
        self.device = model_device(model)
        self.generators = {b: torch.Generator(device=self.device).manual_seed(s)
                           for b, s in zip(self.branches, seeds)}
        """One RNG per branch, on the model's device (where the probabilities are): a CPU run samples
        exactly as before; a GPU run is reproducible on that GPU, not equal to a CPU run."""
        self.forward_tokens = 0
        """Token columns run through the model (shared prompts once, pad columns included)."""
        probe = GroupCache(model, 1)
        self.batched = batched and supports_holes(probe.cache)
        autocast = getattr(torch, prefill_dtype) if prefill_dtype else None
        self.caches = [GroupCache(model, 0 if self.batched else 1, prefill_dtype=autocast) for _ in
                       (range(1) if self.batched else self.branches)]

    def drop(self, branches: list[int]) -> None:
        """Forget finished branches (their cache rows are freed)."""
        gone = set(branches) & set(self.branches)
        if not gone:
            return  # nothing to free (and no cache copy)
        keep = [i for i, b in enumerate(self.branches) if b not in gone]
        if self.batched:
            if self.caches[0].rows:
                self.caches[0].keep(keep)
        else:
            self.caches = [self.caches[i] for i in keep]
        self.branches = [self.branches[i] for i in keep]

    def _new_tokens(self, prompts: dict[int, list[int]]) -> list[list[int]]:
        if sorted(prompts) != sorted(self.branches):
            raise ValueError(f"prompts are for branches {sorted(prompts)} but the live branches are "
                             f"{self.branches}; drop() finished branches first")
        new = []
        for b in self.branches:
            read, prompt = self.read[b], prompts[b]
            if prompt[:len(read)] != read:
                raise ValueError(f"branch {b}: the prompt does not extend this session's history; prompts must "
                                 "grow by prefix extension (see alfrl.protocol.build_next_prompt)")
            if len(prompt) == len(read):
                raise ValueError(f"branch {b}: the prompt adds no token to read; nothing to condition the reply on")
            new.append(prompt[len(read):])
        return new

    def _forward(self, tokens: list[list[int]]) -> torch.Tensor:
        """Read ``tokens[i]`` into live branch i; logits after each branch's last new token."""
        for b, t in zip(self.branches, tokens):
            self.read[b].extend(t)
        if not self.batched:
            self.forward_tokens += sum(len(t) for t in tokens)
            return self._forward_each(tokens)
        cache = self.caches[0]
        if cache.rows == 0:  # first read: each distinct prompt is read once, then its row copied
            unique = []
            for t in tokens:
                if t not in unique:
                    unique.append(t)
            rows = [unique.index(t) for t in tokens]
            cache.mask = cache.mask.new_zeros(len(unique), 0)
            cache.positions = cache.positions.new_zeros(len(unique))
            self.forward_tokens += len(unique) * max(len(t) for t in unique)
            logits = cache.forward(unique, self.pad_id)
            if len(unique) < len(tokens):
                cache.keep(rows)
            return logits[rows]
        self.forward_tokens += cache.rows * max(len(t) for t in tokens)
        return cache.forward(tokens, self.pad_id)

    def _forward_each(self, tokens: list[list[int]]) -> torch.Tensor:
        rows = [c.forward([t], self.pad_id)[0] if t else None for c, t in zip(self.caches, tokens)]
        width = next(r.shape[-1] for r in rows if r is not None)
        return torch.stack([r if r is not None else torch.zeros(width, device=self.device) for r in rows])

    def sample(self, prompts: dict[int, list[int]], cfg: SampleConfig) -> dict[int, Sample]:
        """Read what is new in each branch's prompt, then sample one reply per branch."""
        if not self.branches and not prompts:
            return {}
        new = self._new_tokens(prompts)
        logits = self._forward(new)
        live = list(self.branches)
        tokens = {b: [] for b in live}
        logprobs = {b: [] for b in live}
        stopped = {b: "budget" for b in live}
        running = set(live)
        for step in range(cfg.max_new_tokens):
            logp = token_distribution(logits, cfg.temperature, cfg.top_p)
            rows = [i for i, b in enumerate(live) if b in running]
            index = torch.tensor(rows, device=logp.device)
            if cfg.temperature == 0:
                picked = torch.argmax(logp[index], dim=-1)
            else:
                picked = torch.cat([torch.multinomial(logp[i].exp(), 1, generator=self.generators[live[i]])
                                    for i in rows])
            # two reads from the device per step, whatever the number of branches
            picked_logp = logp[index, picked].tolist()
            sampled = dict(zip(rows, zip(picked.tolist(), picked_logp)))
            feed = []
            for i, b in enumerate(live):
                if b not in running:
                    feed.append([])
                    continue
                token, token_logp = sampled[i]
                tokens[b].append(token)
                logprobs[b].append(token_logp)
                if token in self.stop_ids:
                    stopped[b] = "eos"
                    running.discard(b)
                feed.append([token] if b in running else [])
            if not running or step + 1 == cfg.max_new_tokens:
                break
            logits = self._forward(feed)
        # The last sampled token is read at the start of the next turn, with the tool result.
        if self.batched and self.caches[0].holes > self.compact_at * self.caches[0].mask.numel():
            self.caches[0].compact()
        return {b: Sample(tokens=tokens[b], logprobs=logprobs[b], stopped_on=stopped[b], prefilled=len(n))
                for b, n in zip(live, new)}


class Session:
    """One trajectory's view of the model: the tokens it has read and their KV cache."""

    def __init__(self, model, stop_ids: set[int], seed: int = 0, pad_id: int = 0):
        self.group = GroupSession(model, stop_ids, [seed], pad_id)
        self.prefilled_total = 0
        self.sampled_total = 0

    @property
    def cached(self) -> list[int]:
        """Tokens whose keys/values are in the cache, in order."""
        return self.group.read[0]

    def sample(self, prompt: list[int], cfg: SampleConfig) -> Sample:
        """Read what is new in ``prompt`` (which must extend what was read), then sample a reply."""
        sample = self.group.sample({0: prompt}, cfg)[0]
        self.prefilled_total += sample.prefilled
        self.sampled_total += len(sample.tokens)
        return sample

    @property
    def tokens_read(self) -> int:
        """Every token run through the model: prompts plus sampled tokens fed back."""
        return len(self.cached)


def stop_ids(tokenizer) -> set[int]:
    """End-of-turn token ids: eos plus the usual chat end markers the vocabulary has."""
    return {tokenizer.eos_token_id} | {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>")
                                       if t in tokenizer.get_vocab()}


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def new_session(policy, seed: int = 0) -> Session:
    """A fresh session (empty cache) for one trajectory of ``policy``."""
    return Session(policy.model, stop_ids(policy.tokenizer), seed=seed, pad_id=pad_id(policy.tokenizer))


def new_group_session(policy, seeds: list[int], batched: bool = True,
                      prefill_dtype: str | None = None) -> GroupSession:
    """A fresh session for ``len(seeds)`` branches of one group, one RNG seed each; ``prefill_dtype``
    ("bfloat16"): read prompts and tool results under that autocast (see :mod:`alfrl.kvcache`)."""
    return GroupSession(policy.model, stop_ids(policy.tokenizer), seeds, pad_id(policy.tokenizer), batched=batched,
                        prefill_dtype=prefill_dtype)
