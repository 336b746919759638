"""The scale run's committed rooms (data/rl_rooms) and its pre-registered held-out panel (data/panel): as
PREREGISTRATION.md fixed them, apart from each other, and as small as the cpu presets' rooms."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.training.train import training_games
from alfrl.training.train_config import preset
from alfrl.world.gamefile import game_id
from alfrl.world.games import load_games
from alfrl.world.pack import read_pack
from alfrl.world.rooms import ALFRED_TRAIN_SCENES, UNSEEN_SCENES

SCALE = REPO_ROOT / "data/scale"
PANEL = REPO_ROOT / "data/panel/valid_unseen.jsonl.xz"
ROOMS = REPO_ROOT / "data/rl_rooms/train.jsonl.xz"
MORE_ROOMS = REPO_ROOT / "data/rl_rooms_more/train.jsonl.xz"


def registered_sha256(path: str) -> str:
    """The sha256 PREREGISTRATION.md gives the file named ``path``."""
    text = " ".join((SCALE / "PREREGISTRATION.md").read_text().split())
    found = re.search(re.escape(path) + r"`? \(sha256 `([0-9a-f]{64})`", text)
    assert found, f"PREREGISTRATION.md gives no sha256 for {path}"
    return found.group(1)


def test_the_panel_is_the_preregistered_one():
    for path in ("data/panel/valid_unseen.jsonl.xz", "data/scale/panel_games.txt", "data/scale/panel_sampled100.txt"):
        assert hashlib.sha256((REPO_ROOT / path).read_bytes()).hexdigest() == registered_sha256(path), path
    listed = (SCALE / "panel_games.txt").read_text().split()
    assert len(listed) >= 300 and sorted(listed) == sorted(game_id(r) for r in read_pack(PANEL))
    sampled = (SCALE / "panel_sampled100.txt").read_text().split()
    assert len(sampled) == len(set(sampled)) == 100 and set(sampled) <= set(listed)


def test_panel_and_training_rooms_share_nothing():
    panel, first = read_pack(PANEL), read_pack(ROOMS)
    assert len(first) >= 600  # fresh rooms for both arms' first 40 updates (at most 16 played an update)
    rooms = first + read_pack(MORE_ROOMS)  # and the rooms after them (amendment 3)
    for field in ("task_id", "scene"):
        assert not {r[field] for r in panel} & {r[field] for r in rooms}, field
    assert {r["scene"] for r in panel} <= set(UNSEEN_SCENES) and {r["scene"] for r in rooms} <= set(ALFRED_TRAIN_SCENES)
    assert {r["split"] for r in panel} == {"valid_unseen"} and {r["split"] for r in rooms} == {"train"}


def test_the_later_rooms_are_the_amended_ones_and_new():
    """Amendment 3: the rooms after the 909, registered and new (apart from the panel: the test above)."""
    path = "data/rl_rooms_more/train.jsonl.xz"
    assert hashlib.sha256((REPO_ROOT / path).read_bytes()).hexdigest() == registered_sha256(path)
    assert not {game_id(r) for r in read_pack(MORE_ROOMS)} & {game_id(r) for r in read_pack(ROOMS)}


def test_every_room_the_arms_played_keeps_its_place():
    """The scale preset plays data/rl_rooms in its seeded order, then data/rl_rooms_more: every room in the
    committed metrics is the one that order puts there, so adding the later rooms moved none; and an arm
    playing the most rooms an update allows (16) to update 80 still plays none twice."""
    config = preset("scale")
    config = replace(config, data_dir=str(REPO_ROOT / config.data_dir),
                     more_data_dir=str(REPO_ROOT / config.more_data_dir))
    order = [g.game_id for g in training_games(config)]
    assert len(order) == len(read_pack(ROOMS)) + len(read_pack(MORE_ROOMS))
    for arm in ("grpo", "gigpo"):
        metrics = read_jsonl(SCALE / arm / "metrics.jsonl")
        played = [g for m in metrics for g in m["games"]]
        assert len(played) > 300 and played == order[:len(played)], arm
        worst = len(played) + config.max_groups_per_update * (config.updates - len(metrics))
        assert worst <= len(order), f"{arm} may run out of rooms: {worst} > {len(order)}"


def test_every_committed_room_passes_the_presets_filter():
    """The packs hold exactly the rooms the scale preset trains on and the panel's eval plays."""
    config = preset("scale")
    rooms = load_games("train", config.data_dir and REPO_ROOT / config.data_dir,
                       max_expert_steps=config.max_expert_steps, max_receptacles=config.max_receptacles)
    assert len(rooms) == len(read_pack(ROOMS))
    panel = load_games("valid_unseen", REPO_ROOT / "data/panel", max_expert_steps=config.max_expert_steps,
                       max_receptacles=config.max_receptacles)
    assert sorted(g.game_id for g in panel) == (SCALE / "panel_games.txt").read_text().split()


def test_the_official_small_rooms_are_27(real_data_dir):
    games = load_games("valid_seen", real_data_dir, max_expert_steps=8, max_receptacles=20)
    assert len(games) == 27
