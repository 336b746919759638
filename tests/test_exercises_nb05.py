"""Notebook 05's exercises: the checks accept the worked solutions, reject wrong answers and the
unfinished stub with a useful message (and never raise), and the notebook holds the stubs and the check
calls. The checks take their answers from alfrl.ppo, so the solutions are tied to the package."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "notebooks"))

from exercises import nb05 as checks  # noqa: E402
from solutions import nb05 as solutions  # noqa: E402

NOTEBOOK = REPO / "notebooks" / "05_ppo_loop.ipynb"


def unfinished(*args, **kwargs):
    raise NotImplementedError  # your code here


def run(check, fn, capsys) -> tuple[bool, str]:
    ok = check(fn)
    return ok, capsys.readouterr().out


def test_the_solutions_pass(capsys):
    assert run(checks.check_clipped_loss, solutions.clipped_loss, capsys)[0]
    assert run(checks.check_stops_pulling, solutions.stops_pulling, capsys)[0]


@pytest.mark.parametrize("low,high", [(0.8, 1.2), (0.9, 1.1), (0.5, 2.0)])
def test_the_solution_is_alfrl_ppo_loss_with_its_gradient(low, high):
    """The worked clipped loss is what alfrl.ppo.ppo_step minimises, value and gradient, and the tokens
    stops_pulling names are exactly those without a gradient."""
    from alfrl.ppo import ppo_token_loss

    gen = torch.Generator().manual_seed(0)
    old = -3 * torch.rand(4, 30, generator=gen)
    new = (old + 0.4 * torch.randn(4, 30, generator=gen)).requires_grad_(True)  # ratios on both sides of the clip
    adv = torch.randn(4, 1, generator=gen).expand(4, 30)
    mask = (torch.rand(4, 30, generator=gen) < 0.6).float()
    mine = solutions.clipped_loss(new, old, adv, mask, low, high)
    tokens, ratio = ppo_token_loss(new, old, adv, low, high)
    theirs = (tokens * mask).sum() / mask.sum()
    assert torch.isclose(mine, theirs)
    (grad_mine,) = torch.autograd.grad(mine, new)
    (grad_theirs,) = torch.autograd.grad(theirs, new)
    assert torch.allclose(grad_mine, grad_theirs) and torch.all(grad_mine[mask == 0] == 0)
    stopped = solutions.stops_pulling(ratio.detach(), adv, low, high)
    assert stopped.any() and torch.equal(stopped & (mask == 1), (grad_mine == 0) & (mask == 1))


def _ratio_loss(new, old, adv, mask, low, high):
    ratio = torch.exp(new - old)
    return ratio, -torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)


WRONG_LOSSES = {
    "per trajectory": lambda n, o, a, m, lo, hi: ((_ratio_loss(n, o, a, m, lo, hi)[1] * m).sum(1) / m.sum(1)).mean(),
    "multiply the per-token loss by the mask": lambda n, o, a, m, lo, hi: _ratio_loss(n, o, a, m, lo, hi)[1].mean(),
    "no clip": lambda n, o, a, m, lo, hi: (-torch.exp(n - o) * a * m).sum() / m.sum(),
    "the sign": lambda n, o, a, m, lo, hi: -(_ratio_loss(n, o, a, m, lo, hi)[1] * m).sum() / m.sum(),
    "no gradient": lambda n, o, a, m, lo, hi: solutions.clipped_loss(n, o, a, m, lo, hi).detach(),
    "one-number tensor": lambda n, o, a, m, lo, hi: _ratio_loss(n, o, a, m, lo, hi)[1] * m,
    "it raised ZeroDivisionError": lambda *args: 1 / 0,
    "your loss is": lambda n, o, a, m, lo, hi: solutions.clipped_loss(n, o, a, m, lo, hi) + 0.01,
}


@pytest.mark.parametrize("message", list(WRONG_LOSSES))
def test_a_wrong_clipped_loss_is_named(message, capsys):
    ok, out = run(checks.check_clipped_loss, WRONG_LOSSES[message], capsys)
    assert not ok and "✗" in out and message in out, out


WRONG_STOPS = {
    "the *wrong* way": lambda r, a, lo, hi: (r > hi) | (r < lo),  # outside the range either way
    "already moved past": lambda r, a, lo, hi: torch.zeros_like(r, dtype=torch.bool),
    "inside the clip range": lambda r, a, lo, hi: torch.ones_like(r, dtype=torch.bool),
    "one True/False per token": lambda r, a, lo, hi: [True, False],
}


@pytest.mark.parametrize("message", list(WRONG_STOPS))
def test_a_wrong_stops_pulling_is_named(message, capsys):
    ok, out = run(checks.check_stops_pulling, WRONG_STOPS[message], capsys)
    assert not ok and message in out, out


@pytest.mark.parametrize("check", [checks.check_clipped_loss, checks.check_stops_pulling])
def test_the_unfinished_stub_fails_without_raising(check, capsys):
    ok, out = run(check, unfinished, capsys)
    assert not ok and "not written yet" in out


@pytest.mark.parametrize("function,check", [("clipped_loss", "check_clipped_loss"),
                                            ("stops_pulling", "check_stops_pulling")])
def test_the_notebook_has_the_stub_and_the_check(function, check):
    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    stub = [i for i, c in enumerate(cells) if f"def {function}(" in c.source]
    assert len(stub) == 1, f"one cell defines {function}"
    assert "raise NotImplementedError  # your code here" in cells[stub[0]].source
    calls = [i for i, c in enumerate(cells) if f"from exercises.nb05 import {check}" in c.source
             and f"{check}({function})" in c.source]
    assert calls and calls[0] > stub[0], f"a cell after the stub calls {check}({function})"
