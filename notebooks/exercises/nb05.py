"""Checks for notebook 05's exercises: the clipped loss, which tokens stop pulling, a LoRA layer, and one
policy-gradient step.

The right answers come from the package and the libraries it uses: ``alfrl.rl.ppo.ppo_token_loss`` (the loss the
course trains with) and autograd on it (which tokens get no gradient), peft's LoRA layer, and
``alfrl.rl.ppo.ppo_step`` (the step ``alfrl.training.train`` takes), so the exercises cannot drift from the package.
"""

from __future__ import annotations

import torch

from alfrl.rl.ppo import ppo_token_loss

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
    """The course's batch loss (what ``alfrl.rl.ppo.ppo_step`` minimises) and its gradient."""
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
    against alfrl.rl.ppo's on random batches with three clip ranges: its value and its gradient."""
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
            problems.append(f"clip ({low}, {high}): the value is right but its gradient is not alfrl.rl.ppo's "
                            "(is the clip applied with torch.clamp on the ratio?)")
    return verdict(problems, "the batch loss equals alfrl.rl.ppo's (value and gradient), for three clip ranges")


def _stopped_by_autograd(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Tokens whose clipped loss has zero gradient with respect to their new logprob."""
    new = ratio.log().clone().requires_grad_(True)
    loss, _ = ppo_token_loss(new, torch.zeros_like(new), adv, low, high)
    (grad,) = torch.autograd.grad(loss.sum(), new)
    return grad == 0


def check_stops_pulling(stops_pulling) -> bool:
    """``stops_pulling(ratio, adv, low, high)``: a bool tensor, True for the tokens whose clipped loss has
    no gradient (autograd on alfrl.rl.ppo.ppo_token_loss decides)."""
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


def _peft_twin(layer: torch.nn.Linear, A: torch.Tensor, B: torch.Tensor, rank: int, alpha: int):
    """peft's LoRA on a copy of ``layer`` (the library alfrl trains with), with the given A and B."""
    import copy
    from collections import OrderedDict

    from peft import LoraConfig, get_peft_model

    model = get_peft_model(torch.nn.Sequential(OrderedDict(proj=copy.deepcopy(layer))),
                           LoraConfig(r=rank, lora_alpha=alpha, target_modules=["proj"], lora_dropout=0.0))
    with torch.no_grad():
        model.base_model.model.proj.lora_A["default"].weight.copy_(A)
        model.base_model.model.proj.lora_B["default"].weight.copy_(B)
    return model


def check_lora_linear(LoRALinear) -> bool:  # noqa: N803 (the learner's class)
    """``LoRALinear(base, rank, alpha)``: the frozen ``base`` layer plus a trainable update B A scaled by alpha / r,
    parts named ``base``, ``A`` (r x d_in) and ``B`` (d_out x r). Checked against peft's LoRA layer: at creation
    (B = 0: the base layer's outputs), with B trained, on a batch of sequences, and its gradients."""
    import copy

    rank, alpha, d_in, d_out = 4, 8, 64, 48
    torch.manual_seed(0)
    layer = torch.nn.Linear(d_in, d_out)
    mine, problem = attempt(LoRALinear, copy.deepcopy(layer), rank, alpha)
    if problem:
        return verdict([problem], "")
    parts = {name: getattr(mine, name, None) for name in ("base", "A", "B")}
    missing = [name for name, part in parts.items() if part is None]
    if missing:
        return verdict([f"no self.{', self.'.join(missing)}: keep the frozen layer as self.base and the two "
                        "matrices as self.A and self.B"], "")
    A, B = parts["A"], parts["B"]
    problems = []
    if not (isinstance(A, torch.nn.Parameter) and isinstance(B, torch.nn.Parameter)):
        problems.append("A and B must be torch.nn.Parameter, or the optimizer never sees them")
    if tuple(A.shape) != (rank, d_in) or tuple(B.shape) != (d_out, rank):
        problems.append(f"shapes: A is r x d_in = {(rank, d_in)} and B is d_out x r = {(d_out, rank)}; yours are "
                        f"{tuple(A.shape)} and {tuple(B.shape)}")
        return verdict(problems, "")
    if any(p.requires_grad for p in mine.base.parameters()):
        problems.append("the base layer still trains: freeze it (base.requires_grad_(False)); only A and B learn")
    trainable = {id(p) for p in mine.parameters() if p.requires_grad}
    if trainable != {id(A), id(B)}:
        problems.append("the trainable parameters must be exactly A and B")
    if bool((B != 0).any()):
        problems.append("B must start at zero, so that a fresh adapter changes nothing (y = W x at step 0)")
    if not bool((A != 0).any()):
        problems.append("A must start random: with A and B both zero, neither ever gets a gradient")
    x = torch.randn(2, 3, d_in)  # a batch of sequences, as in the model
    out, problem = attempt(mine, x)
    if problem:
        return verdict(problems + [problem + " (on a batch of sequences, shape (2, 3, 64))"], "")
    if tuple(out.shape) != (2, 3, d_out):
        return verdict(problems + [f"the output should have shape (2, 3, {d_out}), got {tuple(out.shape)}"], "")
    if problems:
        return verdict(problems, "")
    if not torch.allclose(out, layer(x), atol=1e-6):
        problems.append("with B = 0 the output must be the base layer's: y = W x + (alpha / r) B A x")
    with torch.no_grad():  # as if trained
        B.normal_()
    out = mine(x)
    theirs = _peft_twin(layer, A.detach(), B.detach(), rank, alpha)(x)
    if not torch.allclose(out, theirs, atol=1e-5):
        update = (x @ A.detach().T) @ B.detach().T
        wrong = {"scale the update by alpha / r (here 8 / 4 = 2), not alpha": layer(x) + alpha * update,
                 "scale the update by alpha / r, not r / alpha": layer(x) + rank / alpha * update,
                 "scale the update by alpha / r": layer(x) + update,
                 "add the base layer's output: y = W x + (alpha / r) B A x": alpha / rank * update}
        named = [m for m, w in wrong.items() if torch.allclose(out.detach(), w, atol=1e-5)]
        problems.append(named[0] if named else "with B trained, your output differs from peft's LoRA layer "
                        f"(largest gap {float((out - theirs).abs().max()):.3g})")
        return verdict(problems, "")
    out.sum().backward()
    if A.grad is None or B.grad is None:
        problems.append("A and B get no gradient: compute the update from self.A and self.B with torch operations")
    elif any(p.grad is not None for p in mine.base.parameters()):
        problems.append("the base layer got a gradient: freeze it")
    return verdict(problems, f"the same outputs as peft's LoRA; trainable: {rank * (d_in + d_out)} parameters "
                             f"(r x (d_in + d_out)) against {d_in * d_out} in W")


def _tiny_policy():
    """A random 2-layer model with a LoRA adapter whose A and B are both random (so both get gradients)."""
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing to act on here
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(LlamaForCausalLM(config), lora)


def _trained_batch():
    """Three trajectories (tokens, mask, advantage) of different lengths: a prompt, replies on the mask, a
    tool result between them; advantages of both signs."""
    gen = torch.Generator().manual_seed(1)
    batch = []
    for length, cuts, adv in ((14, (5, 9, 11, 14), 0.75), (10, (4, 7, 8, 10), -0.25), (16, (6, 10, 13, 16), -0.5)):
        tokens = torch.randint(1, 50, (length,), generator=gen).tolist()
        a, b, c, d = cuts
        mask = [0] * a + [1] * (b - a) + [0] * (c - b) + [1] * (d - c)
        batch.append((tokens, mask, adv))
    return batch


def _logprobs_fn(model):
    from alfrl.rl.logprobs import sequence_logprobs
    return lambda tokens, mask: sequence_logprobs(model, [tokens], 1.0, masks=[mask])[0]


def _trainable(model) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def _course_step(model, batch, max_grad_norm: float, lr: float) -> tuple[dict, list[torch.Tensor]]:
    """alfrl.rl.ppo.ppo_step (what alfrl.training.train runs) on the batch, with plain SGD: (metrics, the weights after)."""
    from types import SimpleNamespace

    from alfrl.rl.ppo import PPOConfig, ppo_step
    from alfrl.rl.trajectory import Trajectory

    trajectories = [Trajectory(game_id="g", task_type="t", branch=i, seed=0, tokens=tokens, mask=mask,
                               logprobs=[0.0] * len(tokens), turns=[], won=adv > 0, steps=1, invalid=0,
                               end_reason="max_steps", prompt_tokens=3, prefilled=0, sampled=sum(mask),
                               model_seconds=0.0, env_seconds=0.0, advantage=adv)
                    for i, (tokens, mask, adv) in enumerate(batch)]
    optimizer = torch.optim.SGD(_trainable(model), lr=lr)
    metrics = ppo_step(SimpleNamespace(model=model), optimizer, trajectories, PPOConfig(max_grad_norm=max_grad_norm),
                       own_old=True)
    return metrics, [p.detach().clone() for p in _trainable(model)]


def _variant_step(model, batch, max_grad_norm: float, lr: float, *, stale=None, mean="batch", clip=True,
                  sign=1.0, masked=True) -> list[torch.Tensor]:
    """A usual mistake, done on purpose: the weights it leaves (to name the learner's mistake)."""
    params = _trainable(model)
    if stale is not None:  # a step that forgot to zero the gradients left over from before
        for p, g in zip(params, stale):
            p.grad = g.clone()
    else:
        for p in params:
            p.grad = None
    logprobs = _logprobs_fn(model)
    total = sum(sum(m) for _, m, _ in batch) if mean == "batch" else sum(len(t) for t, _, _ in batch)
    for tokens, mask, adv in batch:
        new = logprobs(tokens, mask)
        ratio = torch.exp(new - new.detach())
        per_token = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * sign
        weights = torch.tensor(mask, dtype=new.dtype) if masked else torch.ones(len(tokens))
        if mean == "trajectory":
            loss = (per_token * weights).sum() / weights.sum() / len(batch)
        else:
            loss = (per_token * weights).sum() / total
        loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    torch.optim.SGD(params, lr=lr).step()
    return [p.detach().clone() for p in params]


def check_policy_gradient_step(policy_gradient_step) -> bool:
    """``policy_gradient_step(logprobs, params, optimizer, trained, low, high, max_grad_norm) -> (loss, grad_norm)``:
    one optimizer step on ``trained`` (a list of (tokens, mask, advantage)), the same as alfrl.rl.ppo.ppo_step's
    (the step alfrl.training.train takes) on a small random model: the loss, the gradient norm before clipping, and
    the weights after the step. The optimizer is plain SGD here, so a wrong gradient shows in the weights."""
    lr = 0.5
    batch = _trained_batch()
    probe, _ = _course_step(_tiny_policy(), batch, float("inf"), lr)
    max_grad_norm = probe["grad_norm"] / 2  # so that the clip acts
    expected, after = _course_step(_tiny_policy(), batch, max_grad_norm, lr)
    model = _tiny_policy()
    params = _trainable(model)
    stale = [torch.full_like(p, 0.01) for p in params]  # what an earlier step left in .grad
    for p, g in zip(params, stale):
        p.grad = g.clone()
    optimizer = torch.optim.SGD(params, lr=lr)
    got, problem = attempt(policy_gradient_step, _logprobs_fn(model), params, optimizer, batch, 0.8, 1.2,
                           max_grad_norm)
    if problem:
        return verdict([problem], "")
    try:
        loss, grad_norm = (float(v) for v in got)
    except (TypeError, ValueError):
        return verdict([f"return two numbers, (loss, grad_norm); got {got!r}"], "")
    mine = [p.detach() for p in params]
    problems = []
    if not all(torch.allclose(m, a, atol=1e-6) for m, a in zip(mine, after)):
        unchanged = all(torch.equal(m, s) for m, s in zip(mine, [p.detach() for p in _trainable(_tiny_policy())]))
        mistakes = {"zero the gradients first (optimizer.zero_grad()): .grad still held an earlier step's":
                        dict(stale=stale),
                    "divide by the sampled tokens of the whole batch (the token mean), not per trajectory":
                        dict(mean="trajectory"),
                    "count only the sampled tokens: multiply the per-token loss by the mask": dict(masked=False),
                    "divide by the batch's sampled tokens (sum of the masks), not by every token": dict(mean="all"),
                    "clip the gradient's norm before the step (torch.nn.utils.clip_grad_norm_(params, "
                    "max_grad_norm))": dict(clip=False),
                    "the sign: minimise -min(r A, clip(r) A), so that tokens with A > 0 rise": dict(sign=-1.0)}
        named = [message for message, flags in mistakes.items()
                 if all(torch.allclose(m, w, atol=1e-6)
                        for m, w in zip(mine, _variant_step(_tiny_policy(), batch, max_grad_norm, lr, **flags)))]
        problems.append("the weights did not move: call optimizer.step() after the backward passes" if unchanged
                        else named[0] if named else "the weights after your step differ from alfrl.rl.ppo.ppo_step's")
    if abs(loss - expected["loss"]) > 1e-5:  # at ratio 1 a sampled token's loss is -A: the usual wrong sums
        total = sum(sum(m) for _, m, _ in batch)
        wrong = {"multiply the per-token loss by the mask (tokens off it count in your loss)":
                     sum(-a * len(t) for t, _, a in batch) / total,
                 "divide by the batch's sampled tokens, not per trajectory": sum(-a for *_, a in batch) / len(batch),
                 "the loss is the sum of every trajectory's part (add each .item() up), not the last one's":
                     -batch[-1][2] * sum(batch[-1][1]) / total}
        named = [m for m, w in wrong.items() if abs(loss - w) < 1e-5]
        problems.append(named[0] if named else f"the loss you return is {loss:.6f}, alfrl's is "
                        f"{expected['loss']:.6f} (the batch's loss: add up each trajectory's part, a .item() each)")
    if abs(grad_norm - expected["grad_norm"]) > 1e-4 * max(1.0, expected["grad_norm"]):
        problems.append(f"the grad_norm you return is {grad_norm:.6f}, alfrl's is {expected['grad_norm']:.6f} "
                        "(clip_grad_norm_ returns the norm before clipping)")
    return verdict(problems, "the same loss, gradient norm and weights after the step as alfrl.rl.ppo.ppo_step")
