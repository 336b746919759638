"""Notebook 04's exercises: the checks pass the worked solutions, fail wrong and unfinished answers with a
message that says what is wrong, never raise, and the notebook holds each exercise's stub and check call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

from exercise_notebook import assert_has_exercise  # noqa: E402
from exercises import nb04 as checks  # noqa: E402
from solutions import nb04 as solutions  # noqa: E402


def unfinished(*args, **kwargs):
    raise NotImplementedError  # your code here


def test_group_token_advantages_solution_passes(capsys):
    assert checks.check_group_token_advantages(solutions.group_token_advantages) is True
    assert "✓" in capsys.readouterr().out


def test_token_logprobs_solution_passes(capsys):
    assert checks.check_token_logprobs(solutions.token_logprobs) is True
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_group_token_advantages, checks.check_token_logprobs])
def test_unfinished_fails_with_a_message(check, capsys):
    assert check(unfinished) is False
    assert "not written yet" in capsys.readouterr().out


def _rewards(group):
    return [float(t.won) - 0.1 * t.invalid for t in group]


def _no_mask(group):
    rs = _rewards(group)
    mean = sum(rs) / len(rs)
    return [[r - mean] * len(t.mask) for r, t in zip(rs, group)]


def _no_baseline(group):
    return [[r * m for m in t.mask] for r, t in zip(_rewards(group), group)]


def _std_normalised(group):
    rs = _rewards(group)
    mean = sum(rs) / len(rs)
    std = (sum((r - mean) ** 2 for r in rs) / len(rs)) ** 0.5 + 1e-6
    return [[(r - mean) / std * m for m in t.mask] for r, t in zip(rs, group)]


@pytest.mark.parametrize("wrong,message", [(_no_mask, "nonzero where the mask is 0"),
                                           (_no_baseline, "minus the group's mean"),
                                           (_std_normalised, "expected"),
                                           (lambda group: 3, "return one list")])
def test_group_token_advantages_wrong_answers_fail(wrong, message, capsys):
    assert checks.check_group_token_advantages(wrong) is False
    out = capsys.readouterr().out
    assert "✗" in out and message in out, out


def _unshifted(logits, tokens):
    return torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0]


def _raw_logits(logits, tokens):
    out = torch.zeros(len(tokens))
    out[1:] = logits[:-1].gather(1, tokens[1:, None])[:, 0]
    return out


def _one_short(logits, tokens):
    return solutions.token_logprobs(logits, tokens)[1:]


@pytest.mark.parametrize("wrong,message", [(_unshifted, "logits[i-1]"), (_raw_logits, "log_softmax"),
                                           (_one_short, "one per token")])
def test_token_logprobs_wrong_answers_fail(wrong, message, capsys):
    assert checks.check_token_logprobs(wrong) is False
    out = capsys.readouterr().out
    assert "✗" in out and message in out, out


@pytest.mark.parametrize("stub,check", [("def group_token_advantages(group):",
                                         "check_group_token_advantages(group_token_advantages)"),
                                        ("def token_logprobs(logits, tokens):", "check_token_logprobs(token_logprobs)")])
def test_notebook_has_the_exercise(stub, check):
    assert_has_exercise("04_advantages_masks.ipynb", stub, check)
