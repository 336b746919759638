"""Worked solutions to notebook 02's exercises (checked by ``exercises.nb02`` and ``tests/test_exercises_nb02.py``)."""

from __future__ import annotations

import json

import torch


def reply_tokens(fmt, action: str) -> list[int]:
    """The token ids a model samples to play ``action``: one tool call, then the end-of-turn token."""
    call = json.dumps({"name": "alfworld_step", "arguments": {"action": action}})
    text = f"<tool_call>\n{call}\n</tool_call>"   # alfrl.rl.scripted.tool_call(action) writes the same
    end_of_turn = fmt.encode(fmt.closing)[0]      # <|im_end|>: the closing starts with it
    return fmt.encode(text) + [end_of_turn]


def next_prompt(fmt, prompt: list[int], completion: list[int], history: list[dict], tool_content: str) -> list[int]:
    """Turn t+1's prompt: the old prompt + the sampled tokens + the closing + the tool turn, no re-encoding."""
    closing = fmt.encode(fmt.closing)
    if completion and completion[-1] == closing[0]:  # the reply stopped on the end-of-turn token: keep it once
        closing = closing[1:]
    tool_turn = fmt.encode(fmt.tool_turn(history, tool_content))  # the tool result + the next generation prompt
    return list(prompt) + list(completion) + closing + tool_turn


def expert_nll(logits, tokens, mask):
    """Mean negative log-likelihood of the tokens with mask 1; the logits at position t predict token t + 1."""
    logp = torch.log_softmax(logits[:-1].float(), dim=-1)
    picked = logp.gather(-1, torch.as_tensor(tokens)[1:, None])[:, 0]
    target = torch.as_tensor(mask)[1:].to(picked.dtype)
    return -(picked * target).sum() / target.sum()
