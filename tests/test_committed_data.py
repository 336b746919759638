"""The game packs committed in data/packs: ALFWorld-shaped splits that play to a win."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from alfrl import TASK_TYPES
from alfrl.base.paths import PACK_DIR
from alfrl.world.expert import replay
from alfrl.world.games import by_task, load_games
from alfrl.world.generate import SPLIT_TASK_COUNTS
from alfrl.world.pack import expand, read_pack
from alfrl.world.rooms import SPLIT_SCENES, TRAIN_SCENES, UNSEEN_SCENES

SPLITS = ("train", "valid_seen", "valid_unseen")
EVAL_SPLITS = ("valid_seen", "valid_unseen")
SAMPLE_PER_TASK = 1
"""Default run: replay the first games of each task type of each eval split (by game id)."""


@pytest.fixture(scope="module")
def packs() -> dict[str, Path]:
    """The committed packs; missing ones fail the test (they are part of the course)."""
    paths = {split: PACK_DIR / f"{split}.jsonl.xz" for split in SPLITS}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        pytest.fail(f"committed game packs are missing: {missing}; make them with "
                    "`python -m alfrl generate --out data/games --seed 0 --pack-dir data/packs`")
    return paths


@pytest.fixture(scope="module")
def committed(packs, tmp_path_factory) -> Path:
    """The committed packs expanded (with their SHA-256 checks) into a fresh folder."""
    root = tmp_path_factory.mktemp("committed_games")
    for pack in packs.values():
        expand(pack, root)
    return root


@pytest.fixture(scope="module")
def games(committed) -> dict[str, list]:
    return {split: load_games(split, committed) for split in SPLITS}


def test_eval_splits_have_alfworlds_task_counts(games):
    assert len(games["valid_seen"]) == 140
    assert len(games["valid_unseen"]) == 134
    for split in EVAL_SPLITS:
        assert Counter(g.task_type for g in games[split]) == SPLIT_TASK_COUNTS[split]


def test_train_split(games):
    counts = Counter(g.task_type for g in games["train"])
    assert sum(counts.values()) >= 1000
    assert set(counts) == set(TASK_TYPES)
    assert min(counts.values()) >= 50


def test_packs_are_complete_and_in_index_order(packs):
    for split, pack in packs.items():
        records = read_pack(pack)
        assert [r["index"] for r in records] == list(range(len(records)))
        assert {r["split"] for r in records} == {split}


def test_no_game_is_shared_between_splits(packs, games):
    ids = [f"{split}/{g.game_id}" for split in SPLITS for g in games[split]]
    trials = [g.game_id.split("/")[1] for split in SPLITS for g in games[split]]
    assert len(set(trials)) == len(trials) == len(ids)
    # nor the same room and task under another name: compare the problems without their name line
    problems = Counter()
    for pack in packs.values():
        for r in read_pack(pack):
            problems[r["pddl_problem"].split("(:domain alfred)", 1)[1]] += 1
    assert problems.most_common(1)[0][1] == 1


def test_scenes_follow_alfred_splits(games):
    train = {g.scene for g in games["train"]}
    unseen = {g.scene for g in games["valid_unseen"]}
    assert unseen <= set(UNSEEN_SCENES)
    assert train <= set(TRAIN_SCENES) and {g.scene for g in games["valid_seen"]} <= set(SPLIT_SCENES["valid_seen"])
    assert not train & unseen
    assert len(unseen) >= 12  # spread over the held-out floor plans, not a handful


def test_every_game_has_an_expert_walkthrough(games):
    for split in SPLITS:
        for g in games[split]:
            assert g.walkthrough[0] == "look" and len(g.walkthrough) <= 200, g.game_id


def _check(game, engine) -> None:
    result = replay(game.path, list(game.walkthrough), engine=engine)
    assert (result.won, result.inadmissible) == (True, []), f"{game.split}/{game.game_id}"


def test_sample_of_eval_games_replays_to_a_win(games, engine):
    for split in EVAL_SPLITS:
        for group in by_task(games[split]).values():
            for game in group[:SAMPLE_PER_TASK]:
                _check(game, engine)


@pytest.mark.slow
@pytest.mark.parametrize("split", EVAL_SPLITS)
def test_every_eval_game_replays_to_a_win(games, engine, split):
    for game in games[split]:
        _check(game, engine)


def test_setup_command_reuses_expanded_games(committed, games):
    # `python -m alfrl setup` expands data/packs; the stamps the fixture left say it is done
    out = subprocess.run([sys.executable, "-m", "alfrl", "setup", "--data-dir", str(committed)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"games already expanded in {committed} (")
    assert out.stdout.splitlines()[-1].split() == ["all", str(len(games["train"])), "140", "134"]
