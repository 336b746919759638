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
