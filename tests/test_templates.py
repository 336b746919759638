"""Token-exact prompts under other chat templates: a reasoning template with Qwen3's thinking rules
and Llama 3's headers (tests/fixtures/templates), and Qwen3's own template where the machine has it
(``ALFRL_QWEN3_TEMPLATE``, or Qwen3 in the Hugging Face cache), worn by the bundled model's tokenizer.
Every reply shape a sampler returns (a thought, an empty thought, none, one cut off mid-thought) must
extend the prompt by prefix, with thinking at the template's default and switched off, and a tool call
drafted inside the thought is not the reply's call."""

from __future__ import annotations

import json
import os
from copy import deepcopy
from pathlib import Path

import pytest

from alfrl.agent.protocol import ChatFormat, ParsedReply, build_next_prompt, parse_reply, tool_result_message

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
TASK, OBS, ACTIONS = "put a mug in cabinet", "You are in the middle of a room.", ["go to cabinet 1", "look"]


def call(action: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "alfworld_step", "arguments": {"action": action}})}\n</tool_call>'


SHAPES = {
    "thought": "<think>\nThe mug is likely in a cabinet.\n</think>\n\n" + call("go to cabinet 1"),
    "empty thought": "<think>\n\n</think>\n\n" + call("go to cabinet 1"),
    "no thought": call("go to cabinet 1"),
    "drafts a call in the thought": "<think>\nMaybe " + call("look") + " first? No.\n</think>\n\n" + call("go to cabinet 1"),
    "cut mid-thought": "<think>\nThe mug is likely in a cab",
}


QWEN3 = "qwen3_official"
EMPTY_THOUGHT = "<think>\n\n</think>\n\n"


def official_qwen3_template() -> str | None:
    """Qwen3's own chat template, if this machine has it: ``ALFRL_QWEN3_TEMPLATE`` (a tokenizer_config.json or
    a .jinja file), else a Qwen3 tokenizer in the Hugging Face cache. Never downloaded by the tests."""
    given = os.environ.get("ALFRL_QWEN3_TEMPLATE")
    cache = Path(os.environ.get("HF_HUB_CACHE", Path.home() / ".cache" / "huggingface" / "hub"))
    found = [Path(given)] if given else sorted(cache.glob("models--Qwen--Qwen3-*/snapshots/*/tokenizer_config.json"))
    for path in found:
        text = path.read_text()
        return json.loads(text).get("chat_template") if path.suffix == ".json" else text
    return None


def template(name: str) -> str:
    if name != QWEN3:
        return (TEMPLATES / f"{name}.jinja").read_text()
    text = official_qwen3_template()
    if text is None:
        pytest.skip("Qwen3's own chat template is not on this machine: set ALFRL_QWEN3_TEMPLATE to its "
                    "tokenizer_config.json (tests/fixtures/templates/README.md says how)")
    return text


@pytest.fixture(scope="module", params=[("reasoning_chatml", None), ("llama3_headers", None), (QWEN3, None),
                                        ("reasoning_chatml", False), (QWEN3, False)],
                ids=lambda p: p[0] + ("-thinking-off" if p[1] is False else ""))
def fmt(request):
    from alfrl.agent.models import load_tokenizer
    name, thinking = request.param
    tok = deepcopy(load_tokenizer())
    tok.chat_template = template(name)
    return ChatFormat(tok, thinking=thinking)


def test_the_formats_are_derived_from_each_template(fmt):
    assert fmt.closing in ("<|im_end|>\n", "<|eot_id|>")
    prompt = fmt.tokenizer.decode(fmt.initial_prompt(TASK, OBS, ACTIONS))
    header = ("<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n")
    if fmt.thinking is False:  # the reply starts after an empty thought: the model answers at once
        assert prompt.endswith("<|im_start|>assistant\n" + EMPTY_THOUGHT)
    else:
        assert prompt.endswith(header)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_reply_shape_extends_the_prompt_by_prefix(fmt, shape):
    """Two turns of the same shape: each next prompt is the previous one plus the reply's tokens as
    sampled, then the same tool-turn text whatever the reply's shape (the one the template gives
    after a reply it renders alike either way); for a reply with a thought, the whole prompt is the
    template's own rendering of the conversation."""
    tok = fmt.tokenizer
    reply = SHAPES[shape]
    cut = shape == "cut mid-thought"
    history = fmt.messages(TASK, OBS, ACTIONS)
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    for turn in range(2):
        completion = fmt.encode(reply) + ([] if cut else fmt.encode(fmt.closing)[:1])  # cut: no end-of-turn
        history = history + [{"role": "assistant", "content": reply}]
        result = tool_result_message("Action executed.", f"Observation {turn}.", ["look", "inventory"])
        nxt = build_next_prompt(fmt, prompt, completion, history, result)
        assert nxt[:len(prompt) + len(completion)] == prompt + completion
        added = tok.decode(nxt[len(prompt) + len(completion):])
        steady = [*history[:-1], {"role": "assistant", "content": SHAPES["thought"]}]
        tool_text = fmt.render(steady + [{"role": fmt.tool_role, "content": result}], True)[len(fmt.render(steady, False)):]
        assert added == tok.decode(fmt.encode(fmt.closing)[int(not cut):]) + tool_text
        assert result in added and added.count(result) == 1
        history = history + [{"role": "tool", "content": result}]
        if shape == "thought" and fmt.thinking is not False:
            assert tok.decode(nxt) == fmt.render(history, True)  # the template's own text, turn after turn
        if fmt.thinking is False:
            assert tok.decode(nxt).endswith("<|im_start|>assistant\n" + EMPTY_THOUGHT)  # every turn answers at once
        prompt = nxt


@pytest.mark.parametrize("shape, action", [("thought", "go to cabinet 1"), ("empty thought", "go to cabinet 1"),
                                           ("no thought", "go to cabinet 1"),
                                           ("drafts a call in the thought", "go to cabinet 1")])
def test_a_thought_is_not_read_for_the_tool_call(shape, action):
    assert parse_reply(SHAPES[shape]) == ParsedReply(action=action)


def test_a_reply_cut_inside_its_thought_says_how_to_end_it():
    parsed = parse_reply(SHAPES["cut mid-thought"])
    assert not parsed.valid and "</think>" in parsed.reason
    assert parse_reply("Let me think </think> " + call("look")) == ParsedReply(action="look")


def test_the_thinking_switch_needs_a_template_that_has_one():
    from alfrl.agent.models import load_policy, load_tokenizer, thinking_switch
    assert [thinking_switch(t) for t in ("auto", "on", "off")] == [None, True, False]
    with pytest.raises(ValueError, match="auto, on, off"):
        thinking_switch("maybe")
    with pytest.raises(ValueError, match="thinking switch.*leave --thinking auto"):
        ChatFormat(load_tokenizer(), thinking=False)  # SmolLM2's template has no enable_thinking
    with pytest.raises(ValueError, match="thinking switch"):
        load_policy(thinking="off")
