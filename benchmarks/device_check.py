"""The GPU path, checked on a GPU machine in one run of a few minutes, offline, with nothing to download.

    python benchmarks/device_check.py --out device_check.json      # on a machine with a CUDA GPU
    python benchmarks/device_check.py --out dry.json --dry-run     # on a CPU: the same checks, smaller

No model weights are needed: every model is built from a config with random weights (a tiny
Qwen3-architecture model, and Qwen3-4B's real shape for the timings), so the checks run where only
this repository can be copied. What it checks, each with its numbers and ``ok`` in the JSON report:

1. ``attention``: the sampler's grouped-query attention (:func:`alfrl.attention.gqa_sdpa`) against an
   eager float32 reference, Qwen3-4B's heads (32 query, 8 key/value, dim 128), a mask with holes, for
   1 and 300 query tokens against 12,288 cached columns (2,048 in a dry run), float32 and bfloat16;
2. ``batched_greedy``: greedy replies of 4 branches decoded in one batch (with holes in the cache)
   equal the replies each branch gets alone (:class:`alfrl.sampler.GroupSession`), tiny Qwen3, float32;
3. ``ppo_step``: one :func:`alfrl.ppo.ppo_step` with a bfloat16 base and a float32 LoRA adapter, gradient
   checkpointing off and on: a finite loss, a gradient, LoRA weights that move, the same loss both ways;
4. ``decode_4b`` (CUDA only): a random Qwen3-4B in bfloat16 samples 64 tokens after a 1,024-token prompt
   for 8, 32 and 64 rows through the course's sampler: seconds, sampled tokens/s, peak memory;
5. peak GPU memory of each check (``torch.cuda.max_memory_allocated``).

Exit code 0 when every check that ran is ok, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
"""Qwen/Qwen3-4B's config.json, the fields that size it."""
TINY_QWEN3 = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True)
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}
"""Largest |difference| of attention outputs (values of order 0.1) allowed against the float32 reference."""


def peak_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def qwen3(shape: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A Qwen3 causal LM of ``shape`` with random weights, built on ``device`` in ``dtype``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    config = Qwen3Config(**shape, attn_implementation="sdpa")
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def check_attention(device: torch.device, columns: int) -> dict:
    from alfrl.attention import gqa_sdpa

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
    from alfrl.sampler import GroupSession, SampleConfig

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


def check_ppo_step(device: torch.device) -> dict:
    from peft import LoraConfig, get_peft_model

    from alfrl.models import Policy
    from alfrl.ppo import PPOConfig, make_optimizer, ppo_step, sequence_logprobs
    from alfrl.trajectory import Trajectory

    runs = {}
    for checkpointing in (False, True):
        base = qwen3(TINY_QWEN3, device, torch.bfloat16)
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                                task_type="CAUSAL_LM"))
        lora_dtypes = sorted({str(p.dtype) for p in model.parameters() if p.requires_grad})
        torch.manual_seed(3)
        for name, p in model.named_parameters():  # LoRA B starts at 0: move it so the gradient reaches A too
            if "lora_B" in name:
                p.data.normal_(0, 0.02)
        trajectories = []
        for i, advantage in enumerate((1.0, -0.5)):  # a loss of -0.25 at ratio 1
            tokens = torch.randint(1, 512, (300,), generator=torch.Generator().manual_seed(10 + i)).tolist()
            mask = [0] * 200 + [1] * 100
            with torch.no_grad():
                logp = sequence_logprobs(model, [tokens])[0].float().tolist()
            trajectories.append(Trajectory(game_id="g", task_type="t", branch=i, seed=i, tokens=tokens, mask=mask,
                                           logprobs=[lp * m for lp, m in zip(logp, mask)], turns=[], won=advantage > 0,
                                           steps=1, invalid=0, end_reason="won", prompt_tokens=200, prefilled=0,
                                           sampled=100, model_seconds=0.0, env_seconds=0.0, advantage=advantage))
        config = PPOConfig(lr=1e-3, gradient_checkpointing=checkpointing)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        reset_peak(device)
        metrics = ppo_step(Policy(model=model, tokenizer=None, name="tiny-qwen3"), make_optimizer(
            Policy(model=model, tokenizer=None, name="tiny-qwen3"), config), trajectories, config, own_old=True)
        moved = max(float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters() if p.requires_grad)
        runs["on" if checkpointing else "off"] = {
            "loss": metrics["loss"], "grad_norm": metrics["grad_norm"], "lora_max_change": moved,
            "lora_dtypes": lora_dtypes, "sampler_abs_logprob_diff": metrics.get("sampler_abs_logprob_diff"), "peak_gpu_gb": peak_gb(device)}
    off, on = runs["off"], runs["on"]
    finite = all(torch.isfinite(torch.tensor([r["loss"], r["grad_norm"]])).all() for r in runs.values())
    ok = (finite and all(r["grad_norm"] > 0 and r["lora_max_change"] > 0 for r in runs.values())
          and abs(off["loss"] - on["loss"]) <= 1e-3 * max(1.0, abs(off["loss"]))
          and all(d == ["torch.float32"] for d in (off["lora_dtypes"], on["lora_dtypes"])))
    return {"gradient_checkpointing": runs, "ok": bool(ok)}


def check_decode_4b(device: torch.device, rows_list=(8, 32, 64), prompt: int = 1024, new: int = 64) -> dict:
    from alfrl.sampler import GroupSession, SampleConfig

    tick = time.perf_counter()
    model = qwen3(QWEN3_4B, device, torch.bfloat16)
    built = time.perf_counter() - tick
    g = torch.Generator().manual_seed(4)
    timings = []
    for rows in rows_list:
        prompts = {b: torch.randint(1, 150_000, (prompt,), generator=g).tolist() for b in range(rows)}
        session = GroupSession(model, stop_ids=set(), seeds=list(range(rows)), pad_id=0)
        reset_peak(device)
        torch.cuda.synchronize(device)
        tick = time.perf_counter()
        samples = session.sample(prompts, SampleConfig(temperature=1.0, max_new_tokens=new))
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - tick
        sampled = sum(len(s.tokens) for s in samples.values())
        timings.append({"rows": rows, "prompt_tokens": prompt, "new_tokens": new, "seconds": seconds,
                        "sampled_tokens_per_s": sampled / seconds, "peak_gpu_gb": peak_gb(device)})
        del session, samples
        torch.cuda.empty_cache()
    return {"parameters_b": sum(p.numel() for p in model.parameters()) / 1e9, "build_seconds": built,
            "timings": timings, "ok": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="device_check.json", help="the JSON report")
    parser.add_argument("--device", default="auto", help='"auto" (CUDA if there is one), "cuda", "cpu"')
    parser.add_argument("--dry-run", action="store_true", help="CPU-sized: 2,048 attention columns, no 4B timings")
    args = parser.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    import transformers
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
              or platform.machine(), "torch": torch.__version__, "transformers": transformers.__version__,
              "dry_run": args.dry_run, "checks": {}, "skipped": {}}
    checks = {"attention": lambda: check_attention(device, 2048 if args.dry_run else 12288),
              "batched_greedy": lambda: check_batched_greedy(device),
              "ppo_step": lambda: check_ppo_step(device)}
    if device.type == "cuda" and not args.dry_run:
        checks["decode_4b"] = lambda: check_decode_4b(device)
    else:
        report["skipped"]["decode_4b"] = "needs a CUDA GPU (a random Qwen3-4B in bfloat16 is 8 GB)"
    for name, check in checks.items():
        tick = time.perf_counter()
        try:
            report["checks"][name] = check()
        except Exception as e:  # one broken check must not hide the others' results
            report["checks"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        report["checks"][name]["seconds"] = time.perf_counter() - tick
        print(f"{name}: {'ok' if report['checks'][name]['ok'] else 'FAILED'} "
              f"({report['checks'][name]['seconds']:.1f} s)", flush=True)
    report["ok"] = all(c["ok"] for c in report["checks"].values())
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}; {'all checks ok' if report['ok'] else 'SOME CHECKS FAILED'}; skipped: "
          f"{', '.join(report['skipped']) or 'none'}")
    raise SystemExit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
