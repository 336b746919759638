"""Checks for notebook 05's exercises: the clipped loss, and which tokens stop pulling.

The right answers come from ``alfrl.ppo.ppo_token_loss`` (the loss the course trains with) and from
autograd on it (which tokens get no gradient), so the exercises cannot drift from the package.
"""

from __future__ import annotations

import torch

from alfrl.ppo import ppo_token_loss

from . import attempt, verdict

CLIP_RANGES = ((0.8, 1.2), (0.9, 1.1), (0.5, 2.0))


def _batch(seed: int, rows: int = 4, length: int = 30):
    """A batch like an update's: old logprobs, new ones on both sides of the clip, one advantage per
    trajectory (positive and negative rows), and a mask with prompt tokens off it."""
    gen = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(rows, length, generator=gen)
    new = old + 0.4 * torch.randn(rows, length, generator=gen)
    adv = torch.randn(rows, 1, generator=gen).expand(rows, length).clone()
    adv[0], adv[1] = adv[0].abs() + 0.1, -adv[1].abs() - 0.1  # both signs, always
    mask = (torch.rand(rows, length, generator=gen) < 0.6).float()
    mask[:, 0] = 1.0  # every trajectory has a sampled token
    lengths = torch.randint(length // 3, length + 1, (rows,), generator=gen)
    for i, n in enumerate(lengths.tolist()):  # trajectories of different lengths: padding is off the mask
        mask[i, n:] = 0.0
    return new, old, adv, mask


def _expected(new, old, adv, mask, low, high):
    """The course's batch loss (what ``alfrl.ppo.ppo_step`` minimises) and its gradient."""
    new = new.detach().clone().requires_grad_(True)
    per_token, _ = ppo_token_loss(new, old, adv, low, high)
    loss = (per_token * mask).sum() / mask.sum()
    (grad,) = torch.autograd.grad(loss, new)
    return loss.detach(), grad


def _diagnose(value: float, new, old, adv, mask, low, high) -> str | None:
    """Name the usual mistake whose value the learner's loss matches, if any."""
    ratio = torch.exp(new - old)
    tokens, _ = ppo_token_loss(new, old, adv, low, high)
    unclipped, clipped = ratio * adv, ratio.clamp(low, high) * adv
    per_trajectory = ((tokens * mask).sum(1) / mask.sum(1)).mean()
    mistakes = {
        "you averaged per trajectory first: divide the sum over every sampled token of the batch by "
        "their number (the token mean), so a long reply's tokens weigh as much as a short one's": per_trajectory,
        "tokens off the mask count in your loss: multiply the per-token loss by the mask": tokens.mean(),
        "you divided by every token of the batch: divide by the sampled tokens (mask.sum())":
            (tokens * mask).sum() / mask.numel(),
        "no clip: the loss is -min(r A, clip(r, low, high) A), not -r A":
            (-unclipped * mask).sum() / mask.sum(),
        "only the clipped term: take the min of r A and clip(r) A, or a token that moved the wrong way "
        "is never pulled back": (-clipped * mask).sum() / mask.sum(),
        "the sign: the loss is minus the objective, -min(r A, clip(r) A), so that minimising it raises "
        "tokens with A > 0": (torch.minimum(unclipped, clipped) * mask).sum() / mask.sum(),
        "max instead of min: PPO takes the pessimistic (smaller) of the two objectives":
            (-torch.maximum(unclipped, clipped) * mask).sum() / mask.sum(),
        "the ratio is exp(new - old), the probability of the token now over its probability when it "
        "was sampled": (-torch.minimum(torch.exp(old - new) * adv, torch.exp(old - new).clamp(low, high) * adv)
                        * mask).sum() / mask.sum(),
    }
    for message, wrong in mistakes.items():
        if abs(value - float(wrong)) < 1e-5:
            return message
    return None


def check_clipped_loss(clipped_loss) -> bool:
    """``clipped_loss(new_logp, old_logp, adv, mask, low, high)``: the batch's token-mean clipped loss,
    against alfrl.ppo's on random batches with three clip ranges: its value and its gradient."""
    problems = []
    for seed, (low, high) in enumerate(CLIP_RANGES):
        new, old, adv, mask = _batch(seed)
        expected, expected_grad = _expected(new, old, adv, mask, low, high)
        mine_new = new.detach().clone().requires_grad_(True)
        got, problem = attempt(clipped_loss, mine_new, old.clone(), adv.clone(), mask.clone(), low, high)
        if problem:
            return verdict([problem], "")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            problems.append(f"it should return the batch loss as a one-number tensor, got {type(got).__name__}"
                            + (f" of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else ""))
            break
        value = float(got.detach())
        if abs(value - float(expected)) > 1e-5:
            hint = _diagnose(value, new, old, adv, mask, low, high)
            if hint:  # the same mistake on every batch: say it once
                problems.append(hint)
                break
            problems.append(f"clip ({low}, {high}), seed {seed}: your loss is {value:.6f}, the course's "
                            f"is {float(expected):.6f}")
            continue
        if not got.requires_grad:
            problems.append("the loss has no gradient: compute it from new_logp with torch operations "
                            "(no .item(), .detach() or numpy), or training could not use it")
            continue
        (grad,) = torch.autograd.grad(got, mine_new, allow_unused=True)
        if grad is None or not torch.allclose(grad, expected_grad, atol=1e-6):
            problems.append(f"clip ({low}, {high}): the value is right but its gradient is not alfrl.ppo's "
                            "(is the clip applied with torch.clamp on the ratio?)")
    return verdict(problems, "the batch loss equals alfrl.ppo's (value and gradient), for three clip ranges")


def _stopped_by_autograd(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Tokens whose clipped loss has zero gradient with respect to their new logprob."""
    new = ratio.log().clone().requires_grad_(True)
    loss, _ = ppo_token_loss(new, torch.zeros_like(new), adv, low, high)
    (grad,) = torch.autograd.grad(loss.sum(), new)
    return grad == 0


def check_stops_pulling(stops_pulling) -> bool:
    """``stops_pulling(ratio, adv, low, high)``: a bool tensor, True for the tokens whose clipped loss has
    no gradient (autograd on alfrl.ppo.ppo_token_loss decides)."""
    problems = []
    gen = torch.Generator().manual_seed(5)
    for low, high in CLIP_RANGES:
        ratio = torch.exp(0.5 * torch.randn(200, generator=gen))
        ratio = ratio[((ratio - low).abs() > 1e-3) & ((ratio - high).abs() > 1e-3)]  # not on an edge
        adv = torch.where(torch.rand(len(ratio), generator=gen) < 0.5, -1.0, 1.0) * (
            0.1 + torch.rand(len(ratio), generator=gen))
        expected = _stopped_by_autograd(ratio, adv, low, high)
        got, problem = attempt(stops_pulling, ratio.clone(), adv.clone(), low, high)
        if problem:
            return verdict([problem], "")
        try:
            got = torch.as_tensor(got).bool().reshape(expected.shape)
        except Exception:
            problems.append(f"return one True/False per token (a bool tensor of shape {tuple(expected.shape)})")
            break
        wrong = (got != expected).nonzero().flatten().tolist()
        if not wrong:
            continue
        i = wrong[0]
        r, a = float(ratio[i]), float(adv[i])
        if bool(got[i]):
            why = ("it moved past the clip range the *wrong* way, so the min keeps the unclipped term and "
                   "pulls it back" if (r > high and a < 0) or (r < low and a > 0) else
                   "it is inside the clip range, so it is pushed the way A says")
            problems.append(f"clip ({low}, {high}): the token with ratio {r:.2f} and A = {a:+.2f} still pulls: {why}")
        else:
            problems.append(f"clip ({low}, {high}): the token with ratio {r:.2f} and A = {a:+.2f} has no gradient: "
                            f"it already moved past {high if a > 0 else low} the way its advantage wants")
    return verdict(problems, "exactly the tokens with no gradient, for three clip ranges")
