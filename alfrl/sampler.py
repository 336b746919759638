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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


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


@dataclass
class Session:
    """One trajectory's view of the model: the tokens it has read and their KV cache."""

    model: object
    stop_ids: set[int]
    seed: int = 0
    cached: list[int] = field(default_factory=list)
    """Tokens whose keys/values are in the cache, in order."""
    prefilled_total: int = 0
    sampled_total: int = 0

    def __post_init__(self):
        from transformers import DynamicCache
        self.cache = DynamicCache()
        self.generator = torch.Generator().manual_seed(self.seed)

    @torch.no_grad()
    def _forward(self, tokens: list[int]) -> torch.Tensor:
        out = self.model(input_ids=torch.tensor([tokens]), cache=self.cache, use_cache=True)
        self.cache = out.cache
        self.cached.extend(tokens)
        return out.logits[0, -1]

    def sample(self, prompt: list[int], cfg: SampleConfig) -> Sample:
        """Read what is new in ``prompt`` (which must extend what was read), then sample a reply."""
        n = len(self.cached)
        if prompt[:n] != self.cached:
            raise ValueError("the prompt does not extend this session's history; prompts must grow by "
                             "prefix extension (see alfrl.protocol.build_next_prompt)")
        new = prompt[n:]
        if not new:
            raise ValueError("the prompt adds no token to read; nothing to condition the reply on")
        logits = self._forward(new)
        prefilled = len(new)
        tokens, logprobs, stopped = [], [], "budget"
        for step in range(cfg.max_new_tokens):
            logp = token_distribution(logits, cfg.temperature, cfg.top_p)
            if cfg.temperature == 0:
                token = int(torch.argmax(logp))
            else:
                token = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
            tokens.append(token)
            logprobs.append(float(logp[token]))
            if token in self.stop_ids:
                stopped = "eos"
                break
            if step + 1 < cfg.max_new_tokens:
                logits = self._forward([token])
        # The last sampled token is read at the start of the next turn, with the tool result.
        self.prefilled_total += prefilled
        self.sampled_total += len(tokens)
        return Sample(tokens=tokens, logprobs=logprobs, stopped_on=stopped, prefilled=prefilled)

    @property
    def tokens_read(self) -> int:
        """Every token run through the model: prompts plus sampled tokens fed back."""
        return len(self.cached)


def new_session(policy, seed: int = 0) -> Session:
    """A fresh session (empty cache) for one trajectory of ``policy``."""
    tok = policy.tokenizer
    stops = {tok.eos_token_id} | {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>")
                                  if t in tok.get_vocab()}
    return Session(model=policy.model, stop_ids=stops, seed=seed)
