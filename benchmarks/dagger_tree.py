"""What DAgger's fine-tune costs with each episode run once (its branches reading its keys and values,
``alfrl.imitation.sft.tree_nll``) against every branch run with its whole history: tokens run and seconds for the
forward and backward pass, on real episodes. Run it on an idle machine.

    python benchmarks/dagger_tree.py                      # 8 lost warm-start episodes, bf16 and float32
    python benchmarks/dagger_tree.py --episodes 4 --no-bf16

The episodes are the warm start's own (``data/results/cpu_T0.6_keepwin_trajectories.jsonl.xz``: 10-step
episodes of generated train games, T=0.6), lost ones first, each labelled by the expert driven along
its actions (``alfrl.imitation.dagger.expert_labels``) and made into one example with at most ``--max-branches``
branches, as a DAgger round makes them. The same examples go through ``alfrl.imitation.sft.nll_loss`` both ways,
one example a step, as a fine-tune does; the loss of the two ways is printed beside the times.
"""

from __future__ import annotations

import argparse
import json
import lzma
import platform
import time

import torch

from alfrl.agent.models import load_policy
from alfrl.agent.protocol import ChatFormat
from alfrl.base.paths import REPO_ROOT
from alfrl.imitation.dagger import dagger_examples, expert_labels
from alfrl.imitation.sft import nll_loss
from alfrl.rl.prefix import can_share
from alfrl.rl.trajectory import Trajectory
from alfrl.world.games import load_games

EPISODES = REPO_ROOT / "data" / "results" / "cpu_T0.6_keepwin_trajectories.jsonl.xz"


def trees(fmt: ChatFormat, episodes: int, max_branches: int) -> list:
    with lzma.open(EPISODES, "rt") as f:
        played = [Trajectory.from_json(line) for line in f if line.strip()]
    played.sort(key=lambda t: (t.won, t.game_id, t.branch))  # lost first: the states DAgger is for
    games = {g.game_id: g for g in load_games("train")}
    out, seen = [], set()
    for t in played:
        if t.game_id in seen or t.game_id not in games:
            continue
        seen.add(t.game_id)
        labels = expert_labels(games[t.game_id].path, [turn.action for turn in t.turns])
        out += dagger_examples(t, labels, fmt, max_branches=max_branches)
        if len(out) == episodes:
            return out
    return out


def tokens_run(example, shared: bool) -> int:
    if shared:
        return len(example.tokens) + sum(len(b.target) for b in example.branches)
    return sum(len(s.tokens) for s in example.sequences())


def timed(model, examples: list, shared: bool, bf16: bool) -> tuple[float, float]:
    """(seconds, mean loss) of one forward and backward pass per example."""
    losses, seconds = [], 0.0
    for example in examples:
        model.zero_grad(set_to_none=True)
        tick = time.perf_counter()
        loss, _ = nll_loss(model, [example], bf16=bf16, share_prefix=shared)
        seconds += time.perf_counter() - tick
        losses.append(loss)
    return seconds, sum(losses) / len(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-branches", type=int, default=8)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                        help="also time bfloat16 autocast (fast only on a CPU with native bf16)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy("bundled", lora="warmstart_epoch")
    fmt = ChatFormat(policy.tokenizer)
    examples = trees(fmt, args.episodes, args.max_branches)
    assert can_share(policy.model)
    policy.model.train()
    targets = sum(e.target_tokens for e in examples)
    branches = sum(len(e.branches) for e in examples)
    print(f"{len(examples)} episodes, {branches} branches, {targets} target tokens; "
          f"{platform.processor() or platform.machine()}, {args.threads} threads")
    timed(policy.model, examples[:1], True, False)  # warm-up
    print("\n| precision | way | tokens run | seconds | target tokens/s | loss |\n|---|---|---|---|---|---|")
    for bf16 in (False, True) if args.bf16 else (False,):
        for shared in (False, True):
            seconds, loss = timed(policy.model, examples, shared, bf16)
            way = "tree: each episode once" if shared else "each branch with its history"
            print(f"| {'bf16' if bf16 else 'float32'} | {way} | {sum(tokens_run(e, shared) for e in examples)} | "
                  f"{seconds:.1f} | {targets / seconds:.0f} | {loss:.5f} |", flush=True)
    print("\n" + json.dumps({"episodes": len(examples), "branches": branches, "target_tokens": targets}))


if __name__ == "__main__":
    main()
