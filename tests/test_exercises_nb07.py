"""Notebook 07's exercises: the checks pass the worked solutions, fail wrong and unfinished answers with a
message that says what is wrong, never raise, and the notebook holds each exercise's stub and check call."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

from exercise_notebook import assert_has_exercise  # noqa: E402
from exercises import nb07 as checks  # noqa: E402
from solutions import nb07 as solutions  # noqa: E402


def unfinished(*args, **kwargs):
    raise NotImplementedError  # your code here


@pytest.mark.parametrize("check,solution", [(checks.check_shaped_advantages, solutions.shaped_advantages),
                                            (checks.check_dpo_pair, solutions.dpo_pair)])
def test_the_solutions_pass(check, solution, capsys):
    assert check(solution) is True
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_shaped_advantages, checks.check_dpo_pair])
def test_unfinished_fails_with_a_message(check, capsys):
    assert check(unfinished) is False
    assert "not written yet" in capsys.readouterr().out


def test_the_solutions_by_hand():
    """Directly, beside the checks: a group that only differs in progress gets a signal from alpha alone."""
    group = [checks._trajectory(False, s, 0, b) for b, s in enumerate((0, 1, 2, 1))]
    assert solutions.shaped_advantages(group, 0.1) == pytest.approx([-0.1, 0.0, 0.1, 0.0])
    assert solutions.shaped_advantages(group, 0.0) == [0.0] * 4
    loss, g_w, g_l = solutions.dpo_pair(-5.0, -5.0, -5.0, -5.0, 0.5)  # z = 0: no preference yet
    assert (loss, g_w, g_l) == (pytest.approx(math.log(2)), -0.25, 0.25)


def _unshaped(group, alpha):
    rewards = [float(t.won) - 0.1 * t.invalid for t in group]
    return [r - sum(rewards) / len(rewards) for r in rewards]


def _no_baseline(group, alpha):
    return [float(t.won) + alpha * t.subgoals - 0.1 * t.invalid for t in group]


def _no_penalty(group, alpha):
    rewards = [float(t.won) + alpha * t.subgoals for t in group]
    return [r - sum(rewards) / len(rewards) for r in rewards]


@pytest.mark.parametrize("wrong,message", [(_unshaped, "add alpha x subgoals"), (_no_baseline, "group's mean"),
                                           (_no_penalty, "costs 0.1"), (lambda g, a: 3, "one number per branch")])
def test_shaped_advantages_wrong_answers_fail(wrong, message, capsys):
    assert checks.check_shaped_advantages(wrong) is False
    out = capsys.readouterr().out
    assert "✗" in out and message in out, out


def _flipped_sign(s_w, s_l, ref_w, ref_l, beta):
    loss, g_w, g_l = solutions.dpo_pair(s_w, s_l, ref_w, ref_l, beta)
    return loss, -g_w, -g_l


def _wrong_z(s_w, s_l, ref_w, ref_l, beta):
    return solutions.dpo_pair(s_l, s_w, ref_l, ref_w, beta)


def _no_beta(s_w, s_l, ref_w, ref_l, beta):
    loss, g_w, g_l = solutions.dpo_pair(s_w, s_l, ref_w, ref_l, beta)
    return loss, g_w / beta, g_l / beta


@pytest.mark.parametrize("wrong,message", [(_flipped_sign, "raise the chosen"), (_wrong_z, "-log sigmoid(-z)"),
                                           (_no_beta, "beta x sigmoid(-z)"), (lambda *a: 1.0, "three numbers")])
def test_dpo_pair_wrong_answers_fail(wrong, message, capsys):
    assert checks.check_dpo_pair(wrong) is False
    out = capsys.readouterr().out
    assert "✗" in out and message in out, out


@pytest.mark.parametrize("stub,check", [("def shaped_advantages(group, alpha):",
                                         "check_shaped_advantages(shaped_advantages)"),
                                        ("def dpo_pair(s_w, s_l, ref_w, ref_l, beta):", "check_dpo_pair(dpo_pair)")])
def test_notebook_has_the_exercise(stub, check):
    assert_has_exercise("07_beyond_grpo.ipynb", stub, check)
