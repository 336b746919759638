"""alfrl.world.games: ALFWorld's filter, GameSpec, ordering, and clear errors for broken data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alfrl import TASK_TYPES
from alfrl.world.gamefile import game_id
from alfrl.world.games import (HOW_TO_GET_GAMES, GameDataError, available_splits, by_task, check_games,
                               find_game_files, load_games, read_game, resolve_data_dir, shuffled)

SPLIT = "valid_unseen"


def _trial(tiny_games, task_type: str = "pick_and_place_simple") -> Path:
    """The trial folder of a tiny game of ``task_type``."""
    return tiny_games.root / SPLIT / game_id(tiny_games.record(SPLIT, task_type))


def _plant(src_trial: Path, split_dir: Path, name: str, traj_edit=None, game_edit=None) -> Path:
    """Copy a trial to ``split_dir/name`` (``<task folder>/<trial>``), editing its JSON files."""
    dest = split_dir / name
    shutil.copytree(src_trial, dest)
    for fname, edit in (("traj_data.json", traj_edit), ("game.tw-pddl", game_edit)):
        if edit:
            data = json.loads((dest / fname).read_text())
            edit(data)
            (dest / fname).write_text(json.dumps(data))
    return dest / "game.tw-pddl"


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


# ---------------------------------------------------------------- ALFWorld's filter

def test_filter_drops_what_alfworld_drops(tiny_games, tmp_path):
    src = _trial(tiny_games)
    split = tmp_path / "games" / SPLIT
    good = _plant(src, split, "pick_and_place_simple-Cloth-None-GarbageCan-406/trial_good")
    _plant(src, split, "pick_and_place_simple-Cloth-None-GarbageCan-406/trial_movable_1")
    _plant(src, split, "pick_and_place_simple-AppleSliced-None-GarbageCan-406/trial_a")
    unsolvable = _plant(src, split, "pick_and_place_simple-Cloth-None-Shelf-406/trial_b",
                        game_edit=_set("solvable", False))
    other = _plant(src, split, "pick_and_place_with_other_recep-Cloth-Bowl-Shelf-406/trial_c",
                   traj_edit=_set("task_type", "pick_and_place_with_other_recep"))

    # the path filter: movable/Sliced trials are not even read
    assert find_game_files(split) == [good, unsolvable, other]
    assert read_game(unsolvable) is None
    assert read_game(other) is None
    games = load_games(SPLIT, tmp_path / "games")
    assert [g.game_id for g in games] == ["pick_and_place_simple-Cloth-None-GarbageCan-406/trial_good"]


def test_filter_looks_only_at_the_games_own_folders(tiny_games, tmp_path):
    # A data dir whose own path says "Sliced" or "movable" keeps all its games.
    root = tmp_path / "Sliced_movable_courses" / "games"
    tiny_games.copy_split(SPLIT, root)
    assert len(load_games(SPLIT, root)) == 6


def test_unsolvable_game_with_walkthrough_null_is_dropped(tiny_games, tmp_path):
    game = _plant(_trial(tiny_games), tmp_path / SPLIT, "pick_and_place_simple-Cloth-None-Shelf-1/t",
                  game_edit=lambda d: d.update(solvable=False, walkthrough=None))
    assert read_game(game) is None


# ---------------------------------------------------------------- GameSpec

def test_gamespec_fields_match_the_generated_record(tiny_games):
    for g in tiny_games.games(SPLIT):
        record = next(r for r in tiny_games.records[SPLIT] if r["task_type"] == g.task_type)
        p = record["pddl_params"]
        assert g.game_id == game_id(record)
        assert g.path == tiny_games.root / SPLIT / game_id(record) / "game.tw-pddl"
        assert g.split == SPLIT
        assert g.goal == record["goal"]
        assert g.walkthrough == tuple(record["walkthrough"])
        assert g.walkthrough[0] == "look"
        assert g.scene == record["scene"]
        assert (g.object_target, g.parent_target, g.toggle_target) == (
            p["object_target"], p["parent_target"], p["toggle_target"])


def test_game_id_is_alfworlds_folder_name(tiny_games):
    look = next(g for g in tiny_games.games(SPLIT) if g.task_type == "look_at_obj_in_light")
    # look_at_obj games name the lamp where other tasks name the parent receptacle
    assert look.game_id == (f"look_at_obj_in_light-{look.object_target}-None-DeskLamp-{look.scene}/"
                            "trial_alfrl_s0_valid_unseen_00001")
    for g in tiny_games.games(SPLIT):
        task, obj, mrecep, parent, scene = g.game_id.split("/")[0].split("-")
        assert (task, obj, mrecep, int(scene)) == (g.task_type, g.object_target, "None", g.scene)
        assert parent == (g.toggle_target or g.parent_target)


def test_goal_is_parsed_from_the_grammar(tiny_games, tmp_path):
    def edit(game):
        game["grammar"] = game["grammar"].replace(
            f'"rhs": "Your task is to: {tiny_games.record(SPLIT, "pick_and_place_simple")["goal"]}."',
            '"rhs": "Your task is to: put a mug in desk."')
    game = _plant(_trial(tiny_games), tmp_path / SPLIT, "pick_and_place_simple-Mug-None-Desk-1/t",
                  game_edit=edit)
    spec = read_game(game)
    assert spec.goal == "put a mug in desk"
    assert spec.split == SPLIT  # taken from the path when not given


def test_by_task_groups_in_alfworld_order(tiny_games):
    games = tiny_games.games(SPLIT)
    groups = by_task(list(reversed(games)))
    assert list(groups) == list(TASK_TYPES)
    assert {t: [g.task_type for g in gs] for t, gs in groups.items()} == {t: [t] for t in TASK_TYPES}
    assert list(by_task([g for g in games if g.task_type == "pick_two_obj_and_place"])) == [
        "pick_two_obj_and_place"]


# ---------------------------------------------------------------- order, shuffle, filters

def test_games_are_sorted_by_game_id(tiny_games):
    ids = [g.game_id for g in tiny_games.games(SPLIT)]
    assert ids == sorted(game_id(r) for r in tiny_games.records[SPLIT])
    assert [i.split("-")[0] for i in ids] == sorted(TASK_TYPES)


def test_seeded_shuffle(tiny_games):
    root = tiny_games.root
    ordered = load_games(SPLIT, root)
    a = [g.game_id for g in load_games(SPLIT, root, seed=1)]
    assert a == [g.game_id for g in load_games(SPLIT, root, seed=1)]
    assert a != [g.game_id for g in load_games(SPLIT, root, seed=2)]
    assert a != [g.game_id for g in ordered]
    assert sorted(a) == [g.game_id for g in ordered]  # a permutation
    # the order depends on the seed only, not on the input order
    assert shuffled(list(reversed(ordered)), 1) == load_games(SPLIT, root, seed=1)
    assert load_games(SPLIT, root, seed=1, limit=2) == load_games(SPLIT, root, seed=1)[:2]
    assert load_games(SPLIT, root, limit=2) == ordered[:2]


def test_task_types_filter(tiny_games):
    two = ("pick_two_obj_and_place", "look_at_obj_in_light")
    games = load_games(SPLIT, tiny_games.root, task_types=two)
    assert [g.task_type for g in games] == ["look_at_obj_in_light", "pick_two_obj_and_place"]


def test_unknown_task_type_is_an_error(tiny_games):
    with pytest.raises(ValueError, match=r"unknown task types \['pick_three'\]"):
        load_games(SPLIT, tiny_games.root, task_types=("pick_three", "pick_two_obj_and_place"))


def test_available_splits(tiny_games):
    assert available_splits(tiny_games.root) == ["train", "valid_seen", "valid_unseen"]


# ---------------------------------------------------------------- data dirs

def test_resolve_data_dir_accepts_alfworld_data(tiny_games, tmp_path):
    # $ALFWORLD_DATA holds json_2.1.1/<split>
    tiny_games.copy_split(SPLIT, tmp_path / "json_2.1.1")
    assert resolve_data_dir(tmp_path) == tmp_path / "json_2.1.1"
    assert [g.game_id for g in load_games(SPLIT, tmp_path)] == [g.game_id for g in tiny_games.games(SPLIT)]
    assert load_games(SPLIT, tmp_path)[0].path.parent.parent.parent == tmp_path / "json_2.1.1" / SPLIT


def test_resolve_data_dir_keeps_a_dir_that_has_splits(tmp_path):
    (tmp_path / "json_2.1.1").mkdir()
    (tmp_path / "valid_seen").mkdir()
    assert resolve_data_dir(tmp_path) == tmp_path
    assert resolve_data_dir(str(tmp_path)) == tmp_path


# ---------------------------------------------------------------- clear errors

def _error(split: str, root: Path) -> str:
    with pytest.raises(GameDataError) as e:
        load_games(split, root)
    return str(e.value)


def test_missing_data_dir(tmp_path):
    msg = _error(SPLIT, tmp_path / "nowhere")
    assert msg.startswith(f"data dir {tmp_path / 'nowhere'} does not exist.")
    assert HOW_TO_GET_GAMES in msg
    assert "alfworld-download" in msg and "python -m alfrl setup" in msg


def test_empty_data_dir(tmp_path):
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"no split 'valid_unseen' in {tmp_path} (found: nothing).")
    assert HOW_TO_GET_GAMES in msg


def test_missing_split(tiny_games, tmp_path):
    tiny_games.copy_split("valid_seen", tmp_path)
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"no split 'valid_unseen' in {tmp_path} (found: ['valid_seen']).")
    assert HOW_TO_GET_GAMES in msg


def test_split_without_playable_games(tmp_path):
    (tmp_path / SPLIT / "pick_and_place_simple-A-None-B-1" / "trial_x").mkdir(parents=True)
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{tmp_path / SPLIT} holds no playable games.")
    assert HOW_TO_GET_GAMES in msg


@pytest.fixture
def one_game(tiny_games, tmp_path) -> Path:
    """A writable copy of the tiny valid_unseen split; returns one of its game files."""
    tiny_games.copy_split(SPLIT, tmp_path)
    return tmp_path / SPLIT / game_id(tiny_games.record(SPLIT, "pick_cool_then_place_in_recep")) / "game.tw-pddl"


def test_corrupt_game_file(one_game, tmp_path):
    one_game.write_text("{this is not json")
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: corrupt or truncated game file (")
    assert HOW_TO_GET_GAMES in msg


def test_truncated_game_file(one_game, tmp_path):
    data = one_game.read_bytes()
    one_game.write_bytes(data[:len(data) // 2])
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: corrupt or truncated game file (")
    assert HOW_TO_GET_GAMES in msg


def test_truncated_traj_data(one_game, tmp_path):
    traj = one_game.parent / "traj_data.json"
    traj.write_bytes(traj.read_bytes()[:40])
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{traj}: corrupt or truncated traj_data.json (")


def test_missing_traj_data(one_game, tmp_path):
    (one_game.parent / "traj_data.json").unlink()
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game.parent / 'traj_data.json'}: traj_data.json is missing.")
    assert HOW_TO_GET_GAMES in msg


def test_game_file_missing_keys(one_game, tmp_path):
    game = json.loads(one_game.read_text())
    del game["pddl_problem"], game["grammar"]
    one_game.write_text(json.dumps(game))
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: not a complete ALFWorld game (no keys ['grammar', 'pddl_problem']).")
    assert HOW_TO_GET_GAMES in msg


def test_traj_data_without_pddl_params(one_game, tmp_path):
    traj = one_game.parent / "traj_data.json"
    data = json.loads(traj.read_text())
    del data["pddl_params"]
    traj.write_text(json.dumps(data))
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: not a complete ALFWorld game (no traj_data 'pddl_params').")


def test_game_file_that_is_not_an_object(one_game, tmp_path):
    one_game.write_text("[1, 2]")
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: game file is not a JSON object")
    assert HOW_TO_GET_GAMES in msg


def test_grammar_without_task_text(one_game, tmp_path):
    game = json.loads(one_game.read_text())
    game["grammar"] = game["grammar"].replace('"rhs": "Your task is to: ', '"rhs": "Your job: ')
    one_game.write_text(json.dumps(game))
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: the grammar has no task text;")


def _edit_problem(game_file: Path, edit) -> None:
    game = json.loads(game_file.read_text())
    game["pddl_problem"] = edit(game["pddl_problem"])
    game_file.write_text(json.dumps(game))


def test_cut_short_pddl_problem_is_named_when_games_are_read(one_game, tmp_path):
    """A valid game JSON whose PDDL problem is cut short: a clear error naming the file, not the engine's
    ParseError when it is first played."""
    _edit_problem(one_game, lambda p: p[:len(p) // 2])
    msg = _error(SPLIT, tmp_path)
    assert msg.startswith(f"{one_game}: the game's PDDL problem is damaged (")
    assert "python -m alfrl setup" in msg and HOW_TO_GET_GAMES in msg


@pytest.mark.parametrize("damage", [
    lambda p: p.replace("(:init", "(:init (", 1).replace("(:goal", ")(:goal", 1),  # the engine: TypeError
    lambda p: p.replace("(:init", "(:init\n (atLocation agent1 nowhere_1)", 1),  # the engine: KeyError
])
def test_garbled_pddl_problem_is_named_before_it_is_played(one_game, tmp_path, damage):
    _edit_problem(one_game, damage)
    games = load_games(SPLIT, tmp_path)  # passes the cheap check of every read
    check_games([g for g in games if g.path != one_game])
    with pytest.raises(GameDataError) as e:
        check_games(games)
    assert str(e.value).startswith(f"{one_game}: the game's PDDL cannot be parsed (")
    assert "python -m alfrl setup" in str(e.value)


def test_every_generated_and_official_game_passes_the_pddl_checks(tiny_games, real_data_dir):
    check_games(tiny_games.games("valid_seen") + load_games("valid_seen", real_data_dir, limit=20))


def test_listing_games_imports_neither_the_generator_nor_textworld():
    """Finding, filtering and loading games (packs expanded on first use included) needs only the game-file
    layer (alfrl.world.gamefile): not the generator, the expert, nor TextWorld."""
    code = ("import sys, alfrl.world.games; alfrl.world.games.load_games('valid_seen', max_expert_steps=8); "
            "print(sorted(m for m in sys.modules if m.startswith(('alfrl.world.generate', 'alfrl.world.expert', 'alfrl.world.rooms', "
            "'textworld', 'fast_downward'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
