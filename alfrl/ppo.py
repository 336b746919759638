"""The PPO update on the LoRA adapter: recompute token logprobs, the clipped objective on sampled
tokens only, token-level averaging, gradient clipping, Adam.

Per token t of a trajectory with advantage A (the same A for every sampled token of it):

    ratio_t = exp(logp_new(t) - logp_old(t))
    loss_t  = -min(ratio_t * A, clip(ratio_t, clip_low, clip_high) * A)

``logp_old`` is what the sampler reported (:mod:`alfrl.sampler`), at the sampling
temperature, so before the first optimizer step the ratio is 1 (up to float rounding).

**Normalisation.** The batch loss is the sum of ``loss_t`` over every sampled token of
every trajectory in the batch, divided by the number of those tokens (token-level mean,
as in DAPO). A per-trajectory mean would give each token of a short reply more weight
than a token of a long one, so a trajectory that rambles would be pushed less per token;
the token mean weighs every sampled token the same, whatever the episode length.
Micro-batches divide by the *batch's* token count, so accumulating them gives exactly
the full-batch gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from alfrl.rollout import Trajectory


@dataclass
class PPOConfig:
    """The update's settings (the reference run's values by default)."""

    clip_low: float = 0.8
    """Lower bound of the ratio clip."""
    clip_high: float = 1.2
    """Upper bound of the ratio clip."""
    lr: float = 1e-6
    """Adam learning rate."""
    beta1: float = 0.9
    beta2: float = 0.95
    max_grad_norm: float = 1.0
    """Gradient norm clip (0 = off)."""
    kl_coef: float = 0.0
    """Weight of a k3 KL-to-reference penalty (the model without its adapter); 0 = off, as in the reference."""
    temperature: float = 1.0
    """The sampling temperature: logprobs are recomputed at the temperature they were sampled at."""
    micro_batch_tokens: int = 4096
    """Padded tokens per forward/backward pass; longer trajectories go alone."""
    logit_chunk: int = 1024
    """Positions whose logits are materialised at once (a 12K x 150K-vocab logit matrix would not fit)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass instead of storing them: far less memory
    for long trajectories, about a third more compute."""
    epochs: int = 1
    """Passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the batch's trajectories split evenly)."""

    def __post_init__(self):
        if not 0 < self.clip_low <= 1 <= self.clip_high:
            raise ValueError(f"need 0 < clip_low <= 1 <= clip_high (got {self.clip_low}, {self.clip_high})")
        if self.temperature <= 0:
            raise ValueError("logprobs are recomputed at the sampling temperature, which must be > 0 "
                             "(greedy rollouts have no distribution to train on)")


def make_optimizer(policy, config: PPOConfig) -> torch.optim.Adam:
    """Adam over the trainable (LoRA) parameters only."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    if not hasattr(policy.model, "peft_config") or not params:
        raise ValueError("the policy has no LoRA adapter to train; load it with load_policy(..., lora=LoraSpec()) "
                         "or lora=<adapter dir>")
    return torch.optim.Adam(params, lr=config.lr, betas=(config.beta1, config.beta2))


def _parts(model):
    """(decoder stack, LM head, logit softcap) of a causal LM, under a PEFT wrapper or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    cap = getattr(base.config, "final_logit_softcapping", None)
    return decoder, base.get_output_embeddings(), cap


def _chunk_logprobs(head, cap, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(hidden).float()
    if cap:
        logits = torch.tanh(logits / cap) * cap
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(model, sequences: list[list[int]], temperature: float = 1.0,
                      logit_chunk: int = 1024, masks: list[list[int]] | None = None) -> torch.Tensor:
    """logp(token_i | tokens_<i) for each sequence, right-padded into one [batch, length] tensor
    (position 0 and padding are 0). Logits are made ``logit_chunk`` positions at a time and, when
    gradients are on, recomputed in the backward pass instead of stored.

    With ``masks`` (one 0/1 list per sequence, e.g. the trajectories' masks) the LM head runs only
    where the mask is 1 and every other position is 0. Losses that are taken on sampled tokens only
    give the same values and gradients, and the head (a 49K x 576 matrix for the small model, a
    fifth of its compute per token) runs on about one token in seven instead of every token.
    """
    decoder, head, cap = _parts(model)
    length = max(len(s) for s in sequences)
    device = next(model.parameters()).device
    ids = torch.tensor([list(s) + [0] * (length - len(s)) for s in sequences], dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(s) + [0] * (length - len(s)) for s in sequences], dtype=torch.long,
                        device=device)
    hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
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
        args = (head, cap, h[start:start + logit_chunk], t[start:start + logit_chunk], temperature)
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args))
    out = torch.zeros(len(sequences), length, device=device, dtype=pieces[0].dtype if pieces else torch.float32)
    if pieces:
        out = out.index_put((rows, cols), torch.cat(pieces))
    return out


def ppo_token_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                   clip_low: float = 0.8, clip_high: float = 1.2) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped loss ``-min(r A, clip(r) A)`` and the ratio r (same shapes as the inputs)."""
    ratio = torch.exp(new_logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(clip_low, clip_high) * advantages
    return -torch.minimum(unclipped, clipped), ratio


def micro_batches(trajectories: list[Trajectory], max_tokens: int) -> list[list[Trajectory]]:
    """Group trajectories (longest first) so each group's padded size stays under ``max_tokens``."""
    batches, current = [], []
    for t in sorted(trajectories, key=lambda t: -len(t.tokens)):
        longest = len(current[0].tokens) if current else len(t.tokens)
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(t)
    return batches + ([current] if current else [])


def padded_tensors(batch: list[Trajectory], length: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """old logprobs, mask and per-token advantages, right-padded to ``length``."""
    def padded(rows: list[list[float]]) -> torch.Tensor:  # one copy to the device per tensor
        return torch.tensor([list(r) + [0.0] * (length - len(r)) for r in rows], dtype=torch.float32, device=device)
    return (padded([t.logprobs for t in batch]), padded([t.mask for t in batch]),
            padded([[float(t.advantage)] * len(t.tokens) for t in batch]))


def ppo_step(policy, optimizer, trajectories: list[Trajectory], config: PPOConfig) -> dict[str, float]:
    """One optimizer step on ``trajectories`` (each with ``advantage`` set); returns the update's metrics."""
    if not trajectories:
        raise ValueError("no trajectories to train on (every group was degenerate?)")
    if any(t.advantage is None for t in trajectories):
        raise ValueError("trajectories need advantages; call alfrl.advantage.assign_advantages first")
    model = policy.model
    device = next(model.parameters()).device
    total = sum(sum(t.mask) for t in trajectories)
    if total == 0:
        raise ValueError("the trajectories have no sampled tokens to train")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=True)
    sums = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "ratio": 0.0, "penalty": 0.0}
    ratio_max = 0.0
    was_training = model.training
    model.train()
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        for batch in micro_batches(trajectories, config.micro_batch_tokens):
            length = max(len(t.tokens) for t in batch)
            new = sequence_logprobs(model, [t.tokens for t in batch], config.temperature, config.logit_chunk,
                                    masks=[t.mask for t in batch])
            old, mask, adv = padded_tensors(batch, length, device)
            token_loss, ratio = ppo_token_loss(new, old, adv, config.clip_low, config.clip_high)
            loss = (token_loss * mask).sum()
            log_ratio = (new - old).detach()
            k3 = (torch.exp(log_ratio) - 1) - log_ratio  # KL(old || new), estimated on the sampled tokens
            if config.kl_coef:
                with torch.no_grad(), model.disable_adapter():
                    ref = sequence_logprobs(model, [t.tokens for t in batch], config.temperature,
                                            config.logit_chunk, masks=[t.mask for t in batch])
                ref_log_ratio = ref - new
                penalty = ((torch.exp(ref_log_ratio) - 1) - ref_log_ratio) * mask
                loss = loss + config.kl_coef * penalty.sum()
                sums["penalty"] += float(penalty.sum())
            (loss / total).backward()
            with torch.no_grad():
                r = ratio.detach()
                outside = ((r < config.clip_low) & (adv < 0)) | ((r > config.clip_high) & (adv > 0))
                sums["loss"] += float((token_loss.detach() * mask).sum())
                sums["clipped"] += float((outside.float() * mask).sum())
                sums["kl"] += float((k3 * mask).sum())
                sums["ratio"] += float((r * mask).sum())
                ratio_max = max(ratio_max, float((r * mask).max()))
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm if config.max_grad_norm > 0
                                                   else float("inf"))
        optimizer.step()
    finally:
        model.train(was_training)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_disable()
    return {"loss": sums["loss"] / total, "clip_fraction": sums["clipped"] / total, "approx_kl": sums["kl"] / total,
            "ratio_mean": sums["ratio"] / total, "ratio_max": ratio_max, "grad_norm": float(grad_norm),
            "kl_penalty": sums["penalty"] / total, "tokens_trained": int(total),
            "trajectories_trained": len(trajectories)}


def ppo_update(policy, optimizer, trajectories: list[Trajectory], config: PPOConfig) -> list[dict[str, float]]:
    """``epochs`` x ``minibatches`` optimizer steps over the batch; one metrics dict per step."""
    steps = []
    for _ in range(config.epochs):
        size = -(-len(trajectories) // config.minibatches)
        for start in range(0, len(trajectories), size):
            steps.append(ppo_step(policy, optimizer, trajectories[start:start + size], config))
    return steps
