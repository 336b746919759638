"""Notebook 01's exercises: the checks pass the worked solutions, fail wrong and unfinished answers with a
useful message, and the notebook holds each exercise's stub and check call."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

from exercises import nb01 as checks  # noqa: E402
from solutions import nb01 as solutions  # noqa: E402


def _stub(*args, **kwargs):
    raise NotImplementedError  # your code here


def run(capsys, check, fn) -> tuple[bool, str]:
    ok = check(fn)
    return ok, capsys.readouterr().out


# --- exercise 1: the command that wins a step ---------------------------------------------------------

def test_winning_commands_solution_passes(capsys):
    ok, out = run(capsys, checks.check_winning_commands, solutions.winning_commands)
    assert ok, out
    assert out.startswith("✓")


def test_winning_cases_have_winners_and_non_winners():
    cases = checks.winning_cases()
    assert any(right for *_, right in cases) and any(not right for *_, right in cases)
    for game, prefix, right in cases:
        if len(prefix) == len(game.walkthrough) - 1:
            assert game.walkthrough[-1] in right  # the expert's last command wins


def test_winning_commands_expert_guess_fails(capsys):
    """Returning the expert's last command is right one step before the win, wrong two steps before it."""
    ok, out = run(capsys, checks.check_winning_commands, lambda game, prefix: [game.walkthrough[-1]])
    assert not ok
    assert "no command wins here" in out


def test_winning_commands_every_admissible_fails(capsys):
    def everything(game, prefix):
        from alfrl.world.env import GroupEnv
        with GroupEnv(k=1, max_steps=len(prefix) + 1, workers=0) as env:
            env.reset(game)
            for command in prefix:
                env.step({0: command})
            return list(env.admissible[0])

    ok, out = run(capsys, checks.check_winning_commands, everything)
    assert not ok
    assert "do(es) not win" in out


def test_winning_commands_stub_and_bad_types_fail(capsys):
    ok, out = run(capsys, checks.check_winning_commands, _stub)
    assert not ok and "not written yet" in out
    ok, out = run(capsys, checks.check_winning_commands, lambda game, prefix: "look")
    assert not ok and "list of command strings" in out
    ok, out = run(capsys, checks.check_winning_commands, lambda game, prefix: 1 / 0)
    assert not ok and "ZeroDivisionError" in out


# --- exercise 2: K copies, each its own script ---------------------------------------------------------

def test_play_group_solution_passes(capsys):
    ok, out = run(capsys, checks.check_play_group, solutions.play_group)
    assert ok, out


def test_play_group_case_ends_five_ways():
    game, scripts, max_steps, right = checks.group_case()
    walk = len(game.walkthrough)
    assert [(r["won"], r["done"], r["steps"], r["invalid"]) for r in right] == [
        (True, True, walk, 0), (True, True, walk + 2, 2), (False, True, walk + 2, 3),
        (False, True, walk + 2, 0), (False, False, 2, 1)]


def test_play_group_done_read_as_won_fails(capsys):
    def done_as_won(game, scripts, max_steps):
        out = solutions.play_group(game, scripts, max_steps)
        return [{**o, "won": o["done"]} for o in out]

    ok, out = run(capsys, checks.check_play_group, done_as_won)
    assert not ok
    assert "is that `done`?" in out


def test_play_group_ignoring_invalid_fails(capsys):
    def no_invalid(game, scripts, max_steps):
        return [{**o, "invalid": 0} for o in solutions.play_group(game, scripts, max_steps)]

    ok, out = run(capsys, checks.check_play_group, no_invalid)
    assert not ok
    assert "invalid=0, should be 2" in out


def test_play_group_stepping_finished_copies_fails(capsys):
    """Stepping every copy every turn steps a finished one: GroupEnv refuses, and the check says so."""
    from alfrl.world.env import GroupEnv

    def every_copy(game, scripts, max_steps):
        with GroupEnv(k=len(scripts), max_steps=max_steps, workers=0) as env:
            env.reset(game)
            for turn in range(max_steps):  # a copy whose script ended repeats its last command
                env.step({i: s[min(turn, len(s) - 1)] for i, s in enumerate(scripts)})
        return []

    ok, out = run(capsys, checks.check_play_group, every_copy)
    assert not ok
    assert "it raised ValueError" in out and "finished" in out


def test_play_group_stub_and_shape_fail(capsys):
    ok, out = run(capsys, checks.check_play_group, _stub)
    assert not ok and "not written yet" in out
    ok, out = run(capsys, checks.check_play_group, lambda game, scripts, max_steps: [])
    assert not ok and "one dict per copy" in out


# --- the notebook holds each exercise: a stub the learner fills in, then the check call ----------------

@pytest.mark.parametrize("function,check", [("winning_commands", "check_winning_commands"),
                                            ("play_group", "check_play_group")])
def test_notebook_has_exercise(function, check):
    cells = [c.source for c in nbformat.read(NOTEBOOKS / "01_alfworld_env.ipynb", as_version=4).cells
             if c.cell_type == "code"]
    stub = [i for i, s in enumerate(cells) if f"def {function}(" in s and "raise NotImplementedError" in s]
    call = [i for i, s in enumerate(cells) if f"from exercises.nb01 import {check}" in s
            and f"{check}({function}" in s]
    assert len(stub) == 1, f"01 needs one code cell with the stub of {function}"
    assert len(call) == 1 and call[0] == stub[0] + 1, f"the cell after {function}'s stub calls {check}"
