"""No training input lies on the floor plans of ALFWorld's official valid_unseen games (10, 219, 308, 424).

ALFRED keeps those four out of its train split; a course that trains on rooms built on them cannot call
ALFWorld's valid_unseen games unseen. Every committed pack of train games is checked, so a new pack is
covered the day it is committed, and so are the games the training commands draw by default.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from alfrl.base.paths import REPO_ROOT
from alfrl.world.pack import read_pack
from alfrl.world.rooms import ALFRED_TRAIN_SCENES, ALFWORLD_UNSEEN_SCENES, TRAIN_SCENES, draw_scene

DATA = REPO_ROOT / "data"
SCALE_RECORDS = {"data/rl_rooms/train.jsonl.xz": (42, 909), "data/rl_rooms_more/train.jsonl.xz": (16, 387)}
"""The rooms the finished scale run trained on, byte for byte as its pre-registration registered them
(``data/scale/PREREGISTRATION.md`` gives their sha256, ``tests/test_scale_data.py`` checks it): they stay as
trained, and ``docs/results.md`` states how many lie on the four floor plans. No default draws from them."""


def training_packs() -> list[Path]:
    """Every committed pack that holds train games."""
    return sorted(p for p in DATA.rglob("*.jsonl.xz") if p.name == "train.jsonl.xz")


def on_unseen_floor_plans(path: Path) -> int:
    return sum(r["scene"] in ALFWORLD_UNSEEN_SCENES for r in read_pack(path))


def test_the_four_floor_plans_are_alfreds_train_scenes_the_generator_leaves_out():
    assert set(ALFWORLD_UNSEEN_SCENES) == {10, 219, 308, 424}
    assert set(ALFWORLD_UNSEEN_SCENES) <= set(ALFRED_TRAIN_SCENES)
    assert not set(ALFWORLD_UNSEEN_SCENES) & set(TRAIN_SCENES)
    assert len(TRAIN_SCENES) == len(ALFRED_TRAIN_SCENES) - 4


def test_no_training_pack_has_a_room_on_them():
    packs = training_packs()
    assert {"data/packs/train.jsonl.xz", "data/expert/train.jsonl.xz"} <= {str(p.relative_to(REPO_ROOT))
                                                                           for p in packs}
    for path in packs:
        name = str(path.relative_to(REPO_ROOT))
        found = on_unseen_floor_plans(path)
        if name in SCALE_RECORDS:
            assert (found, len(read_pack(path))) == SCALE_RECORDS[name], name
        else:
            assert found == 0, f"{name} has {found} rooms on floor plans {ALFWORLD_UNSEEN_SCENES}"


@pytest.mark.parametrize("command", ["sft", "dagger", "train"])
def test_the_default_training_draws_are_clean(command):
    from alfrl.imitation.dagger import DaggerConfig
    from alfrl.imitation.sft import SFTConfig
    from alfrl.training.train_config import TrainConfig
    from alfrl.world.games import load_games
    config = {"sft": SFTConfig, "dagger": DaggerConfig, "train": TrainConfig}[command]()
    games = load_games("train", config.data_dir)
    assert len(games) >= 900
    assert not {g.scene for g in games} & set(ALFWORLD_UNSEEN_SCENES)


def test_a_draw_that_lands_on_them_is_rejected():
    drawn = [draw_scene("pick_heat_then_place_in_recep", "train", random.Random(i)) for i in range(500)]
    assert None in drawn and 10 not in drawn
    assert draw_scene("pick_heat_then_place_in_recep", "valid_unseen", random.Random(0)) in range(1, 7)
