"""Rejection-sampling fine-tuning (RFT): keep the trajectories that won, fine-tune on them.

The cheap, robust baseline agent papers report beside PPO (STaR, ReST, "RFT"): play groups as
GRPO does, throw away every trajectory that did not win, and train on the winners' sampled tokens
(mask 1) with the warm start's loss, the token-mean negative log-likelihood
(:func:`alfrl.imitation.sft.nll_loss`). No advantages, no ratio, no reference: the policy imitates its own
successes. Unlike GRPO it learns nothing from a group with no win, and nothing from *how* the
losers failed; unlike GRPO it does learn from a group that won every time.

Taught in notebook 07 (RFT, next to GRPO and DPO).
"""

from __future__ import annotations

import time

import torch

from alfrl.imitation.sft import nll_loss
from alfrl.rl.trajectory import Trajectory


def winners(groups: list[list[Trajectory]]) -> list[Trajectory]:
    """Every trajectory that won, group by group."""
    return [t for group in groups for t in group if t.won]


def rft_step(policy, optimizer, trajectories: list[Trajectory], micro_batch_tokens: int = 4096,
             bf16: bool = False, max_grad_norm: float = 1.0, gradient_checkpointing: bool = False) -> dict[str, float]:
    """One optimizer step of the token-mean NLL on ``trajectories``' sampled tokens (recomputing activations in
    the backward pass with ``gradient_checkpointing``, as the update does for long trajectories); returns its
    metrics."""
    if not trajectories:
        raise ValueError("no winning trajectories to fine-tune on (RFT learns only from wins)")
    model = policy.model
    params = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tick = time.perf_counter()
    try:
        optimizer.zero_grad(set_to_none=True)
        loss, tokens = nll_loss(model, trajectories, micro_batch_tokens, bf16=bf16)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
        optimizer.step()
    finally:
        model.train(was_training)
        if gradient_checkpointing:
            model.gradient_checkpointing_disable()
    return {"loss": loss, "grad_norm": float(grad_norm), "tokens_trained": tokens,
            "trajectories_trained": len(trajectories), "update_step_seconds": time.perf_counter() - tick}
