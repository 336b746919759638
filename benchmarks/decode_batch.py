"""What one decode step costs on this machine, by batch rows and history length, for the trained model
(float32 with its LoRA adapter) and for a merged sampling copy (``alfrl.agent.models.sampling_copy``).

Every row reads the same ``--context`` tokens once (the shared first prompt is read once and copied),
then all rows decode ``--steps`` tokens together.

    python benchmarks/decode_batch.py --context 1000 --rows 8 32 --variants lora bfloat16

Run it on an idle machine: two heavy jobs on 2 cores distort every figure.
"""

from __future__ import annotations

import argparse
import time

import torch

from alfrl.agent.models import DEFAULT_WARM_START, load_policy, sampling_copy
from alfrl.agent.sampler import SampleConfig, new_group_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=1000, help="history tokens per row")
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--steps", type=int, default=10, help="decode steps timed")
    parser.add_argument("--variants", nargs="+", default=["lora", "bfloat16"],
                        help='"lora" (the trained model) or a dtype for a merged sampling copy')
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(lora=DEFAULT_WARM_START)
    prompt = [1] + [200 + i % 1000 for i in range(args.context)]
    for name in args.variants:
        model = policy if name == "lora" else sampling_copy(policy, name)
        for rows in args.rows:
            session = new_group_session(model, list(range(rows)))
            tick = time.perf_counter()
            first = session.sample({b: prompt for b in range(rows)}, SampleConfig(max_new_tokens=1))
            prefill = time.perf_counter() - tick
            tick = time.perf_counter()
            session.sample({b: prompt + first[b].tokens + [300] for b in range(rows)},
                           SampleConfig(max_new_tokens=args.steps))
            step = (time.perf_counter() - tick) / args.steps
            print(f"{name:>9} rows {rows:>3} history {args.context}: prefill {prefill:5.2f} s, "
                  f"{step * 1000:4.0f} ms per decode step ({rows / step:5.1f} tokens/s)", flush=True)


if __name__ == "__main__":
    main()
