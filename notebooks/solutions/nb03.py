"""Worked solutions of notebook 03's exercises (checked by tests/test_exercises_nb03.py)."""

from __future__ import annotations

from statistics import fmean

from alfrl.agent.protocol import BAD_FORMAT, EXECUTED, NOT_ADMISSIBLE, build_next_prompt, parse_reply, tool_result_message


def one_turn(session, env, branches, live, cfg, fmt):
    """One turn of the live branches: sample (one batched call), parse, step, then end or extend each."""
    samples = session.sample({b: branches[b]["prompt"] for b in live}, cfg)  # 1. sample
    texts = {b: fmt.tokenizer.decode(samples[b].tokens, skip_special_tokens=True) for b in live}
    parsed = {b: parse_reply(texts[b]) for b in live}  # 2. parse
    results = env.step({b: parsed[b].action for b in live})  # 3. step (None: a broken reply)
    for b in live:
        br, reply, result, sampled = branches[b], parsed[b], results[b], samples[b].tokens
        br["replies"].append(texts[b])
        br["invalid"] += not (reply.valid and result.admissible)
        if result.done:  # won or out of steps: the trajectory ends with this reply
            br.update(won=result.won, steps=result.steps, end="won" if result.won else "max_steps",
                      tokens=br["prompt"] + sampled)
            continue
        if not reply.valid:
            status = BAD_FORMAT.format(reason=reply.reason)
        elif not result.admissible:
            status = NOT_ADMISSIBLE.format(action=reply.action)
        else:
            status = EXECUTED
        content = tool_result_message(status, result.observation, result.admissible_commands)
        br["history"] = br["history"] + [{"role": "assistant", "content": texts[b]}]
        br["prompt"] = build_next_prompt(fmt, br["prompt"], sampled, br["history"], content)  # 4. extend
        br["history"] = br["history"] + [{"role": fmt.tool_role, "content": content}]
    finished = [b for b in live if "end" in branches[b]]
    session.drop(finished)  # finished branches leave the batch
    return [b for b in live if b not in finished]


def group_summary(group):
    """Success, mean reward, invalid replies per episode, and the per-turn format and admissible rates."""
    turns = [turn for t in group for turn in t.turns]
    return {"success": fmean(t.won for t in group),
            "reward": fmean(float(t.won) - 0.1 * t.invalid for t in group),
            "invalid_per_episode": fmean(t.invalid for t in group),
            "valid_format_rate": fmean(turn.valid_format for turn in turns),
            "admissible_rate": fmean(turn.admissible for turn in turns)}
