"""alfrl.agent.protocol: replies are valid only with exactly one alfworld_step call at the end."""

from __future__ import annotations

import json

import pytest

from alfrl.agent.protocol import (SYSTEM_PROMPT, TOOL_NAME, TOOL_SCHEMA, ParsedReply, canonical_action,
                                  check_action_list, first_user_message, listed_actions, parse_reply,
                                  tool_result_message)


def call(action: str, name: str = TOOL_NAME) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": {"action": action}})}\n</tool_call>'


XML = "<tool_call>\n<function=alfworld_step>\n<parameter=action>\n{action}\n</parameter>\n</function>\n</tool_call>"


@pytest.mark.parametrize("reply, action", [
    (call("go to countertop 1"), "go to countertop 1"),
    ("I should look in the fridge.\n" + call("open fridge 1"), "open fridge 1"),
    (call("Take  Apple 1 from   CounterTop 1") + "\n  ", "take apple 1 from countertop 1"),
    ('<tool_call>{"name": "alfworld_step", "arguments": "{\\"action\\": \\"look\\"}"}</tool_call>', "look"),
    (XML.format(action="heat apple 1 with microwave 1"), "heat apple 1 with microwave 1"),
    ("thinking...\n" + XML.format(action="Go To Sinkbasin 1"), "go to sinkbasin 1"),
])
def test_valid_replies(reply, action):
    assert parse_reply(reply) == ParsedReply(action=action)
    assert parse_reply(reply).valid


@pytest.mark.parametrize("reply, reason", [
    ("go to countertop 1", "no tool call; end your reply with <tool_call>...</tool_call>"),
    (call("look") + "\n" + call("inventory"), "more than one tool call; send exactly one per reply"),
    (call("look") + " done!", "text after the tool call; the tool call must end the reply"),
    ('<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}}',
     "the tool call is not closed with </tool_call>"),
    (call("look", name="python"), "unknown tool 'python'; the only tool is alfworld_step"),
    (call("go to\ncountertop 1"), "the action spans several lines; send one action on one line"),
    (call("   "), "the action is empty"),
    ('<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}</tool_call>',
     "the tool call is not valid JSON (Expecting ',' delimiter at character 57)"),
    ('<tool_call>{"name": "alfworld_step", "arguments": {"act": "look"}}</tool_call>',
     'the arguments must be {"action": "<one available action>"}'),
    ('<tool_call>{"tool": "alfworld_step"}</tool_call>',
     'the tool call must be {"name": ..., "arguments": {"action": ...}}'),
    ("<tool_call>go to countertop 1</tool_call>",
     "the tool call must hold a JSON object or <function=...> parameters"),
    ("</tool_call> <tool_call>", "</tool_call> comes before <tool_call>"),
])
def test_invalid_replies_say_why(reply, reason):
    parsed = parse_reply(reply)
    assert not parsed.valid and parsed.action is None
    assert parsed.reason == reason


def test_canonical_action():
    assert canonical_action("  Go  to\tCounterTop 1 ") == "go to countertop 1"


def test_messages_are_exact():
    assert first_user_message("put a clean mug in coffeemachine", "You are in the middle of a room.\n",
                              ["go to cabinet 1", "look"]) == (
        "Your task is to: put a clean mug in coffeemachine\n\n"
        "Observation: You are in the middle of a room.\n\n"
        "Available actions (copy one exactly):\n- go to cabinet 1\n- look")
    # ALFWorld's first observation ends with the task: it is said once, at the top
    alfworld_intro = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
                      "Your task is to: put a clean mug in coffeemachine.")
    assert first_user_message("put a clean mug in coffeemachine", alfworld_intro, ["look"]) == (
        "Your task is to: put a clean mug in coffeemachine\n\n"
        "Observation: -= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
        "Available actions (copy one exactly):\n- look")
    assert tool_result_message("Action executed.", "You arrive at cabinet 1.", ["open cabinet 1"]) == (
        "Action executed.\nObservation: You arrive at cabinet 1.\n\n"
        "Available actions (copy one exactly):\n- open cabinet 1")


def test_system_prompt_describes_the_tool():
    assert TOOL_SCHEMA["function"]["name"] == TOOL_NAME
    assert json.dumps(TOOL_SCHEMA["function"]) in SYSTEM_PROMPT
    example = SYSTEM_PROMPT[SYSTEM_PROMPT.index("<tool_call>"):SYSTEM_PROMPT.index("</tool_call>") + 12]
    assert parse_reply(example) == ParsedReply(action="go to countertop 1")


# --- token-exact prompts on the bundled model's real chat template ----------------------

from alfrl.agent.protocol import ChatFormat, TemplateError, build_next_prompt  # noqa: E402

TASK, OBS, ACTIONS = "put a mug in cabinet", "You are in the middle of a room.", ["go to cabinet 1", "look"]


@pytest.fixture(scope="module")
def fmt():
    from alfrl.agent.models import load_tokenizer
    return ChatFormat(load_tokenizer())


def reply_for(action: str) -> str:
    return f"Next: {action}.\n" + call(action)


def test_format_is_derived_from_the_template(fmt):
    assert fmt.closing == "<|im_end|>\n"
    assert not fmt.uses_tools  # SmolLM2's template ignores tools=, so the system prompt carries the tool
    assert json.dumps(TOOL_SCHEMA["function"]) in fmt.messages(TASK, OBS, ACTIONS)[0]["content"]
    prompt = fmt.tokenizer.decode(fmt.initial_prompt(TASK, OBS, ACTIONS))
    assert prompt.startswith("<|im_start|>system\nYou are an agent in a text-based household game")
    assert prompt.endswith("- go to cabinet 1\n- look<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("stopped_on_eos", [True, False])
def test_prompts_grow_by_prefix_and_equal_the_template(fmt, stopped_on_eos):
    tok = fmt.tokenizer
    history = fmt.messages(TASK, OBS, ACTIONS)
    prompt = fmt.initial_prompt(TASK, OBS, ACTIONS)
    for turn, action in enumerate(["go to cabinet 1", "open cabinet 1", "look"]):
        reply = reply_for(action)
        completion = fmt.encode(reply) + ([tok.eos_token_id] if stopped_on_eos else [])
        history = history + [{"role": "assistant", "content": reply}]
        result = tool_result_message("Action executed.", f"Observation {turn}.", ["look", "inventory"])
        nxt = build_next_prompt(fmt, prompt, completion, history, result)
        assert nxt[:len(prompt) + len(completion)] == prompt + completion  # strict prefix extension
        history = history + [{"role": "tool", "content": result}]
        assert nxt == fmt.encode(fmt.render(history, True))  # what the template renders, token for token
        prompt = nxt


def test_template_that_rewrites_history_is_refused(fmt):
    from copy import deepcopy
    tok = deepcopy(fmt.tokenizer)
    # like reasoning templates that drop earlier assistant turns' thoughts: only the last reply is shown
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                         "{% if m['role'] == 'assistant' and not loop.last %}[earlier reply]"
                         "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    other = ChatFormat(tok)
    history = other.messages(TASK, OBS, ACTIONS) + [{"role": "assistant", "content": reply_for("look")}]
    with pytest.raises(TemplateError, match="rewrites earlier turns"):
        other.tool_turn(history, "Action executed.")


# --- which tool results list the available actions (--actions) ----------------------------------------------

ROOM = ["go to cabinet 1", "go to fridge 1", "examine cabinet 1", "inventory", "look", "open cabinet 1"]


@pytest.mark.parametrize("actions, valid, listed", [
    ("every", True, ROOM),
    ("first", True, None),
    ("first", False, ROOM),  # after an invalid reply the whole list again
    ("local", True, ["examine cabinet 1", "inventory", "look", "open cabinet 1"]),
    ("local", False, ROOM),
])
def test_listed_actions(actions, valid, listed):
    assert listed_actions(actions, ROOM, valid) == listed


def test_a_tool_result_without_a_list_is_status_and_observation():
    assert tool_result_message("Action executed.", " You arrive at cabinet 1. ", None) == \
        "Action executed.\nObservation: You arrive at cabinet 1."
    assert tool_result_message("Action executed.", "Done.", None, "Plan first.") == \
        "Action executed.\nObservation: Done.\n\nPlan first."


def test_an_unknown_protocol_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="--actions must be one of every, first, local"):
        listed_actions("some", ROOM, True)
    with pytest.raises(ValueError, match="every, first, local, auto"):
        check_action_list("all", auto_ok=True)


def test_first_protocol_says_so_and_still_grows_by_prefix():
    from alfrl.agent.models import load_tokenizer
    tok = load_tokenizer()
    every, first = ChatFormat(tok), ChatFormat(tok, actions="first")
    assert first.system_prompt.startswith(every.system_prompt)
    assert first.system_prompt.endswith("the observations name what you can act on.")
    assert every.system_prompt == SYSTEM_PROMPT  # the protocol the shipped adapters were trained in is unchanged
    history = first.messages(TASK, OBS, ACTIONS)
    prompt = first.initial_prompt(TASK, OBS, ACTIONS)
    for turn, (action, valid) in enumerate([("go to cabinet 1", True), ("fly", False), ("look", True)]):
        reply = reply_for(action)
        completion = first.encode(reply) + [tok.eos_token_id]
        history = history + [{"role": "assistant", "content": reply}]
        result = first.tool_content("Action executed.", f"Observation {turn}.", ["look", "inventory"], valid)
        assert ("Available actions" in result) == (not valid)
        nxt = build_next_prompt(first, prompt, completion, history, result)
        assert nxt[:len(prompt) + len(completion)] == prompt + completion
        history = history + [{"role": "tool", "content": result}]
        assert nxt == first.encode(first.render(history, True))
        prompt = nxt
