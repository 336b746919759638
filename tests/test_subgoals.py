"""alfrl.world.subgoals: subgoals read from PDDL goals by hand, checked on hand-made facts, and reached in
order by ALFWorld's expert on every task type, on generated games and (when present) official ones."""

from __future__ import annotations

import json

import pytest

from alfrl import TASK_TYPES
from alfrl.world.engine import make_fast_engine
from alfrl.world.games import load_games
from alfrl.world.subgoals import Progress, State, Subgoal, game_subgoals, reached, subgoals

CLEAN = """(define (problem plan) (:domain alfred) (:objects spoon_1 - object)
  (:init (objectType spoon_1 SpoonType))
  (:goal (and (exists (?r - receptacle) (exists (?o - object)
     (and (cleanable ?o) (objectType ?o SpoonType) (receptacleType ?r CounterTopType) (isClean ?o)
          (inReceptacle ?o ?r)))))))"""
TWO = """(define (problem plan) (:domain alfred)
  (:goal (and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 AlarmClockType)
     (receptacleType ?r DresserType) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2))
     (objectType ?o2 AlarmClockType) (receptacleType ?r DresserType) (inReceptacle ?o2 ?r)))))))))"""
LIGHT = """(define (problem plan) (:domain alfred)
  (:goal (and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot DeskLampType)
     (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))
   (exists (?o - object ?a - agent) (and (objectType ?o AlarmClockType) (holds ?a ?o))))))"""


def test_subgoals_by_hand():
    assert subgoals(CLEAN) == [Subgoal("hold", "spoon"), Subgoal("clean", "spoon"),
                               Subgoal("place", "spoon", "countertop", ("isclean",), 1)]
    assert [g.text() for g in subgoals(CLEAN)] == ["take a spoon", "clean a spoon", "put a clean spoon in countertop"]
    assert [g.text() for g in subgoals(TWO)] == ["take an alarmclock", "put an alarmclock in dresser",
                                                 "put a second alarmclock in dresser"]
    # the lamp is not moved (its inReceptacle only says where it stands): take the clock, then turn the lamp on
    assert subgoals(LIGHT) == [Subgoal("hold", "alarmclock"), Subgoal("toggle", "desklamp")]
    assert [g.text() for g in subgoals(LIGHT)] == ["take an alarmclock", "turn on a desklamp"]
    with pytest.raises(ValueError, match="no \\(:goal"):
        subgoals("(define (problem plan) (:domain alfred))")


def test_reached_on_hand_made_facts():
    types = [("objecttype", "spoon 1", "spoontype "), ("objecttype", "spoon 2", "spoontype "),
             ("receptacletype", "countertop 1", "countertoptype "), ("receptacletype", "sinkbasin 1", "sinkbasintype ")]
    hold, clean, place = subgoals(CLEAN)
    start = State.of(types + [("inreceptacle", "spoon 1", "sinkbasin 1"), ("inreceptacle", "spoon 2", "countertop 1")])
    # spoon 2 is already on the counter, but not clean: the placement does not count
    assert [reached(g, start) for g in (hold, clean, place)] == [False, False, False]
    held = State.of(types + [("holds", "agent1", "spoon 1"), ("isclean", "spoon 1")])
    assert [reached(g, held) for g in (hold, clean, place)] == [True, True, False]
    done = State.of(types + [("isclean", "spoon 1"), ("inreceptacle", "spoon 1", "countertop 1")])
    assert [reached(g, done) for g in (hold, clean, place)] == [False, True, True]
    second = Subgoal("place", "spoon", "countertop", (), 2)
    both = State.of(types + [("inreceptacle", "spoon 1", "countertop 1"), ("inreceptacle", "spoon 2", "countertop 1")])
    assert reached(second, both) and not reached(second, start)


def test_progress_keeps_what_was_reached():
    types = [("objecttype", "spoon 1", "spoontype "), ("receptacletype", "countertop 1", "countertoptype ")]
    progress = Progress(CLEAN)
    assert progress.update(types) == 0
    assert progress.update(types + [("holds", "agent1", "spoon 1")]) == 1
    assert progress.update(types) == 1  # put down again: taking it still counts
    assert progress.update(types + [("isclean", "spoon 1"), ("inreceptacle", "spoon 1", "countertop 1")]) == 3
    assert progress.reached == [True, True, True]


def expert_progress(game) -> list[int]:
    """The subgoals reached after reset and after each of the expert's steps, in the real engine."""
    engine = make_fast_engine(facts=True)
    engine.load(str(game.path))
    progress = Progress(json.loads(game.path.read_text())["pddl_problem"])
    state = engine.reset()
    counts = [progress.update(state["facts"])]
    firsts = []
    for command in game.walkthrough:
        state, _, _ = engine.step(command)
        before = list(progress.reached)
        counts.append(progress.update(state["facts"]))
        firsts += [i for i, (was, now) in enumerate(zip(before, progress.reached)) if now and not was]
        if state["won"]:
            break
    assert state["won"], game.game_id
    assert counts[-1] == len(progress.goals), (game.game_id, progress.goals, progress.reached)
    assert firsts == list(range(len(progress.goals))), (game.game_id, progress.goals, firsts)  # in order
    return counts


def test_the_expert_reaches_every_subgoal_in_order_on_generated_games(tiny_games):
    for task in TASK_TYPES:
        game = next(g for g in tiny_games.games("valid_seen") if g.task_type == task)
        counts = expert_progress(game)
        assert counts[0] == 0, (task, counts)


def test_the_expert_reaches_every_subgoal_in_order_on_official_games(real_data_dir):
    games = load_games("valid_seen", real_data_dir)
    for task in TASK_TYPES:
        for game in [g for g in games if g.task_type == task][:3]:
            expert_progress(game)


@pytest.mark.parametrize("workers", [0, 2])
def test_group_env_counts_each_copys_subgoals(tiny_games, workers):
    """In a GroupEnv, the copy that plays the walkthrough reaches every subgoal, in the steps the bare
    engine does; a copy that only looks around reaches none; a bad action leaves the count as it was."""
    from alfrl.world.env import GroupEnv

    game = next(g for g in tiny_games.games("valid_seen") if g.task_type == "pick_clean_then_place_in_recep")
    expected = expert_progress(game)
    with GroupEnv(k=2, max_steps=30, workers=workers) as env:
        env.reset(game)
        assert env.subgoals == {0: 0, 1: 0} and env.subgoals_total == {0: 3, 1: 3}
        counts = []
        for command in game.walkthrough:
            results = env.step({0: command, 1: "look"})
            counts.append(results[0].subgoals)
            assert results[1].subgoals == 0
            if counts[-1] == 1 and counts.count(1) == 1:  # the object just taken: a bad action keeps the count
                assert env.step({0: "fly to the moon"})[0].subgoals == 1
        assert counts == expected[1:] and results[0].won
    # a game whose goal is not an ALFWorld task's has no subgoals to count (the env still plays it)
    assert game_subgoals("(define (problem plan) (:domain alfred))") == ()
    assert Progress(goals=()).update([("holds", "agent1", "spoon 1")]) == 0


def test_a_rollout_records_the_subgoals_reached(tiny_games):
    """An expert trajectory played through the real rollout records every subgoal of its game."""
    from alfrl.agent.models import load_policy
    from alfrl.imitation.sft import SFTConfig, expert_trajectories

    games = [g for g in tiny_games.games("valid_seen") if g.task_type in ("pick_two_obj_and_place",
                                                                      "look_at_obj_in_light")]
    for t, game in zip(expert_trajectories(load_policy(), games, SFTConfig(), progress=False), games):
        assert t.won and t.subgoals == t.subgoals_total == len(subgoals(json.loads(game.path.read_text())["pddl_problem"]))
