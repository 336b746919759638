"""alfrl.protocol: replies are valid only with exactly one alfworld_step call at the end."""

from __future__ import annotations

import json

import pytest

from alfrl.protocol import (SYSTEM_PROMPT, TOOL_NAME, TOOL_SCHEMA, ParsedReply, canonical_action,
                            first_user_message, parse_reply, tool_result_message)


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
    assert tool_result_message("Action executed.", "You arrive at cabinet 1.", ["open cabinet 1"]) == (
        "Action executed.\nObservation: You arrive at cabinet 1.\n\n"
        "Available actions (copy one exactly):\n- open cabinet 1")


def test_system_prompt_describes_the_tool():
    assert TOOL_SCHEMA["function"]["name"] == TOOL_NAME
    assert json.dumps(TOOL_SCHEMA["function"]) in SYSTEM_PROMPT
    example = SYSTEM_PROMPT[SYSTEM_PROMPT.index("<tool_call>"):SYSTEM_PROMPT.index("</tool_call>") + 12]
    assert parse_reply(example) == ParsedReply(action="go to countertop 1")
