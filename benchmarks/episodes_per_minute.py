"""Episodes per minute of one training update, the cpu preset's settings before and after the speed work,
side by side in one run: rollout / logprob recompute (forward) / backward, and the sampler/trainer ratio
drift before the first step.

Each variant loads the first warm start (``data/warmstart``, the policy the committed logs were measured
with; ``--set init_adapter=warmstart_epoch`` in a variant starts from the default one), plays one
update's groups of the same games, and trains on every trajectory (advantages set to +1/-1
alternately, so an update costs what a real one costs whatever the rewards were).

    python benchmarks/episodes_per_minute.py                       # before vs the cpu preset now
    python benchmarks/episodes_per_minute.py --set bf16=false      # add a variant: the preset with overrides
    python benchmarks/episodes_per_minute.py --set "draft_tokens=0 plain_attention=true"  # the preset without the decode work
    python benchmarks/episodes_per_minute.py --set "sample_dtype=None prefill_dtype=None"   # rollouts with the LoRA model, float32
    python benchmarks/episodes_per_minute.py --set share_prefix=false   # every branch's prompt run in full

Run it on an idle machine: two heavy jobs on 2 cores distort every figure.
"""

from __future__ import annotations

import argparse
import ast
import time
from dataclasses import replace

import torch

import alfrl.agent.attention
from alfrl.agent.models import DEFAULT_WARM_START
from alfrl.rl.ppo import make_optimizer, ppo_update, summarize_steps
from alfrl.training.train import load_for_training, play_update, preset, training_games

BEFORE = dict(games_per_update=2, k=4, groups_per_batch=2, max_steps=10, max_new_tokens=48,
              max_trajectory_tokens=4000, bf16=False, gradient_checkpointing=True, old_logprobs="sampler",
              minibatches=1, dynamic_sampling=False, temperature=1.0, sample_dtype=None, prefill_dtype=None,
              draft_tokens=0, share_prefix=False, workers=2)
"""The cpu preset before this benchmark existed (the settings of data/results/cpu_seed*_metrics.jsonl: games
stepped by 2 worker processes), with the sampler's plain sdpa attention (alfrl.agent.attention.ENABLED = False)."""
PLAIN_ATTENTION = "plain_attention"
"""A --set key of this script only: plain_attention=true runs that variant's rollouts with transformers' sdpa."""


def parse_overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def one_update(name: str, config, plain_attention: bool = False) -> dict:
    alfrl.agent.attention.ENABLED = not plain_attention
    policy = load_for_training(config)
    games = training_games(config)
    tick = time.perf_counter()
    _, played = play_update(policy, replace(config, dynamic_sampling=False), games, step=1, cursor=0, progress=False)
    rollout = time.perf_counter() - tick
    batch = [t for g in played for t in g]
    for i, t in enumerate(batch):
        t.advantage = 1.0 if i % 2 == 0 else -1.0
    ppo = config.ppo()
    tick = time.perf_counter()
    steps = ppo_update(policy, make_optimizer(policy, ppo), batch, ppo)
    update = time.perf_counter() - tick
    s = summarize_steps(steps, ppo.epochs)
    forward = s["forward_seconds"] + s.get("recompute_seconds", 0.0)
    return {"variant": name, "episodes": len(batch), "rollout_s": rollout, "forward_s": forward,
            "backward_s": update - forward, "total_s": rollout + update,
            "episodes_per_min": 60 * len(batch) / (rollout + update),
            "tokens": sum(len(t.tokens) for t in batch), "sampled": sum(t.sampled for t in batch),
            "update_tokens": s["tokens_run"],
            "wins": sum(t.won for t in batch), "ratio_drift": (s.get("sampler_ratio_min"), s.get("sampler_ratio_mean"),
                                                             s.get("sampler_ratio_max"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--init-adapter", default=None,
                        help=f"the adapter to start from (default: the preset's, {DEFAULT_WARM_START} for cpu); the "
                             "committed cpu logs were measured from the first warm start, --init-adapter warmstart "
                             "once its weights are rebuilt (data/warmstart/README.md)")
    parser.add_argument("--set", nargs="*", default=[], metavar='"KEY=VALUE ..."',
                        help="extra variants, one per argument: the preset with these overrides "
                             f"(and {PLAIN_ATTENTION}=true: plain sdpa attention in the sampler)")
    parser.add_argument("--skip-before", action="store_true", help="do not run the old settings")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    first = {"init_adapter": args.init_adapter} if args.init_adapter else {}
    variants = [] if args.skip_before else [("before", preset(args.preset, **first, **BEFORE), True)]
    variants.append(("now: " + args.preset, preset(args.preset, **first), False))
    for extra in args.set:
        overrides = parse_overrides(extra.split())
        plain = bool(overrides.pop(PLAIN_ATTENTION, False))
        variants.append((extra, preset(args.preset, **{**first, **overrides}), plain))
    rows = []
    for name, config, plain in variants:
        print(f"{name}: {config.games_per_update} games x {config.k}, {config.groups_per_batch} groups per decode "
              f"batch, T={config.temperature}, bf16={config.bf16}, gradient checkpointing "
              f"{config.gradient_checkpointing}, old logprobs from the {config.old_logprobs}, sampling copy "
              f"{config.sample_dtype}, prefill autocast {config.prefill_dtype}, draft tokens {config.draft_tokens}, "
              f"shared prefix in the update {config.share_prefix and not config.gradient_checkpointing}, "
              f"{'plain sdpa' if plain else 'grouped-query'} attention in the sampler", flush=True)
        rows.append(one_update(name, config, plain))
        r = rows[-1]
        print(f"  {r['episodes']} episodes ({r['tokens']} tokens, {r['sampled']} sampled, {r['wins']} won; "
              f"{r['update_tokens']} run through the update): "
              f"rollout {r['rollout_s']:.0f} s, recompute {r['forward_s']:.0f} s, backward {r['backward_s']:.0f} s "
              f"-> {r['episodes_per_min']:.2f} episodes/min; sampler/trainer ratio before the first step "
              f"min/mean/max {r['ratio_drift']}", flush=True)
    print(f"\n{'variant':<28} {'episodes':>8} {'rollout s':>9} {'recompute s':>11} {'backward s':>10} "
          f"{'episodes/min':>12}")
    for r in rows:
        print(f"{r['variant']:<28} {r['episodes']:>8} {r['rollout_s']:>9.0f} {r['forward_s']:>11.0f} "
              f"{r['backward_s']:>10.0f} {r['episodes_per_min']:>12.2f}")
    if len(rows) > 1:
        print(f"\nspeed-up of '{rows[1]['variant']}' over '{rows[0]['variant']}': "
              f"{rows[1]['episodes_per_min'] / rows[0]['episodes_per_min']:.1f}x")


if __name__ == "__main__":
    main()
