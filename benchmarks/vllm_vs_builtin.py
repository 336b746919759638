"""Rollout engines side by side: the built-in KV-cached sampler against a vLLM server, in one run, on the
same groups (K branches of each game, the same seeds), with the first warm start (data/warmstart) on the bundled model.

Printed (and written with --out as Markdown): per engine, wall seconds, episodes per minute, sampled
tokens per second and wins; for vLLM also its start-up time (not in its rollout time: a trainer starts
it once). Needs the vLLM venv (`bash scripts/setup_vllm.sh`). Run it on an idle machine.

    python benchmarks/vllm_vs_builtin.py --games 2 --k 8 --threads 2 --out data/results/vllm_vs_builtin_cpu.md
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import replace
from pathlib import Path

import torch

from alfrl.agent.models import load_policy, resolve_adapter, resolve_model
from alfrl.agent.vllm_engine import VLLMConfig, VLLMEngine, VLLMServer, lora_rank
from alfrl.base.paths import REPO_ROOT
from alfrl.rl.rollout import RolloutConfig, rollout_group
from alfrl.world.games import load_games


def play(policy, games, config: RolloutConfig) -> dict:
    begin = time.perf_counter()
    groups = [rollout_group(policy, game, config) for game in games]
    wall = time.perf_counter() - begin
    episodes = [t for g in groups for t in g]
    sampled = sum(t.sampled for t in episodes)
    return {"wall": wall, "episodes": len(episodes), "sampled": sampled, "won": sum(t.won for t in episodes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=2, help="held-out small rooms, one group each")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vllm-threads", type=int, default=1,
                        help="OpenMP threads of vLLM's worker (its API server and engine core run beside it)")
    parser.add_argument("--out", help="write the table as Markdown here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    games = load_games("valid_unseen", str(REPO_ROOT / "data" / "heldout"))[:args.games]
    config = RolloutConfig(k=args.k, max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                           max_trajectory_tokens=4000, temperature=args.temperature, seed=0, workers=0)
    policy = load_policy("bundled", lora="warmstart_epoch")
    results = {"built-in sampler": play(policy, games, config)}
    tick = time.perf_counter()
    serving = VLLMConfig(max_model_len=4096, kv_cache_gb=2, threads=args.vllm_threads, max_num_seqs=args.k,
                         max_lora_rank=lora_rank(policy))
    with VLLMServer(resolve_model("bundled"), serving) as server:
        start = time.perf_counter() - tick
        engine = VLLMEngine(server.url)
        engine.load_adapter(resolve_adapter("warmstart_epoch"))
        play(replace(policy, engine=engine), games[:1], replace(config, k=1, max_steps=1))  # warm-up
        results["vLLM"] = play(replace(policy, engine=engine), games, config)
    lines = [f"{platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}; "
             f"{args.games} held-out games x K={args.k} at T={args.temperature}, {args.max_steps} steps, "
             f"{args.max_new_tokens} new tokens a reply; the first warm start on the bundled 135M model, float32",
             "", "| engine | seconds | episodes/min | sampled tokens/s | won |", "|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['wall']:.1f} | {60 * r['episodes'] / r['wall']:.1f} | "
                     f"{r['sampled'] / r['wall']:.0f} | {r['won']}/{r['episodes']} |")
    lines += ["", f"vLLM started in {start:.0f} s (once per training run; not in its row), its worker on "
              f"{args.vllm_threads} thread(s). The two engines draw from the same distributions with different "
              "random streams, so their episodes and wins differ; tests/test_vllm_real.py checks that greedy "
              "replies are equal and that the logprobs agree."]
    print("\n".join(lines))
    if args.out:
        command = (f"python benchmarks/vllm_vs_builtin.py --games {args.games} --k {args.k} "
                   f"--max-steps {args.max_steps} --max-new-tokens {args.max_new_tokens} "
                   f"--temperature {args.temperature} --threads {args.threads} "
                   f"--vllm-threads {args.vllm_threads} --out {args.out}")
        Path(args.out).write_text("\n".join(lines) + f"\n\nCommand: `{command}`\n")


if __name__ == "__main__":
    main()
