"""alfrl.eval.failures: how a lost episode fails, on hand-built episodes whose modes are known."""

from __future__ import annotations

import pytest

from alfrl.eval.failures import LOOP_WINDOW, failure_modes, failure_shares, first_stop, goal_receptacle, task_object

GAME = "pick_and_place_simple-Mug-None-Desk-301/trial_alfrl_s0_train_00001"


def test_the_task_object_comes_from_the_game_id():
    assert task_object(GAME) == "mug"
    assert task_object("look_at_obj_in_light-AlarmClock-None-DeskLamp-302/trial_T2019") == "alarmclock"
    with pytest.raises(ValueError, match="not an ALFWorld game id"):
        task_object("my-game")


def test_first_stop_is_where_the_object_went_first():
    assert goal_receptacle("pick_and_place_simple-SprayBottle-None-Toilet-415/trial_T2019") == "toilet"
    with pytest.raises(ValueError, match="not an ALFWorld game id"):
        goal_receptacle("room-7")
    took = ["look", "go to toilet 1", "take spraybottle 3 from toilet 1"]
    assert first_stop(took + ["go to cabinet 1", "move spraybottle 3 to cabinet 1"], "cabinet") == "goal"
    assert first_stop(took + [None, "go to sinkbasin 2", "go to cabinet 1"], "cabinet") == "sinkbasin"
    assert first_stop(took + ["go to garbagecan 1"], "cabinet") == "elsewhere"
    assert first_stop(took + ["inventory"], "cabinet") == "stayed"
    assert first_stop(["look", "go to sinkbasin 1", None], "cabinet") == "never took"
    assert first_stop(took + ["go to sinkbasin 1"], "sinkbasin") == "goal"


def test_modes_of_hand_built_episodes():
    wander = ["go to desk 1", "go to shelf 1"] * 3  # back and forth: a loop
    assert failure_modes(GAME, ["look", "go to shelf 1", "take pen 2 from shelf 1"] + wander, "max_steps") == {
        "wrong object": True, "took nothing": False, "loop": True, "out of steps": True}
    right = ["go to shelf 1", "take mug 1 from shelf 1", "take pen 2 from shelf 1", "go to desk 1",
             "go to drawer 1", "open drawer 1", "close drawer 1"]
    assert failure_modes(GAME, right, "max_tokens") == {
        "wrong object": False, "took nothing": False, "loop": False, "out of steps": False}
    short = ["go to desk 1"] * (LOOP_WINDOW - 1)  # too short to call a loop
    assert failure_modes(GAME, short, "max_steps")["loop"] is False
    assert failure_modes(GAME, short, "max_steps")["took nothing"] is True


def test_shares_are_over_the_lost_episodes_only():
    def record(actions, won=False, end="max_steps"):
        turns = [{"action": a, "admissible": a is not None} for a in actions]
        return {"game_id": GAME, "won": won, "end_reason": end, "trajectory": {"turns": turns}}

    records = [record(["take pen 1 from desk 1"]), record([None, "go to desk 1"], end="max_tokens"),
               record(["take mug 1 from desk 1", "move mug 1 to desk 1"], won=True, end="won")]
    assert failure_shares(records) == {"lost": 2, "wrong object": 0.5, "took nothing": 0.5, "loop": 0.0,
                                       "out of steps": 0.5}
    assert failure_shares(records[2:]) == {"lost": 0, "wrong object": 0.0, "took nothing": 0.0, "loop": 0.0,
                                           "out of steps": 0.0}
