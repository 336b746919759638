"""Notebook 03's exercises: one turn of the group loop, and what a group's outcome says.

Both checks are cheap: scripted replies (:class:`alfrl.rl.scripted.ScriptedSession`) in a real game,
and hand-built trajectories; no model is loaded (only its tokenizer, for the chat template).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from exercises import attempt, verdict

SUMMARY_KEYS = ("success", "reward", "invalid_per_episode", "valid_format_rate", "admissible_rate")
"""What ``group_summary`` returns: the same keys, and values, as ``alfrl.rl.advantage.batch_stats``."""


def _small_game():
    """The smallest of valid_unseen's first 20 games (shortest walkthrough), as notebook 03 picks one."""
    from alfrl.world.games import load_games
    return min(load_games("valid_unseen")[:20], key=lambda g: len(g.walkthrough))


def _scripts(game) -> dict[int, list[str]]:
    """Four branches: the expert (wins), two mistakes then the expert (wins two turns later), a valid
    look alternating with broken JSON (runs out of steps), and prose only (bad format every turn)."""
    from alfrl.rl.scripted import expert_replies, tool_call
    walk = list(game.walkthrough)
    return {0: expert_replies(game),
            1: ["I will look around first.", tool_call("fly to the moon")] + expert_replies(game),
            2: [tool_call("look"), "<tool_call>{bad json</tool_call>"] * len(walk),
            3: ["Let me think about where the object is."] * (len(walk) + 2)}


def play_with_one_turn(one_turn: Callable, policy_tokenizer, game, scripts: dict[int, list[str]],
                       max_steps: int) -> list[dict]:
    """Drive the learner's ``one_turn`` until no branch is live, the way notebook 03's loop does."""
    from alfrl.agent.protocol import ChatFormat
    from alfrl.agent.sampler import SampleConfig
    from alfrl.rl.scripted import ScriptedSession
    from alfrl.world.env import GroupEnv

    fmt = ChatFormat(policy_tokenizer)
    k = len(scripts)
    session = ScriptedSession(fmt, scripts)
    cfg = SampleConfig(temperature=1.0, max_new_tokens=64)
    with GroupEnv(k=k, max_steps=max_steps, workers=0) as env:
        start = env.reset(game)
        prompt = fmt.initial_prompt(start.task, start.observation, start.admissible_commands)
        history = fmt.messages(start.task, start.observation, start.admissible_commands)
        branches = [{"prompt": list(prompt), "history": list(history), "replies": [], "invalid": 0}
                    for _ in range(k)]
        live = list(range(k))
        for _ in range(max_steps + 1):  # a turn that never ends a branch must not loop forever
            if not live:
                break
            live = list(one_turn(session, env, branches, live, cfg, fmt))
    return branches


def check_one_turn(one_turn: Callable) -> bool:
    """``one_turn(session, env, branches, live, cfg, fmt)`` plays one turn of the live branches and returns
    those still live. Compared with ``alfrl.rl.rollout.rollout_group`` on the same scripted replies."""
    try:
        from alfrl.agent.models import load_tokenizer
        from alfrl.agent.protocol import ChatFormat
        from alfrl.rl.rollout import RolloutConfig, rollout_group
        from alfrl.rl.scripted import ScriptedSession

        tokenizer = load_tokenizer()
        game = _small_game()
        max_steps = len(game.walkthrough) + 2
        scripts = _scripts(game)

        class _Policy:  # rollout_group needs only the tokenizer when a session is given
            pass

        policy = _Policy()
        policy.tokenizer = tokenizer
        theirs = rollout_group(policy, game, RolloutConfig(k=len(scripts), max_steps=max_steps, workers=0),
                               session=ScriptedSession(ChatFormat(tokenizer), {b: list(s) for b, s in scripts.items()}))
    except Exception as e:  # the course's own setup failed: say so, do not raise
        print(f"✗ could not set up the check ({type(e).__name__}: {e})")
        return False
    mine, problem = attempt(play_with_one_turn, one_turn, tokenizer, game,
                            {b: list(s) for b, s in scripts.items()}, max_steps)
    if problem:
        if "live branches are" in problem:
            problem += " (drop the finished branches from the session, and return only the live ones)"
        return verdict([problem], "")
    problems = []
    names = {0: "the expert", 1: "two mistakes, then the expert", 2: "look / broken JSON, alternating",
             3: "prose only"}
    for b, t in enumerate(theirs):
        br, who = mine[b], f"branch {b} ({names[b]})"
        if "end" not in br:
            problems.append(f"{who} never ended: set branch['end'] (and 'won', 'steps', 'tokens') when "
                            "its game is done, and leave it out of the live list you return")
            continue
        if br["replies"] != [turn.reply for turn in t.turns]:
            problems.append(f"{who}: replies {len(br['replies'])}, expected {len(t.turns)}; decode each sample "
                            "with skip_special_tokens=True and append it once per turn")
        if br.get("won") != t.won:
            problems.append(f"{who}: won={br.get('won')}, expected {t.won} (only result.won is a success)")
        if br["invalid"] != t.invalid:
            problems.append(f"{who}: {br['invalid']} invalid replies, expected {t.invalid}: a reply is invalid "
                            "if it breaks the format OR its action is not admissible")
        if br.get("steps") != t.steps:
            problems.append(f"{who}: steps={br.get('steps')}, expected {t.steps} (result.steps)")
        if br.get("end") != t.end_reason:
            problems.append(f"{who}: end={br.get('end')!r}, expected {t.end_reason!r}")
        if br.get("tokens") != t.tokens:
            got = br.get("tokens") or []
            same = next((i for i, (x, y) in enumerate(zip(got, t.tokens)) if x != y), min(len(got), len(t.tokens)))
            problems.append(f"{who}: its tokens differ from token {same} on ({len(got)} vs {len(t.tokens)} tokens): "
                            "extend the prompt with build_next_prompt(fmt, prompt, sampled, history, content), "
                            "history ending with the reply; a finished branch's tokens are prompt + sampled")
    return verdict(problems, f"one_turn plays all {len(theirs)} scripted branches exactly as rollout_group does")


# --- group_summary -------------------------------------------------------------------------------

def _trajectory(won: bool, turns: list[tuple[bool, bool]], end: str | None = None, branch: int = 0):
    """A hand-built trajectory: ``turns`` as (valid_format, admissible) pairs; the last is the win if won."""
    from alfrl.rl.rollout import Trajectory, Turn
    made = [Turn(reply="", action="look" if fmt_ok else None, valid_format=fmt_ok, admissible=fmt_ok and ok,
                 reason="" if fmt_ok and ok else "invalid", observation="", sampled=1, stopped_on="eos")
            for fmt_ok, ok in turns]
    end = end or ("won" if won else "max_steps")
    return Trajectory(game_id="g", task_type="t", branch=branch, seed=0, tokens=[], mask=[], logprobs=[],
                      turns=made, won=won, steps=len(made), invalid=sum(not t.admissible for t in made),
                      end_reason=end, prompt_tokens=0, prefilled=0, sampled=len(made), model_seconds=0.0,
                      env_seconds=0.0)


def summary_cases() -> list[list]:
    ok, bad_format, not_listed = (True, True), (False, False), (True, False)
    return [
        [_trajectory(True, [ok, ok, ok]), _trajectory(False, [ok] * 4), _trajectory(False, [bad_format] * 4, branch=2),
         _trajectory(True, [not_listed, ok, ok], branch=3)],
        # ran out of tokens (ended, not won); a win after a bad format; a loss with both kinds of mistakes
        [_trajectory(False, [ok, bad_format], end="max_tokens"), _trajectory(True, [bad_format, ok], branch=1),
         _trajectory(False, [not_listed, bad_format, ok, ok], branch=2)],
        [_trajectory(False, [bad_format] * 3, branch=b) for b in range(4)],  # the untrained model's group
    ]


def check_group_summary(group_summary: Callable) -> bool:
    """``group_summary(group)`` returns success, reward, invalid_per_episode, valid_format_rate and
    admissible_rate of one group, as ``alfrl.rl.advantage.batch_stats([group])`` does."""
    from alfrl.rl.advantage import batch_stats
    hints = {"success": "the share of branches with won=True (ending is not winning)",
             "reward": "the mean of won - 0.1 x invalid over the branches",
             "invalid_per_episode": "the mean of t.invalid over the branches",
             "valid_format_rate": "the share of all turns (every branch's) with turn.valid_format",
             "admissible_rate": "the share of all turns with turn.admissible"}
    problems = []
    for i, group in enumerate(summary_cases()):
        mine, problem = attempt(group_summary, group)
        if problem:
            return verdict([problem], "")
        if not isinstance(mine, dict):
            return verdict([f"return a dict with keys {list(SUMMARY_KEYS)}, not a {type(mine).__name__}"], "")
        theirs = batch_stats([group])
        for key in SUMMARY_KEYS:
            if key not in mine:
                problems.append(f"group {i}: no {key!r} in your dict")
            elif not isinstance(mine[key], (int, float)) or not math.isclose(mine[key], theirs[key], abs_tol=1e-9):
                problems.append(f"group {i}: {key} is {mine[key]!r}, expected {theirs[key]:.4g}: {hints[key]}")
    return verdict(problems, "group_summary agrees with alfrl.rl.advantage.batch_stats on every group")
