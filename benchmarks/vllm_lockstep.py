"""Rows that do not wait for each other: vLLM rollouts with and without the per-turn barrier, in one run.

With the built-in sampler every live branch of a turn is decoded in one batch, so a turn lasts as long as its
longest reply and the game steps of all rows run while the model waits. vLLM's rows are independent: without
the barrier (the default, ``--sampler vllm``) each branch sends its next request as soon as its own game step
returns, and the server batches whatever is in flight. ``--vllm-lockstep`` keeps the barrier.

Both modes play the same groups against one server (the default warm start on the bundled model, the scale
preset's episodes: 10 turns, 48 tokens a reply, T 0.6, two groups of 8 decoded together), in the order ABBA
over rounds. The server's prefix cache is emptied before every play (its development endpoint
``/reset_prefix_cache``): the two modes play the same episodes, so a play after another would otherwise find
every one of its prompts cached. Each branch's requests carry the same seeds in both modes; the table says how
many episodes were identical token for token. Needs the vLLM venv (``bash scripts/setup_vllm.sh``); run it on an idle
machine.

    python benchmarks/vllm_lockstep.py --games 2 --rounds 2 --out data/results/vllm_lockstep_cpu.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from alfrl.agent.models import load_policy, resolve_adapter, resolve_model
from alfrl.agent.vllm_engine import VLLMConfig, VLLMEngine, VLLMServer, _post, lora_rank, missing_reason
from alfrl.base.paths import REPO_ROOT
from alfrl.rl.rollout import RolloutConfig, rollout_batch
from alfrl.world.games import load_games

ADAPTER = "warmstart_epoch"
MODES = {True: "per-turn barrier (--vllm-lockstep)", False: "no barrier (default)"}


def play(policy, games, config: RolloutConfig) -> dict:
    _post(policy.engine.url + "/reset_prefix_cache", {})
    begin = time.perf_counter()
    episodes = [t for group in rollout_batch(policy, games, config, progress=False) for t in group]
    return {"wall": time.perf_counter() - begin, "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=2, help="held-out small rooms, one group each")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--groups-per-batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="each mode plays the games once a round (ABBA order)")
    parser.add_argument("--threads", type=int, default=1, help="this process's torch threads")
    parser.add_argument("--vllm-threads", type=int, default=1, help="OpenMP threads of vLLM's worker")
    parser.add_argument("--out", help="write the table as Markdown here")
    args = parser.parse_args()
    if reason := missing_reason():
        sys.exit(f"vllm_lockstep: {reason}")
    torch.set_num_threads(args.threads)
    games = load_games("valid_unseen", str(REPO_ROOT / "data" / "heldout"))[:args.games]
    config = RolloutConfig(k=args.k, max_steps=10, max_new_tokens=48, max_trajectory_tokens=4000, temperature=0.6,
                           seed=0, workers=2, groups_per_batch=args.groups_per_batch)
    policy = load_policy("bundled", lora=ADAPTER)
    serving = VLLMConfig(max_model_len=4096 + 48, kv_cache_gb=2, threads=args.vllm_threads,
                         max_num_seqs=args.k * args.groups_per_batch, max_lora_rank=lora_rank(policy))
    runs: dict[bool, list[dict]] = {True: [], False: []}
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # the server inherits it: /reset_prefix_cache
    with VLLMServer(resolve_model("bundled"), serving) as server:
        engine = VLLMEngine(server.url)
        engine.load_adapter(resolve_adapter(ADAPTER))
        on_vllm = replace(policy, engine=engine)
        play(on_vllm, games[:1], replace(config, k=1, max_steps=1, groups_per_batch=1))  # warm-up
        for r in range(args.rounds):
            for lockstep in ((True, False) if r % 2 == 0 else (False, True)):
                runs[lockstep].append(play(on_vllm, games, replace(config, lockstep=lockstep)))
                print(f"round {r + 1}, {MODES[lockstep]}: {runs[lockstep][-1]['wall']:.1f} s", flush=True)
    n = len(games) * args.k
    same = sum(a.tokens == b.tokens for ra, rb in zip(runs[True], runs[False])
               for a, b in zip(ra["episodes"], rb["episodes"]))
    lines = [f"{platform.processor() or platform.machine()}, {args.threads} trainer thread(s), vLLM worker on "
             f"{args.vllm_threads} thread(s), torch {torch.__version__}; {args.games} held-out games x K={args.k}, "
             f"{args.groups_per_batch} groups decoded together, T 0.6, 10 turns, 48 tokens a reply; {ADAPTER} on "
             f"the bundled 135M model; {args.rounds} rounds, ABBA, the prefix cache emptied before each play", "",
             "| mode | seconds (each round) | episodes/min | sampled tokens/s | won |", "|---|---|---|---|---|"]
    for lockstep, rows in runs.items():
        wall = sum(r["wall"] for r in rows)
        episodes = [t for r in rows for t in r["episodes"]]
        rounds = " + ".join(f"{r['wall']:.1f}" for r in rows)
        lines.append(f"| {MODES[lockstep]} | {rounds} | "
                     f"{60 * len(episodes) / wall:.1f} | {sum(t.sampled for t in episodes) / wall:.0f} | "
                     f"{sum(t.won for t in episodes)}/{len(episodes)} |")
    free = sum(r["wall"] for r in runs[False])
    barred = sum(r["wall"] for r in runs[True])
    lines += ["", f"Without the barrier: {barred / free:.2f}x the episodes a minute. Episodes identical token for "
              f"token in the two modes (same round): {same}/{n * args.rounds}."]
    print("\n".join(lines))
    if args.out:
        command = "python benchmarks/vllm_lockstep.py " + shlex.join(sys.argv[1:])
        Path(args.out).write_text("\n".join(lines) + f"\n\nCommand: `{command}`\n")


if __name__ == "__main__":
    main()
