"""Shared fixtures: tiny generated games (made once per session) and ALFWorld's official games."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n 2 (scripts/test.sh): one thread per worker, and per
    os.environ["OMP_NUM_THREADS"] = "1"   # process it starts (CLI runs, notebook kernels): 2 workers with 2
    os.environ["MKL_NUM_THREADS"] = "1"   # threads each on 2 cores thrash instead of sharing

from alfrl import TASK_TYPES
from alfrl.world.expert import make_engine
from alfrl.world.games import GameSpec, load_games
from alfrl.world.generate import GenerateConfig, generate
from alfrl.world.rooms import SizeConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_DATA = Path(os.environ.get("ALFRL_REAL_DATA", REPO_ROOT.parent / "shared" / "alfworld-real" / "json_2.1.1"))
"""ALFWorld's official games (valid_seen, valid_train), in ``alfworld-download``'s layout."""

TINY_SIZE = SizeConfig(max_receptacles=8, max_object_types=4)
TINY_SPLITS = ("train", "valid_seen", "valid_unseen")
TINY_N = 6
"""Six games per split: ``task_plan`` gives exactly one game of each task type at n=6."""


@dataclass(frozen=True)
class TinyGames:
    """Games generated once per session. Read only: copy them (``copy_split``) to change them."""

    root: Path
    records: dict[str, list[dict]]
    config: GenerateConfig

    def games(self, split: str) -> list[GameSpec]:
        return load_games(split, self.root)

    def record(self, split: str, task_type: str) -> dict:
        return next(r for r in self.records[split] if r["task_type"] == task_type)

    def copy_split(self, split: str, dest_root: Path) -> Path:
        """A writable copy of one split under ``dest_root``; returns ``dest_root/split``."""
        dest = Path(dest_root) / split
        shutil.copytree(self.root / split, dest)
        return dest


@pytest.fixture(scope="session")
def tiny_games(tmp_path_factory) -> TinyGames:
    """Six small games (one per task type) in each of train, valid_seen, valid_unseen."""
    root = tmp_path_factory.mktemp("tiny_games")
    cfg = GenerateConfig(out=str(root), n=TINY_N, splits=TINY_SPLITS, workers=2, size=TINY_SIZE)
    records = generate(cfg)
    for split in TINY_SPLITS:  # the fixture's promise; tests rely on it
        assert sorted(r["task_type"] for r in records[split]) == sorted(TASK_TYPES)
    return TinyGames(root=root, records=records, config=cfg)


@pytest.fixture(scope="session")
def policy():
    """The bundled small model with a fresh rank-4 LoRA adapter (seeded). LoRA starts as the identity,
    so it samples exactly like the base model. Shared by the session: tests that train deep-copy it."""
    import torch

    from alfrl.agent.models import LoraSpec, load_policy
    torch.manual_seed(0)
    return load_policy(lora=LoraSpec(rank=4, alpha=8))


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def engine():
    """One ALFWorld text engine (PddlEnv + AlfredDemangler + AlfredInfos) reused for replays."""
    return make_engine()


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """``json_2.1.1`` of ALFWorld's official games; skips the test when they are not here."""
    if not (REAL_DATA / "valid_seen").is_dir():
        pytest.skip(f"official ALFWorld games not found at {REAL_DATA}; set ALFRL_REAL_DATA to run these")
    return REAL_DATA


def game_files(root: Path) -> dict[str, bytes]:
    """Every game.tw-pddl and traj_data.json under ``root``, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*"))
            if p.name in ("game.tw-pddl", "traj_data.json")}
