"""The PPO update on the LoRA adapter: recompute token logprobs, the clipped objective on sampled
tokens only, token-level averaging, gradient clipping, Adam.

Per token t of a trajectory with advantage A (the same A for every sampled token of it; with step-level
credit, :mod:`alfrl.rl.gigpo`, its turn's):

    ratio_t = exp(logp_new(t) - logp_old(t))
    loss_t  = -min(ratio_t * A, clip(ratio_t, clip_low, clip_high) * A)

``logp_old`` is the policy's logprob at the weights that sampled, at the sampling temperature and
over the sampling nucleus (top-p). By default the trainer recomputes it (``old_logprobs="trainer"``),
so the first ratio is exactly 1 whatever the precision (bf16 autocast) or kernels; the sampler's own
logprobs (:mod:`alfrl.agent.sampler`) are kept to measure the sampler/trainer gap, which the update logs.

**Normalisation.** The batch loss is the sum of ``loss_t`` over every sampled token of
every trajectory in the batch, divided by the number of those tokens (token-level mean,
as in DAPO). A per-trajectory mean would give each token of a short reply more weight
than a token of a long one, so a trajectory that rambles would be pushed less per token;
the token mean weighs every sampled token the same, whatever the episode length.
Micro-batches divide by the *batch's* token count, so accumulating them gives exactly
the full-batch gradient.

Taught in notebook 05 (the clipped loss, the update); the logprobs it recomputes are :mod:`alfrl.rl.logprobs`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from alfrl.rl.gigpo import token_advantage_values
from alfrl.rl.logprobs import model_parts, sequence_logprobs
from alfrl.rl.prefix import SharedPrefix, can_share, prefix_groups, run_prefix
from alfrl.rl.rollout import Trajectory


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
    top_p: float = 1.0
    """The sampling nucleus: logprobs are renormalised over the same top-p set the sampler drew from."""
    old_logprobs: str = "trainer"
    """Where the ratio's denominator comes from: "trainer" recomputes it with the training forward at the
    weights that sampled (verl's recomputed old_log_prob; exact whatever the sampler's precision or
    kernels), "sampler" takes the sampler's own logprobs (the reference's choice; exact only in fp32)."""
    tis_cap: float = 0.0
    """Truncated importance sampling: weight each sampled token's loss by min(exp(trainer_old - sampler),
    tis_cap), the trainer's probability of the token over the sampler's at the same weights, capped
    (TRL and verl cap this weight too). It corrects for a sampler whose distribution is not quite the
    trainer's (bf16 sampling, other kernels, vLLM). 0: off. Needs old_logprobs="trainer"."""
    bf16: bool = False
    """bfloat16 autocast in the update's forward and backward (about 1.7x on a CPU with avx512_bf16;
    LoRA weights, gradients and Adam stay float32). Use it with old_logprobs="trainer"."""
    micro_batch_tokens: int = 4096
    """Padded tokens per forward/backward pass; longer trajectories go alone."""
    logit_chunk: int = 1024
    """Positions whose logits are materialised at once (a 12K x 150K-vocab logit matrix would not fit)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass instead of storing them: far less memory
    for long trajectories, about a third more compute."""
    share_prefix: bool = True
    """Run the tokens a group's branches share (their prompt, and first replies they wrote alike) once,
    not once per branch (:mod:`alfrl.rl.prefix`): the same loss and gradient, about a third fewer tokens
    in the cpu preset. Not with gradient checkpointing (its recomputation would re-append to the
    cache), nor for models with sliding-window layers."""
    epochs: int = 1
    """Passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the batch's trajectories split evenly)."""

    def __post_init__(self):
        if self.old_logprobs not in ("trainer", "sampler"):
            raise ValueError(f"old_logprobs must be 'trainer' or 'sampler' (got {self.old_logprobs!r})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.epochs < 1 or self.minibatches < 1:
            raise ValueError(f"epochs and minibatches must be >= 1 (got {self.epochs}, {self.minibatches})")
        if not 0 < self.clip_low <= 1 <= self.clip_high:
            raise ValueError(f"need 0 < clip_low <= 1 <= clip_high (got {self.clip_low}, {self.clip_high})")
        if self.tis_cap and (self.tis_cap < 1 or self.old_logprobs != "trainer"):
            raise ValueError(f"tis_cap must be 0 (off) or >= 1, with old_logprobs='trainer' (got {self.tis_cap}, "
                             f"{self.old_logprobs!r}): the weight compares the trainer's logprobs with the sampler's")
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


def ppo_token_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                   clip_low: float = 0.8, clip_high: float = 1.2) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped loss ``-min(r A, clip(r) A)`` and the ratio r (same shapes as the inputs)."""
    ratio = torch.exp(new_logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(clip_low, clip_high) * advantages
    return -torch.minimum(unclipped, clipped), ratio


def tis_weights(trainer_old: torch.Tensor, sampler: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights ``min(exp(trainer_old - sampler), cap)`` (no gradient): how much more
    likely the trainer finds each sampled token than the sampler that drew it did, capped."""
    return torch.exp((trainer_old - sampler).detach()).clamp(max=cap)


def micro_batches(trajectories: list[Trajectory], max_tokens: int, shared: int = 0) -> list[list[Trajectory]]:
    """Group trajectories (longest first) so each group's padded size (up to each one's last sampled
    token, :func:`trained_length`, less the ``shared`` prefix tokens run once for all) stays under
    ``max_tokens``. With a shared prefix each row still attends to (and holds keys/values for) the
    prefix too: lower ``micro_batch_tokens`` if memory runs out."""
    batches, current = [], []
    for t in sorted(trajectories, key=lambda t: -trained_length(t)):
        longest = (trained_length(current[0]) if current else trained_length(t)) - shared
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(t)
    return batches + ([current] if current else [])


def padded_tensors(batch: list[Trajectory], length: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """old logprobs, mask and per-token advantages (0 where none is set yet), right-padded to ``length``."""
    def padded(rows: list[list[float]]) -> torch.Tensor:  # one copy to the device per tensor
        return torch.tensor([list(r) + [0.0] * (length - len(r)) for r in rows], dtype=torch.float32, device=device)
    return (padded([t.logprobs for t in batch]), padded([t.mask for t in batch]),
            padded([token_advantage_values(t) for t in batch]))


def _autocast(model, enabled: bool):
    """bfloat16 autocast on the model's device when ``enabled`` (a no-op context otherwise)."""
    return torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16, enabled=enabled)


def trained_length(trajectory: Trajectory) -> int:
    """Tokens up to the last sampled one: what the update must run through the model. The final tool
    result (and anything else after the last reply) conditions no trained token, so, the model being
    causal, leaving it out changes no logprob and no gradient."""
    return max((i + 1 for i, m in enumerate(trajectory.mask) if m), default=1)


def _batch_logprobs(model, batch: list[Trajectory], config: PPOConfig,
                    prefix: SharedPrefix | None = None) -> torch.Tensor:
    """The trainer's logprob of every token of ``batch`` ([batch, longest], 0 where no token was sampled),
    each trajectory run through the model only up to its last sampled token (after ``prefix``, if given)."""
    cut = [trained_length(t) for t in batch]
    with _autocast(model, config.bf16):
        logp = sequence_logprobs(model, [t.tokens[:n] for t, n in zip(batch, cut)], config.temperature,
                                 config.logit_chunk, masks=[t.mask[:n] for t, n in zip(batch, cut)],
                                 top_p=config.top_p, prefix=prefix)
    return torch.nn.functional.pad(logp, (0, max(len(t.tokens) for t in batch) - logp.shape[1]))


def shared_passes(model, trajectories: list[Trajectory], config: PPOConfig):
    """The update's passes over ``trajectories``: (prefix, micro-batches) per group of branches, the prefix
    run once (with gradient if it is on; None where nothing is shared or sharing is off). The caller
    runs the micro-batches, then ``prefix.backward()`` when training."""
    share = config.share_prefix and not config.gradient_checkpointing and can_share(model)
    groups = (prefix_groups(trajectories, [trained_length(t) for t in trajectories]) if share
              else [(trajectories, 0)])
    decoder = model_parts(model)[0]
    for group, shared in groups:
        prefix = None
        if shared:
            with _autocast(model, config.bf16):
                prefix = run_prefix(decoder, model.config, group[0].tokens[:shared])
        yield prefix, micro_batches(group, config.micro_batch_tokens, shared)


def sampler_gap(sampler: torch.Tensor, trainer: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the trainer's logprobs of the sampled tokens are from the sampler's, at the same weights:
    the ratio exp(trainer - sampler) a PPO step would start from if it trusted the sampler (1 when the
    two engines agree). Sums and extremes over the masked tokens (divide the sums by the token count)."""
    on = mask.bool()
    diff = (trainer - sampler)[on]
    if diff.numel() == 0:
        return {"gap_ratio_sum": 0.0, "gap_abs_sum": 0.0, "gap_ratio_min": 1.0, "gap_ratio_max": 1.0}
    ratio = diff.exp()
    return {"gap_ratio_sum": float(ratio.sum()), "gap_abs_sum": float(diff.abs().sum()),
            "gap_ratio_min": float(ratio.min()), "gap_ratio_max": float(ratio.max())}


def _gap_metrics(parts: list[dict[str, float]], tokens: int) -> dict[str, float]:
    return {"sampler_ratio_mean": sum(p["gap_ratio_sum"] for p in parts) / tokens,
            "sampler_ratio_min": min(p["gap_ratio_min"] for p in parts),
            "sampler_ratio_max": max(p["gap_ratio_max"] for p in parts),
            "sampler_abs_logprob_diff": sum(p["gap_abs_sum"] for p in parts) / tokens}


def recompute_old_logprobs(policy, trajectories: list[Trajectory], config: PPOConfig
                           ) -> tuple[list[Trajectory], dict[str, float]]:
    """Copies of ``trajectories`` whose logprobs are the trainer's at the current weights (no gradient;
    the same precision and micro-batches as the update; the sampler's kept as ``sampler_logprobs``), and
    the sampler/trainer gap they show."""
    model = policy.model
    device = next(model.parameters()).device
    out: dict[int, Trajectory] = {}
    parts = []
    with torch.no_grad():
        for prefix, batches in shared_passes(model, trajectories, config):
            for batch in batches:
                length = max(len(t.tokens) for t in batch)
                trainer = _batch_logprobs(model, batch, config, prefix).float()
                sampler, mask, _ = padded_tensors(batch, length, device)
                parts.append(sampler_gap(sampler, trainer, mask))
                for i, t in enumerate(batch):
                    out[id(t)] = replace(t, logprobs=trainer[i, :len(t.tokens)].tolist(),
                                         sampler_logprobs=t.logprobs)
    total = sum(sum(t.mask) for t in trajectories)
    return [out[id(t)] for t in trajectories], _gap_metrics(parts, max(total, 1))


def _kl_penalty(model, batch: list[Trajectory], new: torch.Tensor, mask: torch.Tensor,
                config: PPOConfig) -> torch.Tensor:
    """The k3 estimate of KL(new || reference) per sampled token; the reference is the model without
    its adapter."""
    with torch.no_grad(), model.disable_adapter(), _autocast(model, config.bf16):
        ref = sequence_logprobs(model, [t.tokens for t in batch], config.temperature, config.logit_chunk,
                                masks=[t.mask for t in batch], top_p=config.top_p).float()
    ref_log_ratio = ref - new
    return ((torch.exp(ref_log_ratio) - 1) - ref_log_ratio) * mask


def _micro_batch(model, batch: list[Trajectory], config: PPOConfig, own_old: bool, total: int,
                 stats: dict, prefix: SharedPrefix | None = None) -> None:
    """Forward, loss and backward of one micro-batch (gradients accumulate, on the shared ``prefix``'s
    leaves too); adds its sums to ``stats``."""
    device = next(model.parameters()).device
    tick = time.perf_counter()
    new = _batch_logprobs(model, batch, config, prefix).float()
    stats["forward_seconds"] += time.perf_counter() - tick
    stats["tokens_run"] += sum(trained_length(t) for t in batch) - len(batch) * (prefix.length if prefix else 0)
    length = max(len(t.tokens) for t in batch)
    old, mask, adv = padded_tensors(batch, length, device)
    sampler = old
    if own_old:
        stats["gaps"].append(sampler_gap(old, new.detach(), mask))
        old = new.detach()
    elif config.tis_cap:
        sampler = padded_tensors([replace(t, logprobs=t.sampler_logprobs or t.logprobs) for t in batch],
                                 length, device)[0]
    token_loss, ratio = ppo_token_loss(new, old, adv, config.clip_low, config.clip_high)
    if config.tis_cap:
        weights = tis_weights(old, sampler, config.tis_cap)
        token_loss = token_loss * weights
        stats["tis_weight"] += float((weights * mask).sum())
        stats["tis_capped"] += float(((torch.exp(old - sampler) > config.tis_cap).float() * mask).sum())
    loss = (token_loss * mask).sum()
    if config.kl_coef:
        penalty = _kl_penalty(model, batch, new, mask, config)
        loss = loss + config.kl_coef * penalty.sum()
        stats["penalty"] += float(penalty.sum())
    tick = time.perf_counter()
    (loss / total).backward()
    stats["backward_seconds"] += time.perf_counter() - tick
    with torch.no_grad():
        r = ratio.detach()
        log_ratio = (new - old).detach()
        k3 = (torch.exp(log_ratio) - 1) - log_ratio  # KL(old || new), estimated on the sampled tokens
        outside = ((r < config.clip_low) & (adv < 0)) | ((r > config.clip_high) & (adv > 0))
        stats["loss"] += float((token_loss.detach() * mask).sum())
        stats["clipped"] += float((outside.float() * mask).sum())
        stats["kl"] += float((k3 * mask).sum())
        stats["ratio"] += float((r * mask).sum())
        stats["ratio_max"] = max(stats["ratio_max"], float((r * mask).max()))


def ppo_step(policy, optimizer, trajectories: list[Trajectory], config: PPOConfig,
             own_old: bool = False) -> dict[str, float]:
    """One optimizer step on ``trajectories`` (each with ``advantage`` set); returns the step's metrics.

    The ratio statistics (``ratio_mean``, ``clip_fraction``, ``approx_kl``) are measured in this step's
    forward pass, before its own optimizer step: they show how far *earlier* steps of the same update
    moved the policy from the one that sampled. On the first step of an update they are 1, 0 and 0 by
    construction.

    ``own_old=True`` (the first step, with ``old_logprobs="trainer"``) takes the old logprobs from this
    very forward pass (detached): the weights have not moved since sampling, so this *is* the trainer's
    recomputation, for free. The sampler/trainer gap is then reported too.
    """
    if not trajectories:
        raise ValueError("no trajectories to train on (every group was degenerate?)")
    if any(t.advantage is None for t in trajectories):
        raise ValueError("trajectories need advantages; call alfrl.rl.advantage.assign_advantages first")
    total = sum(sum(t.mask) for t in trajectories)
    if total == 0:
        raise ValueError("the trajectories have no sampled tokens to train")
    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=True)
    stats = {"loss": 0.0, "clipped": 0.0, "kl": 0.0, "ratio": 0.0, "penalty": 0.0, "ratio_max": 0.0,
             "tis_weight": 0.0, "tis_capped": 0.0,
             "forward_seconds": 0.0, "backward_seconds": 0.0, "tokens_run": 0, "gaps": []}
    was_training = model.training
    model.train()
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        tick = time.perf_counter()
        for prefix, batches in shared_passes(model, trajectories, config):
            stats["forward_seconds"] += time.perf_counter() - tick  # the shared prefix's forward
            for batch in batches:
                _micro_batch(model, batch, config, own_old, total, stats, prefix)
            if prefix is not None:
                stats["tokens_run"] += prefix.length
                tick = time.perf_counter()
                prefix.backward()
                stats["backward_seconds"] += time.perf_counter() - tick
            tick = time.perf_counter()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm if config.max_grad_norm > 0
                                                   else float("inf"))
        optimizer.step()
    finally:
        model.train(was_training)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_disable()
    metrics = {"loss": stats["loss"] / total, "clip_fraction": stats["clipped"] / total,
               "approx_kl": stats["kl"] / total, "ratio_mean": stats["ratio"] / total,
               "ratio_max": stats["ratio_max"], "grad_norm": float(grad_norm),
               "kl_penalty": stats["penalty"] / total, "tokens_trained": int(total), "tokens_run": stats["tokens_run"],
               "trajectories_trained": len(trajectories), "forward_seconds": stats["forward_seconds"],
               "backward_seconds": stats["backward_seconds"]}
    if stats["gaps"]:
        metrics.update(_gap_metrics(stats["gaps"], total))
    if config.tis_cap:
        metrics.update(tis_weight_mean=stats["tis_weight"] / total, tis_capped_fraction=stats["tis_capped"] / total)
    return metrics


def ppo_update(policy, optimizer, trajectories: list[Trajectory], config: PPOConfig) -> list[dict[str, float]]:
    """``epochs`` x ``minibatches`` optimizer steps over the batch; one metrics dict per step.

    With ``old_logprobs="trainer"`` the old logprobs are the trainer's at the sampling weights. With one
    step per update the step takes them from its own forward pass (free); with more, the whole batch is
    recomputed once, without gradient, before the first step. The first step's metrics carry the
    sampler/trainer gap (``sampler_ratio_mean`` and friends).

    With one step per update (``epochs = minibatches = 1``) the ratio is 1 when the gradient is taken,
    so the clip never acts: the update is group-baseline REINFORCE (the policy gradient with the group
    mean as baseline). The clip starts to matter from the second step on; :func:`summarize_steps`
    reports the ratio statistics of those steps only.
    """
    single = config.epochs == 1 and config.minibatches == 1
    gap = {}
    if config.old_logprobs == "trainer" and not single:
        tick = time.perf_counter()
        trajectories, gap = recompute_old_logprobs(policy, trajectories, config)
        gap["recompute_seconds"] = time.perf_counter() - tick
    size = -(-len(trajectories) // config.minibatches)
    steps = []
    for _ in range(config.epochs):
        for start in range(0, len(trajectories), size):
            own = single and config.old_logprobs == "trainer"
            steps.append(ppo_step(policy, optimizer, trajectories[start:start + size], config, own_old=own))
    steps[0].update(gap)
    return steps


RATIO_KEYS = ("clip_fraction", "approx_kl", "ratio_mean", "ratio_max")
"""Metrics that measure how far the policy moved: meaningful only after the update's first step."""


def summarize_steps(steps: list[dict[str, float]], passes: int = 1) -> dict[str, float | None]:
    """One update's metrics from its steps: means over all steps, except the ratio statistics, which are
    taken over the steps after the first (None when there is only one: the clip could not act) and the
    sampler/trainer gap, which only the first step measures. ``passes``: the update's epochs (tokens and
    trajectories trained are counted once per pass over the batch)."""
    out: dict[str, float | None] = {}
    for key in steps[0]:
        if key in RATIO_KEYS:
            later = [s[key] for s in steps[1:]]
            out[key] = (max(later) if key == "ratio_max" else sum(later) / len(later)) if later else None
        elif key.startswith("sampler_") or key == "recompute_seconds":
            out[key] = steps[0][key]
        elif key.endswith("_seconds"):
            out[key] = sum(s[key] for s in steps)
        else:
            out[key] = sum(s[key] for s in steps) / len(steps)
    for key in ("tokens_trained", "tokens_run", "trajectories_trained"):  # once per pass, not per step
        out[key] = int(sum(s[key] for s in steps) // max(1, passes))
    return out
