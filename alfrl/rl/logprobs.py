"""Token logprobs of sequences under a causal LM: what the update recomputes and trains.

``sequence_logprobs(model, sequences)`` gives logp(token_i | tokens_<i) for every position (or, with
``masks``, only where the mask is 1, the tokens the model sampled), at a sampling temperature and over the
sampling nucleus (top-p), so that the trainer's logprob of a sampled token is the sampler's
(:mod:`alfrl.agent.sampler`) computed again. Logits are made a chunk of positions at a time, and recomputed in the
backward pass rather than stored, since for a 49K vocabulary they outweigh everything else the update holds.

Taught in notebook 04 (the logprobs of the sampled tokens, and the one-position shift); used by the PPO update (:mod:`alfrl.rl.ppo`), SFT
(:mod:`alfrl.imitation.sft`) and DPO (:mod:`alfrl.imitation.dpo`).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from alfrl.agent.kvcache import CACHE
from alfrl.rl.prefix import SharedPrefix


def model_parts(model):
    """(decoder stack, LM head, logit softcap) of a causal LM, under a PEFT wrapper or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    cap = getattr(base.config, "final_logit_softcapping", None)
    return decoder, base.get_output_embeddings(), cap


def chunk_logprobs(head, cap, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                   top_p: float = 1.0) -> torch.Tensor:
    """logp(target | hidden state) for a chunk of positions: the LM head, the logit softcap if the model has
    one, the temperature and (``top_p`` < 1) the nucleus, as the sampler draws."""
    logits = head(hidden).float()
    if cap:
        logits = torch.tanh(logits / cap) * cap
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        logp = nucleus_logprobs(logp, targets, top_p)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def nucleus_logprobs(logp: torch.Tensor, targets: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logp`` renormalised over the top-p nucleus, the set :func:`alfrl.agent.sampler.token_distribution`
    samples from (the smallest prefix of tokens, most likely first, whose mass reaches ``top_p``).

    Which tokens are in the nucleus is a choice, not a function to differentiate: it is made without
    gradient, and the token that was sampled always stays in (at the sampling weights it is in the
    nucleus by construction; after an update it may have slipped out, and its ratio must stay finite).
    """
    with torch.no_grad():
        sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
        p = sorted_logp.exp()
        drop_sorted = p.cumsum(-1) - p >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        drop.scatter_(-1, targets.unsqueeze(-1), False)
    kept = logp.masked_fill(drop, float("-inf"))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)


def sequence_logprobs(model, sequences: list[list[int]], temperature: float = 1.0,
                      logit_chunk: int = 1024, masks: list[list[int]] | None = None,
                      top_p: float = 1.0, prefix: SharedPrefix | None = None) -> torch.Tensor:
    """logp(token_i | tokens_<i) for each sequence, right-padded into one [batch, length] tensor
    (position 0 and padding are 0). Logits are made ``logit_chunk`` positions at a time and, when
    gradients are on, recomputed in the backward pass instead of stored.

    With ``masks`` (one 0/1 list per sequence, e.g. the trajectories' masks) the LM head runs only
    where the mask is 1 and every other position is 0. Losses that are taken on sampled tokens only
    give the same values and gradients, and the head (a 49K x 576 matrix for the small model, a
    fifth of its compute per token) runs on about one token in seven instead of every token.

    With ``prefix`` (every sequence starts with ``prefix.tokens``, and is longer) only the rest of each
    sequence runs through the decoder, attending to the prefix's cached keys and values; the prefix's
    hidden states stand in for its positions (:mod:`alfrl.rl.prefix`).
    """
    decoder, head, cap = model_parts(model)
    length = max(len(s) for s in sequences)
    device = next(model.parameters()).device
    ids = torch.tensor([list(s) + [0] * (length - len(s)) for s in sequences], dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(s) + [0] * (length - len(s)) for s in sequences], dtype=torch.long,
                        device=device)
    if prefix is None:
        hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    else:
        n = prefix.length
        if any(len(s) <= n or list(s[:n]) != prefix.tokens for s in sequences):
            raise ValueError(f"every sequence must start with the shared prefix ({n} tokens) and go on after it")
        rest = decoder(input_ids=ids[:, n:], attention_mask=mask, use_cache=True,
                       **{CACHE: prefix.cache(len(sequences))}).last_hidden_state
        hidden = torch.cat([prefix.hidden_for(len(sequences), rest.dtype), rest], dim=1)
    wanted = mask.bool()
    if masks is not None:
        for i, m in enumerate(masks):
            if len(m) != len(sequences[i]):
                raise ValueError(f"sequence {i} has {len(sequences[i])} tokens but its mask has {len(m)}")
        wanted = torch.tensor([list(m) + [0] * (length - len(m)) for m in masks], dtype=torch.bool, device=device)
    wanted[:, 0] = False  # nothing predicts the first token
    rows, cols = wanted.nonzero(as_tuple=True)
    h, t = hidden[rows, cols - 1], ids[rows, cols]  # the state before each wanted token, and the token
    pieces = []
    for start in range(0, len(rows), logit_chunk):
        args = (head, cap, h[start:start + logit_chunk], t[start:start + logit_chunk], temperature, top_p)
        if torch.is_grad_enabled():
            pieces.append(checkpoint(chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(chunk_logprobs(*args))
    out = torch.zeros(len(sequences), length, device=device, dtype=pieces[0].dtype if pieces else torch.float32)
    if pieces:
        out = out.index_put((rows, cols), torch.cat(pieces))
    return out
