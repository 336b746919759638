"""The device check's checks against references that share none of the code they check (see device_check.py).

- ``naive_gradient``: the update's gradient (:func:`alfrl.rl.ppo.ppo_step`, ratio 1, no TIS) on a tiny float32
  Qwen3 with a LoRA adapter, against the gradient of a loss written from scratch here: the full
  ``log_softmax`` of ``model(ids).logits``, gathered at the sampled tokens, times the advantage, a masked token
  mean. Cosine > 0.9999 and the same norm within 0.1%; then one finite-difference probe of that naive loss, in
  float64, along the update's gradient: the directional derivative agrees within 0.1%. A bug that moves the mask,
  drops a token, or takes the logprob at the wrong position fails it.
- ``sampler_gap``: the course's sampler (:class:`alfrl.agent.sampler.GroupSession`) at temperature 1 on a model
  with a nonzero LoRA adapter (a random Qwen3-4B in bfloat16 on a GPU; a small shape in a dry run): its
  logprobs of the tokens it sampled against the trainer's (:func:`alfrl.rl.logprobs.sequence_logprobs`) on the
  same sequences, and the truncated importance-sampling weights the reference preset's update would give them
  (exp(trainer - sampler), capped at 2). Each figure against a stated threshold (:data:`GAP_LIMITS`). A sampler
  that samples at one temperature and reports another, or a trainer that reads another adapter, fails it.

The model's logits are sharpened (its final norm scaled to a mean entropy of :data:`ENTROPY`) so that a random model's next-token
distributions are peaked as a trained model's are: on the flat distributions of random weights a wrong
temperature would change almost nothing.
"""

from __future__ import annotations

import copy
import time

import torch
from device_shapes import TINY_QWEN3, lora_model, peak_gb, reset_peak, tiny_lora

ENTROPY = 1.5
"""The mean next-token entropy (nats) the logits are scaled to, by the final norm's weight: a random Qwen3's
next-token distributions are nearly flat (entropy near log of the vocabulary), and on flat distributions a wrong
temperature changes almost nothing; at 1.5 nats they are as peaked as a trained model's."""

GAP_LIMITS = {"mean_abs_diff": 0.02, "tis_weight_mean": (0.98, 1.02), "tis_capped_fraction": 0.01}
"""Sampler against trainer on the same weights: mean |logprob difference| per sampled token, the mean TIS weight (1
when the two agree) and the share of tokens whose weight the cap of 2 cuts; the largest difference is reported, not
judged (one token of thousands may round far in bfloat16). Not yet measured on a GPU: bfloat16 rounding of two
computations (a cached decode against one full forward) is expected well inside them, a temperature off by 20% on
peaked distributions, or another adapter, far outside (tests/test_device_check.py plants the temperature)."""


def sharpen(model, vocab: int, target: float | None = None) -> float:
    """Scale the final norm's weight in place (the logits are linear in it) so that the mean next-token entropy on
    a random sequence is about ``target`` nats (default :data:`ENTROPY`): a bisection on the scale's logarithm;
    returns the scale."""
    target = ENTROPY if target is None else target
    device = next(model.parameters()).device
    ids = torch.randint(1, vocab, (1, 64), generator=torch.Generator().manual_seed(4)).to(device)
    norm = model.get_decoder().norm
    base = norm.weight.detach().clone()

    def entropy(scale: float) -> float:
        with torch.no_grad():
            norm.weight.copy_(base * scale)
            logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
            return float(-(logp.exp() * logp).sum(-1).mean())

    low, high = -4.0, 8.0  # log scale: entropy falls as the scale grows
    for _ in range(14):
        middle = (low + high) / 2
        low, high = (middle, high) if entropy(2 ** middle) > target else (low, middle)
    scale = 2 ** ((low + high) / 2)
    reached = entropy(scale)  # leaves the weight at this scale
    if abs(reached - target) > 0.3:
        raise RuntimeError(f"could not sharpen the logits to {target} nats (reached {reached:.2f} at scale {scale:.3g})")
    return scale


def _naive_loss(model, sequences: list[list[int]], masks: list[list[int]], advantages: list[float]) -> torch.Tensor:
    """-sum_i A_i sum_t m_it log p(x_it | x_i<t) / sum m: every logit made, nothing chunked, nothing cached."""
    device = next(model.parameters()).device
    ids = torch.tensor(sequences, device=device)
    logp = torch.log_softmax(model(input_ids=ids).logits.double(), dim=-1)[:, :-1]
    taken = logp.gather(-1, ids[:, 1:, None])[..., 0]
    mask = torch.tensor(masks, device=device, dtype=torch.float64)[:, 1:]
    weight = torch.tensor(advantages, device=device, dtype=torch.float64)[:, None]
    return -(taken * mask * weight).sum() / mask.sum()


def check_naive_gradient(device: torch.device) -> dict:
    from alfrl.agent.models import Policy
    from alfrl.rl.ppo import PPOConfig, make_optimizer, ppo_step
    from alfrl.rl.trajectory import Trajectory

    model = tiny_lora(device, torch.float32)
    sharpen(model, TINY_QWEN3["vocab_size"])
    g = torch.Generator().manual_seed(21)
    shared = torch.randint(1, TINY_QWEN3["vocab_size"], (60,), generator=g).tolist()  # a prompt both branches share:
    sequences = [shared + torch.randint(1, TINY_QWEN3["vocab_size"], (100,), generator=g).tolist()  # the update runs it
                 for _ in range(2)]  # once and the rest on its cached keys and values (alfrl.rl.prefix)
    masks = [[0] * 60 + [1] * 40 + [0] * 30 + [1] * 30, [0] * 60 + [1] * 25 + [0] * 45 + [1] * 30]  # two turns each
    advantages = [1.0, -0.5]
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}

    naive = copy.deepcopy(model)
    loss = _naive_loss(naive, sequences, masks, advantages)
    loss.backward()
    reference = {n: p.grad.detach().double().cpu() for n, p in naive.named_parameters() if p.requires_grad}

    trajectories = [Trajectory(game_id="g", task_type="t", branch=i, seed=i, tokens=s, mask=m, logprobs=[0.0] * len(s),
                               turns=[], won=a > 0, steps=1, invalid=0, end_reason="won", prompt_tokens=60, prefilled=0,
                               sampled=sum(m), model_seconds=0.0, env_seconds=0.0, advantage=a)
                    for i, (s, m, a) in enumerate(zip(sequences, masks, advantages))]
    config = PPOConfig(lr=1e-3, max_grad_norm=0.0, tis_cap=0.0)  # no clipping: the raw gradient is compared
    policy = Policy(model=model, tokenizer=None, name="tiny-qwen3")
    metrics = ppo_step(policy, make_optimizer(policy, config), trajectories, config, own_old=True)
    update = {n: p.grad.detach().double().cpu() for n, p in params.items()}
    x = torch.cat([update[n].flatten() for n in sorted(update)])
    y = torch.cat([reference[n].flatten() for n in sorted(reference)])
    cosine = float(torch.nn.functional.cosine_similarity(x, y, dim=0))
    norm_ratio = float(x.norm() / y.norm())

    # finite differences of the naive loss in float64, along the update's own gradient direction
    probe = copy.deepcopy(naive).double()
    direction = {n: update[n].to(device) / x.norm().to(device) for n in update}
    eps = 1e-4

    def loss_at(sign: float) -> float:
        moved = copy.deepcopy(probe)
        with torch.no_grad():
            for n, p in moved.named_parameters():
                if n in direction:
                    p.add_(sign * eps * direction[n].to(p.dtype))
            return float(_naive_loss(moved, sequences, masks, advantages))

    finite_difference = (loss_at(1.0) - loss_at(-1.0)) / (2 * eps)
    along = float((y * x).sum() / x.norm())  # the naive gradient's component along the update's direction
    fd_rel = abs(finite_difference - along) / abs(along)
    ok = cosine > 0.9999 and abs(norm_ratio - 1) < 1e-3 and fd_rel < 1e-3 and metrics["grad_norm"] > 0
    return {"cosine": cosine, "norm_ratio": norm_ratio, "naive_loss": float(loss.detach()), "tokens": metrics["tokens_trained"],
            "finite_difference": finite_difference, "directional_derivative": along, "fd_rel_error": fd_rel,
            "limits": {"cosine": 0.9999, "norm_ratio": "1 +- 1e-3", "fd_rel_error": 1e-3}, "ok": bool(ok)}


def check_sampler_gap(device: torch.device, shape: dict, rows: int, prompt: int, reply: int) -> dict:
    """``rows`` branches sampled at T=1 for two turns of ``reply`` tokens after a ``prompt``-token prompt; the
    sampler's logprobs against the trainer's on the finished sequences."""
    from alfrl.agent.sampler import GroupSession, SampleConfig
    from alfrl.rl.logprobs import sequence_logprobs
    from alfrl.rl.ppo import sampler_gap

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # the reference run's, or the CPU's
    model = lora_model(shape, device) if dtype == torch.bfloat16 else tiny_lora(device, torch.float32, shape)
    vocab = shape["vocab_size"]
    factor = sharpen(model, vocab)
    g = torch.Generator().manual_seed(8)
    prompts = {b: torch.randint(1, vocab, (prompt + 17 * b,), generator=g).tolist() for b in range(rows)}
    sampled = {b: [] for b in prompts}  # (position, sampler logprob)
    session = GroupSession(model, stop_ids=set(), seeds=list(range(rows)), pad_id=0)
    cfg = SampleConfig(temperature=1.0, max_new_tokens=reply)
    reset_peak(device)
    tick = time.perf_counter()
    for turn in range(2):
        out = session.sample(prompts, cfg)
        for b, s in out.items():
            sampled[b] += [(len(prompts[b]) + i, lp) for i, lp in enumerate(s.logprobs)]
            prompts[b] = prompts[b] + s.tokens + torch.randint(1, vocab, (11,), generator=g).tolist()
    seconds = time.perf_counter() - tick
    sampler_rows, trainer_rows, mask_rows = [], [], []
    with torch.no_grad():
        for b in prompts:
            mask = [0] * len(prompts[b])
            sampler = [0.0] * len(prompts[b])
            for position, lp in sampled[b]:
                mask[position], sampler[position] = 1, lp
            trainer = sequence_logprobs(model, [prompts[b]], 1.0, masks=[mask])[0].float().cpu()
            sampler_rows.append(torch.tensor(sampler))
            trainer_rows.append(trainer)
            mask_rows.append(torch.tensor(mask, dtype=torch.float32))
    sampler_all, trainer_all, mask_all = (torch.cat(r) for r in (sampler_rows, trainer_rows, mask_rows))
    on = mask_all.bool()
    diff = (trainer_all - sampler_all)[on]
    weights = diff.exp()
    gap = sampler_gap(sampler_all, trainer_all, mask_all)
    figures = {"tokens": int(on.sum()), "mean_abs_diff": float(diff.abs().mean()), "max_abs_diff": float(diff.abs().max()),
               "tis_weight_mean": float(weights.clamp(max=2.0).mean()),
               "tis_capped_fraction": float((weights > 2.0).float().mean()),
               "ratio_mean_by_ppo": gap["gap_ratio_sum"] / int(on.sum()),
               "sampled_nll_mean": float(-sampler_all[on].mean())}
    low, high = GAP_LIMITS["tis_weight_mean"]
    ok = (0.05 <= figures["sampled_nll_mean"] <= 5.0  # peaked, not one-hot: a temperature shows in the logprobs
          and figures["mean_abs_diff"] <= GAP_LIMITS["mean_abs_diff"]
          and low <= figures["tis_weight_mean"] <= high
          and figures["tis_capped_fraction"] <= GAP_LIMITS["tis_capped_fraction"])
    return {"dtype": str(dtype).removeprefix("torch."), "rows": rows, "prompt_tokens": prompt, "reply_tokens": reply,
            "entropy_target": ENTROPY, "norm_scaled_by": factor, **figures, "limits": GAP_LIMITS, "seconds": seconds, "peak_gpu_gb": peak_gb(device),
            "ok": bool(ok)}
