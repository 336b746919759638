"""Experiment tracking (--log): names, missing packages, the numbers a tracker gets, TensorBoard read
back (and a resumed run's log), W&B and SwanLab offline when they are installed. A real training run's
TensorBoard log is checked against its metrics.jsonl in test_train.py's CLI smoke run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from alfrl.base import tracking
from alfrl.base.tracking import Trackers, TrackerMissing, check_log, parse_log, read_tensorboard, scalars


def test_log_names():
    assert parse_log("tensorboard") == ("tensorboard",)
    assert parse_log("TensorBoard, wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_log(["wandb", "swanlab"]) == ("wandb", "swanlab")
    assert parse_log("none") == parse_log("") == parse_log(None) == ()
    with pytest.raises(ValueError, match=r"--log 'mlflow' is not a tracker .* tensorboard, wandb, swanlab"):
        parse_log("tensorboard,mlflow")


@pytest.mark.parametrize("name", ["wandb", "swanlab"])
def test_a_tracker_that_is_not_installed_is_a_clear_error(monkeypatch, name):
    real = importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda mod, *a: None if mod == name else real(mod, *a))
    with pytest.raises(TrackerMissing, match=rf"the {name} package is not installed.*pip install {name}.*--log none"):
        check_log(f"tensorboard,{name}")
    assert check_log("tensorboard") == ("tensorboard",)  # installed with the course


def test_the_cli_names_an_unknown_tracker_before_doing_anything(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "alfrl", "train", "--run-dir", str(run), "--log", "tensorbord"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--log 'tensorbord' is not a tracker alfrl knows" in out.stderr
    assert not run.exists()


def test_scalars_are_the_numbers_of_a_metrics_line():
    line = {"step": 3, "success": 0.25, "loss": None, "games": ["a", "b"], "won": True, "groups": 2,
            "eval_split": "valid_unseen", "splits": {"valid_unseen": {"success": 0.5}}}
    assert scalars(line) == {"step": 3.0, "success": 0.25, "won": 1.0, "groups": 2.0,
                             "splits/valid_unseen/success": 0.5}


def test_tensorboard_gets_every_number_and_a_resumed_run_logs_each_step_once(tmp_path):
    config = {"lr": 1e-4, "k": 8, "run_dir": str(tmp_path)}
    with Trackers(("tensorboard",), tmp_path, config) as trackers:
        for step in (1, 2, 3):
            trackers.log({"step": step, "reward": 0.1 * step, "loss": None, "games": ["g"]}, step)
    got = read_tensorboard(tmp_path)
    assert set(got) == {"reward"}  # step is the x axis, None and lists are left out
    assert got["reward"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2)), (3, pytest.approx(0.3))]
    # a resumed run whose last checkpoint is update 2 replays update 3: the interrupted one's is dropped
    with Trackers(("tensorboard",), tmp_path, config, first_step=3) as trackers:
        trackers.log({"step": 3, "reward": -1.0}, 3)
        trackers.log({"step": 4, "reward": -2.0}, 4)
    assert read_tensorboard(tmp_path)["reward"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2)), (3, -1.0),
                                                    (4, -2.0)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    texts = [t for t in acc.Tags()["tensors"] if t.startswith("config")]
    assert len(texts) == 1  # the config, once, though the run was opened twice
    text = acc.Tensors(texts[0])[0].tensor_proto.string_val[0].decode()
    assert json.loads("\n".join(line[4:] for line in text.splitlines())) == config


def test_nothing_is_written_with_log_none(tmp_path):
    with Trackers(parse_log("none"), tmp_path, {}) as trackers:
        trackers.log({"reward": 1.0}, 1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name,folder", [("wandb", "wandb"), ("swanlab", "swanlog")])
def test_wandb_and_swanlab_log_offline_when_installed(tmp_path, monkeypatch, name, folder):
    pytest.importorskip(name, reason=f"{name} is optional (pip install {name}); without it --log {name} is "
                                     "a clear error, tested above")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no stored key: offline
    for key in ("WANDB_API_KEY", "WANDB_MODE", "SWANLAB_API_KEY", "SWANLAB_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking._wandb_mode() == "offline" and tracking._swanlab_mode() == "offline"
    run = tmp_path / "run"
    with Trackers((name,), run, {"lr": 1e-4}) as trackers:
        trackers.log({"step": 1, "reward": 0.5}, 1)
    assert any((run / folder).iterdir())
