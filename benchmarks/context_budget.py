"""How many tokens a 50-step game takes under each action-list protocol, on ALFWorld's official games.

Every solvable official valid_seen game (``../shared/alfworld-real`` or ``$ALFWORLD_DATA``) is played once
in the real engine: the expert's walkthrough padded to 50 steps with search moves before it
(:func:`alfrl.rl.context.record_episode`). Each record is then rendered through the real rollout code under
each protocol (``--actions every|first|local``) with the bundled model's chat template, and the script
prints, per protocol: tokens a turn adds (median), tokens at step 50 (median and max over the games),
tokens prefilled per episode with the KV cache kept (each token once) and without it (every turn reads
the whole history again), and how many games overflow the model's 8,192 positions.

    python benchmarks/context_budget.py                      # all 140 games, ~15 min on one core
    python benchmarks/context_budget.py --games 10           # a quick look
    python benchmarks/context_budget.py --write              # also data/results/context_budget.{md,json}
    python benchmarks/context_budget.py --fixture tests/fixtures/largest_official_50steps.jsonl.xz

``--fixture`` keeps the record of the game with the most receptacles, for the test that a 50-step game of the
largest official room fits the default context. ``--play N`` also plays N of the games with the
default warm start at 50 steps under each protocol, decoded together, and prints episodes a minute (slow:
minutes a game; the warm start was trained in ``every``, so its play in the others is not what a warm start
trained in them would do).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from alfrl.agent.models import load_tokenizer
from alfrl.agent.protocol import ACTION_LISTS
from alfrl.base.paths import REPO_ROOT
from alfrl.rl.context import Episode, load_episodes, record_episode, render, save_episodes, turn_ends
from alfrl.world.env import GroupEnv
from alfrl.world.games import load_games, resolve_data_dir

WINDOW = 8192


def measure(tokenizer, episodes: list[Episode], actions: str) -> tuple[dict, dict[str, int]]:
    """Token figures of ``episodes`` rendered under ``actions``, and each game's tokens at its end."""
    at_end, per_turn, first, stateless = {}, [], [], []
    for e in episodes:
        t = render(tokenizer, e, actions)
        ends = turn_ends(t)
        at_end[e.game_id] = len(t.tokens)
        per_turn += [b - a for a, b in zip(ends, ends[1:])]
        first.append(t.prompt_tokens)
        # with the KV cache kept each token is read once; without it, turn i reads everything before its reply
        turn_starts = [t.prompt_tokens] + ends[:-1]
        stateless.append(sum(turn_starts) + sum(t.mask))
    ends_all = list(at_end.values())
    row = {"actions": actions, "games": len(episodes), "tokens_per_turn_median": statistics.median(per_turn),
           "first_prompt_median": statistics.median(first), "tokens_at_end_median": statistics.median(ends_all),
           "tokens_at_end_max": max(ends_all), "over_window": sum(n > WINDOW for n in ends_all),
           "prefilled_cached_median": statistics.median(ends_all),
           "prefilled_stateless_median": statistics.median(stateless)}
    return row, at_end


def play_speed(games: list, adapter: str, steps: int) -> str:
    """Play ``games`` once each under every protocol (the cpu preset's sampling: greedy here, 48 new tokens a
    reply, bfloat16 prefill where native) and tabulate episodes a minute and where the episodes ended."""
    from alfrl.agent.models import load_policy
    from alfrl.agent.precision import native_bf16_cpu
    from alfrl.rl.rollout import RolloutConfig, rollout_games
    policy = load_policy(lora=adapter)
    policy.model.eval()
    lines = [f"{len(games)} official games played together by {adapter}, greedy, at most {steps} steps, replies of "
             "at most 48 tokens, the window 8,192:", "",
             "| protocol | episodes a minute | won | steps (mean) | tokens at the end (max) | ended by the window |",
             "|---|---|---|---|---|---|"]
    for actions in ACTION_LISTS:
        config = RolloutConfig(k=len(games), max_steps=steps, max_trajectory_tokens=WINDOW, max_new_tokens=48,
                               temperature=0.0, workers=0, actions=actions,
                               prefill_dtype="bfloat16" if native_bf16_cpu() else None)
        start = time.perf_counter()
        with tqdm(desc=f"play --actions {actions}", unit="turn") as bar:
            played = rollout_games(policy, games, config, on_turn=lambda turn, live: bar.update())
        minutes = (time.perf_counter() - start) / 60
        print(f"--actions {actions}: {minutes:.1f} minutes", file=sys.stderr, flush=True)
        lines.append(f"| `{actions}` | {len(games) / minutes:.2f} | {sum(t.won for t in played)} | "
                     f"{statistics.mean(t.steps for t in played):.1f} | {max(len(t.tokens) for t in played)} | "
                     f"{sum(t.end_reason == 'max_tokens' for t in played)} |")
    return "\n".join(lines) + "\n"


def table(rows: list[dict], steps_median: float, n: int) -> str:
    lines = [f"Official valid_seen games: {n}, each its expert walkthrough padded to 50 steps with search moves "
             f"(median {steps_median:g} steps played). Bundled model's chat template (SmolLM2), "
             f"context window {WINDOW}.", "",
             "| protocol (`--actions`) | tokens a turn adds (median) | first prompt (median) | tokens at the end "
             "(median / max) | games over 8,192 | prefilled per episode, KV cache kept / without (median) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['actions']}` | {r['tokens_per_turn_median']:g} | {r['first_prompt_median']:g} | "
                     f"{r['tokens_at_end_median']:g} / {r['tokens_at_end_max']} | {r['over_window']} of {r['games']} | "
                     f"{r['prefilled_cached_median']:g} / {r['prefilled_stateless_median']:g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="official games (default: $ALFWORLD_DATA, else ../shared/alfworld-real)")
    ap.add_argument("--games", type=int, default=None, help="only the first N games (by game id)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--write", action="store_true", help="write data/results/context_budget.{md,json} (and, "
                    "with --play, context_budget_play.md)")
    ap.add_argument("--fixture", default=None, help="save the record of the game with the most receptacles here")
    ap.add_argument("--play", type=int, default=0, help="also play this many games (the first by game id) with "
                    "--adapter at 50 steps under each protocol, decoded together, and print episodes a minute")
    ap.add_argument("--adapter", default="warmstart_epoch", help="the adapter --play plays (default: the course's)")
    args = ap.parse_args()
    data_dir = args.data_dir or _official_dir()
    games = load_games("valid_seen", data_dir)[:args.games]
    tokenizer = load_tokenizer()
    cache = REPO_ROOT / f"runs/context_budget/episodes_{len(games)}_{args.steps}.jsonl.xz"
    if cache.is_file():  # the games are played once; rendering them again under a changed protocol is quick
        episodes = load_episodes(cache)
    else:
        start = time.perf_counter()
        with GroupEnv(k=1, max_steps=args.steps, workers=0) as env:
            episodes = [record_episode(game, steps=args.steps, env=env)
                        for game in tqdm(games, desc="play padded walkthroughs", unit="game")]
        save_episodes(episodes, cache)  # under runs/: official games stay out of the repository
        print(f"played {len(episodes)} games in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(f"won {sum(e.won for e in episodes)} of {len(episodes)} (the rest need more than {args.steps} expert steps); "
          f"invalid padding moves {sum(not s.admissible for e in episodes for s in e.steps)}", file=sys.stderr)
    measured = {a: measure(tokenizer, episodes, a) for a in ACTION_LISTS}
    rows = [measured[a][0] for a in ACTION_LISTS]
    steps_median = statistics.median(len(e.steps) for e in episodes)
    text = table(rows, steps_median, len(episodes))
    print(text)
    if args.write:
        out = REPO_ROOT / "data/results"
        (out / "context_budget.md").write_text(
            "# The context budget of a 50-step official game, by protocol\n\nMade by `python benchmarks/context_budget.py "
            "--write` (no model: the expert's tool calls as replies).\n\n" + text)
        (out / "context_budget.json").write_text(json.dumps(
            {"rows": rows, "steps_median": steps_median, "receptacles": {e.game_id: e.receptacles for e in episodes},
             "tokens_at_end": {a: measured[a][1] for a in ACTION_LISTS}}, indent=1))
    if args.play:
        speed = play_speed(load_games("valid_seen", data_dir)[:args.play], args.adapter, args.steps)
        print(speed)
        if args.write:
            (REPO_ROOT / "data/results/context_budget_play.md").write_text(
                f"# Episodes a minute at {args.steps} steps, by protocol\n\nMade by `python benchmarks/context_budget.py "
                f"--write --play {args.play} --steps {args.steps} --adapter {args.adapter}` on {cpu_name()}, "
                f"{torch.get_num_threads()} torch threads.\n\n"
                + speed)
    if args.fixture:
        largest = max(episodes, key=lambda e: (e.receptacles, e.game_id))
        save_episodes([largest], args.fixture)
        print(f"saved {largest.game_id} ({largest.receptacles} receptacles, {len(largest.steps)} steps) to {args.fixture}")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), with its core count and whether bfloat16 is native."""
    from alfrl.agent.precision import native_bf16_cpu
    try:
        name = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.machine()
    return f"{len(os.sched_getaffinity(0))}-core {name} ({'native' if native_bf16_cpu() else 'no native'} bfloat16)"


def _official_dir() -> Path:
    try:
        return resolve_data_dir(None if "ALFWORLD_DATA" in os.environ
                                else REPO_ROOT.parent / "shared/alfworld-real")
    except Exception as e:  # noqa: BLE001
        raise SystemExit(f"no official games found ({e}); pass --data-dir or set $ALFWORLD_DATA") from e


if __name__ == "__main__":
    main()
