"""Group rollouts: K trajectories of one game, played by the policy through the tool protocol.

One turn for every live branch of a group:

1. the sampler reads what is new in each branch's prompt and samples one reply per
   branch (batched; on turn 0 the shared prompt is read once);
2. each reply is parsed (:func:`alfrl.agent.protocol.parse_reply`); a valid call whose action
   is admissible moves that branch's copy of the game. An invalid reply (bad format, or
   an action not in the list) does not: the tool result says why, and the branch is
   charged one invalid action and one step;
3. the tool result is appended by prefix extension (:func:`alfrl.agent.protocol.build_next_prompt`).

Hierarchical play (``plan_every``): the first turn, every ``plan_every``-th, and the turn right after a
subgoal is reached are planner turns. Their message asks the model to begin its reply with one line
``Subgoal: ...`` (:data:`alfrl.agent.protocol.PLAN_REQUEST`); the line is part of the sampled reply, so it is
trained like the rest, and the turn is still one step of the game.

With vLLM (a session whose rows are ``independent``) there is no per-turn barrier unless ``lockstep`` asks for
one: each branch sends its next request as soon as its own game step returns (:func:`_play_unbarred`).

A branch ends when it wins, runs out of steps (``max_steps``), or its next turn would not
fit in ``max_trajectory_tokens``. Its record keeps every token with a mask that is 1
exactly on the tokens the model sampled, and those tokens' logprobs: what the PPO update
needs (:mod:`alfrl.rl.ppo`).

Taught in notebook 03 (one turn of the group loop, inline, then this module); used by 04-06; notebook 07
plays a hierarchical episode.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

from tqdm.auto import tqdm

from alfrl.agent.models import fit_context
from alfrl.agent.protocol import (BAD_FORMAT, COMPLETED, EXECUTED, NOT_ADMISSIBLE, PLAN_REQUEST, ChatFormat,
                                  build_next_prompt, check_action_list, is_planner_turn, parse_plan, parse_reply,
                                  plan_token_count, policy_format)
from alfrl.agent.sampler import Sample, SampleConfig, new_group_session
from alfrl.rl.trajectory import (END_REASONS, Trajectory, Turn, load_trajectories,  # noqa: F401 (re-exported)
                                 save_trajectories)
from alfrl.world.env import NOTHING_HAPPENS, GroupEnv


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
    """Decode the live branches of a group in one batch (see alfrl.agent.kvcache)."""
    prefill_dtype: str | None = None
    """Read prompts and tool results under this autocast dtype ("bfloat16": ~1.7x faster reads on a
    CPU with AMX/avx512_bf16); decode steps stay in the model's precision. None: off."""
    draft_tokens: int = 0
    """Speculative decoding by prompt lookup: tokens guessed from each branch's history and checked in
    one forward pass (see alfrl.agent.sampler; the replies keep plain sampling's distribution). 0: off."""
    plan_every: int = 0
    """Hierarchical play: planner turns (the reply begins with one line "Subgoal: ...") first, every this many
    steps, and right after a subgoal is reached. 0: off."""
    groups_per_batch: int = 1
    """Groups that :func:`rollout_batch` plays together, k x this many rows decoded in one batch.
    On a CPU the decode step reads the weights once whatever the batch, so 2 groups of 4 take
    little more time than one; on a GPU, memory for the KV caches sets the limit."""
    actions: str = "auto"
    """Which tool results list the available actions: "every", "first" (the first message, then only after
    an invalid reply) or "local" (also the actions other than go to, every turn); "auto": the protocol the
    policy's adapter was trained in (alfrl.agent.protocol.ACTION_LISTS, resolve_actions)."""
    lockstep: bool = False
    """With an engine whose rows are independent (vLLM): still sample every live branch's turn together, each
    turn waiting for the slowest reply, as the built-in sampler must. False: each branch sends its next request
    as soon as its own game step returns (the same replies, drawn from the same seeds)."""

    def __post_init__(self):
        if self.k < 1 or self.max_steps < 1 or self.max_new_tokens < 1:
            raise ValueError(f"k, max_steps and max_new_tokens must be >= 1 (got {self.k}, {self.max_steps}, "
                             f"{self.max_new_tokens})")
        if self.plan_every < 0:
            raise ValueError(f"plan_every must be >= 0 (0 = no planner turns; got {self.plan_every})")
        if self.draft_tokens < 0:
            raise ValueError(f"draft_tokens must be >= 0 (0 = no speculative decoding; got {self.draft_tokens})")
        check_action_list(self.actions, auto_ok=True)
        if self.prefill_dtype not in (None, "bfloat16", "float16"):
            raise ValueError(f"prefill_dtype must be None, 'bfloat16' or 'float16' (got {self.prefill_dtype!r})")


def branch_seed(seed: int, game_id: str, branch: int) -> int:
    """A stable per-branch seed: same run seed, game and branch give the same samples."""
    return zlib.crc32(f"{seed}:{game_id}:{branch}".encode())


@dataclass
class _Branch:
    """A branch while it plays: the trajectory so far, and its bookkeeping."""

    tokens: list[int]
    """Every token so far: the first prompt, then each reply and tool result (what the next turn extends)."""
    history: list[dict]
    """The same conversation as chat messages (what the chat template renders)."""
    mask: list[int]
    logprobs: list[float]
    turns: list[Turn] = field(default_factory=list)
    invalid: int = 0
    prefilled: int = 0
    sampled: int = 0
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    entropy: float = 0.0
    end_reason: str = ""
    won: bool = False
    prompt_tokens: int = 0
    subgoals: int = 0
    subgoals_total: int = 0
    planning: bool = False
    """Whether the next reply is a planner turn's."""

    def end(self, reason: str, last_reply: list[int]) -> None:
        """The trajectory ends with its last reply."""
        self.end_reason = reason
        self.tokens = self.tokens + last_reply


def rollout_group(policy, game, config: RolloutConfig | None = None, env: GroupEnv | None = None,
                  fmt: ChatFormat | None = None, session=None,
                  on_turn: Callable[[int, int], None] | None = None) -> list[Trajectory]:
    """Play ``config.k`` trajectories of ``game`` (a GameSpec) with ``policy``; one record per branch.

    Pass an open ``env`` (with ``k`` copies) to reuse its workers across groups, a ``session``
    (e.g. :class:`alfrl.rl.scripted.ScriptedSession`) to play scripted replies instead of sampling,
    and ``on_turn(turn, live_branches)`` to hear after every turn (progress).
    """
    config = config or RolloutConfig()
    fmt = fmt or policy_format(policy, config.actions)
    own_env = env is None
    env = env or GroupEnv(k=config.k, max_steps=config.max_steps, workers=config.workers)
    if env.k != config.k or env.max_steps != config.max_steps:
        raise ValueError(f"the env has k={env.k}, max_steps={env.max_steps}; the config wants "
                         f"k={config.k}, max_steps={config.max_steps}")
    try:
        return _play(policy, [game] * config.k, config, env, fmt, session, on_turn=on_turn)
    finally:
        if own_env:
            env.close()


def rollout_games(policy, games: list, config: RolloutConfig | None = None, env: GroupEnv | None = None,
                  fmt: ChatFormat | None = None,
                  on_turn: Callable[[int, int], None] | None = None) -> list[Trajectory]:
    """One trajectory of each game, all decoded in one batch (evaluation plays games this way).

    ``config.k`` is ignored: the env (if given) needs ``len(games)`` copies. Branch seeds are those
    :func:`rollout_group` gives branch 0 of each game, so the result equals playing the games one
    at a time with ``k=1``, up to float rounding in the batched forward pass.
    """
    config = replace(config or RolloutConfig(), k=len(games))
    fmt = fmt or policy_format(policy, config.actions)
    own_env = env is None
    env = env or GroupEnv(k=config.k, max_steps=config.max_steps, workers=config.workers)
    if env.k != len(games) or env.max_steps != config.max_steps:
        raise ValueError(f"the env has k={env.k}, max_steps={env.max_steps}; {len(games)} games with "
                         f"max_steps={config.max_steps} need as many copies")
    try:
        return _play(policy, list(games), config, env, fmt, None, on_turn=on_turn)
    finally:
        if own_env:
            env.close()


def _start(games: list, config: RolloutConfig, env: GroupEnv, fmt: ChatFormat) -> dict[int, _Branch]:
    """Reset the games (one game K times, or K games) and build each branch's first prompt."""
    k = len(games)
    begin = time.perf_counter()
    one_game = all(g.game_id == games[0].game_id for g in games)
    starts = [env.reset(games[0])] * k if one_game else env.reset_each(games)
    reset_share = (time.perf_counter() - begin) / k
    branches = {}
    planning = is_planner_turn(0, False, config.plan_every)
    request = PLAN_REQUEST if planning else ""
    for b, start in enumerate(starts):
        prompt = fmt.initial_prompt(start.task, start.observation, start.admissible_commands, request)
        if len(prompt) >= config.max_trajectory_tokens:
            raise ValueError(f"the first prompt of {games[b].game_id} has {len(prompt)} tokens, no fewer than "
                             f"max_trajectory_tokens={config.max_trajectory_tokens}; raise the budget")
        branches[b] = _Branch(tokens=list(prompt), history=fmt.messages(start.task, start.observation,
                                                                       start.admissible_commands, request),
                              mask=[0] * len(prompt), logprobs=[0.0] * len(prompt), env_seconds=reset_share,
                              prompt_tokens=len(prompt), subgoals=env.subgoals[b],
                              subgoals_total=env.subgoals_total[b], planning=planning)
    return branches


def _sample_replies(session, branches: dict[int, _Branch], live: list[int], config: RolloutConfig,
                    tokenizer) -> tuple[dict[int, Sample], dict[int, str]]:
    """Step 1: one reply per live branch, sampled together; each cut at its branch's token budget."""
    budget = {b: _budget(branches[b], config) for b in live}
    # One sampling call for every live branch; the loosest budget bounds the batch, and a branch whose
    # reply would overflow its own budget is cut there.
    cfg = _sample_config(config, max(budget[b] for b in live))
    tick = time.perf_counter()
    samples = session.sample({b: branches[b].tokens for b in live}, cfg)
    model_share = (time.perf_counter() - tick) / len(live)
    texts = {b: _take_reply(branches[b], samples[b], budget[b], model_share, tokenizer) for b in live}
    return samples, texts


def _budget(br: _Branch, config: RolloutConfig) -> int:
    """The tokens a branch's trajectory has left."""
    return config.max_trajectory_tokens - len(br.tokens)


def _sample_config(config: RolloutConfig, budget: int) -> SampleConfig:
    return SampleConfig(temperature=config.temperature, top_p=config.top_p, draft_tokens=config.draft_tokens,
                        max_new_tokens=min(config.max_new_tokens, budget))


def _take_reply(br: _Branch, sample: Sample, budget: int, model_seconds: float, tokenizer) -> str:
    """Cut a reply at its branch's token budget, count it, and return its text."""
    if len(sample.tokens) > budget:
        sample.tokens, sample.logprobs = sample.tokens[:budget], sample.logprobs[:budget]
        sample.entropies = sample.entropies[:budget]
        sample.stopped_on = "budget"
    br.model_seconds += model_seconds
    br.prefilled += sample.prefilled
    br.sampled += len(sample.tokens)
    br.entropy += sum(sample.entropies)
    return tokenizer.decode(sample.tokens, skip_special_tokens=True)


def _tool_result(reply, result) -> tuple[str, str]:
    """Step 3: the status line and observation the tool answers with (an invalid reply changes nothing)."""
    if not reply.valid:
        return BAD_FORMAT.format(reason=reply.reason), NOTHING_HAPPENS
    if not result.admissible:
        return NOT_ADMISSIBLE.format(action=reply.action), NOTHING_HAPPENS
    return (COMPLETED if result.won else EXECUTED), result.observation


def _record_turn(br: _Branch, sample: Sample, text: str, reply, result, fmt: ChatFormat,
                 config: RolloutConfig) -> None:
    """Step 4: record the turn; end the branch, or grow its tokens by prefix extension with the tool result."""
    status, observation = _tool_result(reply, result)
    valid = reply.valid and result.admissible
    br.invalid += not valid
    plan = (parse_plan(text) or "") if br.planning else None
    br.turns.append(Turn(reply=text, action=reply.action, valid_format=reply.valid, admissible=valid,
                         reason="" if valid else status, observation=observation, sampled=len(sample.tokens),
                         stopped_on=sample.stopped_on, plan=plan,
                         plan_tokens=plan_token_count(fmt.tokenizer, sample.tokens, text) if plan else 0))
    br.mask += [1] * len(sample.tokens)
    br.logprobs += sample.logprobs
    reached = result.subgoals > br.subgoals
    br.subgoals = result.subgoals
    br.planning = is_planner_turn(len(br.turns), reached, config.plan_every)
    if result.won or result.done:
        br.won = result.won
        br.end("won" if result.won else "max_steps", sample.tokens)
        return
    history = br.history + [{"role": "assistant", "content": text}]
    content = fmt.tool_content(status, observation, result.admissible_commands, valid,
                               PLAN_REQUEST if br.planning else "")
    nxt = build_next_prompt(fmt, br.tokens, sample.tokens, history, content)
    if len(nxt) >= config.max_trajectory_tokens:  # no room for another reply: end on this one
        br.end("max_tokens", sample.tokens)
        return
    br.history = history + [{"role": fmt.tool_role, "content": content}]
    added = len(nxt) - len(br.tokens) - len(sample.tokens)
    br.mask += [0] * added
    br.logprobs += [0.0] * added
    br.tokens = nxt


def _play(policy, games: list, config: RolloutConfig, env: GroupEnv, fmt: ChatFormat, session,
          on_turn: Callable[[int, int], None] | None = None) -> list[Trajectory]:
    """Branch b plays ``games[b]``: one game K times (a group) or K different games (evaluation).
    ``on_turn(turn, live)`` is called after every turn (progress)."""
    if config.actions != "auto" and fmt.actions != config.actions:  # "auto": a given format's own protocol
        raise ValueError(f"the chat format lists actions {fmt.actions!r} but the rollout config says "
                         f"{config.actions!r}; build it with policy_format(policy, config.actions)")
    config = fit_context(config, policy)
    k = len(games)
    index = [sum(g.game_id == games[b].game_id for g in games[:b]) for b in range(k)]  # branch within its game
    seeds = [branch_seed(config.seed, games[b].game_id, index[b]) for b in range(k)]
    branches = _start(games, config, env, fmt)
    session = session or new_group_session(policy, seeds, batched=config.batched,
                                           prefill_dtype=config.prefill_dtype)
    if getattr(session, "independent", False) and not config.lockstep:
        _play_unbarred(policy, branches, config, env, fmt, session, on_turn)
    else:
        live, turn = list(range(k)), 0
        while live:
            samples, texts = _sample_replies(session, branches, live, config, policy.tokenizer)  # 1. sample
            _step_and_record(branches, live, samples, texts, config, env, fmt)  # 2-4. parse, step, record
            session.drop([b for b in live if branches[b].end_reason])
            live = [b for b in live if not branches[b].end_reason]
            turn += 1
            if on_turn:
                on_turn(turn, len(live))
    return [_trajectory(games[b], branches[b], index[b], seeds[b], config) for b in range(k)]


def _step_and_record(branches: dict[int, _Branch], rows: list[int], samples: dict[int, Sample],
                     texts: dict[int, str], config: RolloutConfig, env: GroupEnv, fmt: ChatFormat) -> None:
    """Steps 2-4 for ``rows``: parse each reply, step those game copies together, record each turn."""
    replies = {b: parse_reply(texts[b]) for b in rows}  # 2. parse: None (bad format) uses a step, moves nothing
    tick = time.perf_counter()
    results = env.step({b: replies[b].action for b in rows})  # 3. step the game copies
    env_share = (time.perf_counter() - tick) / len(rows)
    for b in rows:  # 4. record, and extend each prompt with its tool result
        branches[b].env_seconds += env_share
        _record_turn(branches[b], samples[b], texts[b], replies[b], results[b], fmt, config)


def _play_unbarred(policy, branches: dict[int, _Branch], config: RolloutConfig, env: GroupEnv, fmt: ChatFormat,
                   session, on_turn: Callable[[int, int], None] | None) -> None:
    """The turn loop without a barrier, for a session whose rows are independent (vLLM): each branch's
    next request is sent as soon as its own game step returns, so a short reply never waits for the longest
    one of its turn, and the server batches whatever requests are in flight. The env is stepped only from
    this thread (its worker pipes are not shared); the replies that arrive together are stepped together.
    Each branch's requests carry its own seeds in order, so the replies are those of the lockstep loop."""
    pending: dict[Future, int] = {}
    with ThreadPoolExecutor(max_workers=len(branches)) as pool:
        def send(b: int) -> None:
            budget = _budget(branches[b], config)
            pending[pool.submit(session.sample_one, b, branches[b].tokens, _sample_config(config, budget))] = b

        for b in branches:
            send(b)
        try:
            while pending:
                tick = time.perf_counter()
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                model_share = (time.perf_counter() - tick) / len(done)  # the wall time waited, split
                finished = {pending.pop(future): future for future in done}
                rows = sorted(finished)
                samples = {b: finished[b].result() for b in rows}
                texts = {b: _take_reply(branches[b], samples[b], _budget(branches[b], config), model_share,
                                        policy.tokenizer) for b in rows}
                _step_and_record(branches, rows, samples, texts, config, env, fmt)
                ended = [b for b in rows if branches[b].end_reason]
                session.drop(ended)
                for b in rows:
                    if not branches[b].end_reason:
                        send(b)
                if on_turn:
                    on_turn(max(len(br.turns) for br in branches.values()),
                            sum(not br.end_reason for br in branches.values()))
        finally:
            for future in pending:
                future.cancel()


def _trajectory(game, br: _Branch, branch: int, seed: int, config: RolloutConfig) -> Trajectory:
    """The finished branch as a record."""
    assert len(br.tokens) == len(br.mask) == len(br.logprobs) <= config.max_trajectory_tokens
    return Trajectory(game_id=game.game_id, task_type=game.task_type, branch=branch, seed=seed, tokens=br.tokens,
                      mask=br.mask, logprobs=br.logprobs, turns=br.turns, won=br.won, steps=len(br.turns),
                      invalid=br.invalid, end_reason=br.end_reason, prompt_tokens=br.prompt_tokens,
                      prefilled=br.prefilled, sampled=br.sampled, model_seconds=br.model_seconds,
                      env_seconds=br.env_seconds, entropy=br.entropy, subgoals=br.subgoals,
                      subgoals_total=br.subgoals_total)


def rollout_batch(policy, games: list, config: RolloutConfig | None = None, progress: bool = True,
                  fmt: ChatFormat | None = None) -> list[list[Trajectory]]:
    """One group per game, ``config.groups_per_batch`` groups decoded together, with a progress bar.

    Branch seeds depend only on the game and the branch index, so the groups are the same
    whether they are played together or one at a time (up to float rounding).
    """
    config = config or RolloutConfig()
    fmt = fmt or policy_format(policy, config.actions)
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
            def on_turn(turn: int, live: int, first=start) -> None:
                bar.set_description(f"rollout groups {first + 1}-{first + len(chunk)}: turn {turn}/{config.max_steps}, "
                                    f"{live} of {rows} playing", refresh=True)

            played = _play(policy, [g for g in chunk for _ in range(config.k)], config, env, fmt, None,
                           on_turn=on_turn if progress else None)
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
