"""Rollout speed: one group (K branches of one game) played end to end by the small model on the CPU.

Printed: wall time, trajectories per minute, sampled tokens per second, prefill
amplification (tokens each branch ran through the model / its final length; and the
batch's token columns, pad columns included, / all final tokens), and the env's share of
the wall time. With ``--compare`` the same group is also played one branch at a time.

    python benchmarks/rollout_speed.py --k 8 --max-steps 10 --max-new-tokens 64 --temperature 0.6 --variants lora float32 float32+bf16-prefill
"""

from __future__ import annotations

import argparse
import time

import torch

from alfrl.agent.models import load_policy, sampling_copy
from alfrl.agent.sampler import new_group_session
from alfrl.rl.rollout import RolloutConfig, branch_seed, rollout_group
from alfrl.world.games import load_games


def run(policy, game, config: RolloutConfig) -> dict:
    session = new_group_session(policy, [branch_seed(config.seed, game.game_id, b) for b in range(config.k)],
                                batched=config.batched)
    begin = time.perf_counter()
    group = rollout_group(policy, game, config, session=session)
    wall = time.perf_counter() - begin
    final = sum(len(t.tokens) for t in group)
    return {
        "wall": wall,
        "per_min": len(group) / wall * 60,
        "sampled_per_s": sum(t.sampled for t in group) / wall,
        "amplification": sum(t.prefilled + t.sampled for t in group) / final,
        "columns": session.forward_tokens / final,
        "model": sum(t.model_seconds for t in group),
        "env": sum(t.env_seconds for t in group),
        "turns": sum(t.steps for t in group),
        "final": final,
        "won": sum(t.won for t in group),
        "invalid": sum(t.invalid for t in group),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--game-index", type=int, default=0)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lora", default="warmstart_epoch", help='an adapter folder, "warmstart_epoch", or "none"')
    parser.add_argument("--variants", nargs="+", default=["lora"],
                        help='"lora" (the trained model as it is) and/or a dtype for a merged sampling copy '
                             '(alfrl.agent.models.sampling_copy), e.g. "float32"; "+bf16-prefill" added to either reads '
                             'prompts and tool results under bfloat16 autocast (RolloutConfig.prefill_dtype)')
    parser.add_argument("--compare", action="store_true", help="also play the group one branch at a time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    trained = load_policy(args.model, lora=None if args.lora == "none" else args.lora)
    game = load_games(args.split)[args.game_index]
    print(f"game {game.game_id} ({game.task_type}); K={args.k}, {args.max_steps} steps, up to "
          f"{args.max_new_tokens} new tokens per reply, temperature {args.temperature}, {args.threads} threads, "
          f"adapter {args.lora}\n")
    modes = (("batched", True), ("one by one", False)) if args.compare else (("batched", True),)
    for variant, (name, batched) in ((v, m) for v in args.variants for m in modes):
        weights, _, prefill = variant.partition("+")
        policy = trained if weights == "lora" else sampling_copy(trained, weights)
        name = (f"{name}, {'float32 + LoRA' if weights == 'lora' else f'merged {weights} copy'}"
                f"{', prompts read in bfloat16' if prefill else ''}")
        config = RolloutConfig(k=args.k, max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, batched=batched,
                               prefill_dtype="bfloat16" if prefill else None)
        r = run(policy, game, config)
        print(f"{name}: {r['wall']:.1f} s for {args.k} trajectories ({r['turns']} turns, {r['final']} tokens; "
              f"{r['won']} won, {r['invalid']} invalid replies)")
        print(f"  {r['per_min']:.1f} trajectories/min, {r['sampled_per_s']:.1f} sampled tokens/s")
        print(f"  prefill amplification {r['amplification']:.3f} per branch; batch columns / final tokens "
              f"{r['columns']:.3f} (shared prompt read once, pad columns counted)")
        print(f"  model {r['model']:.1f} s ({r['model'] / r['wall']:.0%}), env {r['env']:.2f} s "
              f"({r['env'] / r['wall']:.1%} of wall time)\n")


if __name__ == "__main__":
    main()
