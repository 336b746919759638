"""Does padding sequences into one micro-batch pay on a CPU? The fine-tune's loss and gradient on real expert
trajectories, once with pairs of them padded into one forward/backward pass (``--micro-batch-tokens 4096``,
the default) and once with each sequence alone (``--micro-batch-tokens 1``): seconds, tokens and the loss.

    python benchmarks/sft_padding.py                      # 4 trajectories, bf16 and float32, 2 threads
    python benchmarks/sft_padding.py --threads 1 --precisions bf16

The trajectories are the expert's walkthroughs of the shortest data/expert games (under 2,048 tokens, so
the default pairs them), rendered by the real rollout code (alfrl.imitation.sft.expert_trajectories). Run it on an
idle machine.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from alfrl.agent.models import load_policy
from alfrl.base.paths import REPO_ROOT
from alfrl.imitation.sft import SFTConfig, expert_trajectories, nll_loss
from alfrl.rl.ppo import micro_batches
from alfrl.world.games import load_games


def timed(model, trajectories, micro_batch_tokens: int, bf16: bool) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    tick = time.perf_counter()
    loss, _ = nll_loss(model, trajectories, micro_batch_tokens, bf16=bf16)
    return time.perf_counter() - tick, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["bf16", "float32"], choices=["bf16", "float32"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy("bundled", lora="warmstart_epoch")
    games = [g for g in load_games("train", str(REPO_ROOT / "data" / "expert"), seed=0) if 6 <= len(g.walkthrough) <= 8]
    trajectories = [t for t in expert_trajectories(policy, games[:3 * args.trajectories], SFTConfig(), progress=False)
                    if len(t.tokens) <= 2048][:args.trajectories]
    pairs = micro_batches(trajectories, 4096)
    tokens = sum(len(t.tokens) for t in trajectories)
    padded = sum(len(b) * max(len(t.tokens) for t in b) for b in pairs)
    print(f"{platform.machine()}, torch {torch.__version__}, {args.threads} threads; {len(trajectories)} expert "
          f"trajectories of {sorted(len(t.tokens) for t in trajectories)} tokens ({tokens} in all); "
          f"--micro-batch-tokens 4096 runs them as {len(pairs)} padded passes of {padded} tokens")
    print("| precision | micro-batches | passes | seconds | tokens/s | loss |")
    print("|---|---|---|---|---|---|")
    policy.model.train()
    timed(policy.model, trajectories[:1], 1, False)  # warm-up
    for precision in args.precisions:
        bf16 = precision == "bf16"
        for name, size, passes in (("padded pairs (4096)", 4096, len(pairs)), ("one sequence each (1)", 1,
                                                                              len(trajectories))):
            seconds, loss = timed(policy.model, trajectories, size, bf16)
            print(f"| {precision} | {name} | {passes} | {seconds:.1f} | {tokens / seconds:.0f} | {loss:.5f} |",
                  flush=True)


if __name__ == "__main__":
    main()
