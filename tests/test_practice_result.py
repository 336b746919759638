"""scripts/practice_result.py's bookkeeping: each warm start is paired with its own committed held-out outcomes,
and an output folder refuses stages run from another warm start or pool."""

from __future__ import annotations

import json

import pytest

from alfrl.agent.models import EPOCH_WARM_START, WARM_START
from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT

from script_loader import load_script

ROOMS = {r["game_id"] for r in read_jsonl(REPO_ROOT / "data/results/practice/seed0_heldout_outcomes.jsonl")}
"""The 60 held-out rooms the practice runs were measured on."""


def test_each_warm_start_is_paired_with_its_own_held_out_outcomes():
    script = load_script("practice_result")
    first, default = (script.warm_heldout(w, ROOMS) for w in (WARM_START, EPOCH_WARM_START))
    # docs/results.md ("Practice"): the first warm start won 9 of these 60 rooms; the default one wins 30 of them
    # (66 of all 123, data/results/rl_on_warmstart_epoch_heldout.md)
    assert len(first) == len(default) == 60 and {r["game_id"] for r in default} == ROOMS
    assert sum(r["won"] for r in first) == 9
    assert sum(r["won"] for r in default) == 30


def test_an_output_folder_refuses_another_warm_start(tmp_path):
    script = load_script("practice_result")
    settings = {"warm_start": WARM_START, "pool": "data/practice/pool.json"}
    script.remember_settings(tmp_path / "out", settings)
    script.remember_settings(tmp_path / "out", settings)  # the same again: fine
    assert json.loads((tmp_path / "out" / "settings.json").read_text()) == settings
    with pytest.raises(SystemExit, match=r"other settings \(warm_start\)"):
        script.remember_settings(tmp_path / "out", {**settings, "warm_start": EPOCH_WARM_START})


def test_the_default_is_the_default_warm_start_and_its_folders():
    """Without flags the script measures what ``--preset practice`` trains from, and writes where notebook 06 reads."""
    from alfrl.training.train import preset
    script = load_script("practice_result")
    args = script.parse_args([])
    assert args.warm_start == preset("practice").init_adapter == EPOCH_WARM_START
    assert (args.out, args.dest) == ("runs/practice_epoch", "data/results/practice_epoch")
    assert (REPO_ROOT / args.dest / "seed0_result.md").is_file()
    first = script.parse_args(["--warm-start", WARM_START])  # the first warm start's experiment, where it is committed
    assert (first.out, first.dest) == ("runs/practice_result", "data/results/practice")
    assert (REPO_ROOT / first.dest / "seed0_result.md").is_file()
    given = script.parse_args(["--out", "runs/mine", "--dest", "data/results/mine"])  # flags win
    assert (given.out, given.dest) == ("runs/mine", "data/results/mine")


def test_a_stage_s_seconds_add_up_over_runs(tmp_path):
    """A resumed stage counts both of its parts; a later run that skips it (its output complete) keeps its time."""
    script = load_script("practice_result")
    seconds = tmp_path / "seconds.json"
    assert script.add_seconds(seconds, "before", 600.0) == 600.0
    assert script.add_seconds(seconds, "train_seed0", 1400.0) == 1400.0
    assert script.add_seconds(seconds, "before", 290.0) == 890.0  # resumed: the rest of the stage
    assert script.add_seconds(seconds, "before", 0.5) == 890.5  # skipped: already complete
    assert json.loads(seconds.read_text()) == {"before": 890.5, "train_seed0": 1400.0}
