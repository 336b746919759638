"""alfrl.world.generate (+ rooms, pddl, expert): splits, determinism, playability, resume, size knob."""

from __future__ import annotations

import json
import random
import re
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from alfrl import TASK_TYPES
from alfrl.world import expert, pddl
from alfrl.world.games import load_games
from alfrl.world.generate import (SPLIT_TASK_COUNTS, GenerateConfig, continue_from_pack, game_id, generate, make_game,
                                  pack_journal, read_journal, task_plan)
from alfrl.world.rooms import (ALFWORLD_UNSEEN_SCENES, SPLIT_SCENES, TRAIN_SCENES, UNSEEN_SCENES, SizeConfig,
                               draw_scene, make_room, scenes_for)

from conftest import TINY_SIZE, TINY_SPLITS, game_files

RECEPTACLE_FACT = re.compile(r"\(receptacleType [^?]")  # in :init, not the goal's (receptacleType ?r ...)


# ---------------------------------------------------------------- task plans

def test_task_plan_valid_seen_is_alfworlds():
    plan = task_plan("valid_seen", 140, 0)
    assert Counter(plan) == {"pick_and_place_simple": 35, "look_at_obj_in_light": 13,
                             "pick_clean_then_place_in_recep": 27, "pick_heat_then_place_in_recep": 16,
                             "pick_cool_then_place_in_recep": 25, "pick_two_obj_and_place": 24}
    assert Counter(plan) == SPLIT_TASK_COUNTS["valid_seen"]


def test_task_plan_valid_unseen_is_alfworlds():
    plan = task_plan("valid_unseen", 134, 0)
    assert Counter(plan) == {"pick_and_place_simple": 24, "look_at_obj_in_light": 18,
                             "pick_clean_then_place_in_recep": 31, "pick_heat_then_place_in_recep": 23,
                             "pick_cool_then_place_in_recep": 21, "pick_two_obj_and_place": 17}


def test_task_plan_train_is_proportional_to_alfworlds_train():
    # 790/308/650/459/533/813 of 3,553, scaled to 1,000 by largest remainders
    assert Counter(task_plan("train", 1000, 0)) == {
        "pick_and_place_simple": 222, "look_at_obj_in_light": 87, "pick_clean_then_place_in_recep": 183,
        "pick_heat_then_place_in_recep": 129, "pick_cool_then_place_in_recep": 150,
        "pick_two_obj_and_place": 229}


@pytest.mark.parametrize("split", ["train", "valid_seen", "valid_unseen"])
def test_task_plan_sizes_and_seeds(split):
    for n in (1, 2, 5, 6, 7, 13, 50, 333):
        assert len(task_plan(split, n, 0)) == n
    assert Counter(task_plan(split, 6, 0)) == {t: 1 for t in TASK_TYPES}
    assert task_plan(split, 50, 3) == task_plan(split, 50, 3)
    assert task_plan(split, 50, 3) != task_plan(split, 50, 4)
    assert Counter(task_plan(split, 50, 3)) == Counter(task_plan(split, 50, 4))


# ---------------------------------------------------------------- the tiny games

def test_tiny_splits_hold_one_game_per_task_type(tiny_games):
    for split in TINY_SPLITS:
        assert sorted(g.task_type for g in tiny_games.games(split)) == sorted(TASK_TYPES)


def test_every_generated_game_replays_its_walkthrough_to_a_win(tiny_games, engine):
    for split in TINY_SPLITS:
        for g in tiny_games.games(split):
            result = expert.replay(g.path, list(g.walkthrough), engine=engine)
            assert (g.game_id, result.won, result.inadmissible) == (g.game_id, True, [])
            assert result.steps == len(g.walkthrough)  # the win comes with the last command


def test_goal_does_not_hold_at_start(tiny_games, engine):
    for g in tiny_games.games("valid_unseen"):
        start = expert.replay(g.path, [], engine=engine)
        assert (start.won, start.steps) == (False, 0)
        intro = start.observations[0]
        assert intro.startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert intro.endswith(f"Your task is to: {g.goal}.")
        almost = expert.replay(g.path, list(g.walkthrough[:-1]), engine=engine)
        assert almost.won is False


def test_splits_use_alfreds_scenes(tiny_games):
    assert not set(TRAIN_SCENES) & set(UNSEEN_SCENES)
    for split in TINY_SPLITS:
        allowed = SPLIT_SCENES[split]
        for r in tiny_games.records[split]:
            assert r["scene"] in allowed
            assert r["scene"] in scenes_for(r["task_type"], split)
            traj = json.loads((tiny_games.root / split / game_id(r) / "traj_data.json").read_text())
            assert traj["scene"] == {"floor_plan": f"FloorPlan{r['scene']}", "scene_num": r["scene"]}


def test_scenes_for_respects_room_types():
    # ALFRED's GOALS_VALID: heat/cool only in kitchens (FloorPlan1-30), look only in living/bed rooms
    assert scenes_for("pick_heat_then_place_in_recep", "valid_unseen") == [1, 2, 3, 4, 5, 6]
    assert scenes_for("look_at_obj_in_light", "valid_unseen") == [201, 202, 203, 204, 205, 206,
                                                                  301, 302, 303, 304, 305, 306]
    assert len(scenes_for("pick_and_place_simple", "train")) == 92  # ALFRED's 96 less ALFWorld's unseen four
    assert len(scenes_for("pick_and_place_simple", "valid_seen")) == 96


def test_train_never_draws_alfworlds_unseen_floor_plans():
    # ALFWorld's valid_unseen games are on floor plans 10, 219, 308 and 424: no training room may be
    for task_type in TASK_TYPES:
        assert not set(scenes_for(task_type, "train")) & set(ALFWORLD_UNSEEN_SCENES)
    drawn = [draw_scene("pick_and_place_simple", "train", random.Random(i)) for i in range(2000)]
    assert None in drawn  # the draw is over ALFRED's list, so it does land on them, and is rejected
    assert not {s for s in drawn if s is not None} & set(ALFWORLD_UNSEEN_SCENES)
    assert {s for s in drawn if s is not None} == set(scenes_for("pick_and_place_simple", "train"))


def test_traj_data_and_game_file_agree(tiny_games):
    for r in tiny_games.records["valid_seen"]:
        folder = tiny_games.root / "valid_seen" / game_id(r)
        traj = json.loads((folder / "traj_data.json").read_text())
        assert traj["task_type"] == r["task_type"]
        assert traj["pddl_params"] == r["pddl_params"]
        assert traj["task_id"] == folder.name == f"trial_alfrl_s0_valid_seen_{r['index']:05d}"
        assert [a["task_desc"] for a in traj["turk_annotations"]["anns"]] == r["goals"]
        assert r["goal"] in r["goals"]
        game = json.loads((folder / "game.tw-pddl").read_text())
        assert game["pddl_domain"] == pddl.domain_text()
        assert game["pddl_problem"] == r["pddl_problem"]
        assert (game["solvable"], game["walkthrough"]) == (True, r["walkthrough"])


def test_tiny_rooms_respect_the_size_knob(tiny_games):
    for split in TINY_SPLITS:
        for r in tiny_games.records[split]:
            assert 1 <= len(RECEPTACLE_FACT.findall(r["pddl_problem"])) <= TINY_SIZE.max_receptacles


# ---------------------------------------------------------------- determinism and resume

def _cfg(out: Path, n: int, **kw) -> GenerateConfig:
    kw = {"workers": 1, "size": TINY_SIZE, **kw}
    return GenerateConfig(out=str(out), n=n, splits=("valid_unseen",), **kw)


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> tuple[Path, list[dict]]:
    """3 valid_unseen games, one worker."""
    out = tmp_path_factory.mktemp("three")
    return out, generate(_cfg(out, 3))["valid_unseen"]


def test_generation_is_byte_identical_across_worker_counts(three, tmp_path):
    out, records = three
    two = generate(_cfg(tmp_path, 3, workers=2))["valid_unseen"]
    first = game_files(out)
    assert len(first) == 6
    assert game_files(tmp_path) == first
    assert [json.dumps(r, sort_keys=True) for r in two] == [json.dumps(r, sort_keys=True) for r in records]


def test_a_game_depends_only_on_seed_split_and_index(three):
    _, records = three
    r = records[0]
    job = ("valid_unseen", 0, r["task_type"], 0, TINY_SIZE, 30)
    _, again = make_game(job)
    assert again["pddl_problem"] == r["pddl_problem"] and again["walkthrough"] == r["walkthrough"]
    _, other = make_game(("valid_unseen", 0, r["task_type"], 1, TINY_SIZE, 30))
    assert other["pddl_problem"] != r["pddl_problem"]
    assert other["task_id"] == "trial_alfrl_s1_valid_unseen_00000"


def _journal_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "valid_unseen" / ".journal.jsonl").read_text().splitlines()]


def test_resume_makes_only_the_missing_games(three, tmp_path):
    fresh_out, fresh = three
    assert task_plan("valid_unseen", 3, 0)[:2] == task_plan("valid_unseen", 2, 0)
    generate(_cfg(tmp_path, 2))
    assert [r["index"] for r in _journal_lines(tmp_path)] == [0, 1]
    records = generate(_cfg(tmp_path, 3))["valid_unseen"]
    assert [r["index"] for r in _journal_lines(tmp_path)] == [0, 1, 2]  # one new game
    assert game_files(tmp_path) == game_files(fresh_out)
    assert [r["pddl_problem"] for r in records] == [r["pddl_problem"] for r in fresh]
    assert sorted(read_journal(tmp_path, "valid_unseen")) == [0, 1, 2]


def test_a_pack_cut_short_is_continued_from_another_folder(three, tmp_path):
    # a long generation is packed part-way (--pack-so-far), committed, and continued in a fresh clone
    fresh_out, fresh = three
    first = tmp_path / "first"
    generate(_cfg(first, 2))
    pack = tmp_path / "packs" / "valid_unseen.jsonl.xz"
    assert pack_journal(_cfg(first, 2), "valid_unseen", pack) == 2
    again = _cfg(tmp_path / "clone", 3)
    assert continue_from_pack(again, "valid_unseen", pack) == 2
    records = generate(again)["valid_unseen"]
    assert [r["index"] for r in _journal_lines(tmp_path / "clone")] == [0, 1, 2]  # one new game
    assert [r["pddl_problem"] for r in records] == [r["pddl_problem"] for r in fresh]
    with pytest.raises(RuntimeError, match="made with other settings"):
        continue_from_pack(_cfg(tmp_path / "other", 3, seed=1), "valid_unseen", pack)


def test_resume_with_another_n_follows_the_new_plan(three, tmp_path):
    # task_plan(valid_unseen, 4, 0) differs from the n=3 plan at two of the first three games
    fresh_out, _ = three
    assert sum(a != b for a, b in zip(task_plan("valid_unseen", 3, 0), task_plan("valid_unseen", 4, 0))) == 2
    fresh_files = game_files(fresh_out)
    shutil.copytree(fresh_out / "valid_unseen", tmp_path / "valid_unseen")  # with its journal
    four = generate(_cfg(tmp_path, 4))["valid_unseen"]
    assert [r["task_type"] for r in four] == task_plan("valid_unseen", 4, 0)
    assert sorted(g.task_type for g in load_games("valid_unseen", tmp_path)) == sorted(
        task_plan("valid_unseen", 4, 0))
    assert len(_journal_lines(tmp_path)) == 3 + 3  # one new game and two remade ones
    generate(_cfg(tmp_path, 3))  # back to n=3: the same files as a fresh n=3 run, no leftovers
    assert game_files(tmp_path) == fresh_files
    assert len(_journal_lines(tmp_path)) == 6 + 2


def test_other_settings_in_the_same_folder_are_refused(three, tmp_path):
    generate(_cfg(tmp_path, 1))
    for cfg in (_cfg(tmp_path, 1, seed=1), replace(_cfg(tmp_path, 1), size=SizeConfig())):
        with pytest.raises(RuntimeError, match="holds games made with other settings"):
            generate(cfg)
    assert len(_journal_lines(tmp_path)) == 1


def test_unknown_split_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown split 'valid_train'"):
        generate(GenerateConfig(out=str(tmp_path), n=1, splits=("valid_train",)))


def test_torn_journal_line_is_ignored(three, tmp_path):
    out, _ = three
    (tmp_path / "valid_unseen").mkdir()
    lines = (out / "valid_unseen" / ".journal.jsonl").read_text().splitlines()
    (tmp_path / "valid_unseen" / ".journal.jsonl").write_text("\n".join(lines[:2] + [lines[2][:100]]))
    assert sorted(read_journal(tmp_path, "valid_unseen")) == [0, 1]


# ---------------------------------------------------------------- rooms and the size knob

def test_max_receptacles_caps_every_room():
    checked = shrunk = 0
    for task_type in TASK_TYPES:
        for split in ("train", "valid_unseen"):
            for scene in scenes_for(task_type, split)[::3]:
                built = make_room(task_type, scene, SizeConfig(max_receptacles=6, max_object_types=4),
                                  random.Random(f"{task_type}/{scene}"))
                if built is None:
                    continue
                room, task = built
                n = len(RECEPTACLE_FACT.findall(pddl.problem(room, task, "t")))
                assert n == len(room.receptacles) <= 6, (task_type, scene)
                assert set(room.objects.values()) <= set(room.receptacles)
                assert task.parent_target in room.rtypes() or task.toggle_target == "DeskLamp"
                big, _ = make_room(task_type, scene, SizeConfig(), random.Random(f"{task_type}/{scene}"))
                checked += 1
                shrunk += len(big.receptacles) > 6
    assert checked >= 120 and shrunk >= 120  # 129 rooms, 127 of them bigger than 6 uncapped


def test_size_knob_in_generated_games(tmp_path):
    size = SizeConfig(max_receptacles=6, max_object_types=2)
    cfg = GenerateConfig(out=str(tmp_path), n=2, splits=("valid_seen",), workers=1, size=size)
    for r in generate(cfg)["valid_seen"]:
        assert len(RECEPTACLE_FACT.findall(r["pddl_problem"])) <= 6


# ---------------------------------------------------------------- the expert's "move" fix

def test_expert_solves_pick_two_with_the_move_fix(tiny_games, engine, monkeypatch):
    g = next(g for g in tiny_games.games("valid_unseen") if g.task_type == "pick_two_obj_and_place")
    walkthrough = expert.solve(g.path, seed=0)
    assert walkthrough is not None and walkthrough[0] == "look"
    assert sum(c.startswith("move ") for c in walkthrough) == 2
    result = expert.replay(g.path, walkthrough, engine=engine)
    assert (result.won, result.inadmissible, result.steps) == (True, [], len(walkthrough))
    # ALFWorld's stock expert, which does not read "move" as "put", wanders after the first one
    monkeypatch.setattr(expert, "_move_as_put", lambda policy: None)
    stock = expert.solve(g.path, seed=0)
    assert stock is None or len(stock) > len(walkthrough)


def test_solve_needs_facts(tiny_games, engine):
    g = tiny_games.games("valid_unseen")[0]
    with pytest.raises(ValueError, match="make_engine\\(facts=True\\)"):
        expert.solve(g.path, engine=engine)
