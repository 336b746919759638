"""One training update at the cpu preset, timed: rollout / logprob recompute / backward + optimizer step,
with peak memory (RSS) after each phase.

The rollout is real (for cpu the first warm start, ``data/warmstart``, as in the committed logs, plays
one update's groups). So that every trajectory trains whatever the rewards were, the update is timed
with advantages set to +1/-1 alternately, which costs exactly what a real update costs.

    python benchmarks/train_step.py
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from alfrl.agent.models import DEFAULT_WARM_START
from alfrl.rl.advantage import assign_advantages
from alfrl.rl.ppo import make_optimizer, ppo_step
from alfrl.rl.rollout import rollout_batch
from alfrl.training.train import games_for_update, load_for_training, preset, training_games


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--init-adapter", default=None,
                        help=f"the adapter to start from (default: the preset's, {DEFAULT_WARM_START} for cpu); the "
                             "committed cpu logs were measured from the first warm start, --init-adapter warmstart "
                             "once its weights are rebuilt (data/warmstart/README.md)")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None,
                        help="override the preset's setting")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {"init_adapter": args.init_adapter} if args.init_adapter else {}
    if args.gradient_checkpointing is not None:
        overrides["gradient_checkpointing"] = args.gradient_checkpointing
    config = preset(args.preset, **overrides)
    print(f"preset {args.preset}: {config.games_per_update} games x {config.k}, {config.max_steps} steps, "
          f"{config.max_new_tokens} new tokens per reply, LoRA rank {config.lora_rank}; {args.threads} threads; "
          f"gradient checkpointing {'on' if config.gradient_checkpointing else 'off'}")
    policy = load_for_training(config)  # the first warm start
    print(f"loaded: peak RSS {peak_rss_mb():.0f} MB")

    ppo = config.ppo()
    games = games_for_update(training_games(config), 1, config.games_per_update)
    tick = time.perf_counter()
    groups = rollout_batch(policy, games, config.rollout(1))
    rollout_s = time.perf_counter() - tick
    assign_advantages(groups, config.advantage())
    batch = [t for g in groups for t in g]
    for i, t in enumerate(batch):
        t.advantage = 1.0 if i % 2 == 0 else -1.0
    tokens = sum(len(t.tokens) for t in batch)
    trained = sum(sum(t.mask) for t in batch)
    print(f"rollout: {rollout_s:.1f} s for {len(batch)} trajectories ({tokens} tokens, {trained} sampled); "
          f"peak RSS {peak_rss_mb():.0f} MB")

    optimizer = make_optimizer(policy, ppo)
    tick = time.perf_counter()
    step = ppo_step(policy, optimizer, batch, ppo)  # the trainer's own step: forward, loss, backward, Adam
    step_s = time.perf_counter() - tick
    forward_s, backward_s = step["forward_seconds"], step["backward_seconds"]
    other_s = step_s - forward_s - backward_s
    print(f"logprob recompute (forward): {forward_s:.1f} s ({tokens / forward_s:.0f} tokens/s)")
    print(f"backward: {backward_s:.1f} s; the rest of the step (loss, clipping, Adam) {other_s:.2f} s; "
          f"peak RSS {peak_rss_mb():.0f} MB")
    total = rollout_s + step_s
    print(f"one update: {total:.1f} s = rollout {rollout_s / total:.0%}, recompute {forward_s / total:.0%}, "
          f"backward {(backward_s + other_s) / total:.0%}")


if __name__ == "__main__":
    main()
