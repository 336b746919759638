"""Notebook 03's exercises: the checks pass the worked solutions, fail wrong and unfinished answers with a
message that says what is wrong, never raise, and the notebook holds each exercise's stub and check call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

from exercise_notebook import assert_has_exercise  # noqa: E402
from exercises import nb03 as checks  # noqa: E402
from solutions import nb03 as solutions  # noqa: E402


def unfinished(*args, **kwargs):
    raise NotImplementedError  # your code here


def test_one_turn_solution_passes(capsys):
    assert checks.check_one_turn(solutions.one_turn) is True
    assert "✓" in capsys.readouterr().out


def test_one_turn_unfinished_fails_with_a_message(capsys):
    assert checks.check_one_turn(unfinished) is False
    assert "not written yet" in capsys.readouterr().out


def _counts_only_bad_format(session, env, branches, live, cfg, fmt):
    """A classic mistake: an inadmissible action is not counted as invalid."""
    before = {b: branches[b]["invalid"] for b in live}
    still = solutions.one_turn(session, env, branches, live, cfg, fmt)
    from alfrl.agent.protocol import parse_reply
    for b in before:
        if parse_reply(branches[b]["replies"][-1]).valid and branches[b]["invalid"] > before[b]:
            branches[b]["invalid"] = before[b]
    return still


def _never_drops(session, env, branches, live, cfg, fmt):
    """Forgets to drop finished branches from the session (and keeps them live)."""
    session.drop = lambda finished: None
    solutions.one_turn(session, env, branches, live, cfg, fmt)
    return [b for b in live if "end" not in branches[b]]


def _no_prefix_extension(session, env, branches, live, cfg, fmt):
    """Appends only the sampled tokens (no closing, no tool result) to the prompt."""
    samples = session.sample({b: branches[b]["prompt"] for b in live}, cfg)
    from alfrl.agent.protocol import parse_reply
    texts = {b: fmt.tokenizer.decode(samples[b].tokens, skip_special_tokens=True) for b in live}
    parsed = {b: parse_reply(texts[b]) for b in live}
    results = env.step({b: parsed[b].action for b in live})
    for b in live:
        br = branches[b]
        br["replies"].append(texts[b])
        br["invalid"] += not (parsed[b].valid and results[b].admissible)
        br["prompt"] = br["prompt"] + samples[b].tokens
        if results[b].done:
            br.update(won=results[b].won, steps=results[b].steps, end="won" if results[b].won else "max_steps",
                      tokens=br["prompt"])
    done = [b for b in live if "end" in branches[b]]
    session.drop(done)
    return [b for b in live if b not in done]


@pytest.mark.parametrize("wrong,message", [(_counts_only_bad_format, "invalid replies, expected"),
                                           (_never_drops, "it raised"),
                                           (_no_prefix_extension, "tokens differ")])
def test_one_turn_wrong_answers_fail_with_a_message(wrong, message, capsys):
    assert checks.check_one_turn(wrong) is False
    out = capsys.readouterr().out
    assert "✗" in out and message in out, out


def test_group_summary_solution_passes(capsys):
    assert checks.check_group_summary(solutions.group_summary) is True
    assert "✓" in capsys.readouterr().out


def test_group_summary_unfinished_fails(capsys):
    assert checks.check_group_summary(unfinished) is False
    assert "not written yet" in capsys.readouterr().out


def test_group_summary_wrong_answers_fail_with_a_message(capsys):
    def ended_is_success(group):
        out = solutions.group_summary(group)
        out["success"] = sum(t.end_reason != "max_steps" for t in group) / len(group)
        return out

    assert checks.check_group_summary(ended_is_success) is False
    assert "success is" in capsys.readouterr().out

    def no_rates(group):
        out = solutions.group_summary(group)
        del out["admissible_rate"]
        return out

    assert checks.check_group_summary(no_rates) is False
    assert "no 'admissible_rate'" in capsys.readouterr().out
    assert checks.check_group_summary(lambda group: [1, 2]) is False
    assert "return a dict" in capsys.readouterr().out


@pytest.mark.parametrize("stub,check", [("def one_turn(session, env, branches, live, cfg, fmt):", "check_one_turn(one_turn)"),
                                        ("def group_summary(group):", "check_group_summary(group_summary)")])
def test_notebook_has_the_exercise(stub, check):
    assert_has_exercise("03_group_rollouts.ipynb", stub, check)
