"""``python -m alfrl``: help, demo, games, generate, and errors, run as a learner runs them."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from alfrl import TASK_TYPES
from alfrl.base.cli import add_dataclass_args, build_dataclass
from alfrl.world.games import HOW_TO_GET_GAMES, load_games
from alfrl.world.generate import GenerateConfig
from alfrl.world.pack import read_pack
from alfrl.world.rooms import SizeConfig

from conftest import REPO_ROOT


def alfrl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alfrl", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=300)


def test_help_lists_the_commands():
    out = alfrl("--help")
    assert out.returncode == 0, out.stderr
    for command in ("setup", "demo", "games", "generate"):
        assert command in out.stdout


def test_generate_help_lists_every_flag():
    out = alfrl("generate", "--help")
    assert out.returncode == 0, out.stderr
    for flag in ("--out", "--splits", "--n", "--seed", "--workers", "--max-attempts", "--size-max-receptacles",
                 "--size-max-object-types", "--size-instances", "--pack-dir"):
        assert f"  {flag} " in out.stdout, flag
    assert "Keep at most this many receptacles" in out.stdout  # field docstrings are the help


def test_flags_build_the_config():
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, GenerateConfig)
    cfg = build_dataclass(GenerateConfig, parser.parse_args(
        ["--n", "3", "--splits", "valid_seen", "valid_unseen", "--size-max-receptacles", "6",
         "--size-instances", "1", "0", "0"]))
    assert cfg == GenerateConfig(n=3, splits=("valid_seen", "valid_unseen"),
                                 size=SizeConfig(max_receptacles=6, instances=(1.0, 0.0, 0.0)))
    assert build_dataclass(GenerateConfig, parser.parse_args([])) == GenerateConfig()


def test_demo_plays_a_game_to_a_win(tiny_games):
    out = alfrl("demo", "--data-dir", tiny_games.root, "--split", "valid_unseen",
                "--task", "pick_two_obj_and_place")
    assert out.returncode == 0, out.stderr
    game = load_games("valid_unseen", tiny_games.root, task_types=("pick_two_obj_and_place",))[0]
    assert f"game  valid_unseen/{game.game_id}\ntask  {game.goal}\n" in out.stdout
    assert "-= Welcome to TextWorld, ALFRED! =-" in out.stdout
    assert f"[{len(game.walkthrough):>2}] > {game.walkthrough[-1]}" in out.stdout
    assert f"won: True after {len(game.walkthrough)} steps" in out.stdout


def test_games_counts_per_split_and_task(tiny_games):
    out = alfrl("games", "--data-dir", tiny_games.root)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["task", "type", "train", "valid_seen", "valid_unseen"]
    assert [line.split() for line in lines[1:]] == [[t, "1", "1", "1"] for t in TASK_TYPES] + [
        ["all", "6", "6", "6"]]


@pytest.mark.parametrize("command", ["games", "demo"])
def test_missing_data_dir_is_a_clear_error(tmp_path, command):
    out = alfrl(command, "--data-dir", tmp_path / "nowhere")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith(f"error: data dir {tmp_path / 'nowhere'} does not exist.")
    assert HOW_TO_GET_GAMES in out.stderr
    assert "Traceback" not in out.stderr


def test_generate_writes_games_and_packs(tmp_path):
    out = alfrl("generate", "--out", tmp_path / "games", "--splits", "valid_unseen", "--n", "1",
                "--workers", "1", "--size-max-receptacles", "6", "--size-max-object-types", "2",
                "--pack-dir", tmp_path / "packs")
    assert out.returncode == 0, out.stderr
    assert f"made 1 games in {tmp_path / 'games'}" in out.stdout
    assert f"packed 1 games into {tmp_path / 'packs' / 'valid_unseen.jsonl.xz'}" in out.stdout
    [game] = load_games("valid_unseen", tmp_path / "games")
    [record] = read_pack(tmp_path / "packs" / "valid_unseen.jsonl.xz")
    assert (record["task_type"], tuple(record["walkthrough"])) == (game.task_type, game.walkthrough)
    assert record["pddl_problem"].count("(receptacleType ") - record["pddl_problem"].count(
        "(receptacleType ?") <= 6
    # run again with other settings into the same folder: refused, with the reason
    again = alfrl("generate", "--out", tmp_path / "games", "--splits", "valid_unseen", "--n", "1",
                  "--workers", "1", "--seed", "5")
    assert again.returncode == 2
    assert again.stderr.startswith(f"error: {tmp_path / 'games' / 'valid_unseen'} holds games made with "
                                   "other settings")


def test_demo_agent_plays_turn_by_turn(tiny_games):
    """``demo --agent warmstart_epoch``: the default warm start plays a game through the real rollout code,
    printed turn by turn with the result; a reply cut short by --max-new-tokens is shown as invalid, with why."""
    out = alfrl("demo", "--agent", "warmstart_epoch", "--data-dir", tiny_games.root, "--split", "valid_unseen",
                "--task", "pick_and_place_simple", "--max-expert-steps", "0", "--max-receptacles", "0",
                "--max-steps", "2", "--max-new-tokens", "48")
    assert out.returncode == 0, out.stderr
    [game] = load_games("valid_unseen", tiny_games.root, task_types=("pick_and_place_simple",))
    assert f"game  valid_unseen/{game.game_id} (held out: " in out.stdout
    assert "The course's agent plays it: SmolLM2-135M-Instruct (bundled) with the default warm start" in out.stdout
    assert "greedy (temperature 0.01), at most 2 turns of 48 new tokens" in out.stdout
    assert "-= Welcome to TextWorld, ALFRED! =-" in out.stdout
    assert "[ 1] " in out.stdout
    assert "\nwon: " in out.stdout and " invalid actions; " in out.stdout and " s playing" in out.stdout
    if "won: True" not in out.stdout:
        assert "[ 2] " in out.stdout and "won: False after 2 steps" in out.stdout

    cut = alfrl("demo", "--agent", "warmstart_epoch", "--data-dir", tiny_games.root, "--split", "valid_unseen",
                "--task", "pick_and_place_simple", "--max-expert-steps", "0", "--max-receptacles", "0",
                "--max-steps", "1", "--max-new-tokens", "3")
    assert cut.returncode == 0, cut.stderr
    assert "[ 1] (no valid tool call" in cut.stdout
    assert "turn 1: Invalid tool-call format: " in cut.stdout
    assert "won: False after 1 steps, 1 invalid actions; out of turns (1)" in cut.stdout


def test_demo_agent_takes_a_run_directory(tmp_path):
    """--agent PATH: an adapter folder, a checkpoint folder, or a run directory's newest checkpoint."""
    import json
    import shutil

    from alfrl.__main__ import agent_adapter
    from alfrl.agent.models import SHIPPED
    from alfrl.base.paths import EPOCH_WARM_START_DIR, REPO_ROOT
    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(EPOCH_WARM_START_DIR, run / "checkpoints" / f"step_{step:05d}" / "adapter")
        (run / "checkpoints" / f"step_{step:05d}" / "state.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"model": "some/model"}))
    newest = run / "checkpoints" / "step_00002"
    assert agent_adapter(str(run), None)[:2] == (newest / "adapter", "some/model")
    assert agent_adapter(str(run), "bundled")[:2] == (newest / "adapter", "bundled")
    assert agent_adapter(str(newest), None)[:2] == (newest / "adapter", "bundled")
    assert agent_adapter(str(newest / "adapter"), None)[:2] == (newest / "adapter", "bundled")
    # the shipped adapters, by name
    name, model, what = agent_adapter("warmstart_epoch", None)
    assert (name, model) == ("warmstart_epoch", "bundled") and "default" in what and "data/warmstart_epoch" in what
    for name in ("warmstart", "warmstart_expert", "grpo"):  # their weights are out of git until rebuilt
        if not (REPO_ROOT / SHIPPED[name][1] / "adapter_model.safetensors").is_file():
            with pytest.raises(FileNotFoundError, match=f"rebuild them as .*{SHIPPED[name][1]}/README.md says"):
                agent_adapter(name, None)
    name, model, what = agent_adapter("grpo_scale", None)
    assert (name, model) == ("grpo_scale", "bundled") and "80 GRPO updates" in what
    assert "data/scale/grpo/adapters/step_00080" in what


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_demo_agent_without_an_adapter_is_a_clear_error(tmp_path, where):
    path = tmp_path / "runs" / "nothing"
    if where == "empty":
        path.mkdir(parents=True)
    out = alfrl("demo", "--agent", path)
    assert out.returncode == 2
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: --agent {path}: {path} ")
    assert ("does not exist" if where == "missing" else "holds no LoRA adapter") in out.stderr
    assert "pass --agent warmstart_epoch" in out.stderr and "a training run directory" in out.stderr


@pytest.mark.slow
def test_demo_agent_default_game_is_a_held_out_win():
    """The quick start's last step: the default warm start wins its default held-out game (as its evaluation
    did), after looking where the watch was not."""
    out = alfrl("demo", "--agent", "warmstart_epoch")
    assert out.returncode == 0, out.stderr
    assert "game  valid_unseen/pick_and_place_simple-Watch-None-Drawer-205/" in out.stdout
    assert "(held out: a room on a floor plan never used in training" in out.stdout
    assert "> go to sofa 1" in out.stdout and "> take watch 1 from sidetable 1" in out.stdout
    assert "won: True after 7 steps, 0 invalid actions; won" in out.stdout
