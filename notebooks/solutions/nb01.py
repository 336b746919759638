"""Worked solutions to notebook 01's exercises (checked by ``exercises.nb01`` and ``tests/test_exercises_nb01.py``)."""

from __future__ import annotations

from alfrl.world.env import GroupEnv


def winning_commands(game, prefix: list[str]) -> list[str]:
    """Play ``prefix``, then return every admissible command that wins ``game`` on the next step."""
    # One copy to learn which commands are admissible after the prefix ...
    with GroupEnv(k=1, max_steps=len(prefix) + 1, workers=0) as env:
        env.reset(game)
        for command in prefix:
            env.step({0: command})
        candidates = list(env.admissible[0])
    # ... then one copy per candidate: every copy replays the prefix and tries its own command.
    with GroupEnv(k=len(candidates), max_steps=len(prefix) + 1, workers=0) as env:
        env.reset(game)
        for command in prefix:
            env.step({i: command for i in env.live()})
        results = env.step({i: command for i, command in enumerate(candidates)})
    return sorted(command for i, command in enumerate(candidates) if results[i].won)


def play_group(game, scripts: list[list[str]], max_steps: int) -> list[dict]:
    """Copy i plays ``scripts[i]`` until it is done or its script runs out; won, done, steps, invalid per copy."""
    outcomes = [{"won": False, "done": False, "steps": 0, "invalid": 0} for _ in scripts]
    with GroupEnv(k=len(scripts), max_steps=max_steps, workers=0) as env:
        env.reset(game)
        for turn in range(max_steps):
            actions = {i: scripts[i][turn] for i in env.live() if turn < len(scripts[i])}
            if not actions:  # every copy is done or out of script
                break
            for i, result in env.step(actions).items():
                outcomes[i].update(won=result.won, done=result.done, steps=result.steps)
                outcomes[i]["invalid"] += not result.admissible
    return outcomes
