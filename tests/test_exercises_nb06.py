"""Notebook 06's exercises: the checks accept the worked solutions, reject wrong answers and the
unfinished stub with a useful message (and never raise), and the notebook holds the stubs and the check
calls. The checks take their answers from alfrl.eval.evaluate, so the solutions are tied to the package."""

from __future__ import annotations

import sys
from math import sqrt
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "notebooks"))

from exercises import nb06 as checks  # noqa: E402
from solutions import nb06 as solutions  # noqa: E402

NOTEBOOK = REPO / "notebooks" / "06_evaluation.ipynb"


def unfinished(*args, **kwargs):
    raise NotImplementedError  # your code here


def run(check, fn, capsys) -> tuple[bool, str]:
    ok = check(fn)
    return ok, capsys.readouterr().out


def test_the_solutions_pass(capsys):
    assert run(checks.check_wilson, solutions.wilson, capsys)[0]
    assert run(checks.check_sign_test, solutions.sign_test, capsys)[0]


def test_the_solutions_are_alfrl_evaluate(tmp_path):
    """Directly, beside the checks: the README's numbers (5 of 20 solved: 11-47%; 5 gained, 1 lost: p = 14/64)."""
    from alfrl.eval.evaluate import wilson_interval

    assert solutions.wilson(5, 20) == pytest.approx(wilson_interval(5, 20))
    assert solutions.wilson(5, 20) == pytest.approx((0.1119, 0.4687), abs=1e-4)
    before = {f"g{i}": i < 3 for i in range(10)}
    after = {f"g{i}": 1 <= i < 8 for i in range(10)}
    assert solutions.sign_test(before, after) == {"games": 10, "gained": 5, "lost": 1, "p_value": 14 / 64}


def _wald(won, games, z=1.96):
    p = won / games if games else 0.0
    half = z * sqrt(p * (1 - p) / games) if games else 1.0
    return p - half, p + half


def _one_sided(before, after):
    right = solutions.sign_test(before, after)
    return {**right, "p_value": right["p_value"] / 2}


def _uncapped(before, after):
    right = solutions.sign_test(before, after)
    n, m = right["gained"] + right["lost"], min(right["gained"], right["lost"])
    from math import comb
    return {**right, "p_value": 2 * sum(comb(n, i) for i in range(m + 1)) / 2 ** n}


WRONG = [
    (checks.check_wilson, _wald, "normal (Wald) interval"),
    (checks.check_wilson, lambda w, g, z=1.96: (0.0, 1.0) if not g else solutions.wilson(w, g, z)[::-1], "yours is"),
    (checks.check_wilson, lambda w, g, z=1.96: solutions.wilson(w, g, z) if g else (0.0, 0.0), "every success rate"),
    (checks.check_wilson, lambda w, g, z=1.96: w / g, "return two numbers"),
    (checks.check_wilson, lambda w, g, z=1.96: (w / g, w / g), "it raised ZeroDivisionError"),
    (checks.check_sign_test, lambda b, a: solutions.sign_test(a, b), "swapped"),
    (checks.check_sign_test, _one_sided, "two-sided"),
    (checks.check_sign_test, _uncapped, "cap it at 1"),
    (checks.check_sign_test, lambda b, a: {**solutions.sign_test(b, a), "games": len(b.keys() | a.keys())},
     "only the games both played"),
    (checks.check_sign_test, lambda b, a: (1, 2, 3), "return a dict"),
]


@pytest.mark.parametrize("check,fn,message", WRONG, ids=[m for *_, m in WRONG])
def test_a_wrong_answer_is_named(check, fn, message, capsys):
    ok, out = run(check, fn, capsys)
    assert not ok and "✗" in out and message in out, out


@pytest.mark.parametrize("check", [checks.check_wilson, checks.check_sign_test])
def test_the_unfinished_stub_fails_without_raising(check, capsys):
    ok, out = run(check, unfinished, capsys)
    assert not ok and "not written yet" in out


@pytest.mark.parametrize("function,check", [("wilson", "check_wilson"), ("sign_test", "check_sign_test")])
def test_the_notebook_has_the_stub_and_the_check(function, check):
    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    stub = [i for i, c in enumerate(cells) if f"def {function}(" in c.source]
    assert len(stub) == 1, f"one cell defines {function}"
    assert "raise NotImplementedError  # your code here" in cells[stub[0]].source
    calls = [i for i, c in enumerate(cells) if f"from exercises.nb06 import {check}" in c.source
             and f"{check}({function})" in c.source]
    assert calls and calls[0] > stub[0], f"a cell after the stub calls {check}({function})"
