"""Notebook 02's exercises: the checks pass the worked solutions, fail wrong and unfinished answers with a
useful message, and the notebook holds each exercise's stub and check call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

from exercise_notebook import assert_has_exercise  # noqa: E402
from exercises import nb02 as checks  # noqa: E402
from solutions import nb02 as solutions  # noqa: E402


@pytest.fixture(scope="module")
def fmt():
    from alfrl.agent.models import load_tokenizer
    from alfrl.agent.protocol import ChatFormat

    return ChatFormat(load_tokenizer())


def _stub(*args, **kwargs):
    raise NotImplementedError  # your code here


def run(capsys, check, fn, fmt) -> tuple[bool, str]:
    ok = check(fn, fmt)
    return ok, capsys.readouterr().out


# --- exercise 1: the tokens of one valid reply ------------------------------------------------------------

def test_reply_tokens_solution_passes(capsys, fmt):
    ok, out = run(capsys, checks.check_reply_tokens, solutions.reply_tokens, fmt)
    assert ok, out


def test_reply_tokens_is_what_the_warm_start_teaches(fmt):
    """The solution's reply is the expert reply of the warm start (alfrl.rl.scripted), token for token."""
    from alfrl.rl.scripted import tool_call

    for action in checks.ACTIONS:
        assert solutions.reply_tokens(fmt, action) == fmt.encode(tool_call(action)) + [fmt.encode(fmt.closing)[0]]


def _eot(fmt) -> list[int]:
    return [fmt.encode(fmt.closing)[0]]


def _no_end_of_turn(fmt, action):
    return solutions.reply_tokens(fmt, action)[:-1]


def _no_tool_call(fmt, action):
    return fmt.encode(action) + _eot(fmt)


def _wrong_tool(fmt, action):
    return fmt.encode(f'<tool_call>{{"name": "step", "arguments": {{"action": "{action}"}}}}</tool_call>') + _eot(fmt)


def _ids_by_hand(fmt, action):
    """The right text, one character at a time: it decodes right, but no tokenizer would encode it so."""
    text = fmt.tokenizer.decode(solutions.reply_tokens(fmt, action)[:-1])
    return [t for ch in text for t in fmt.encode(ch)] + _eot(fmt)


@pytest.mark.parametrize("wrong,message", [
    (_no_end_of_turn, "end-of-turn token"),
    (_no_tool_call, "no tool call"),
    (_wrong_tool, "unknown tool"),
    (_ids_by_hand, "not how the tokenizer encodes it"),
    (lambda fmt, action: "<tool_call>", "list of token ids"),
], ids=["no end-of-turn", "no tool call", "wrong tool", "ids by hand", "text not ids"])
def test_reply_tokens_wrong_answers_fail(capsys, fmt, wrong, message):
    ok, out = run(capsys, checks.check_reply_tokens, wrong, fmt)
    assert not ok
    assert message in out


def test_reply_tokens_stub_fails(capsys, fmt):
    ok, out = run(capsys, checks.check_reply_tokens, _stub, fmt)
    assert not ok and "not written yet" in out


# --- exercise 2: the next prompt, by prefix ---------------------------------------------------------------

def test_next_prompt_solution_passes(capsys, fmt):
    ok, out = run(capsys, checks.check_next_prompt, solutions.next_prompt, fmt)
    assert ok, out


def test_next_prompt_cases_include_a_reply_that_does_not_round_trip(fmt):
    """Re-encoding the conversation gives other tokens for one case: the check can tell it from prefix extension."""
    cases = checks.prompt_cases(fmt)
    reencoded = [fmt.encode(fmt.render(c["history"] + [{"role": fmt.tool_role, "content": c["tool_content"]}],
                                       generation_prompt=True)) for c in cases]
    assert any(r != c["right"] for r, c in zip(reencoded, cases))


def test_next_prompt_reencoding_fails(capsys, fmt):
    def reencode(fmt, prompt, completion, history, tool_content):
        return fmt.encode(fmt.render(history + [{"role": fmt.tool_role, "content": tool_content}], True))

    ok, out = run(capsys, checks.check_next_prompt, reencode, fmt)
    assert not ok
    assert "must start with the old prompt and the sampled tokens" in out


def test_next_prompt_closing_twice_fails(capsys, fmt):
    def closing_always(fmt, prompt, completion, history, tool_content):
        return (list(prompt) + list(completion) + fmt.encode(fmt.closing)
                + fmt.encode(fmt.tool_turn(history, tool_content)))

    ok, out = run(capsys, checks.check_next_prompt, closing_always, fmt)
    assert not ok
    assert "end-of-turn token twice" in out


def test_next_prompt_without_closing_fails(capsys, fmt):
    def no_closing(fmt, prompt, completion, history, tool_content):
        return list(prompt) + list(completion) + fmt.encode(fmt.tool_turn(history, tool_content))

    ok, out = run(capsys, checks.check_next_prompt, no_closing, fmt)
    assert not ok
    assert "cut off by the token budget" in out and "first difference" in out


def test_next_prompt_stub_fails(capsys, fmt):
    ok, out = run(capsys, checks.check_next_prompt, _stub, fmt)
    assert not ok and "not written yet" in out


# --- the notebook holds each exercise: a stub the learner fills in, then the check call ------------------

@pytest.mark.parametrize("function,check", [("reply_tokens", "check_reply_tokens"),
                                            ("next_prompt", "check_next_prompt"),
                                            ("expert_nll", "check_expert_nll")])
def test_notebook_has_exercise(function, check):
    assert_has_exercise("02_tool_protocol.ipynb", f"def {function}(", f"{check}({function}")


def test_expert_nll_solution_passes(capsys):
    assert checks.check_expert_nll(solutions.expert_nll) is True
    assert "✓" in capsys.readouterr().out


def test_expert_nll_unfinished_fails(capsys):
    assert checks.check_expert_nll(_stub) is False
    assert "not written yet" in capsys.readouterr().out


def _nll_by(**mistake):
    return lambda logits, tokens, mask: checks._nll(logits, tokens, mask, **mistake)


@pytest.mark.parametrize("wrong,message", [(_nll_by(shift=False), "predict token t + 1"),
                                           (_nll_by(masked=False), "reply tokens only"),
                                           (_nll_by(mean=False), "a mean, not a sum"),
                                           (lambda lg, t, m: -checks._nll(lg, t, m), "NEGATIVE"),
                                           (lambda lg, t, m: checks._nll(lg.detach(), t, m), "no gradient")])
def test_expert_nll_mistakes_are_named(wrong, message, capsys):
    assert checks.check_expert_nll(wrong) is False
    assert message in capsys.readouterr().out


def test_expert_nll_solution_is_alfrl_sft_on_a_real_expert_trajectory(policy):
    """The solution, on the bundled model's logits for a real expert trajectory, is alfrl.imitation.sft.nll_loss."""
    import torch

    from alfrl.imitation.sft import SFTConfig, expert_trajectories, nll_loss
    from alfrl.world.games import load_games
    game = min(load_games("train")[:20], key=lambda g: len(g.walkthrough))
    (trajectory,) = expert_trajectories(policy, [game], SFTConfig(max_steps=10), progress=False)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([trajectory.tokens])).logits[0]
        mine = float(solutions.expert_nll(logits, trajectory.tokens, trajectory.mask))
    theirs, tokens = nll_loss(policy.model, [trajectory], backward=False)
    assert tokens == sum(trajectory.mask) > 0
    assert abs(mine - theirs) < 1e-4
