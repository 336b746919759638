"""Group rollouts: K trajectories of one game, played by the policy through the tool protocol.

One turn for every live branch of a group:

1. the sampler reads what is new in each branch's prompt and samples one reply per
   branch (batched; on turn 0 the shared prompt is read once);
2. each reply is parsed (:func:`alfrl.protocol.parse_reply`); a valid call whose action
   is admissible moves that branch's copy of the game. An invalid reply (bad format, or
   an action not in the list) does not: the tool result says why, and the branch is
   charged one invalid action and one step;
3. the tool result is appended by prefix extension (:func:`alfrl.protocol.build_next_prompt`).

A branch ends when it wins, runs out of steps (``max_steps``), or its next turn would not
fit in ``max_trajectory_tokens``. Its record keeps every token with a mask that is 1
exactly on the tokens the model sampled, and those tokens' logprobs: what the PPO update
needs (:mod:`alfrl.ppo`).
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.env import NOTHING_HAPPENS, GroupEnv
from alfrl.protocol import (BAD_FORMAT, COMPLETED, EXECUTED, NOT_ADMISSIBLE, ChatFormat, build_next_prompt,
                            parse_reply, tool_result_message)
from alfrl.sampler import SampleConfig, new_group_session

END_REASONS = ("won", "max_steps", "max_tokens")


@dataclass
class RolloutConfig:
    """How a group is played."""

    k: int = 8
    """Trajectories per game (the group size)."""
    max_steps: int = 50
    """Turns per trajectory; every reply uses one, valid or not."""
    max_trajectory_tokens: int = 12000
    """A trajectory ends before a turn that would take it past this many tokens."""
    max_new_tokens: int = 256
    """Tokens the model may sample per reply."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    seed: int = 0
    """Seeds every branch's sampler (with the game id and branch index)."""
    workers: int = 2
    """Processes stepping the K copies of the game."""
    batched: bool = True
    """Decode the live branches of a group in one batch (see alfrl.kvcache)."""
    prefill_dtype: str | None = None
    """Read prompts and tool results under this autocast dtype ("bfloat16": ~1.7x faster reads on a
    CPU with AMX/avx512_bf16); decode steps stay in the model's precision. None: off."""
    groups_per_batch: int = 1
    """Groups that :func:`rollout_batch` plays together, k x this many rows decoded in one batch.
    On a CPU the decode step reads the weights once whatever the batch, so 2 groups of 4 take
    little more time than one; on a GPU, memory for the KV caches sets the limit."""

    def __post_init__(self):
        if self.k < 1 or self.max_steps < 1 or self.max_new_tokens < 1:
            raise ValueError(f"k, max_steps and max_new_tokens must be >= 1 (got {self.k}, {self.max_steps}, "
                             f"{self.max_new_tokens})")
        if self.prefill_dtype not in (None, "bfloat16", "float16"):
            raise ValueError(f"prefill_dtype must be None, 'bfloat16' or 'float16' (got {self.prefill_dtype!r})")


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
    reward: float | None = None
    """Set by alfrl.advantage."""
    advantage: float | None = None
    """Set by alfrl.advantage."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> "Trajectory":
        data = json.loads(line)
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
    """Read trajectories written by :func:`save_trajectories`."""
    with Path(path).open() as f:
        return [Trajectory.from_json(line) for line in f if line.strip()]


def branch_seed(seed: int, game_id: str, branch: int) -> int:
    """A stable per-branch seed: same run seed, game and branch give the same samples."""
    return zlib.crc32(f"{seed}:{game_id}:{branch}".encode())


@dataclass
class _Branch:
    prompt: list[int]
    history: list[dict]
    mask: list[int]
    logprobs: list[float]
    turns: list[Turn] = field(default_factory=list)
    invalid: int = 0
    prefilled: int = 0
    sampled: int = 0
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    end_reason: str = ""
    won: bool = False
    prompt_tokens: int = 0


def rollout_group(policy, game, config: RolloutConfig | None = None, env: GroupEnv | None = None,
                  fmt: ChatFormat | None = None, session=None) -> list[Trajectory]:
    """Play ``config.k`` trajectories of ``game`` (a GameSpec) with ``policy``; one record per branch.

    Pass an open ``env`` (with ``k`` copies) to reuse its workers across groups, and a
    ``session`` (e.g. :class:`alfrl.scripted.ScriptedSession`) to play scripted replies
    instead of sampling.
    """
    config = config or RolloutConfig()
    fmt = fmt or ChatFormat(policy.tokenizer)
    own_env = env is None
    env = env or GroupEnv(k=config.k, max_steps=config.max_steps, workers=config.workers)
    if env.k != config.k or env.max_steps != config.max_steps:
        raise ValueError(f"the env has k={env.k}, max_steps={env.max_steps}; the config wants "
                         f"k={config.k}, max_steps={config.max_steps}")
    try:
        return _play(policy, [game] * config.k, config, env, fmt, session)
    finally:
        if own_env:
            env.close()


def rollout_games(policy, games: list, config: RolloutConfig | None = None, env: GroupEnv | None = None,
                  fmt: ChatFormat | None = None) -> list[Trajectory]:
    """One trajectory of each game, all decoded in one batch (evaluation plays games this way).

    ``config.k`` is ignored: the env (if given) needs ``len(games)`` copies. Branch seeds are those
    :func:`rollout_group` gives branch 0 of each game, so the result equals playing the games one
    at a time with ``k=1``, up to float rounding in the batched forward pass.
    """
    config = replace(config or RolloutConfig(), k=len(games))
    fmt = fmt or ChatFormat(policy.tokenizer)
    own_env = env is None
    env = env or GroupEnv(k=config.k, max_steps=config.max_steps, workers=config.workers)
    if env.k != len(games) or env.max_steps != config.max_steps:
        raise ValueError(f"the env has k={env.k}, max_steps={env.max_steps}; {len(games)} games with "
                         f"max_steps={config.max_steps} need as many copies")
    try:
        return _play(policy, list(games), config, env, fmt, None)
    finally:
        if own_env:
            env.close()


def _play(policy, games: list, config: RolloutConfig, env: GroupEnv, fmt: ChatFormat, session) -> list[Trajectory]:
    """Branch b plays ``games[b]``: one game K times (a group) or K different games (evaluation)."""
    tokenizer = policy.tokenizer
    k = len(games)
    index = [sum(g.game_id == games[b].game_id for g in games[:b]) for b in range(k)]  # branch within its game
    seeds = [branch_seed(config.seed, games[b].game_id, index[b]) for b in range(k)]
    begin = time.perf_counter()
    one_game = all(g.game_id == games[0].game_id for g in games)
    starts = [env.reset(games[0])] * k if one_game else env.reset_each(games)
    reset_seconds = time.perf_counter() - begin
    branches = {}
    for b, start in enumerate(starts):
        prompt = fmt.initial_prompt(start.task, start.observation, start.admissible_commands)
        if len(prompt) >= config.max_trajectory_tokens:
            raise ValueError(f"the first prompt of {games[b].game_id} has {len(prompt)} tokens, no fewer than "
                             f"max_trajectory_tokens={config.max_trajectory_tokens}; raise the budget")
        branches[b] = _Branch(prompt=list(prompt), history=fmt.messages(start.task, start.observation,
                                                                       start.admissible_commands),
                              mask=[0] * len(prompt), logprobs=[0.0] * len(prompt), env_seconds=reset_seconds / k,
                              prompt_tokens=len(prompt))
    session = session or new_group_session(policy, seeds, batched=config.batched,
                                           prefill_dtype=config.prefill_dtype)
    live = list(range(k))
    while live:
        budget = {b: config.max_trajectory_tokens - len(branches[b].prompt) for b in live}
        # One sampling call for every live branch; the tightest token budget bounds the batch, and a
        # branch whose reply would overflow its own budget is cut there below.
        cfg = SampleConfig(temperature=config.temperature, top_p=config.top_p,
                           max_new_tokens=min(config.max_new_tokens, max(budget[b] for b in live)))
        tick = time.perf_counter()
        samples = session.sample({b: branches[b].prompt for b in live}, cfg)
        model_share = (time.perf_counter() - tick) / len(live)
        actions, parsed, texts = {}, {}, {}
        for b in live:
            sample, br = samples[b], branches[b]
            if len(sample.tokens) > budget[b]:  # cut at this branch's own budget
                sample.tokens, sample.logprobs = sample.tokens[:budget[b]], sample.logprobs[:budget[b]]
                sample.stopped_on = "budget"
            br.model_seconds += model_share
            br.prefilled += sample.prefilled
            br.sampled += len(sample.tokens)
            texts[b] = tokenizer.decode(sample.tokens, skip_special_tokens=True)
            parsed[b] = parse_reply(texts[b])
            actions[b] = parsed[b].action  # None (bad format) uses a step and changes nothing
        tick = time.perf_counter()
        results = env.step(actions)
        env_share = (time.perf_counter() - tick) / len(live)
        for b in live:
            br, sample, reply, result = branches[b], samples[b], parsed[b], results[b]
            br.env_seconds += env_share
            if not reply.valid:
                status, observation = BAD_FORMAT.format(reason=reply.reason), NOTHING_HAPPENS
            elif not result.admissible:
                status, observation = NOT_ADMISSIBLE.format(action=reply.action), NOTHING_HAPPENS
            else:
                status, observation = (COMPLETED if result.won else EXECUTED), result.observation
            valid = reply.valid and result.admissible
            br.invalid += not valid
            br.turns.append(Turn(reply=texts[b], action=reply.action, valid_format=reply.valid,
                                 admissible=valid, reason="" if valid else status, observation=observation,
                                 sampled=len(sample.tokens), stopped_on=sample.stopped_on))
            br.mask += [1] * len(sample.tokens)
            br.logprobs += sample.logprobs
            if result.won or result.done:
                br.won = result.won
                br.end_reason = "won" if result.won else "max_steps"
                br.prompt = br.prompt + sample.tokens  # the trajectory ends with the last reply
                continue
            br.history = br.history + [{"role": "assistant", "content": texts[b]}]
            content = tool_result_message(status, observation, result.admissible_commands)
            nxt = build_next_prompt(fmt, br.prompt, sample.tokens, br.history, content)
            if len(nxt) >= config.max_trajectory_tokens:  # no room for another reply: end on this one
                br.end_reason = "max_tokens"
                br.prompt = br.prompt + sample.tokens
                continue
            br.history = br.history + [{"role": fmt.tool_role, "content": content}]
            added = len(nxt) - len(br.prompt) - len(sample.tokens)
            br.mask += [0] * added
            br.logprobs += [0.0] * added
            br.prompt = nxt
        done = [b for b in live if branches[b].end_reason]
        session.drop(done)
        live = [b for b in live if not branches[b].end_reason]
    out = []
    for b in range(k):
        br = branches[b]
        assert len(br.prompt) == len(br.mask) == len(br.logprobs) <= config.max_trajectory_tokens
        out.append(Trajectory(game_id=games[b].game_id, task_type=games[b].task_type, branch=index[b],
                              seed=seeds[b], tokens=br.prompt, mask=br.mask, logprobs=br.logprobs,
                              turns=br.turns, won=br.won, steps=len(br.turns), invalid=br.invalid,
                              end_reason=br.end_reason, prompt_tokens=br.prompt_tokens, prefilled=br.prefilled,
                              sampled=br.sampled, model_seconds=br.model_seconds, env_seconds=br.env_seconds))
    return out


def rollout_batch(policy, games: list, config: RolloutConfig | None = None, progress: bool = True,
                  fmt: ChatFormat | None = None) -> list[list[Trajectory]]:
    """One group per game, ``config.groups_per_batch`` groups decoded together, with a progress bar.

    Branch seeds depend only on the game and the branch index, so the groups are the same
    whether they are played together or one at a time (up to float rounding).
    """
    config = config or RolloutConfig()
    fmt = fmt or ChatFormat(policy.tokenizer)
    per_batch = max(1, config.groups_per_batch)
    groups: list[list[Trajectory]] = []
    env = None
    bar = tqdm(total=len(games), desc="rollout groups", unit="group", disable=not progress)
    try:
        for start in range(0, len(games), per_batch):
            chunk = games[start:start + per_batch]
            rows = config.k * len(chunk)
            if env is None or env.k != rows:
                if env is not None:
                    env.close()
                env = GroupEnv(k=rows, max_steps=config.max_steps, workers=config.workers)
            played = _play(policy, [g for g in chunk for _ in range(config.k)], config, env, fmt, None)
            groups += [played[i * config.k:(i + 1) * config.k] for i in range(len(chunk))]
            done = [t for g in groups for t in g]
            bar.update(len(chunk))
            bar.set_postfix(success=f"{sum(t.won for t in done) / len(done):.2f}",
                            invalid=f"{sum(t.invalid for t in done) / len(done):.1f}")
    finally:
        bar.close()
        if env is not None:
            env.close()
    return groups
