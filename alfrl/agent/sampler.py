"""Token-level sampling with one KV cache per trajectory, kept across turns.

A multi-turn episode's prompt grows by prefix extension (:mod:`alfrl.agent.protocol`): turn
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

import math
from dataclasses import dataclass, field

import torch

from alfrl.agent.kvcache import GroupCache, model_device, supports_holes


@dataclass
class SampleConfig:
    """How to sample one reply."""

    temperature: float = 1.0
    """Sampling temperature; 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    max_new_tokens: int = 256
    """Budget of sampled tokens per reply."""
    draft_tokens: int = 0
    """Speculative decoding by prompt lookup (0 = off): each forward pass also checks up to this many
    tokens guessed from the branch's own history (:func:`lookup_draft`), accepted or resampled so that the
    reply has exactly the distribution of plain sampling (see :meth:`GroupSession.sample`)."""


@dataclass
class Sample:
    """One reply: its token ids and their logprobs, and why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stopped_on: str
    """"eos" (an end-of-turn token) or "budget" (max_new_tokens)."""
    prefilled: int
    """Tokens run through the model to read the prompt this turn."""
    entropies: list[float] = field(default_factory=list)
    """The entropy (nats) of the distribution each token was sampled from: how unsure the policy was where
    it chose (their mean is the policy entropy trainers log). Empty for scripted replies."""


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
    :mod:`alfrl.agent.kvcache`) each branch runs alone; results are the same either way, up to
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
        self.holes = supports_holes(probe.cache)
        """Whether cached columns can be masked out (batching branches, unreading rejected drafts)."""
        self.batched = batched and self.holes
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
                                 "grow by prefix extension (see alfrl.agent.protocol.build_next_prompt)")
            if len(prompt) == len(read):
                raise ValueError(f"branch {b}: the prompt adds no token to read; nothing to condition the reply on")
            new.append(prompt[len(read):])
        return new

    def _forward(self, tokens: list[list[int]], every_position: bool = False) -> torch.Tensor:
        """Read ``tokens[i]`` into live branch i; logits after each branch's last new token, or with
        ``every_position`` after each new token ([live branches, widest read, vocab]; not for a first read)."""
        for b, t in zip(self.branches, tokens):
            self.read[b].extend(t)
        if not self.batched:
            self.forward_tokens += sum(len(t) for t in tokens)
            return self._forward_each(tokens, every_position)
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
        return cache.forward(tokens, self.pad_id, every_position)

    def _forward_each(self, tokens: list[list[int]], every_position: bool = False) -> torch.Tensor:
        rows = [c.forward([t], self.pad_id, every_position)[0] if t else None for c, t in zip(self.caches, tokens)]
        shape = next(r.shape for r in rows if r is not None)
        if every_position:  # pad every row to the widest read
            width = max(len(t) for t in tokens)
            rows = [torch.nn.functional.pad(r, (0, 0, 0, width - r.shape[0])) if r is not None else
                    torch.zeros(width, shape[-1], device=self.device) for r in rows]
            return torch.stack(rows)
        return torch.stack([r if r is not None else torch.zeros(shape, device=self.device) for r in rows])

    def _unread(self, drop: dict[int, int]) -> None:
        """Forget the last ``drop[b]`` tokens each live branch read (rejected draft tokens)."""
        for b, n in drop.items():
            if n:
                del self.read[b][-n:]
        if self.batched:
            self.caches[0].unread([drop.get(b, 0) for b in self.branches])
        else:
            for cache, b in zip(self.caches, self.branches):
                cache.unread([drop.get(b, 0)])

    def _compact_if_holey(self) -> None:
        """After a reply: compact the batched cache once holes are more than ``compact_at`` of it."""
        if self.batched and self.caches[0].holes > self.compact_at * self.caches[0].mask.numel():
            self.caches[0].compact()

    def _draw(self, logp: torch.Tensor, branch: int, temperature: float, exclude: int | None = None) -> int:
        """One token from ``exp(logp)`` (``exclude`` removed, renormalised), with the branch's own RNG."""
        if temperature == 0:
            if exclude is not None:
                logp = logp.clone()
                logp[exclude] = float("-inf")
            return int(torch.argmax(logp))
        probs = logp.exp()
        if exclude is not None:
            probs[exclude] = 0.0
            if not bool(probs.any()):  # all the mass was on the excluded token (only float rounding rejects it)
                return exclude
        return int(torch.multinomial(probs, 1, generator=self.generators[branch]))

    def _accept(self, logp: torch.Tensor, token: int, token_logp: float, branch: int, temperature: float) -> bool:
        """Whether draft ``token`` stands: with probability p(token), the branch's RNG deciding
        (greedy: when it is the argmax)."""
        if temperature == 0:
            return int(torch.argmax(logp)) == token
        u = torch.rand(1, generator=self.generators[branch], device=self.device)
        return float(u) < math.exp(token_logp)

    def _sample_speculative(self, logits: torch.Tensor, new: list[list[int]], cfg: SampleConfig) -> dict[int, Sample]:
        replies = _Replies.start(self.branches, self.stop_ids, cfg.max_new_tokens)
        first = token_distribution(logits, cfg.temperature, cfg.top_p)
        first_entropy = torch.special.entr(first.exp()).sum(-1).tolist()
        running = []
        for i, b in enumerate(self.branches):
            token = self._draw(first[i], b, cfg.temperature)
            if replies.take(b, token, float(first[i, token]), first_entropy[i]):
                running.append(b)
        while running:
            # each running branch reads its pending (last sampled) token and a draft of what may follow
            drafts = {b: lookup_draft(self.read[b] + replies.tokens[b][-1:],
                                      min(cfg.draft_tokens, cfg.max_new_tokens - len(replies.tokens[b])))
                      for b in running}
            feed = [[replies.tokens[b][-1]] + drafts[b] if b in drafts else [] for b in self.branches]
            before = {b: len(replies.tokens[b]) for b in running}
            logp_all = token_distribution(self._forward(feed, every_position=True), cfg.temperature, cfg.top_p)
            entropy_all = torch.special.entr(logp_all.exp()).sum(-1)
            row = {b: i for i, b in enumerate(self.branches)}
            width = {b: len(drafts[b]) + 1 for b in running}
            still = [b for b in running
                     if self._check_draft(replies, b, drafts[b], logp_all[row[b], :width[b]],
                                          entropy_all[row[b], :width[b]].tolist(), cfg.temperature)]
            # every reply token but the last is read: unread the rest of what was fed
            self._unread({b: width[b] - (len(replies.tokens[b]) - before[b]) for b in running})
            running = still
        self._compact_if_holey()
        return replies.samples(self.branches, new)

    def _check_draft(self, replies: _Replies, b: int, draft: list[int], logp: torch.Tensor, entropy: list[float],
                     temperature: float) -> bool:
        """Branch b's draft, token by token: accepted ones join the reply; at the first rejection one token
        is drawn with the draft token removed; if all stand, one more is drawn after them (``logp`` holds
        the distributions after the pending token and after each draft token). False once the reply ended."""
        drafted = logp[torch.arange(len(draft)), torch.tensor(draft, dtype=torch.long)].tolist() if draft else []
        for j, token in enumerate(draft):
            if not self._accept(logp[j], token, drafted[j], b, temperature):
                nxt = self._draw(logp[j], b, temperature, exclude=token)
                return replies.take(b, nxt, float(logp[j, nxt]), entropy[j])
            if not replies.take(b, token, drafted[j], entropy[j]):
                return False
        nxt = self._draw(logp[len(draft)], b, temperature)
        return replies.take(b, nxt, float(logp[len(draft), nxt]), entropy[len(draft)])

    def sample(self, prompts: dict[int, list[int]], cfg: SampleConfig) -> dict[int, Sample]:
        """Read what is new in each branch's prompt, then sample one reply per branch.

        With ``cfg.draft_tokens`` (and a cache that can have holes), decoding is speculative: each
        forward pass reads a branch's last sampled token plus a draft of the tokens that followed the
        same few tokens earlier in its history (a tool call's boilerplate, an action named in the list
        of available ones). Draft token x is accepted with probability p(x) under the sampling
        distribution; at the first rejection the token is drawn from p with x removed (renormalised),
        and if all are accepted one more token is drawn after them. Each token then has exactly
        plain sampling's distribution (a draft that is one fixed guess is the simplest case of
        speculative sampling), and its logprob is log p. Rejected draft tokens are unread from the
        cache (:meth:`GroupCache.unread`)."""
        if not self.branches and not prompts:
            return {}
        new = self._new_tokens(prompts)
        logits = self._forward(new)
        if cfg.draft_tokens > 0 and self.holes:
            return self._sample_speculative(logits, new, cfg)
        live = list(self.branches)
        replies = _Replies.start(live, self.stop_ids, cfg.max_new_tokens)
        running = set(live)
        while running:
            logp = token_distribution(logits, cfg.temperature, cfg.top_p)
            rows = [i for i, b in enumerate(live) if b in running]
            index = torch.tensor(rows, device=logp.device)
            if cfg.temperature == 0:
                picked = torch.argmax(logp[index], dim=-1)
            else:
                picked = torch.cat([torch.multinomial(logp[i].exp(), 1, generator=self.generators[live[i]])
                                    for i in rows])
            # two reads from the device per step, whatever the number of branches
            entropy = torch.special.entr(logp[index].exp()).sum(-1)  # -sum p log p; 0 outside a nucleus
            picked_logp, picked_entropy = torch.stack([logp[index, picked], entropy]).tolist()
            for i, token, token_logp, token_entropy in zip(rows, picked.tolist(), picked_logp, picked_entropy):
                if not replies.take(live[i], token, token_logp, token_entropy):
                    running.discard(live[i])
            if running:
                logits = self._forward([[replies.tokens[b][-1]] if b in running else [] for b in live])
        # The last sampled token is read at the start of the next turn, with the tool result.
        self._compact_if_holey()
        return replies.samples(live, new)


@dataclass
class _Replies:
    """The replies being sampled in one call, one per branch: their tokens, logprobs and entropies, and
    why each stopped."""

    stop_ids: set[int]
    max_new_tokens: int
    tokens: dict[int, list[int]]
    logprobs: dict[int, list[float]]
    entropies: dict[int, list[float]]
    stopped: dict[int, str]

    @classmethod
    def start(cls, branches: list[int], stop_ids: set[int], max_new_tokens: int) -> _Replies:
        return cls(stop_ids, max_new_tokens, {b: [] for b in branches}, {b: [] for b in branches},
                   {b: [] for b in branches}, {b: "budget" for b in branches})

    def take(self, b: int, token: int, token_logp: float, entropy: float) -> bool:
        """Append a token to branch b's reply; False once the reply has ended (an end-of-turn token, or
        ``max_new_tokens`` reached)."""
        self.tokens[b].append(token)
        self.logprobs[b].append(token_logp)
        self.entropies[b].append(entropy)
        if token in self.stop_ids:
            self.stopped[b] = "eos"
            return False
        return len(self.tokens[b]) < self.max_new_tokens

    def samples(self, branches: list[int], new: list[list[int]]) -> dict[int, Sample]:
        """The finished replies, with the prompt tokens each branch read first."""
        return {b: Sample(tokens=self.tokens[b], logprobs=self.logprobs[b], stopped_on=self.stopped[b],
                          prefilled=len(n), entropies=self.entropies[b])
                for b, n in zip(branches, new)}


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


def lookup_draft(history: list[int], length: int, longest: int = 3) -> list[int]:
    """Prompt-lookup drafting: the ``length`` tokens that followed the latest earlier occurrence of the
    history's last ``longest`` tokens (or fewer, down to 1), or [] if there is none. In a tool-calling
    episode that is the boilerplate of the last call and the names in the list of available actions."""
    if length <= 0:
        return []
    for n in range(min(longest, len(history) - 1), 0, -1):
        key = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):
            if history[start:start + n] == key:
                return history[start + n:start + n + length]
    return []


def stop_ids(tokenizer, generation_config=None) -> set[int]:
    """End-of-turn token ids: the tokenizer's eos, the usual chat end markers the vocabulary has, and every eos
    id of the model's generation config (Qwen3's lists ``<|im_end|>`` and ``<|endoftext|>``)."""
    ids = {tokenizer.eos_token_id} | {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>")
                                      if t in tokenizer.get_vocab()}
    eos = getattr(generation_config, "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, (list, tuple)) else {eos}
    return {i for i in ids if i is not None}


def policy_stop_ids(policy) -> set[int]:
    """:func:`stop_ids` of a loaded policy: its tokenizer and its model's generation config."""
    return stop_ids(policy.tokenizer, getattr(policy.model, "generation_config", None))


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def new_session(policy, seed: int = 0) -> Session:
    """A fresh session (empty cache) for one trajectory of ``policy``."""
    return Session(policy.model, policy_stop_ids(policy), seed=seed, pad_id=pad_id(policy.tokenizer))


def new_group_session(policy, seeds: list[int], batched: bool = True,
                      prefill_dtype: str | None = None) -> GroupSession:
    """A fresh session for ``len(seeds)`` branches of one group, one RNG seed each; ``prefill_dtype``
    ("bfloat16"): read prompts and tool results under that autocast (see :mod:`alfrl.agent.kvcache`). A policy
    with an ``engine`` (vLLM, :mod:`alfrl.agent.vllm_engine`) samples there instead."""
    if getattr(policy, "engine", None) is not None:
        return policy.engine.session(policy_stop_ids(policy), seeds)
    return GroupSession(policy.model, policy_stop_ids(policy), seeds, pad_id(policy.tokenizer), batched=batched,
                        prefill_dtype=prefill_dtype)
