"""Worked solutions of notebook 05's exercises (try them first)."""

from __future__ import annotations

import torch


def clipped_loss(new_logp, old_logp, adv, mask, low=0.8, high=1.2):
    """The batch loss: -min(r A, clip(r, low, high) A) on the sampled tokens (mask 1), token mean."""
    ratio = torch.exp(new_logp - old_logp)  # how much more likely the token is now than when sampled
    per_token = -torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)
    return (per_token * mask).sum() / mask.sum()  # every sampled token of the batch weighs the same


def stops_pulling(ratio, adv, low=0.8, high=1.2):
    """True for the tokens with no gradient: they moved past the clip range the way their advantage wants."""
    return ((ratio > high) & (adv > 0)) | ((ratio < low) & (adv < 0))


class LoRALinear(torch.nn.Module):
    """y = W x + (alpha / r) B A x: the frozen weight W plus a trainable rank-r update B A."""

    def __init__(self, base: torch.nn.Linear, rank: int, alpha: int):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = torch.nn.Parameter(torch.randn(rank, base.in_features) / rank)  # peft: kaiming-uniform
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank))  # zero: starts as the base layer
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * (x @ self.A.T) @ self.B.T


def policy_gradient_step(logprobs, params, optimizer, trained, low=0.8, high=1.2, max_grad_norm=1.0):
    """One optimizer step on trained = [(tokens, mask, advantage), ...]; returns (loss, grad_norm)."""
    optimizer.zero_grad()  # no gradient left over from an earlier step
    total = sum(sum(mask) for _, mask, _ in trained)  # the batch's sampled tokens: the token mean's divisor
    batch_loss = 0.0
    for tokens, mask, advantage in trained:  # one trajectory at a time: their gradients add up
        new = logprobs(tokens, mask)
        ratio = torch.exp(new - new.detach())  # 1: the weights have not moved since sampling
        per_token = -torch.minimum(ratio * advantage, ratio.clamp(low, high) * advantage)
        loss = (per_token * torch.tensor(mask, dtype=new.dtype)).sum() / total
        loss.backward()
        batch_loss += loss.item()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)  # the norm before clipping
    optimizer.step()
    return batch_loss, float(grad_norm)
