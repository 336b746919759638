"""Checks for notebook 01's exercises (the environment: admissible commands, won vs done, K copies).

- :func:`check_winning_commands`: after a list of commands, which admissible command wins on the next step?
- :func:`check_play_group`: play K copies of one game, each its own script, and report won, done,
  steps and invalid commands per copy.

The right answers come from :class:`alfrl.world.env.GroupEnv` (ALFWorld's engine, in its fast form).
Every check prints what is wrong, or ✓, returns a bool, and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from exercises import attempt, verdict

JUNK = "fly to the moon"
"""A command no game ever admits."""


def _games(split: str, data_dir, n: int):
    """The ``n`` games of ``split`` cheapest to replay (few receptacles, short walkthrough; at least 4 commands)."""
    from alfrl.world.games import load_games

    games = [g for g in load_games(split, data_dir) if len(g.walkthrough) >= 4]
    return sorted(games, key=lambda g: (max(g.receptacles, 1) * len(g.walkthrough), g.game_id))[:n]


def winners(game, prefix: list[str]) -> list[str]:
    """The package's answer: every command admissible after ``prefix`` that wins ``game`` on the next step.

    One copy per admissible command, all in one GroupEnv: each copy replays ``prefix``, then tries its command.
    """
    from alfrl.world.env import GroupEnv

    with GroupEnv(k=1, max_steps=len(prefix) + 1, workers=0) as env:
        env.reset(game)
        for command in prefix:
            env.step({0: command})
        candidates = list(env.admissible[0])
    with GroupEnv(k=len(candidates), max_steps=len(prefix) + 1, workers=0) as env:
        env.reset(game)
        for command in prefix:
            env.step({i: command for i in env.live()})
        tried = env.step({i: c for i, c in enumerate(candidates)})
    return sorted(c for i, c in enumerate(candidates) if tried[i].won)


@lru_cache(maxsize=8)
def winning_cases(split: str = "valid_seen", data_dir=None, n_games: int = 1) -> tuple[tuple, ...]:
    """(game, prefix, the package's winners): one step before the expert's win, and two steps before it.
    Each position costs a few seconds (every candidate replays the prefix), so the answers are kept."""
    cases = []
    for game in _games(split, data_dir, n_games):
        walk = list(game.walkthrough)
        for prefix in (walk[:-1], walk[:-2]):
            cases.append((game, tuple(prefix), tuple(winners(game, prefix))))
    return tuple(cases)


def check_winning_commands(fn: Callable, split: str = "valid_seen", data_dir=None, n_games: int = 1) -> bool:
    """Check ``fn(game, prefix) -> list[str]``: the admissible commands that win right after ``prefix``."""
    try:
        cases = winning_cases(split, data_dir, n_games)
    except Exception as e:  # no games, a broken install: say so, never raise
        return verdict([f"could not set up the check ({type(e).__name__}: {e})"], "")
    problems = []
    for game, prefix, right in cases:
        where = f"{game.game_id} after {len(prefix)} of its {len(game.walkthrough)} expert commands"
        got, problem = attempt(fn, game, list(prefix))
        if problem:
            problems.append(f"{where}: {problem}")
            continue
        if not isinstance(got, (list, tuple, set)) or not all(isinstance(c, str) for c in got):
            problems.append(f"{where}: return a list of command strings, not {type(got).__name__} {got!r}"[:300])
            continue
        got, right = sorted(set(got)), list(right)
        if got == right:
            continue
        if not right:
            problems.append(f"{where}: no command wins here (the goal is two steps away), but you returned {got}")
        else:
            missing, extra = sorted(set(right) - set(got)), sorted(set(got) - set(right))
            detail = []
            if missing:
                detail.append(f"missing the winner(s) {missing}")
            if extra:
                detail.append(f"{extra} do(es) not win")
            problems.append(f"{where}: " + "; ".join(detail))
    n_win = sum(bool(r) for *_, r in cases)
    return verdict(problems, f"right on {len(cases)} positions ({n_win} with a winning command, "
                             f"{len(cases) - n_win} without)")


# --- exercise 2: K copies, each with its own script ---------------------------------------------

def group_outcomes(game, scripts: list[list[str]], max_steps: int) -> list[dict]:
    """The package's answer: each copy plays its script until it is done (won or out of steps) or
    the script runs out; per copy ``won``, ``done``, ``steps`` and ``invalid`` (inadmissible commands)."""
    from alfrl.world.env import GroupEnv

    with GroupEnv(k=len(scripts), max_steps=max_steps, workers=0) as env:
        env.reset(game)
        out = [{"won": False, "done": False, "steps": 0, "invalid": 0} for _ in scripts]
        for turn in range(max_steps):
            actions = {i: scripts[i][turn] for i in env.live() if turn < len(scripts[i])}
            if not actions:
                break
            for i, r in env.step(actions).items():
                out[i].update(won=r.won, done=r.done, steps=r.steps)
                out[i]["invalid"] += not r.admissible
    return out


@lru_cache(maxsize=8)
def group_case(split: str = "valid_seen", data_dir=None) -> tuple:
    """(game, scripts, max_steps, the package's outcomes) for five copies that end five different ways."""
    (game,) = _games(split, data_dir, 1)
    walk = list(game.walkthrough)
    max_steps = len(walk) + 2
    scripts = [
        walk,                              # the expert: won, done
        [JUNK, JUNK] + walk,               # two wasted steps: won on the very last step
        [JUNK, JUNK, JUNK] + walk,         # three wasted: out of steps, done but not won
        ["look"] * (max_steps + 5),        # admissible but useless: done, not won, nothing invalid
        ["look", "pick up the thing"],     # the script ends first: neither won nor done
    ]
    return game, tuple(tuple(s) for s in scripts), max_steps, tuple(group_outcomes(game, scripts, max_steps))


KEYS = ("won", "done", "steps", "invalid")


def check_play_group(fn: Callable, split: str = "valid_seen", data_dir=None) -> bool:
    """Check ``fn(game, scripts, max_steps) -> list[dict]`` (one dict per copy with won, done, steps, invalid)."""
    try:
        game, scripts, max_steps, right = group_case(split, data_dir)
    except Exception as e:
        return verdict([f"could not set up the check ({type(e).__name__}: {e})"], "")
    got, problem = attempt(fn, game, [list(s) for s in scripts], max_steps)
    if problem:
        return verdict([problem], "")
    if not isinstance(got, (list, tuple)) or len(got) != len(scripts):
        return verdict([f"return one dict per copy ({len(scripts)} here), not {type(got).__name__} "
                        f"{str(got)[:200]}"], "")
    problems = []
    for i, (mine, theirs) in enumerate(zip(got, right)):
        if not isinstance(mine, dict) or not set(KEYS) <= set(mine):
            problems.append(f"copy {i}: give a dict with keys {list(KEYS)}, not {str(mine)[:120]}")
            continue
        for key in KEYS:
            if mine[key] != theirs[key] and not (key in ("won", "done") and bool(mine[key]) == theirs[key]):
                hint = ""
                if key == "won" and bool(mine["won"]) == theirs["done"] != theirs["won"]:
                    hint = " (is that `done`? Out of steps is done, not won)"
                elif key == "invalid":
                    hint = " (count the steps whose StepResult.admissible is False)"
                elif key == "steps":
                    hint = " (an inadmissible command uses a step too; a finished copy takes no more)"
                problems.append(f"copy {i} (script {list(scripts[i][:3])}...): {key}={mine[key]!r}, "
                                f"should be {theirs[key]!r}{hint}")
    return verdict(problems, f"all {len(scripts)} copies: " + "; ".join(
        f"{i}: {'won' if r['won'] else 'done, not won' if r['done'] else 'unfinished'} in {r['steps']}"
        f" ({r['invalid']} invalid)" for i, r in enumerate(right)))
