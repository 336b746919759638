"""Hierarchical play (``plan_every``): planner turns through the same protocol, on the real game and the
real model. The subgoal line is sampled (mask 1, trained), the turn is still one game step, and the
viewer tells planner tokens from the actor's."""

from __future__ import annotations

import pytest

from alfrl.agent.protocol import (EXECUTED, PLAN_REQUEST, ChatFormat, is_planner_turn, parse_plan, plan_token_count,
                                  tool_result_message)
from alfrl.rl.rollout import RolloutConfig, rollout_group
from alfrl.rl.scripted import ScriptedSession, expert_replies, planned_expert_replies, tool_call
from alfrl.rl.viewer import PLANNER, token_roles, trajectory_html
from alfrl.world.engine import make_fast_engine
from alfrl.world.env import GroupEnv
from alfrl.world.subgoals import game_progress

CLEAN = "pick_clean_then_place_in_recep"


@pytest.mark.parametrize("reply, plan", [
    ("Subgoal: take a mug\n" + tool_call("go to shelf 1"), "take a mug"),
    ("  Subgoal:   clean the mug  \n\nI go." + tool_call("go to sinkbasin 1"), "clean the mug"),
    ("Subgoal: heat it" + tool_call("look"), "heat it"),             # the call right after the line
    ("Subgoal: heat it", "heat it"),                                   # no call at all: the plan still counts
    ("I will take a mug.\nSubgoal: take a mug\n" + tool_call("look"), None),  # not the first line
    ("Subgoal:\n" + tool_call("look"), None),                          # empty
    ("subgoal: take a mug\n" + tool_call("look"), None),               # the prefix is exact
    (tool_call("look"), None),
])
def test_parse_plan(reply, plan):
    assert parse_plan(reply) == plan


def test_planner_turns_first_every_n_and_after_a_subgoal():
    assert [is_planner_turn(s, False, 3) for s in range(7)] == [True, False, False, True, False, False, True]
    assert is_planner_turn(4, True, 3) and not is_planner_turn(0, True, 0)


def test_plan_token_count_covers_the_subgoal_line(policy):
    tok = policy.tokenizer
    for reply, line in [("Subgoal: take a mug\n" + tool_call("look"), "Subgoal: take a mug\n"),
                        ("Subgoal: heat it" + tool_call("look"), "Subgoal: heat it")]:
        tokens = tok(reply, add_special_tokens=False)["input_ids"]
        n = plan_token_count(tok, tokens, reply)
        assert tok.decode(tokens[:n]).startswith(line) and not tok.decode(tokens[:n - 1]).startswith(line)
    assert plan_token_count(tok, tok(tool_call("look"))["input_ids"], tool_call("look")) == 0


@pytest.fixture(scope="module")
def game(tiny_games):
    return next(g for g in tiny_games.games("valid_seen") if g.task_type == CLEAN)


def test_hierarchical_expert_group_on_the_real_game(monkeypatch, policy, game):
    """The expert with plan lines, and without them, through the real rollout with planner turns every 3
    steps: the same game steps and outcome; plans where the rule says; token-exact prompts with the
    request on exactly the planner turns; the viewer's planner tokens are the subgoal lines."""
    fmt = ChatFormat(policy.tokenizer)
    planned = planned_expert_replies(game, plan_every=3)
    scripts = {0: planned, 1: expert_replies(game)}
    monkeypatch.setattr("alfrl.rl.rollout.new_group_session", lambda *a, **k: ScriptedSession(fmt, scripts))
    t0, t1 = rollout_group(policy, game, RolloutConfig(k=2, max_steps=len(game.walkthrough), workers=0,
                                                       plan_every=3))
    goals = game_progress(game.path).goals
    assert [g.kind for g in goals] == ["hold", "clean", "place"]

    for t in (t0, t1):
        assert t.won and t.steps == len(game.walkthrough) and t.invalid == 0  # a plan line is no extra step
    planner_turns = [i for i, turn in enumerate(t0.turns) if turn.plan is not None]
    assert planner_turns == [i for i, turn in enumerate(t1.turns) if turn.plan is not None]
    assert planner_turns == sorted(set(range(0, t0.steps, 3)) | set(after_subgoal(game)))
    assert len(after_subgoal(game)) == 2  # taken, cleaned (placing it wins: no turn follows)
    assert [t0.turns[i].plan for i in planner_turns] == [p.split("\n")[0].removeprefix("Subgoal: ")
                                                         for p in (planned[i] for i in planner_turns)]
    assert t0.turns[0].plan == goals[0].text() and all(t1.turns[i].plan == "" for i in planner_turns)
    assert all(turn.plan_tokens == 0 for turn in t1.turns)

    # Token-exact: the prompt grown turn by turn is what the template renders of the whole conversation,
    # with the request closing exactly the messages before planner turns.
    history = conversation(fmt, game, t0)
    assert sum(PLAN_REQUEST in m["content"] for m in history) == len(planner_turns)
    full = fmt.encode(fmt.render(history, True))
    assert t0.tokens[:len(full)] == full and len(t0.tokens) == len(full) + t0.turns[-1].sampled

    roles = token_roles(t0, fmt)
    planner_text = policy.tokenizer.decode([tok for tok, r in zip(t0.tokens, roles) if r == PLANNER])
    assert planner_text == "".join(planned[i].split("\n")[0] + "\n" for i in planner_turns)
    assert all(m == 1 for m, r in zip(t0.mask, roles) if r == PLANNER)
    assert PLANNER not in token_roles(t1, fmt)
    assert "planner: a planner turn" in trajectory_html(t0, fmt) and "planner:" not in trajectory_html(t1, fmt)


def conversation(fmt: ChatFormat, game, t) -> list[dict]:
    """The messages of an all-valid trajectory ``t`` up to its last reply, rebuilt by replaying its actions
    in a fresh env, with the plan request before every turn that recorded a plan."""
    def request(i: int) -> str:
        return PLAN_REQUEST if t.turns[i].plan is not None else ""

    with GroupEnv(k=1, workers=0) as env:
        start = env.reset(game)
        history = fmt.messages(game.goal, start.observation, start.admissible_commands, request(0))
        for i, turn in enumerate(t.turns[:-1]):
            result = env.step({0: turn.action})[0]
            history += [{"role": "assistant", "content": turn.reply},
                        {"role": fmt.tool_role, "content": tool_result_message(
                            EXECUTED, result.observation, result.admissible_commands, request(i + 1))}]
    return history


def after_subgoal(game) -> list[int]:
    """The turns that follow a step on which the expert reached a subgoal."""
    engine = make_fast_engine(facts=True)
    engine.load(str(game.path))
    progress = game_progress(game.path)
    count = progress.update(engine.reset()["facts"])
    turns = []
    for step, action in enumerate(game.walkthrough, start=1):
        state, _, _ = engine.step(action)
        before, count = count, progress.update(state["facts"])
        if count > before:
            turns.append(step)
    return [i for i in turns if i < len(game.walkthrough)]


def test_real_model_planner_turns_are_sampled_and_asked_for(policy, game):
    """The real small model with planner turns every 2 steps: each planner turn's message carries the
    request, its reply is sampled like any other (mask 1 throughout), and plans are recorded only there."""
    config = RolloutConfig(k=2, max_steps=4, max_new_tokens=24, temperature=1.0, seed=3, workers=0, plan_every=2)
    fmt = ChatFormat(policy.tokenizer)
    for t in rollout_group(policy, game, config):
        text = policy.tokenizer.decode(t.tokens)
        asked = [turn.plan is not None for turn in t.turns]
        assert asked[0] and text.count(PLAN_REQUEST) == sum(asked)
        assert all(asked[i] for i in range(0, t.steps, 2))
        roles = token_roles(t, fmt)
        assert [r in ("sampled", PLANNER) for r in roles] == [m == 1 for m in t.mask]
        assert sum(r == PLANNER for r in roles) == sum(turn.plan_tokens for turn in t.turns)


def test_notebook_07_planner_by_hand_equals_the_package():
    """Notebook 07's planner-turn rule and plan reading, written out for the learner, are alfrl.agent.protocol's."""
    from test_notebooks import notebook_definitions

    defs = notebook_definitions("07_beyond_grpo.ipynb", "plan_by_hand")  # the cell defines both
    for reply in ("Subgoal: take a mug\n" + tool_call("look"), "Subgoal:\n" + tool_call("look"), tool_call("look"),
                  "I go.\nSubgoal: x", "  Subgoal: heat it" + tool_call("look"), "no plan here at all"):
        assert defs["plan_by_hand"](reply) == parse_plan(reply), reply
    for steps in range(10):
        for reached in (False, True):
            for every in (0, 1, 2, 5):
                assert defs["planner_turn_by_hand"](steps, reached, every) == is_planner_turn(steps, reached, every)


def test_sft_plan_every_renders_the_planned_expert(policy, game):
    """``python -m alfrl sft --plan-every 3``: the expert trajectories it learns from carry the plan lines, on
    the planner turns a rollout with --plan-every 3 asks on, inside the trained (mask 1) tokens."""
    from alfrl.imitation.sft import SFTConfig, expert_trajectories
    (plain,) = expert_trajectories(policy, [game], SFTConfig(), progress=False)
    (planned,) = expert_trajectories(policy, [game], SFTConfig(plan_every=3), progress=False)
    assert plain.won and planned.won and planned.steps == plain.steps
    assert all(turn.plan is None for turn in plain.turns)
    plans = [turn.plan for turn in planned.turns if turn.plan is not None]
    assert plans[0] == game_progress(game.path).goals[0].text() and all(plans)
    fmt = ChatFormat(policy.tokenizer)
    roles = token_roles(planned, fmt)
    assert sum(r == PLANNER for r in roles) == sum(turn.plan_tokens for turn in planned.turns) > 0
    assert planned.tokens[:planned.prompt_tokens] != plain.tokens[:plain.prompt_tokens]  # the request is asked
