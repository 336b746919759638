"""scripts/scale_run.py's amendment step: before an arm's update 41 its saved config gets the scale preset's
later rooms (``more_data_dir``), once, and nothing else in it changes."""

from __future__ import annotations

import json
from types import SimpleNamespace

from script_loader import load_script


def test_an_arm_gets_the_later_rooms_once_and_keeps_every_other_setting(tmp_path, monkeypatch):
    script = load_script("scale_run")
    monkeypatch.setattr(script, "run_dir", lambda arm: tmp_path / arm)
    monkeypatch.setattr(script, "preset", lambda name: SimpleNamespace(more_data_dir="data/rl_rooms_more"))
    (tmp_path / "grpo").mkdir()
    saved = {"data_dir": "data/rl_rooms", "more_data_dir": None, "updates": 40, "seed": 0}
    (tmp_path / "grpo" / "config.json").write_text(json.dumps(saved))
    assert script.add_more_rooms("grpo")
    assert json.loads((tmp_path / "grpo" / "config.json").read_text()) == {**saved,
                                                                           "more_data_dir": "data/rl_rooms_more"}
    assert not script.add_more_rooms("grpo")  # already there: the file is left alone
