"""A played trajectory as data: its turns, its tokens with the sampled-token mask, and JSONL I/O.

What a rollout (:mod:`alfrl.rl.rollout`) produces and everything after it reads: advantages
(:mod:`alfrl.rl.advantage`), the update (:mod:`alfrl.rl.ppo`), evaluation records and the viewer.
Taught in notebook 03 (a group's records) and 04 (the mask).
"""

from __future__ import annotations

import json
import lzma
from dataclasses import asdict, dataclass, fields
from pathlib import Path

END_REASONS = ("won", "max_steps", "max_tokens")
"""How a trajectory can end: the game was won, the steps ran out, or the next turn would not fit."""


@dataclass
class Turn:
    """One reply and what came of it."""

    reply: str
    """The sampled text (special tokens removed)."""
    action: str | None
    """The parsed, canonical action; None when the reply broke the format."""
    valid_format: bool
    admissible: bool
    """Whether the action was in the list (so the game moved)."""
    reason: str
    """Why the reply was invalid ("" when it was fine)."""
    observation: str
    """What the game answered."""
    sampled: int
    """Tokens sampled for this reply."""
    stopped_on: str
    """"eos" or "budget"."""
    plan: str | None = None
    """On a planner turn (hierarchical play), the subgoal its reply named ("" if it named none); None on
    any other turn."""
    plan_tokens: int = 0
    """The reply's first tokens that write its subgoal line (0 when it wrote none)."""


@dataclass
class Trajectory:
    """One branch of a group, everything the update and the analysis need."""

    game_id: str
    task_type: str
    branch: int
    seed: int
    tokens: list[int]
    """Every token of the conversation, system prompt to last reply."""
    mask: list[int]
    """1 on tokens the model sampled, 0 on everything else (prompt, template, tool results)."""
    logprobs: list[float]
    """The sampler's logprob of each token (0.0 where mask is 0)."""
    turns: list[Turn]
    won: bool
    steps: int
    invalid: int
    """Replies that broke the format or named an action not in the list."""
    end_reason: str
    """"won", "max_steps" or "max_tokens"."""
    prompt_tokens: int
    """Length of the first prompt (shared by the group)."""
    prefilled: int
    """Tokens this branch's prompts added to its cache, all turns together (the shared first prompt included)."""
    sampled: int
    model_seconds: float
    """This branch's share of the group's model time (a batched step is split among the branches in it)."""
    env_seconds: float
    """This branch's share of the group's env time."""
    entropy: float = 0.0
    """Entropy (nats) of the sampling distribution at each sampled token, summed (``/ sampled``: the mean)."""
    subgoals: int = 0
    """Subgoals of the game reached (alfrl.world.subgoals: taken, cleaned/heated/cooled, placed, lamp on)."""
    subgoals_total: int = 0
    """The game's subgoals in all (0 in files written before they were counted)."""
    reward: float | None = None
    """Set by alfrl.rl.advantage."""
    advantage: float | None = None
    """Set by alfrl.rl.advantage."""
    sampler_logprobs: list[float] | None = None
    """The sampler's logprobs, kept where an update replaced ``logprobs`` with the trainer's
    (alfrl.rl.ppo.recompute_old_logprobs; truncated importance sampling compares the two)."""
    turn_advantages: list[float] | None = None
    """With step-level credit (``--credit gigpo``, alfrl.rl.gigpo): the advantage of each turn's sampled tokens,
    episode advantage + omega x step advantage; None: every sampled token gets ``advantage``."""

    def record(self) -> dict:
        """The trajectory as a JSON-ready dict (``sampler_logprobs`` and ``turn_advantages`` only where an
        update set them, so records keep their form)."""
        data = asdict(self)
        for optional in ("sampler_logprobs", "turn_advantages"):
            if data[optional] is None:
                del data[optional]
        return data

    def to_json(self) -> str:
        return json.dumps(self.record())

    @classmethod
    def from_json(cls, line: str) -> "Trajectory":
        """A trajectory from its JSON line; keys that are not fields (e.g. the ``step`` a training run's
        ``trajectories.jsonl`` adds) are ignored."""
        data = json.loads(line)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["turns"] = [Turn(**t) for t in data["turns"]]
        return cls(**data)


def save_trajectories(trajectories: list[Trajectory], path: str | Path, append: bool = False) -> Path:
    """Write one JSON line per trajectory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for t in trajectories:
            f.write(t.to_json() + "\n")
    return path


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by :func:`save_trajectories` or a training run (``trajectories.jsonl``),
    xz-compressed or not (the committed probes in ``data/results`` are ``.jsonl.xz``)."""
    path = Path(path)
    with (lzma.open(path, "rt") if path.suffix == ".xz" else path.open()) as f:
        return [Trajectory.from_json(line) for line in f if line.strip()]


def groups_of(trajectories: list[Trajectory], k: int) -> list[list[Trajectory]]:
    """Consecutive runs of ``k`` branches of one game, branches 0..k-1 in order: the groups as a training
    run saves them; a clear error if the trajectories are not laid out that way."""
    groups = [trajectories[i:i + k] for i in range(0, len(trajectories), k)]
    for group in groups:
        if len(group) != k or len({t.game_id for t in group}) != 1 or [t.branch for t in group] != list(range(k)):
            raise ValueError(f"expected groups of {k} branches of one game in order; got {[t.game_id for t in group]}")
    return groups
