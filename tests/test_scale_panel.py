"""scripts/scale_panel.py's committed files: each game's outcome with the actions that moved it, written again by
``--rewrite`` from the full records without playing, and a finished part never played (or timed) twice."""

from __future__ import annotations

import json
import sys

import pytest

from alfrl.eval.scale import PARTS, ScaleRun

from script_loader import load_script


@pytest.fixture
def panel(tmp_path, monkeypatch):
    module = load_script("scale_panel")
    monkeypatch.setattr(module, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(module, "PANEL", tmp_path / "data/scale/panel")
    monkeypatch.setattr(module, "SAMPLED_GAMES", tmp_path / "data/scale/panel_sampled100.txt")
    return module


def record(game_id: str, won: bool, actions: list[str | None], inadmissible: tuple[str, ...] = ()) -> dict:
    return {"split": "valid_unseen", "game_id": game_id, "task_type": game_id.split("-")[0], "won": won,
            "steps": len(actions), "invalid": actions.count(None) + len(inadmissible),
            "end_reason": "won" if won else "max_steps",
            "trajectory": {"turns": [{"action": a, "admissible": a is not None and a not in inadmissible,
                                      "reply": "..."} for a in actions]}}


def write_records(folder, records) -> None:
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_keep_writes_each_games_outcome_and_actions(panel, tmp_path):
    folder = tmp_path / "runs/scale_panel/grpo_u5/greedy"
    write_records(folder, [record("pick_and_place_simple-Pen-None-Desk-1/t", True, ["look", "take pen 1 from bed 1"]),
                           record("look_at_obj_in_light-Pen-None-DeskLamp-2/t", False,
                                  [None, "go to desk 9", "go to desk 1"], inadmissible=("go to desk 9",))])
    path = panel.keep("grpo_u5", "greedy", folder)
    assert path == tmp_path / "data/scale/panel/grpo_u5_greedy.jsonl"
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"checkpoint": "grpo_u5", "split": "valid_unseen", "game_id": "pick_and_place_simple-Pen-None-Desk-1/t",
         "task_type": "pick_and_place_simple", "won": True, "steps": 2, "invalid": 0, "end_reason": "won",
         "actions": ["look", "take pen 1 from bed 1"]},
        {"checkpoint": "grpo_u5", "split": "valid_unseen", "game_id": "look_at_obj_in_light-Pen-None-DeskLamp-2/t",
         "task_type": "look_at_obj_in_light", "won": False, "steps": 3, "invalid": 2, "end_reason": "max_steps",
         "actions": [None, None, "go to desk 1"]}]


def test_rewrite_plays_nothing_and_a_finished_part_is_not_played_again(panel, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "runs/scale_panel/grpo_u5/greedy"
    write_records(folder, [record("pick_and_place_simple-Pen-None-Desk-1/t", True, ["look"])])
    monkeypatch.setattr(panel.subprocess, "run", lambda *a, **k: pytest.fail("a finished part was played again"))
    monkeypatch.setattr(sys, "argv", ["scale_panel.py", "grpo_u5", "x", "--rewrite", "--parts", "greedy", "sampled"])
    panel.main()
    out = capsys.readouterr().out
    assert "grpo_u5_greedy.jsonl" in out and "sampled: not played here" in out
    seconds = tmp_path / "data/scale/panel/grpo_u5_seconds.json"
    seconds.write_text(json.dumps({"greedy": 600.0}))
    monkeypatch.setattr(sys, "argv", ["scale_panel.py", "grpo_u5", "x", "--parts", "greedy"])
    panel.main()
    assert "greedy: already played (10.0 min)" in capsys.readouterr().out
    assert json.loads(seconds.read_text()) == {"greedy": 600.0}


def test_played_asks_the_committed_seconds_and_plays_nothing(panel, tmp_path, monkeypatch):
    """--played: exit 0 only when every asked part that can be played here is committed; official counts only
    where its games are (beyond_grpo_scale.sh skips a finished rule by it on a fresh clone)."""
    monkeypatch.setattr(panel.subprocess, "run", lambda *a, **k: pytest.fail("--played played something"))
    monkeypatch.setattr(panel, "official_data", lambda: tmp_path)  # official games here
    seconds = tmp_path / "data/scale/panel/grpo_u5_seconds.json"

    def played(*parts: str) -> int:
        monkeypatch.setattr(sys, "argv", ["scale_panel.py", "grpo_u5", "x", "--parts", *parts, "--played"])
        with pytest.raises(SystemExit) as stop:
            panel.main()
        return stop.value.code
    assert played("greedy") == 1  # nothing committed yet
    seconds.parent.mkdir(parents=True)
    seconds.write_text(json.dumps({"greedy": 600.0}))
    assert played("greedy") == 0 and played("greedy", "official") == 1
    monkeypatch.setattr(panel, "official_data", lambda: None)  # no official games on this machine
    assert played("greedy", "official") == 0
    assert not (tmp_path / "runs").exists()


def test_every_committed_greedy_record_keeps_the_actions_it_took():
    run = ScaleRun()
    names = [p.name.rsplit("_", 1)[0] for p in (run.root / "panel").glob("*_official.jsonl")]
    assert "start" in names
    for name in names:
        for part in PARTS[:2]:
            for r in run.results(name, part):
                assert len(r["actions"]) == r["steps"] and r["actions"].count(None) == r["invalid"], (name, r)
