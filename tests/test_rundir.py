"""Output folders of train and eval (alfrl.base.rundir's one policy), saved configs, and starts that fail
before they leave anything behind. No model is loaded: where a run would reach one, it is stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest

from alfrl.base.checkpoint import prepare_run_dir
from alfrl.base.rundir import DAGGER, EVAL, FOREIGN, RUN, TRAIN, RunDirError, changed_settings, folder_kind, prepare_output_dir
from alfrl.eval.evaluate import EvalConfig, evaluate
from alfrl.training.train import TrainConfig, train

from conftest import REPO_ROOT


class ModelReached(Exception):
    """Raised where a test's run would load a model: everything before it was checked and passed."""


@pytest.fixture
def no_model(monkeypatch):
    def stop(*args, **kwargs):
        raise ModelReached
    monkeypatch.setattr("alfrl.training.train.load_for_training", stop)
    monkeypatch.setattr("alfrl.eval.evaluate.load_policy", stop)


def train_config(run_dir, data_dir=None, **overrides) -> TrainConfig:
    return TrainConfig(**{**dict(run_dir=str(run_dir), data_dir=str(data_dir) if data_dir else None,
                                 split="valid_seen", updates=1, games_per_update=1, k=2, max_steps=2,
                                 init_adapter=None, max_expert_steps=None, max_receptacles=None, workers=0,
                                 device="cpu", dtype="float32"), **overrides})


def eval_config(out, data_dir, **overrides) -> EvalConfig:
    return EvalConfig(**{**dict(out=str(out), data_dir=str(data_dir), split="valid_seen", limit=1, max_steps=2,
                                max_new_tokens=8), **overrides})


def make_run(folder, **overrides):
    """A training run directory as train writes it: config.json, metrics, a checkpoint's state."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(asdict(train_config(folder, **overrides))))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    return folder


def make_eval(folder):
    """An evaluation folder as eval writes it: config.json and records."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(asdict(EvalConfig(out=str(folder)))))
    (folder / "records.jsonl").write_text(json.dumps({"split": "valid_seen", "game_id": "a/b"}) + "\n")
    return folder


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- --overwrite deletes only its own kind
def test_overwrite_refuses_a_folder_of_many_runs(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs / "a")
    make_run(runs / "b")
    before = snapshot(runs)
    with pytest.raises(RunDirError) as e:
        train(train_config(runs, overwrite=True), progress=False)
    assert str(e.value).startswith(f"{runs} is not a folder any alfrl command wrote")
    assert "--overwrite only replaces an existing training run directory" in str(e.value)
    assert snapshot(runs) == before
    with pytest.raises(RunDirError):
        prepare_run_dir(runs, overwrite=True)  # sft's folders: the same rule
    assert snapshot(runs) == before


def test_eval_overwrite_refuses_a_folder_of_many_runs(tmp_path, tiny_games, no_model):
    runs = tmp_path / "runs"
    make_eval(runs / "a")
    make_run(runs / "b")
    before = snapshot(runs)
    with pytest.raises(RunDirError, match="--overwrite only replaces an existing evaluation folder"):
        evaluate(eval_config(runs, tiny_games.root, overwrite=True), progress=False)
    assert snapshot(runs) == before


def test_overwrite_replaces_a_folder_of_its_own_kind(tmp_path):
    run = make_run(tmp_path / "run")
    with pytest.raises(RunDirError, match=f"continue it with --resume {run}"):
        prepare_output_dir(run, TRAIN, flag="--run-dir")
    assert not any(prepare_output_dir(run, TRAIN, overwrite=True).path.iterdir())
    results = make_eval(tmp_path / "eval")
    with pytest.raises(RunDirError, match="already holds evaluation results; pass --resume"):
        prepare_output_dir(results, EVAL)
    assert not any(prepare_output_dir(results, EVAL, overwrite=True).path.iterdir())


def test_folder_kinds(tmp_path):
    assert folder_kind(tmp_path / "missing") is None
    (tmp_path / "empty").mkdir()
    assert folder_kind(tmp_path / "empty") is None
    assert folder_kind(make_run(tmp_path / "run")) == TRAIN
    assert folder_kind(make_eval(tmp_path / "eval")) == EVAL
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "config.json").write_text(json.dumps({"out": "runs/sft", "epochs": 2}))
    assert folder_kind(tmp_path / "sft") == RUN
    from alfrl.imitation.dagger import DaggerConfig
    (tmp_path / "dagger").mkdir()
    (tmp_path / "dagger" / "config.json").write_text(json.dumps(asdict(DaggerConfig())))
    assert folder_kind(tmp_path / "dagger") == DAGGER
    (tmp_path / "dagger" / "metrics.jsonl").write_text("")
    with pytest.raises(RunDirError, match="already holds a DAgger run; pass --resume"):
        prepare_output_dir(tmp_path / "dagger", DAGGER)
    with pytest.raises(RunDirError, match="is a DAgger run folder"):
        prepare_output_dir(tmp_path / "dagger", EVAL, resume=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{not json")
    assert folder_kind(tmp_path / "mine") == FOREIGN


def test_a_folder_holding_only_its_config_is_started_afresh(tmp_path):
    """What a start that failed before any work left: no --overwrite needed to start again."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(asdict(train_config(run))))
    prepared = prepare_output_dir(run, TRAIN)
    assert not prepared.created and not prepared.kept


# ---------------------------------------------------------------- train and eval never share a folder
def test_eval_refuses_a_training_run_directory(tmp_path, tiny_games, no_model):
    run = make_run(tmp_path / "run")
    before = snapshot(run)
    for flags in ({}, {"resume": True}, {"overwrite": True}):
        with pytest.raises(RunDirError) as e:
            evaluate(eval_config(run, tiny_games.root, **flags), progress=False)
        assert str(e.value).startswith(f"{run} is a training run directory (python -m alfrl train), not an "
                                       "evaluation folder (python -m alfrl eval); refusing to")
        assert snapshot(run) == before  # its config.json is untouched: train --resume still works


def test_train_refuses_an_evaluation_folder(tmp_path):
    results = make_eval(tmp_path / "eval")
    before = snapshot(results)
    with pytest.raises(RunDirError, match=r"is an evaluation folder .* not a training run directory \(.*\); "
                                          "refusing to write into it"):
        train(train_config(results), progress=False)
    with pytest.raises(RunDirError, match="is an evaluation folder .* refusing to continue it"):
        train(resume=results, progress=False)
    assert snapshot(results) == before


def test_cli_eval_into_a_training_run_is_a_clear_error(tmp_path, tiny_games):
    run = make_run(tmp_path / "run")
    before = snapshot(run)
    done = subprocess.run([sys.executable, "-m", "alfrl", "eval", "--out", str(run), "--data-dir",
                           str(tiny_games.root), "--split", "valid_seen", "--limit", "1"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {run} is a training run directory")
    assert "Traceback" not in done.stderr
    assert snapshot(run) == before


# ---------------------------------------------------------------- saved configs from elsewhere
def test_resume_names_unknown_keys_of_a_foreign_config(tmp_path):
    run = make_run(tmp_path / "run")
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**saved, "learning_rate": 0.1, "zzz": 1}))
    with pytest.raises(ValueError) as e:
        train(resume=run, progress=False)
    assert str(e.value).startswith(f"{run / 'config.json'} has settings this version of alfrl does not know: "
                                   "learning_rate, zzz;")


def test_resume_of_a_damaged_config_names_the_file(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "config.json").write_text('{"run_dir": "x", ')
    with pytest.raises(ValueError, match=f"^{run / 'config.json'} is not valid JSON"):
        train(resume=run, progress=False)


def test_resume_of_an_older_config_takes_defaults_and_says_so(tmp_path, tiny_games, capsys):
    run = make_run(tmp_path / "run", data_dir=tiny_games.root)
    saved = json.loads((run / "config.json").read_text())
    del saved["top_p"], saved["kl_coef"]
    (run / "config.json").write_text(json.dumps(saved))
    (run / "checkpoints" / "step_00001").mkdir(parents=True)
    (run / "checkpoints" / "step_00001" / "state.json").write_text(json.dumps({"step": 1}))
    history = train(resume=run, progress=False)  # finished: returns before any model
    assert [m["step"] for m in history] == [1]
    err = capsys.readouterr().err
    assert f"note: {run / 'config.json'} has no kl_coef, top_p (written by an older alfrl); resuming with the " \
           "defaults kl_coef=0.0, top_p=1.0" in err
    assert json.loads((run / "config.json").read_text())["top_p"] == 1.0


# ---------------------------------------------------------------- a failed start leaves nothing behind
@pytest.mark.parametrize("overrides, error, message", [
    ({"init_adapter": "no/such/adapter"}, FileNotFoundError, "adapter folder no/such/adapter does not exist"),
    ({"temperature": 0.0}, ValueError, r"--temperature must be above 0 \(got 0.0\): the update divides"),
    ({"k": 0}, ValueError, r"--k must be at least 1 \(got 0\)"),
    ({"lr": "fast"}, ValueError, "lr must be of type"),
    ({"split": "nope"}, Exception, "no split 'nope'"),
])
def test_failed_start_makes_no_run_directory(tmp_path, tiny_games, no_model, overrides, error, message):
    config = train_config(tmp_path / "run", tiny_games.root, **overrides)
    with pytest.raises(error, match=message):
        train(config, progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ModelReached):  # the corrected start gets as far as the model
        train(train_config(tmp_path / "run", tiny_games.root), progress=False)


def test_failed_eval_leaves_nothing_behind(tmp_path, tiny_games, no_model):
    with pytest.raises(FileNotFoundError, match="adapter folder no/such/adapter does not exist"):
        evaluate(eval_config(tmp_path / "a", tiny_games.root, adapter="no/such/adapter"), progress=False)
    with pytest.raises(ValueError, match="--batch must be at least 1"):
        evaluate(eval_config(tmp_path / "a", tiny_games.root, batch=0), progress=False)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ModelReached):  # fails after its folder was made, before any record
        evaluate(eval_config(tmp_path / "a", tiny_games.root), progress=False)
    assert not (tmp_path / "a").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(ModelReached):
        evaluate(eval_config(mine, tiny_games.root), progress=False)
    assert mine.is_dir() and not any(mine.iterdir())  # a folder that existed stays, as it was


def test_changed_settings_compares_saved_and_wanted_configs():
    saved = {"lr": 1e-5, "k": 8, "out": "a", "gone": 1}
    wanted = {"lr": 2e-5, "k": 8, "out": "b", "new": 3}
    # strict (a training run): a changed value, a setting dropped and one added all count; ignored ones never
    assert changed_settings(saved, wanted, ignore=("out",)) == ["gone", "lr", "new"]
    assert changed_settings(saved, dict(saved)) == []
    # added_ok (results a newer version extends): a setting the saved config lacks is not a change
    assert changed_settings(saved, wanted, ignore=("out",), added_ok=True) == ["lr"]
    assert changed_settings(saved, {**saved, "new": 3}, added_ok=True) == []
