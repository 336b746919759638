"""Scripted replies in place of the model: the expert's walkthrough as tool calls, or any texts.

A :class:`ScriptedSession` has the sampler's interface (:class:`alfrl.agent.sampler.GroupSession`),
so :func:`alfrl.rl.rollout.rollout_group` plays scripted branches through exactly the same
prompts, tool results and token accounting as the model's. Uses: tests of the rollout
logic, teaching examples with a known outcome, and expert trajectories for a supervised
warm start, rendered token for token as a rollout would.

Used in notebooks 03 and 05 (scripted groups whose outcomes are known).
"""

from __future__ import annotations

import json

import torch

from alfrl.agent.protocol import PLAN_PREFIX, TOOL_NAME, ChatFormat, is_planner_turn
from alfrl.agent.sampler import SampleConfig, Sample


def tool_call(action: str) -> str:
    """The reply that calls the tool with ``action``, in the protocol's JSON form."""
    arguments = json.dumps({"name": TOOL_NAME, "arguments": {"action": action}})
    return f"<tool_call>\n{arguments}\n</tool_call>"


def expert_replies(game) -> list[str]:
    """The handcoded expert's walkthrough of ``game`` (a GameSpec) as tool-call replies."""
    return [tool_call(action) for action in game.walkthrough]


def planned_expert_replies(game, plan_every: int) -> list[str]:
    """The expert's walkthrough as a hierarchical player's replies: on each planner turn (the rollout's
    rule, :func:`alfrl.agent.protocol.is_planner_turn`) the line ``Subgoal: <the first subgoal not reached yet>``
    comes before the tool call. The subgoals come from the engine's facts as the walkthrough is played."""
    from alfrl.world.engine import make_fast_engine
    from alfrl.world.subgoals import game_progress

    engine = make_fast_engine(facts=True)
    engine.load(str(game.path))
    progress = game_progress(game.path)
    count = progress.update(engine.reset()["facts"])
    replies, planning = [], is_planner_turn(0, False, plan_every)
    for step, action in enumerate(game.walkthrough, start=1):
        ahead = [goal for goal, done in zip(progress.goals, progress.reached) if not done]
        plan = f"{PLAN_PREFIX} {ahead[0].text()}\n" if planning and ahead else ""
        replies.append(plan + tool_call(action))
        state, _, _ = engine.step(action)
        before, count = count, progress.update(state["facts"])
        planning = is_planner_turn(step, count > before, plan_every)
    return replies


class ScriptedSession:
    """Each branch 'samples' the next text of its script, followed by the end-of-turn token.

    Logprobs are 0.0, or with ``model`` the model's own logprobs of the scripted tokens at
    ``temperature`` (teacher forcing: what the model would have given them), so scripted
    trajectories can go through the PPO update like sampled ones.
    """

    def __init__(self, fmt: ChatFormat, scripts: dict[int, list[str]], model=None, temperature: float = 1.0):
        self.fmt, self.model, self.temperature = fmt, model, temperature
        self.scripts = {b: list(texts) for b, texts in scripts.items()}
        self.branches = sorted(self.scripts)
        self.read: dict[int, list[int]] = {b: [] for b in self.branches}
        self.end_of_turn = fmt.encode(fmt.closing)[0]
        self.calls: list[list[int]] = []
        """The live branches of each sampling call."""

    def drop(self, branches: list[int]) -> None:
        self.branches = [b for b in self.branches if b not in set(branches)]

    def sample(self, prompts: dict[int, list[int]], cfg: SampleConfig) -> dict[int, Sample]:
        if sorted(prompts) != self.branches:
            raise ValueError(f"prompts are for {sorted(prompts)}, live branches are {self.branches}")
        self.calls.append(sorted(prompts))
        out = {}
        for b, prompt in prompts.items():
            if prompt[:len(self.read[b])] != self.read[b]:
                raise ValueError(f"branch {b}: the prompt does not extend what was read before")
            if not self.scripts[b]:
                raise ValueError(f"branch {b} ran out of scripted replies")
            tokens = (self.fmt.encode(self.scripts[b].pop(0)) + [self.end_of_turn])[:cfg.max_new_tokens]
            stopped = "eos" if tokens[-1] == self.end_of_turn else "budget"
            out[b] = Sample(tokens=tokens, logprobs=self._logprobs(prompt, tokens), stopped_on=stopped,
                            prefilled=len(prompt) - len(self.read[b]))
            self.read[b] = list(prompt) + tokens[:-1]
        return out

    def _logprobs(self, prompt: list[int], tokens: list[int]) -> list[float]:
        if self.model is None:
            return [0.0] * len(tokens)
        from alfrl.rl.logprobs import sequence_logprobs
        with torch.no_grad():
            logp = sequence_logprobs(self.model, [list(prompt) + tokens], self.temperature)[0]
        return [float(x) for x in logp[len(prompt):]]
