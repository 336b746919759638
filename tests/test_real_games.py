"""ALFWorld's official games through alfrl: the loader and the engine agree with ALFWorld.

Needs the official valid_seen / valid_train games (``ALFRL_REAL_DATA``); skipped without them.
"""

from __future__ import annotations

from collections import Counter

import pytest

from alfrl import TASK_TYPES
from alfrl.world.expert import replay
from alfrl.world.games import by_task, find_game_files, load_games

# Solvable games per task type (ALFWorld's filter keeps exactly these), and all game files.
SOLVABLE = {
    "valid_seen": {"pick_and_place_simple": 44, "look_at_obj_in_light": 13,
                   "pick_clean_then_place_in_recep": 32, "pick_heat_then_place_in_recep": 18,
                   "pick_cool_then_place_in_recep": 26, "pick_two_obj_and_place": 22},
    "valid_train": {"pick_and_place_simple": 46, "look_at_obj_in_light": 19,
                    "pick_clean_then_place_in_recep": 35, "pick_heat_then_place_in_recep": 23,
                    "pick_cool_then_place_in_recep": 28, "pick_two_obj_and_place": 36},
}
FILES = {"valid_seen": 187, "valid_train": 200}


@pytest.mark.parametrize("split, total", [("valid_seen", 155), ("valid_train", 187)])
def test_solvable_games_per_task(real_data_dir, split, total):
    games = load_games(split, real_data_dir)
    assert len(games) == total
    assert Counter(g.task_type for g in games) == SOLVABLE[split]
    assert len(find_game_files(real_data_dir / split)) == FILES[split]
    assert len({g.game_id for g in games}) == total


def test_alfworld_data_parent_is_accepted(real_data_dir):
    # $ALFWORLD_DATA (the folder holding json_2.1.1) works as well as json_2.1.1 itself
    assert len(load_games("valid_seen", real_data_dir.parent)) == 155


@pytest.mark.parametrize("split", ["valid_seen", "valid_train"])
def test_every_game_has_a_walkthrough_and_a_goal(real_data_dir, split):
    for g in load_games(split, real_data_dir):
        assert g.walkthrough and g.walkthrough[0] == "look", g.game_id
        assert g.goal and not g.goal.endswith("."), g.game_id
        assert g.split == split and g.task_type in TASK_TYPES
        assert g.game_id.startswith(f"{g.task_type}-{g.object_target}-") and g.game_id.count("/") == 1
        assert g.game_id.split("/")[0].endswith(f"-{g.scene}")


def test_first_game_fields(real_data_dir):
    g = load_games("valid_seen", real_data_dir)[0]
    assert g.game_id == "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790"
    assert g.goal == "examine the alarmclock with the desklamp"
    assert g.walkthrough == ("look", "go to sidetable 1", "take alarmclock 3 from sidetable 1",
                             "go to sidetable 2", "use desklamp 2")
    assert (g.scene, g.object_target, g.parent_target, g.toggle_target) == (323, "AlarmClock", "", "DeskLamp")


def _check_replay(game, engine) -> None:
    result = replay(game.path, list(game.walkthrough), engine=engine)
    assert (result.won, result.inadmissible, result.steps) == (True, [], len(game.walkthrough)), game.game_id
    assert result.observations[0].startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert result.observations[0].endswith(f"Your task is to: {game.goal}.")


def test_one_game_per_task_type_replays_to_a_win(real_data_dir, engine):
    groups = by_task(load_games("valid_seen", real_data_dir))
    assert list(groups) == list(TASK_TYPES)
    for games in groups.values():
        _check_replay(games[0], engine)


@pytest.mark.slow
@pytest.mark.parametrize("split", ["valid_seen", "valid_train"])
def test_every_game_replays_to_a_win(real_data_dir, engine, split):
    for game in load_games(split, real_data_dir):
        _check_replay(game, engine)
