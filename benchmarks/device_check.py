"""The GPU path, checked on a GPU machine in one run of a few minutes, offline, with nothing to download.

    python benchmarks/device_check.py --out device_check.json          # on a machine with a CUDA GPU
    python benchmarks/device_check.py --out dry.json --dry-run         # on a CPU: the same checks, smaller
    python benchmarks/device_check.py --only update_4b,rollout_4b      # some of them

No model weights are needed: every model is built from a config with random weights (a tiny Qwen3, and
Qwen3-4B's real shape for the scale checks), so the checks run where only this repository and its packages
are. Each check reports its numbers and ``ok``; the JSON report is rewritten after every check:

1. ``attention``: the sampler's grouped-query attention (:func:`alfrl.agent.attention.gqa_sdpa`) against an
   eager float32 reference, Qwen3-4B's heads (32 query, 8 key/value, dim 128), a mask with holes, for
   1 and 300 query tokens against 12,288 cached columns (2,048 in a dry run), float32 and bfloat16;
2. ``batched_greedy``: greedy replies of 4 branches decoded in one batch (with holes in the cache)
   equal the replies each branch gets alone (:class:`alfrl.agent.sampler.GroupSession`), tiny Qwen3, float32;
3. ``ppo_gradients``: one :func:`alfrl.rl.ppo.ppo_step` with a bfloat16 base and a float32 LoRA adapter on all
   seven projections: its LoRA gradients with gradient checkpointing on and off (cosine > 0.9999) and
   against a float32 copy of the same weights (cosine > 0.99); with truncated importance sampling at cap 2
   acting on half the tokens, the loss equals the one computed by hand (the TIS formula; the real gap between
   sampler and trainer is ``sampler_gap``'s);
4. ``train_resume``: ``alfrl.training.train`` for 2 updates with a tiny random Qwen3 model folder and the bundled
   tokenizer, and the same run stopped after update 1 and resumed: the same log;
5. ``update_4b`` and ``rollout_4b`` (:mod:`device_check_scale`): the reference preset's update on a random
   Qwen3-4B with rank-32 LoRA over 12K- and 6K-token trajectories, and an 8-branch rollout grown to about
   11.5K columns through uneven turns, PEFT against merged weights: seconds, tokens/s, peak memory (on a
   CPU only in a dry run, on a small shape), each under a stated memory and time ceiling on the GPU
   (``device_check_scale.REFERENCE``);
6. ``naive_gradient`` and ``sampler_gap`` (:mod:`device_check_truth`): the update's gradient against a loss written
   from scratch (full ``log_softmax``, gathered, masked mean; cosine > 0.9999) and a float64 finite difference; the
   sampler's logprobs at temperature 1 against the trainer's on its own output, on the 4B shape with a nonzero
   LoRA, with the TIS weights they would give, each against a stated limit. ``tests/test_device_check.py`` plants
   a shifted mask and a wrong temperature and sees each fail.

Exit code 0 when every check that ran is ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import time
from pathlib import Path

import torch
from device_check_scale import QWEN3_4B, REFERENCE, SMALL, check_rollout, check_train_resume, check_update
from device_check_truth import check_naive_gradient, check_sampler_gap
from device_shapes import TINY_QWEN3, peak_gb, qwen3, reset_peak, tiny_lora

TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}
"""Largest |difference| of attention outputs (values of order 0.1) allowed against the float32 reference."""


def check_attention(device: torch.device, columns: int) -> dict:
    from alfrl.agent.attention import gqa_sdpa

    module = type("Attention", (), {"num_key_value_groups": 4, "is_causal": True, "training": False})()
    g = torch.Generator(device="cpu").manual_seed(0)
    rows, heads, kv_heads, dim = 2, 32, 8, 128
    results = []
    for q_len in (1, 300):
        q = torch.randn(rows, heads, q_len, dim, generator=g)
        k, v = torch.randn(rows, kv_heads, columns, dim, generator=g), torch.randn(rows, kv_heads, columns, dim, generator=g)
        mask = torch.ones(rows, 1, q_len, columns, dtype=torch.bool)
        mask[1, :, :, columns // 3:columns // 3 + 200] = False  # a hole: pad columns of a branch that diverged
        mask[:, :, :, columns - q_len:] &= torch.ones(q_len, q_len, dtype=torch.bool).tril()  # causal over new tokens
        scores = (q @ k.repeat_interleave(4, 1).transpose(-1, -2)) / dim ** 0.5  # eager float32 reference
        reference = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v.repeat_interleave(4, 1)
        reference = reference.transpose(1, 2)
        for dtype in (torch.float32, torch.bfloat16):
            reset_peak(device)
            out, _ = gqa_sdpa(module, *(t.to(device, dtype) for t in (q, k, v)), mask.to(device), scaling=dim ** -0.5)
            diff = float((out.float().cpu() - reference).abs().max())
            name = str(dtype).removeprefix("torch.")
            results.append({"q": q_len, "columns": columns, "dtype": name, "max_abs_diff": diff,
                            "tolerance": TOLERANCE[name], "ok": diff <= TOLERANCE[name], "peak_gpu_gb": peak_gb(device)})
    return {"cases": results, "ok": all(r["ok"] for r in results)}


def check_batched_greedy(device: torch.device) -> dict:
    from alfrl.agent.sampler import GroupSession, SampleConfig

    model = qwen3(TINY_QWEN3, device, torch.float32)
    g = torch.Generator().manual_seed(1)
    first = {b: torch.randint(1, 512, (40 + 13 * b,), generator=g).tolist() for b in range(4)}
    extra = {b: torch.randint(1, 512, (5 + 7 * b,), generator=g).tolist() for b in range(4)}  # tool results
    cfg = SampleConfig(temperature=0.0, max_new_tokens=16)
    replies = {}
    for batched in (True, False):
        session = GroupSession(model, stop_ids=set(), seeds=[0, 1, 2, 3], pad_id=0, batched=batched)
        one = session.sample(first, cfg)
        two = session.sample({b: first[b] + one[b].tokens + extra[b] for b in first}, cfg)
        replies[batched] = {b: one[b].tokens + two[b].tokens for b in first}
    same = replies[True] == replies[False]
    return {"branches": 4, "turns": 2, "tokens_per_reply": 16, "equal": same, "ok": same}


SAMPLER_SHIFT = (-1.0, 0.3)
"""The sampler's logprobs, the trainer's minus these: the first trajectory's tokens get a TIS weight of e = 2.7
(capped at 2), the second's e^-0.3 = 0.74."""


def _gradients(model, config, device: torch.device) -> tuple[dict, dict, dict]:
    """One ppo_step on two 300-token trajectories (advantages +1 and -0.5): (metrics, LoRA gradients, the
    trainer's logprobs of the sampled tokens)."""
    from alfrl.agent.models import Policy
    from alfrl.rl.logprobs import sequence_logprobs
    from alfrl.rl.ppo import make_optimizer, ppo_step
    from alfrl.rl.trajectory import Trajectory

    trajectories, trainer = [], {}
    for i, (advantage, shift) in enumerate(zip((1.0, -0.5), SAMPLER_SHIFT)):
        tokens = torch.randint(1, TINY_QWEN3["vocab_size"], (300,), generator=torch.Generator().manual_seed(10 + i)).tolist()
        mask = [0] * 200 + [1] * 100
        with torch.no_grad():
            logp = sequence_logprobs(model, [tokens], masks=[mask])[0].float().cpu()
        trainer[i] = logp[torch.tensor(mask, dtype=torch.bool)]
        trajectories.append(Trajectory(game_id="g", task_type="t", branch=i, seed=i, tokens=tokens, mask=mask,
                                       logprobs=[(float(lp) + shift) * m for lp, m in zip(logp, mask)], turns=[],
                                       won=advantage > 0, steps=1, invalid=0, end_reason="won", prompt_tokens=200,
                                       prefilled=0, sampled=100, model_seconds=0.0, env_seconds=0.0,
                                       advantage=advantage))
    policy = Policy(model=model, tokenizer=None, name="tiny-qwen3")
    reset_peak(device)
    metrics = ppo_step(policy, make_optimizer(policy, config), trajectories, config, own_old=True)
    metrics["peak_gpu_gb"] = peak_gb(device)
    grads = {n: p.grad.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
    return metrics, grads, trainer


def _agreement(a: dict, b: dict) -> dict:
    """How alike two sets of gradients are: cosine of the flattened vectors, largest difference relative to b's largest."""
    x, y = torch.cat([a[n].flatten() for n in sorted(a)]), torch.cat([b[n].flatten() for n in sorted(b)])
    return {"cosine": float(torch.nn.functional.cosine_similarity(x, y, dim=0)),
            "max_rel_diff": float((x - y).abs().max() / y.abs().max())}


def check_ppo_gradients(device: torch.device) -> dict:
    """The update's gradients: with gradient checkpointing on and off (bfloat16 base), against a float32 copy of
    the same weights, and with truncated importance sampling at cap 2 acting (the loss by hand)."""
    from alfrl.rl.ppo import PPOConfig

    runs = {}
    for name, dtype, checkpointing, cap in (("bf16", torch.bfloat16, False, 0.0),
                                            ("bf16_checkpointing", torch.bfloat16, True, 0.0),
                                            ("fp32", torch.float32, False, 0.0), ("fp32_tis", torch.float32, False, 2.0)):
        config = PPOConfig(lr=1e-3, gradient_checkpointing=checkpointing, tis_cap=cap)
        runs[name] = _gradients(tiny_lora(device, dtype), config, device)
    checkpointing = _agreement(runs["bf16_checkpointing"][1], runs["bf16"][1])
    precision = _agreement(runs["bf16"][1], runs["fp32"][1])
    metrics, _, trainer = runs["fp32_tis"]
    weights = [torch.exp(-torch.full_like(trainer[i], shift)).clamp(max=2.0) for i, shift in enumerate(SAMPLER_SHIFT)]
    by_hand = float(-(1.0 * weights[0]).sum() - (-0.5 * weights[1]).sum()) / 200  # ratio 1: loss_t = -A w_t
    tis = {"loss": metrics["loss"], "loss_by_hand": by_hand, "tis_weight_mean": metrics["tis_weight_mean"],
           "tis_capped_fraction": metrics["tis_capped_fraction"]}
    ok = (checkpointing["cosine"] > 0.9999 and checkpointing["max_rel_diff"] < 1e-2 and precision["cosine"] > 0.99
          and abs(tis["loss"] - by_hand) < 1e-4 and abs(tis["tis_capped_fraction"] - 0.5) < 1e-6
          and all(r[0]["grad_norm"] > 0 for r in runs.values()))
    return {"checkpointing_on_vs_off": checkpointing, "bf16_vs_fp32": precision, "tis_cap_2": tis,
            "grad_norms": {name: r[0]["grad_norm"] for name, r in runs.items()},
            "peak_gpu_gb": {name: r[0]["peak_gpu_gb"] for name, r in runs.items()}, "ok": bool(ok)}


def checks_for(device: torch.device, dry_run: bool) -> dict:
    """Every check, by name, at its size: the reference run's on a GPU, small ones in a dry run."""

    scale = SMALL if dry_run else REFERENCE
    return {"attention": lambda: check_attention(device, 2048 if dry_run else 12288),
            "batched_greedy": lambda: check_batched_greedy(device),
            "ppo_gradients": lambda: check_ppo_gradients(device),
            "naive_gradient": lambda: check_naive_gradient(device),
            "sampler_gap": lambda: (check_sampler_gap(device, SMALL.shape, 4, 100, 24) if dry_run
                                    else check_sampler_gap(device, QWEN3_4B, 8, 1500, 256)),
            "train_resume": lambda: check_train_resume(device),
            "update_4b": lambda: check_update(device, scale),
            "rollout_4b": lambda: check_rollout(device, scale)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="device_check.json", help="the JSON report, rewritten after every check")
    parser.add_argument("--device", default="auto", help='"auto" (CUDA if there is one), "cuda", "cpu"')
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU-sized: 2,048 attention columns, a small Qwen3 shape for the 4B checks")
    parser.add_argument("--only", default=None, help="comma-separated checks to run (default: all); names: "
                        "attention, batched_greedy, ppo_gradients, naive_gradient, sampler_gap, train_resume, update_4b, "
                        "rollout_4b")
    args = parser.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    checks = checks_for(device, args.dry_run)
    wanted = args.only.split(",") if args.only else list(checks)
    unknown = [name for name in wanted if name not in checks]
    if unknown:
        parser.error(f"unknown check(s) {unknown}; choose from {', '.join(checks)}")
    import transformers
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
              or platform.machine(), "torch": torch.__version__, "transformers": transformers.__version__,
              "dry_run": args.dry_run, "checks": {}, "skipped": {}}
    if device.type != "cuda" and not args.dry_run:
        for name in ("update_4b", "rollout_4b"):
            if name in wanted:
                wanted.remove(name)
                report["skipped"][name] = "needs a CUDA GPU at full size (a random Qwen3-4B in bfloat16 is 8 GB); --dry-run runs it small"
    games = [m for m in ("textworld", "alfworld") if importlib.util.find_spec(m) is None]
    if games and "train_resume" in wanted:  # the GPU machine's image has neither: carry them as wheels (docs/gpu.md)
        wanted.remove("train_resume")
        report["skipped"]["train_resume"] = f"plays games: needs {' and '.join(games)}, not installed here"
    out, start = Path(args.out), time.perf_counter()
    report["ok"] = None  # until a check has run
    out.write_text(json.dumps(report, indent=1) + "\n")
    for name in wanted:
        tick = time.perf_counter()
        try:
            report["checks"][name] = checks[name]()
        except Exception as e:  # one broken check must not hide the others' results
            report["checks"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        report["checks"][name]["seconds_total"] = time.perf_counter() - tick
        report["ok"] = all(c["ok"] for c in report["checks"].values())
        report["seconds"] = time.perf_counter() - start
        out.write_text(json.dumps(report, indent=1) + "\n")  # as it goes: a run cut short keeps what it measured
        print(f"{name}: {'ok' if report['checks'][name]['ok'] else 'FAILED'} "
              f"({report['checks'][name]['seconds_total']:.1f} s)", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not report["checks"]:  # every check asked for was skipped: passed on a dry run, not a pass on the device
        report["ok"] = bool(args.dry_run)
        out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}; {'all checks ok' if report.get('ok') else 'SOME CHECKS FAILED'} in {report.get('seconds', 0):.0f} s; "
          f"skipped: {', '.join(report['skipped']) or 'none'}")
    raise SystemExit(0 if report.get("ok") else 1)


if __name__ == "__main__":
    main()
