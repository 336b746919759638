"""``python -m alfrl``: help, demo, games, generate, and errors, run as a learner runs them."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from alfrl import TASK_TYPES
from alfrl.cli import add_dataclass_args, build_dataclass
from alfrl.games import HOW_TO_GET_GAMES, load_games
from alfrl.generate import GenerateConfig
from alfrl.pack import read_pack
from alfrl.rooms import SizeConfig

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
