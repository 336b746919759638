"""Is bfloat16 autocast fast on this CPU? The small model (with the shipped warm start's LoRA) reads a
sequence of random tokens in float32 and under bfloat16 autocast, with and without the backward pass,
each timed twice, alternating; prints the CPU's bfloat16 flags, the times and the ratios.

    python benchmarks/bf16_speed.py                 # 512 tokens, 2 threads
    python benchmarks/bf16_speed.py --tokens 2048

On a CPU with AVX512_BF16 or AMX autocast is faster (SFT measured about 1.7x); on an AVX2-only CPU PyTorch
emulates bfloat16 and it is far slower. alfrl.agent.precision turns the cpu preset's bfloat16 options on only
where the flags are there. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from alfrl.agent.models import load_policy
from alfrl.agent.precision import BF16_FLAGS, cpu_flags, native_bf16_cpu


def timed_pass(model, ids: torch.Tensor, bf16: bool, backward: bool) -> float:
    model.zero_grad(set_to_none=True)
    tick = time.perf_counter()
    with torch.set_grad_enabled(backward), torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
    if backward:
        loss.backward()
    return time.perf_counter() - tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flags = cpu_flags()
    print(f"CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, capability "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} threads")
    print(f"native bfloat16 flags ({', '.join(BF16_FLAGS)}): {sorted(flags & set(BF16_FLAGS)) or 'none'} "
          f"-> native_bf16_cpu() = {native_bf16_cpu()}")
    model = load_policy("bundled", lora="warmstart_epoch").model
    ids = torch.randint(100, 20_000, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    timed_pass(model, ids[:, :16], False, True)  # warm-up
    print(f"{args.tokens} tokens, seconds per pass (each timed {args.repeats} times, alternating):")
    for backward in (False, True):
        times = {False: [], True: []}
        for _ in range(args.repeats):
            for bf16 in (False, True):
                times[bf16].append(timed_pass(model, ids, bf16, backward))
        fp32, bf16 = min(times[False]), min(times[True])
        what = "forward + backward" if backward else "forward (no grad)"
        print(f"  {what:<19} float32 {fp32:7.2f} s   bf16 autocast {bf16:7.2f} s   bf16 / float32 = "
              f"{bf16 / fp32:.2f}")


if __name__ == "__main__":
    main()
