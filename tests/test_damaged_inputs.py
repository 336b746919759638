"""Files damaged by a kill or by hand: torn JSONL lines (metrics, trajectories, eval records) and a broken
adapter_config.json give a clear error or a repair that names the file. No model is loaded."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest

from alfrl.agent.models import check_adapter, load_policy
from alfrl.base.checkpoint import read_jsonl, truncate_jsonl
from alfrl.base.paths import EPOCH_WARM_START_DIR
from alfrl.eval.evaluate import EvalConfig, evaluate, read_records
from alfrl.training.train import TrainConfig, train
from alfrl.world.games import load_games

LINES = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.25}]
TORN = '{"step": 3, "rew'


def write_lines(path, records, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


# ---------------------------------------------------------------- one JSONL reader
def test_torn_last_line_is_skipped_with_a_warning_naming_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_lines(path, LINES, TORN)
    with pytest.warns(UserWarning, match=f"{path}: skipped its torn last line 3"):
        assert read_jsonl(path) == LINES
    assert path.read_text().endswith(TORN)  # reading alone changes nothing
    with pytest.warns(UserWarning):
        assert read_jsonl(path, repair=True) == LINES
    assert path.read_text() == "".join(json.dumps(r) + "\n" for r in LINES)


def test_complete_last_line_without_newline_is_kept_and_ended(tmp_path):
    path = tmp_path / "records.jsonl"
    write_lines(path, LINES[:1], json.dumps(LINES[1]))
    assert read_jsonl(path, repair=True) == LINES
    assert path.read_text().endswith("}\n")  # the next append starts a line of its own


def test_damaged_line_before_the_last_names_file_and_line(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + TORN + "\n" + json.dumps(LINES[1]) + "\n")
    with pytest.raises(ValueError, match=f"^{path}, line 2: not a JSON record"):
        read_jsonl(path, repair=True)
    with pytest.raises(ValueError, match=f"^{path}, line 2: not a JSON record"):
        truncate_jsonl(path, 1)


def test_truncate_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_lines(path, LINES, TORN)
    with pytest.warns(UserWarning, match=str(path)):
        truncate_jsonl(path, 1)
    assert path.read_text() == json.dumps(LINES[0]) + "\n"


def test_training_resume_repairs_torn_metrics_and_trajectories(tmp_path, tiny_games):
    run = tmp_path / "run"
    run.mkdir()
    config = TrainConfig(run_dir=str(run), data_dir=str(tiny_games.root), split="valid_seen", updates=2,
                         init_adapter=None, max_expert_steps=None, max_receptacles=None, device="cpu",
                         dtype="float32")
    (run / "config.json").write_text(json.dumps(asdict(config)))
    write_lines(run / "metrics.jsonl", LINES, TORN)
    write_lines(run / "trajectories.jsonl", [{"step": 1}, {"step": 2}], '{"step": 2, "tur')
    (run / "checkpoints" / "step_00002").mkdir(parents=True)
    (run / "checkpoints" / "step_00002" / "state.json").write_text(json.dumps({"step": 2}))
    with pytest.warns(UserWarning, match="torn last line") as warned:
        history = train(resume=run, progress=False)  # finished: no model
    assert {str(run / name) for name in ("metrics.jsonl", "trajectories.jsonl")} <= {
        str(w.message).split(": skipped")[0] for w in warned}
    assert history == LINES
    assert read_jsonl(run / "trajectories.jsonl") == [{"step": 1}, {"step": 2}]


def test_eval_resume_repairs_torn_records(tmp_path, tiny_games, monkeypatch):
    out = tmp_path / "eval"
    config = EvalConfig(out=str(out), data_dir=str(tiny_games.root), split="valid_seen", limit=1, resume=True)
    [game] = load_games("valid_seen", tiny_games.root, limit=1, seed=0)
    out.mkdir()
    (out / "config.json").write_text(json.dumps(asdict(config)))
    record = {"split": "valid_seen", "game_id": game.game_id, "task_type": game.task_type, "won": True,
              "steps": 3, "invalid": 0, "end_reason": "won", "valid_calls": 3, "admissible": 3, "turns": 3}
    write_lines(out / "records.jsonl", [record], TORN)
    monkeypatch.setattr("alfrl.eval.evaluate.load_policy", lambda *a, **k: pytest.fail("every game is recorded"))
    with pytest.warns(UserWarning, match=f"{out / 'records.jsonl'}: skipped its torn last line 2"):
        summary = evaluate(config, progress=False)
    assert summary["all"]["games"] == 1 and summary["all"]["won"] == 1
    assert read_records(out) == [record]


# ---------------------------------------------------------------- damaged adapters
@pytest.fixture
def broken_adapter(tmp_path):
    adapter = tmp_path / "adapter"
    shutil.copytree(EPOCH_WARM_START_DIR, adapter)
    return adapter


@pytest.mark.parametrize("text, message", [
    ('{"peft_type": "LORA", "r": ', "is not valid JSON"),
    (json.dumps({"r": 8, "lora_alpha": 16}), "is not a LoRA adapter's config (it holds peft_type None"),
    ("[]", "is not a LoRA adapter's config (it holds a JSON list"),
])
def test_damaged_adapter_config_names_the_file(broken_adapter, tmp_path, tiny_games, text, message, monkeypatch):
    config_file = broken_adapter / "adapter_config.json"
    config_file.write_text(text)
    expected = f"^{config_file} {message}".replace("(", r"\(").replace("[", r"\[")
    with pytest.raises(ValueError, match=expected):
        check_adapter(broken_adapter)
    import transformers
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the adapter is checked before the model loads"))
    with pytest.raises(ValueError, match=expected):
        load_policy(lora=str(broken_adapter))
    with pytest.raises(ValueError, match=expected):  # --init-adapter: before the run directory is made
        train(TrainConfig(run_dir=str(tmp_path / "run"), data_dir=str(tiny_games.root), split="valid_seen",
                          init_adapter=str(broken_adapter), device="cpu", dtype="float32"), progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=expected):  # eval --adapter: before the output folder is made
        evaluate(EvalConfig(out=str(tmp_path / "eval"), data_dir=str(tiny_games.root), split="valid_seen",
                            adapter=str(broken_adapter)), progress=False)
    assert not (tmp_path / "eval").exists()
    assert "save it again" in str(pytest.raises(ValueError, check_adapter, broken_adapter).value)


def test_shipped_warm_start_passes_the_adapter_check():
    assert check_adapter("warmstart_epoch") == EPOCH_WARM_START_DIR


def test_an_adapter_without_its_weights_is_refused_before_the_model_loads(broken_adapter, monkeypatch):
    (broken_adapter / "adapter_model.safetensors").unlink()
    import transformers
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the adapter is checked before the model loads"))
    with pytest.raises(FileNotFoundError, match=f"^{broken_adapter} holds an adapter_config.json but no "
                                                "adapter_model.safetensors \\(or .bin\\): the adapter is damaged"):
        load_policy(lora=str(broken_adapter))
