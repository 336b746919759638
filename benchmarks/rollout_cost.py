"""Rollout cost: a stateless loop (re-read the whole prompt every turn) vs the KV-cached sampler.

Both play the same multi-turn conversation with the small model, greedily: the model's
replies are sampled, while the game is driven by the expert's walkthrough (then "look")
so both loops see exactly the same real observations. Printed: prefill amplification
(tokens run through the model / final trajectory tokens), tokens per second, wall time,
and whether both produced identical tokens.

Then a group: K branches sampled at temperature 1 (one seed each) over the same scripted
observations, decoded one branch at a time vs batched in one ``GroupSession``.

    python benchmarks/rollout_cost.py --turns 20 --max-new-tokens 48 --group 8 --group-turns 10
"""

from __future__ import annotations

import argparse
import time

import torch

from alfrl.agent.models import load_policy
from alfrl.agent.protocol import EXECUTED, COMPLETED, ChatFormat, build_next_prompt, tool_result_message
from alfrl.agent.sampler import SampleConfig, new_group_session, new_session
from alfrl.world.engine import make_fast_engine
from alfrl.world.games import load_games


def game_turns(game, turns: int) -> list[tuple[str, str, list[str]]]:
    """(status, observation, admissible) after each of ``turns`` scripted commands."""
    engine = make_fast_engine()
    engine.load(str(game.path))
    state = engine.reset()
    commands = list(game.walkthrough[:turns]) + ["look"] * max(0, turns - len(game.walkthrough))
    out = []
    for command in commands:
        if state["won"]:
            command = "look"
        state, _, _ = engine.step(command)
        out.append((COMPLETED if state["won"] else EXECUTED, state["feedback"], list(state["admissible_commands"])))
    return out


def play(policy, fmt: ChatFormat, game, start, turns_data, cfg: SampleConfig, cached: bool):
    task = start["task"]
    history = fmt.messages(task, start["obs"], start["admissible"])
    prompt = fmt.initial_prompt(task, start["obs"], start["admissible"])
    session = new_session(policy)
    read, replies = 0, []
    begin = time.perf_counter()
    for status, obs, admissible in turns_data:
        if not cached:
            session = new_session(policy)  # the stateless loop: a fresh cache, the whole prompt again
        before = session.tokens_read
        sample = session.sample(prompt, cfg)
        read += session.tokens_read - before
        replies.append(sample.tokens)
        text = policy.tokenizer.decode(sample.tokens, skip_special_tokens=True)
        history = history + [{"role": "assistant", "content": text}]
        result = tool_result_message(status, obs, admissible)
        prompt = build_next_prompt(fmt, prompt, sample.tokens, history, result)
        history = history + [{"role": fmt.tool_role, "content": result}]
    seconds = time.perf_counter() - begin
    sampled = sum(len(r) for r in replies)
    return {"read": read, "final": len(prompt), "sampled": sampled, "seconds": seconds, "replies": replies}


def play_group(policy, fmt: ChatFormat, start, turns_data, cfg: SampleConfig, k: int, batched: bool):
    """K branches, one seed each, through the same scripted observations; returns time and token counts."""
    session = new_group_session(policy, seeds=list(range(k)), batched=batched)
    prompt0 = fmt.initial_prompt(start["task"], start["obs"], start["admissible"])
    prompts = {b: prompt0 for b in range(k)}
    history = {b: fmt.messages(start["task"], start["obs"], start["admissible"]) for b in range(k)}
    sampled = 0
    begin = time.perf_counter()
    for status, obs, admissible in turns_data:
        samples = session.sample(prompts, cfg)
        result = tool_result_message(status, obs, admissible)
        for b, sample in samples.items():
            sampled += len(sample.tokens)
            text = policy.tokenizer.decode(sample.tokens, skip_special_tokens=True)
            history[b] = history[b] + [{"role": "assistant", "content": text}]
            prompts[b] = build_next_prompt(fmt, prompts[b], sample.tokens, history[b], result)
            history[b] = history[b] + [{"role": fmt.tool_role, "content": result}]
    seconds = time.perf_counter() - begin
    final = sum(len(p) for p in prompts.values())
    return {"seconds": seconds, "sampled": sampled, "final": final, "columns": session.forward_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group", type=int, default=8, help="branches in the group comparison (0 = skip it)")
    parser.add_argument("--group-turns", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    policy = load_policy(args.model)
    fmt = ChatFormat(policy.tokenizer)
    game = max(load_games(args.split)[:40], key=lambda g: len(g.walkthrough))
    engine = make_fast_engine()
    engine.load(str(game.path))
    state = engine.reset()
    start = {"task": game.goal, "obs": state["feedback"], "admissible": list(state["admissible_commands"])}
    turns_data = game_turns(game, args.turns)
    cfg = SampleConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    print(f"game {game.game_id} ({game.task_type}), {args.turns} turns, up to {args.max_new_tokens} new tokens "
          f"per turn, greedy, {args.threads} threads\n")
    results = {}
    for name, cached in (("stateless", False), ("cached", True)):
        r = play(policy, fmt, game, start, turns_data, cfg, cached)
        results[name] = r
        print(f"{name:>9}: read {r['read']:>7} tokens for a {r['final']}-token trajectory: amplification "
              f"{r['read'] / r['final']:5.2f}; {r['sampled']} sampled; {r['seconds']:6.1f} s; "
              f"{r['read'] / r['seconds']:7.0f} tokens read/s; {r['sampled'] / r['seconds']:5.1f} sampled tokens/s")
    same = results["stateless"]["replies"] == results["cached"]["replies"]
    speedup = results["stateless"]["seconds"] / results["cached"]["seconds"]
    print(f"\ncached is {speedup:.1f}x faster; identical greedy tokens: {'yes' if same else 'NO'}")
    if not same:
        first = next(i for i, (a, b) in enumerate(zip(results["stateless"]["replies"], results["cached"]["replies"]))
                     if a != b)
        print(f"first difference at turn {first}")

    if args.group:
        sampling = SampleConfig(temperature=1.0, max_new_tokens=args.max_new_tokens)
        print(f"\ngroup of {args.group} branches, {args.group_turns} turns, temperature 1, same observations:")
        timing = {}
        for name, batched in (("one by one", False), ("batched", True)):
            r = play_group(policy, fmt, start, turns_data[:args.group_turns], sampling, args.group, batched)
            timing[name] = r["seconds"]
            print(f"{name:>10}: {r['seconds']:6.1f} s; {r['sampled']} sampled tokens, "
                  f"{r['sampled'] / r['seconds']:5.1f} sampled tokens/s; {r['columns']} token columns run for "
                  f"{r['final']} trajectory tokens (amplification {r['columns'] / r['final']:.2f})")
        print(f"batched decode is {timing['one by one'] / timing['batched']:.1f}x faster for the group")


if __name__ == "__main__":
    main()
