"""Notebook 05's exercises: the checks accept the worked solutions, reject wrong answers and the
unfinished stub with a useful message (and never raise), and the notebook holds the stubs and the check
calls. The checks take their answers from alfrl.rl.ppo and peft, so the solutions are tied to the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "notebooks"))

from exercise_notebook import assert_has_exercise  # noqa: E402
from exercises import nb05 as checks  # noqa: E402
from solutions import nb05 as solutions  # noqa: E402



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
    """The worked clipped loss is what alfrl.rl.ppo.ppo_step minimises, value and gradient, and the tokens
    stops_pulling names are exactly those without a gradient."""
    from alfrl.rl.ppo import ppo_token_loss

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


@pytest.mark.parametrize("check", [checks.check_clipped_loss, checks.check_stops_pulling, checks.check_lora_linear,
                                   checks.check_policy_gradient_step])
def test_the_unfinished_stub_fails_without_raising(check, capsys):
    ok, out = run(check, unfinished, capsys)
    assert not ok and "not written yet" in out


@pytest.mark.parametrize("stub,check", [("def clipped_loss(", "check_clipped_loss(clipped_loss)"),
                                        ("def stops_pulling(", "check_stops_pulling(stops_pulling)"),
                                        ("class LoRALinear(", "check_lora_linear(LoRALinear)"),
                                        ("def policy_gradient_step(", "check_policy_gradient_step(policy_gradient_step)")])
def test_the_notebook_has_the_stub_and_the_check(stub, check):
    assert_has_exercise("05_ppo_loop.ipynb", stub, check)


class _LoRA(torch.nn.Module):
    """The worked LoRALinear with one thing changed (a usual mistake)."""

    def __init__(self, base, rank, alpha, *, b_init=torch.zeros, a_init=torch.randn, freeze=True, scale=None,
                 add_base=True):
        super().__init__()
        self.base = base.requires_grad_(not freeze)
        self.A = torch.nn.Parameter(a_init(rank, base.in_features) / rank)
        self.B = torch.nn.Parameter(b_init(base.out_features, rank))
        self.scale = alpha / rank if scale is None else scale(alpha, rank)
        self.add_base = add_base

    def forward(self, x):
        return (self.base(x) if self.add_base else 0) + self.scale * (x @ self.A.T) @ self.B.T


WRONG_LORAS = {
    "B must start at zero": dict(b_init=torch.randn),
    "A must start random": dict(a_init=torch.zeros),
    "the base layer still trains": dict(freeze=False),
    "not alpha": dict(scale=lambda alpha, rank: alpha),
    "not r / alpha": dict(scale=lambda alpha, rank: rank / alpha),
    "add the base layer's output": dict(add_base=False),
}


@pytest.mark.parametrize("message", list(WRONG_LORAS))
def test_a_wrong_lora_linear_is_named(message, capsys):
    wrong = lambda base, rank, alpha: _LoRA(base, rank, alpha, **WRONG_LORAS[message])  # noqa: E731
    ok, out = run(checks.check_lora_linear, wrong, capsys)
    assert not ok and message in out, out


def test_the_lora_solution_is_peft_s_layer(capsys):
    assert run(checks.check_lora_linear, solutions.LoRALinear, capsys)[0]
    layer = torch.nn.Linear(10, 6)
    mine = solutions.LoRALinear(layer, rank=2, alpha=4)
    torch.nn.init.normal_(mine.B)
    x = torch.randn(5, 10)
    theirs = checks._peft_twin(layer, mine.A.detach(), mine.B.detach(), 2, 4)
    assert torch.allclose(mine(x), theirs(x), atol=1e-6)


def _step(*, zero=True, per_trajectory=False, masked=True, clip=True, sign=1.0, step=True, post_clip_norm=False):
    """The worked policy_gradient_step with one thing changed (a usual mistake)."""
    def policy_gradient_step(logprobs, params, optimizer, trained, low=0.8, high=1.2, max_grad_norm=1.0):
        if zero:
            optimizer.zero_grad()
        total = sum(sum(m) for _, m, _ in trained)
        batch_loss = 0.0
        for tokens, mask, adv in trained:
            new = logprobs(tokens, mask)
            ratio = torch.exp(new - new.detach())
            per_token = -sign * torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)
            weights = torch.tensor(mask, dtype=new.dtype) if masked else torch.ones(len(tokens))
            loss = (per_token * weights).sum() / (weights.sum() * len(trained) if per_trajectory else total)
            loss.backward()
            batch_loss += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if clip else float("inf"))
        if post_clip_norm:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        if step:
            optimizer.step()
        return batch_loss, float(norm)
    return policy_gradient_step


WRONG_STEPS = {
    "zero the gradients first": dict(zero=False),
    "not per trajectory": dict(per_trajectory=True),
    "multiply the per-token loss by the mask": dict(masked=False),
    "clip the gradient's norm": dict(clip=False),
    "the sign": dict(sign=-1.0),
    "call optimizer.step()": dict(step=False),
    "returns the norm before clipping": dict(post_clip_norm=True),
}


@pytest.mark.parametrize("message", list(WRONG_STEPS))
def test_a_wrong_policy_gradient_step_is_named(message, capsys):
    ok, out = run(checks.check_policy_gradient_step, _step(**WRONG_STEPS[message]), capsys)
    assert not ok and message in out, out


def test_the_step_solution_is_alfrl_ppo_step(capsys):
    """The worked step leaves the weights alfrl.rl.ppo.ppo_step leaves, on the check's model and batch (the
    check's own answer comes from ppo_step, so this ties the solution to the package)."""
    assert run(checks.check_policy_gradient_step, solutions.policy_gradient_step, capsys)[0]
    batch = checks._trained_batch()
    metrics, after = checks._course_step(checks._tiny_policy(), batch, 0.05, 0.5)
    model = checks._tiny_policy()
    params = checks._trainable(model)
    loss, norm = solutions.policy_gradient_step(checks._logprobs_fn(model), params, torch.optim.SGD(params, lr=0.5),
                                                batch, max_grad_norm=0.05)
    assert abs(loss - metrics["loss"]) < 1e-6 and abs(norm - metrics["grad_norm"]) < 1e-5
    assert all(torch.allclose(p.detach(), a, atol=1e-6) for p, a in zip(params, after))
