"""ALFWorld's handcoded expert, driven the way ``alfworld-generate`` drives it, minus one bug.

The expert (``alfworld.agents.expert.HandCodedTWAgent``) tracks what it carries by
watching for the word "put" in its own last command. ALFWorld 0.4's grammar says
``move X to Y`` instead, so after its first placement the expert believes it still
holds the object and wanders: stock pick-two walkthroughs run 10-188 steps and
often time out. :func:`solve` renames "move" to "put" *only in what the expert's
state tracker sees*; the commands sent to the game are unchanged.

The engine stack is ALFWorld's own: TextWorld's ``PddlEnv`` + ``AlfredDemangler``
(object names like ``apple 1``) + ``AlfredInfos`` (``extra.gamefile``).

Taught in notebook 00 (the expert plays a game); 01 reuses it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import textworld
from textworld.envs import PddlEnv

MAX_EXPERT_STEPS = 200
"""ALFWorld's own limit for the handcoded expert (``AlfredExpert`` uses 200)."""


def make_engine(facts: bool = False) -> textworld.core.Environment:
    """Return ALFWorld's text engine: ``PddlEnv`` wrapped like ``AlfredTWEnv`` wraps it.

    ``facts=True`` also requests the PDDL facts, which the expert needs.
    """
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(admissible_commands=True, won=True, feedback=True, facts=facts,
                               extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))


def _move_as_put(policy) -> None:
    """Patch one expert policy instance so its tracker reads ``move X to Y`` as ``put``."""
    track = policy.update_state_tracking

    def update_state_tracking(game_state, last_action: str):
        if last_action.startswith("move "):
            last_action = "put " + last_action[len("move "):]
        return track(game_state, last_action)

    policy.update_state_tracking = update_state_tracking


def solve(game_file: str | Path, seed: int = 0, max_steps: int = MAX_EXPERT_STEPS,
          engine: textworld.core.Environment | None = None) -> list[str] | None:
    """Play ``game_file`` with the handcoded expert; return its walkthrough, or None if it fails.

    ``traj_data.json`` must sit beside the game file (the expert reads its task there).
    The expert draws from Python's global ``random``; it is seeded with ``seed`` so a
    walkthrough is reproducible. The first command is ``look``, as in ALFWorld's data.
    """
    from alfworld.agents.expert import HandCodedTWAgent

    game_file = str(game_file)
    engine = engine or make_engine(facts=True)
    if not engine.request_infos.facts:
        raise ValueError("the expert needs an engine made with make_engine(facts=True)")
    random.seed(seed)
    engine.load(game_file)
    state = engine.reset()
    expert = HandCodedTWAgent(max_steps=max_steps)
    expert.reset(game_file)
    _move_as_put(expert.policy)
    expert.observe(state["feedback"])

    walkthrough: list[str] = []
    command = "look"
    try:
        for _ in range(max_steps):
            state, _, done = engine.step(command)
            walkthrough.append(command)
            if state["won"]:
                return walkthrough
            if done:
                return None
            command = expert.act(state, 0, state["won"], command)
            if command not in state["admissible_commands"]:
                command = "look"  # what ALFWorld's AlfredExpert does with an inadmissible pick
    except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed and friends
        return None
    return None


@dataclass
class Replay:
    """The outcome of replaying a command list in the real engine."""

    won: bool
    steps: int
    observations: list[str] = field(default_factory=list)
    inadmissible: list[str] = field(default_factory=list)


def replay(game_file: str | Path, commands: list[str],
           engine: textworld.core.Environment | None = None) -> Replay:
    """Replay ``commands`` in ``game_file``; record observations and inadmissible commands.

    The first observation is the game's intro (room and task). Stops early once won.
    """
    engine = engine or make_engine()
    engine.load(str(game_file))
    state = engine.reset()
    result = Replay(won=False, steps=0, observations=[state["feedback"]])
    for command in commands:
        if command not in state["admissible_commands"]:
            result.inadmissible.append(command)
        state, _, _ = engine.step(command)
        result.steps += 1
        result.observations.append(state["feedback"])
        if state["won"]:
            result.won = True
            break
    return result
