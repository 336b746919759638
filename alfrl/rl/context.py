"""The context budget: how many tokens a whole game takes under each action-list protocol.

A 135M model reads at most 8,192 positions. Under the protocol where every tool result repeats the
whole list of available actions (``--actions every``), a large official ALFWorld room adds 30-70 lines
a turn, and a 50-step game cannot fit. To compare protocols on the same games without a model:

1. :func:`record_episode` plays a game in the real engine with the expert's walkthrough, padded to
   ``steps`` with plausible search moves (go to a receptacle the walkthrough does not need; open it and
   close it again where it opens), and keeps every observation and list of available actions;
2. :class:`RecordedEnv` plays that record back through the course's real rollout code
   (:func:`alfrl.rl.rollout.rollout_group` with the expert's tool calls as the replies), so
   :func:`render` gives the exact tokens the policy would read under any protocol.

The same budget guards every rollout: :func:`alfrl.agent.models.fit_context` cuts a trajectory budget above the
model's trained positions to them. ``benchmarks/context_budget.py`` runs this on every official valid_seen game. Taught in
notebook 08.
"""

from __future__ import annotations

import json
import lzma
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

from alfrl.world.env import NOTHING_HAPPENS, GroupEnv, GroupReset, StepResult


@dataclass
class RecordedStep:
    """One step of a recorded episode: the action and what the game answered."""

    action: str
    observation: str
    admissible_commands: list[str]
    admissible: bool
    won: bool


@dataclass
class Episode:
    """A game played once in the real engine, kept so that any protocol can render it."""

    game_id: str
    task: str
    observation: str
    """The first observation."""
    admissible_commands: list[str]
    """The first list of available actions."""
    steps: list[RecordedStep] = field(default_factory=list)
    receptacles: int = 0

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1].won


def padding_place(rng: random.Random, admissible: list[str], needed: set[str]) -> str:
    """Where the next search move goes: a receptacle the walkthrough does not need (any receptacle if it
    needs them all), among those the game lets the agent go to now."""
    places = [a[len("go to "):] for a in admissible if a.startswith("go to ")]
    return rng.choice([p for p in places if p not in needed] or places)


def record_episode(game, steps: int = 50, seed: int = 0, env: GroupEnv | None = None) -> Episode:
    """Play ``game``'s walkthrough padded to ``steps`` with search moves placed before it; every answer kept.

    A receptacle is opened only where the game offers ``open`` (it is closed), and closed again at once, so the
    walkthrough still wins from where the search leaves the agent."""
    own = env is None
    env = env or GroupEnv(k=1, max_steps=steps, workers=0)
    rng = random.Random(f"{seed}:{game.game_id}")
    walkthrough = list(game.walkthrough)
    needed = {w.split(" ", 2)[-1] for w in walkthrough if w.startswith("go to ")}
    try:
        start = env.reset(game)
        episode = Episode(game_id=game.game_id, task=start.task, observation=start.observation,
                          admissible_commands=list(start.admissible_commands),
                          receptacles=sum(a.startswith("go to ") for a in start.admissible_commands))
        pad = max(0, steps - len(walkthrough))
        while pad > 0:  # go somewhere; open it and close it again where it is closed, so nothing changes
            place = padding_place(rng, env.admissible[0], needed)
            episode.steps.append(_step(env, f"go to {place}"))
            pad -= 1
            if pad >= 2 and f"open {place}" in env.admissible[0]:
                episode.steps += [_step(env, f"open {place}"), _step(env, f"close {place}")]
                pad -= 2
        for action in walkthrough:
            if episode.won or len(episode.steps) >= steps:
                break
            episode.steps.append(_step(env, action))
    finally:
        if own:
            env.close()
    return episode


def _step(env: GroupEnv, action: str) -> RecordedStep:
    result = env.step({0: action})[0]
    return RecordedStep(action=action, observation=result.observation,
                        admissible_commands=list(result.admissible_commands), admissible=result.admissible,
                        won=result.won)


class RecordedEnv:
    """A :class:`~alfrl.world.env.GroupEnv` stand-in with one copy that answers from a recorded :class:`Episode`
    (the replies must be the recorded actions, in order)."""

    def __init__(self, episode: Episode, max_steps: int | None = None):
        self.episode = episode
        self.k = 1
        self.max_steps = max_steps or len(episode.steps)
        self.subgoals, self.subgoals_total = {0: 0}, {0: 0}
        self.taken = 0
        self.off_record = False

    def _last_list(self) -> list[str]:
        return self.episode.steps[self.taken - 1].admissible_commands if self.taken else \
            self.episode.admissible_commands

    def reset(self, game) -> GroupReset:
        self.taken, self.off_record = 0, False
        return GroupReset(observation=self.episode.observation, task=self.episode.task,
                          admissible_commands=list(self.episode.admissible_commands))

    def step(self, actions: dict) -> dict[int, StepResult]:
        if self.off_record:
            raise ValueError("the replies left the record at the step before; nothing recorded follows")
        recorded = self.episode.steps[self.taken]
        if actions[0] != recorded.action:  # a reply the token budget cut: invalid, and the last step replayed
            self.off_record = True
            return {0: StepResult(observation=NOTHING_HAPPENS, admissible_commands=list(self._last_list()),
                                  won=False, done=False, admissible=False, steps=self.taken + 1)}
        self.taken += 1
        done = recorded.won or self.taken >= self.max_steps
        return {0: StepResult(observation=recorded.observation if recorded.admissible else NOTHING_HAPPENS,
                              admissible_commands=list(recorded.admissible_commands), won=recorded.won, done=done,
                              admissible=recorded.admissible, steps=self.taken)}

    def close(self) -> None:
        pass


def render(tokenizer, episode: Episode, actions: str, max_tokens: int = 10**7):
    """The episode as the policy would read it under protocol ``actions``: the real rollout, each reply the
    recorded action's tool call, with no token budget but ``max_tokens``. Returns the Trajectory."""
    from alfrl.agent.protocol import ChatFormat
    from alfrl.rl.rollout import RolloutConfig, rollout_group
    from alfrl.rl.scripted import ScriptedSession, tool_call

    fmt = ChatFormat(tokenizer, actions=actions)
    game = SimpleNamespace(game_id=episode.game_id, task_type="", split="")
    config = RolloutConfig(k=1, max_steps=len(episode.steps), max_trajectory_tokens=max_tokens,
                           max_new_tokens=10_000, workers=0, actions=actions)
    session = ScriptedSession(fmt, {0: [tool_call(s.action) for s in episode.steps]})
    policy = SimpleNamespace(tokenizer=tokenizer)  # no model: nothing is sampled, and no context window to cut at
    (trajectory,) = rollout_group(policy, game, config, env=RecordedEnv(episode), fmt=fmt, session=session)
    return trajectory


def turn_ends(trajectory) -> list[int]:
    """The trajectory's length in tokens after each turn's reply (what the context holds at each step)."""
    mask = trajectory.mask
    return [i + 1 for i, m in enumerate(mask) if m and (i + 1 == len(mask) or not mask[i + 1])]


def save_episodes(episodes: list[Episode], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(path, "wt") as f:
        for e in episodes:
            f.write(json.dumps(asdict(e)) + "\n")
    return path


def load_episodes(path: str | Path) -> list[Episode]:
    with lzma.open(Path(path), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Episode(**{**r, "steps": [RecordedStep(**s) for s in r["steps"]]}) for r in rows]
