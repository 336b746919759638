"""alfrl.agent.protocol.parse_reply never raises and never stalls, whatever the model writes.

A sampled reply is untrusted text: one bad reply must become a "bad format" rejection
with a reason, never an exception that ends a training run. Stdlib only (no model).
"""

from __future__ import annotations

import json
import random
import sys
import time

import pytest

from alfrl.agent.protocol import TOOL_NAME, ParsedReply, canonical_action, parse_reply

MAX_DIGITS = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300


def wrap(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def assert_well_formed(reply: str) -> ParsedReply:
    """The contract every caller relies on: a ParsedReply, a bool ``valid``, a reason when invalid."""
    try:
        parsed = parse_reply(reply)
    except Exception as e:  # pragma: no cover - the failure message is the point
        pytest.fail(f"parse_reply raised {type(e).__name__}: {e} on {reply[:200]!r}... ({len(reply)} chars)")
    assert isinstance(parsed, ParsedReply)
    assert type(parsed.valid) is bool
    if parsed.valid:
        assert isinstance(parsed.action, str) and parsed.action and parsed.reason == ""
        assert parsed.action == canonical_action(parsed.action) and "\n" not in parsed.action
    else:
        assert parsed.action is None
        assert isinstance(parsed.reason, str) and parsed.reason.strip(), f"no reason for {reply[:200]!r}"
    return parsed


# ---------------------------------------------------------------- the faults from issue 13

def test_deeply_nested_json_is_a_bad_format_not_a_recursion_error():
    # in SmolLM2's tokenizer "[[" is one token: about 500 sampled tokens nest 1,000 deep
    for body in ('{"name": "alfworld_step", "arguments": {"action": ' + "[[" * 500,
                 '{"name": "alfworld_step", "arguments": ' + '{"a": ' * 1000 + "1" + "}" * 1001,
                 '{"name": "alfworld_step", "arguments": {"action": ' + "[" * 5000 + "]" * 5000 + "}}"):
        parsed = assert_well_formed(wrap(body))
        assert parsed.reason == "the tool call is not valid JSON (nested too deeply)"


def test_arguments_string_nested_too_deeply_is_a_bad_format():
    body = json.dumps({"name": TOOL_NAME, "arguments": "[" * 5000})
    assert assert_well_formed(wrap(body)).reason == "the tool call's arguments are not a JSON object"


def test_an_integer_with_too_many_digits_is_a_bad_format_not_a_value_error():
    for body in ('{"name": "alfworld_step", "arguments": {"action": ' + "7" * (MAX_DIGITS + 1) + "}}",
                 '{"name": ' + "1" * 10_000 + ', "arguments": {"action": "look"}}',
                 '{"name": "alfworld_step", "arguments": {"action": -' + "9" * 20_000 + "}}"):
        parsed = assert_well_formed(wrap(body))
        assert parsed.reason == f"the tool call is not valid JSON (a number has more than {MAX_DIGITS} digits)"
    body = json.dumps({"name": TOOL_NAME, "arguments": "1" * (MAX_DIGITS + 1)})
    assert assert_well_formed(wrap(body)).reason == "the tool call's arguments are not a JSON object"


def test_a_name_that_is_not_a_string_is_a_bad_format():
    for name in (None, 5, ["alfworld_step"], {"a": 1}, True):
        body = json.dumps({"name": name, "arguments": {"action": "look"}})
        assert assert_well_formed(wrap(body)).reason == f'the tool\'s "name" must be the string "{TOOL_NAME}"'


def test_an_unknown_tool_name_is_shown_shortened():
    reason = assert_well_formed(wrap(json.dumps({"name": "x" * 10_000, "arguments": {}}))).reason
    assert reason.startswith("unknown tool 'xxx") and reason.endswith(f"; the only tool is {TOOL_NAME}")
    assert len(reason) < 200


@pytest.mark.parametrize("body", [
    "<function=alfworld_step>" + " " * 3000 + "</function>x",  # the XML form's regex backtracked cubically
    "<function=alfworld_step>" + " " * 3000 + "<parameter=action>look</parameter>" + " " * 3000 + "</function>.",
    "<function=alfworld_step>" + "<parameter=action>" * 3000 + "</function>",
    "<function=alfworld_step>" + "<parameter=\n" * 3000 + ">" + "</function>",
    "<function=" + "\n" * 3000 + ">" + "</function>",
])
def test_long_adversarial_replies_parse_fast(body):
    start = time.perf_counter()
    assert not assert_well_formed(wrap(body)).valid
    assert time.perf_counter() - start < 1.0, "parse_reply must be linear in the reply's length"


@pytest.mark.parametrize("body, action", [
    ("<function=alfworld_step>\n<parameter=action>\nlook\n</parameter>\n</function>", "look"),
    ("<function= alfworld_step >  <parameter=action>Go To Sinkbasin 1</parameter>  </function>",
     "go to sinkbasin 1"),
    ("<function=alfworld_step><parameter=other>x</parameter><parameter=action>\n\nlook\n\n</parameter></function>",
     "look"),
    ("<function=alfworld_step><parameter=x\n><parameter=action>look</parameter></function>", "look"),
])
def test_xml_calls_still_parse(body, action):
    assert parse_reply(wrap(body)) == ParsedReply(action=action)


@pytest.mark.parametrize("body, reason", [
    ("<function=alfworld_step>look</function>", 'the arguments must be {"action": "<one available action>"}'),
    ("<function=alfworld_step><parameter=action>look</function>",
     'the arguments must be {"action": "<one available action>"}'),
    ("<function=alfworld_step><parameter=action>a\nb</parameter></function>",
     "the action spans several lines; send one action on one line"),
    ("<function=alfworld_step>", "the tool call must hold a JSON object or <function=...> parameters"),
    ("<function=alfworld_step></function>x", "the tool call must hold a JSON object or <function=...> parameters"),
    ("<function=alf\nworld_step></function>", "the tool call must hold a JSON object or <function=...> parameters"),
    ("<function=python><parameter=action>look</parameter></function>",
     "unknown tool 'python'; the only tool is alfworld_step"),
])
def test_bad_xml_calls_say_why(body, reason):
    assert assert_well_formed(wrap(body)).reason == reason


# ---------------------------------------------------------------- fuzz

FRAGMENTS = ["<tool_call>", "</tool_call>", "<tool_call>\n", "\n</tool_call>", "<function=alfworld_step>",
             "</function>", "<function=", "<parameter=action>", "</parameter>", "<parameter=", "<|im_end|>",
             "{", "}", "[", "]", "[[", '"', ":", ",", "\n", " ", "\t", "\\", "null", "None", "true", "false",
             "NaN", "Infinity", "-Infinity", "1e999", "-0", "0.5", '"name"', '"arguments"', '"action"',
             f'"{TOOL_NAME}"', '"look"', '"go to countertop 1"', "\\u0000", "\\ud800", "\\n", "\x00", "\ud800",
             "é", "🙂", "\u2028", "go to countertop 1", ">", "<", "=", "'"]
ODD_VALUES = [None, True, False, 0, -1, 3.5, float("nan"), "", " ", "\n", "look", "Go  To CounterTop 1",
              "look\ninventory", "None", "null", [], ["look"], {}, {"action": "look"}, "<tool_call>",
              "</tool_call>", "\ud800", "\x00", "🙂" * 50]


def rand_unicode(rng: random.Random, n: int) -> str:
    points = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            points.append(rng.randrange(32, 127))
        elif kind < 0.6:
            points.append(rng.randrange(0, 32))
        elif kind < 0.7:
            points.append(rng.randrange(0xD800, 0xE000))  # lone surrogates
        else:
            points.append(rng.randrange(0, 0x110000))
    return "".join(map(chr, points))


def rand_value(rng: random.Random, depth: int = 0):
    """A random JSON-able value, sometimes adversarial (huge, deep, odd types)."""
    kind = rng.randrange(10)
    if kind == 0:
        return rng.choice(ODD_VALUES)
    if kind == 1:
        return rand_unicode(rng, rng.randrange(0, 40))
    if kind == 2:
        return rng.choice([rng.randrange(-10**6, 10**6), rng.random() * 10 ** rng.randrange(-300, 300)])
    if kind == 3:
        return "x" * rng.randrange(0, 20_000)  # huge strings
    if kind in (4, 5) and depth < 4:
        items = [rand_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
        return items if kind == 4 else {rand_unicode(rng, rng.randrange(0, 8)): v for v in items}
    return rng.choice(["look", "go to countertop 1", "open fridge 1", "  Take Apple 1 from CounterTop 1 "])


def raw_json(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return "null"


def number_text(rng: random.Random) -> str:
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 3 * MAX_DIGITS)))
    return rng.choice(["", "-"]) + digits + rng.choice(["", ".5", "e7", "e99999", ".0e-3"])


def nested_text(rng: random.Random) -> str:
    depth = rng.randrange(1, 3000)
    opens = "".join(rng.choice(["[", '{"a":', "[[", '{"action":']) for _ in range(depth))
    return opens + rng.choice(["", "1", '"look"', "null", "]" * depth, "}" * depth])


def reply_soup(rng: random.Random) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randrange(0, 60)))


def reply_random_bytes(rng: random.Random) -> str:
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
    return data.decode(rng.choice(["latin-1", "utf-8"]), errors=rng.choice(["replace", "ignore", "surrogateescape"]))


def reply_random_unicode(rng: random.Random) -> str:
    return rand_unicode(rng, rng.randrange(0, 300))


def reply_odd_fields(rng: random.Random) -> str:
    """A well-formed call whose name, arguments or action is an odd value."""
    call = {"name": TOOL_NAME, "arguments": {"action": "look"}}
    for _ in range(rng.randrange(1, 3)):
        field = rng.choice(["name", "arguments", "action", "extra", "drop"])
        if field == "action":
            call["arguments"] = {"action": rand_value(rng)}
        elif field == "drop":
            call.pop(rng.choice(["name", "arguments"]), None)
        else:
            call[field] = rand_value(rng)
    if rng.random() < 0.2 and isinstance(call.get("arguments"), dict):
        call["arguments"] = raw_json(call["arguments"])  # the arguments as a JSON string
    body = raw_json(call)
    return rng.choice(["", "I will look.\n", "<think>hm</think>"]) + wrap(body)


def reply_raw_field(rng: random.Random) -> str:
    """A call with a raw (possibly invalid, huge or deep) JSON text in one place."""
    raw = rng.choice([number_text, nested_text])(rng) if rng.random() < 0.7 else reply_soup(rng)
    templates = ['{"name": "alfworld_step", "arguments": {"action": %s}}', '{"name": %s, "arguments": {}}',
                 '{"name": "alfworld_step", "arguments": %s}', "%s", '{"name": "alfworld_step", "arguments": "%s"}']
    return wrap(rng.choice(templates).replace("%s", raw))


def reply_truncated(rng: random.Random) -> str:
    full = "Let me think.\n" + wrap(json.dumps({"name": TOOL_NAME, "arguments": {"action": "go to countertop 1"}}))
    cut = full[:rng.randrange(0, len(full) + 1)]
    return cut + rng.choice(["", "</tool_call>", "}", "\n", "<tool_call>"])


def reply_misplaced_tags(rng: random.Random) -> str:
    reply = list("Thinking.\n" + wrap(json.dumps({"name": TOOL_NAME, "arguments": {"action": "look"}})))
    for _ in range(rng.randrange(1, 4)):
        reply.insert(rng.randrange(0, len(reply) + 1),
                     rng.choice(["<tool_call>", "</tool_call>", "<function=alfworld_step>", "</function>", "\n"]))
    return "".join(reply)


def reply_xml(rng: random.Random) -> str:
    params = "".join("<parameter=" + rng.choice(["action", "x", " action ", "act\nion"]) + ">"
                     + rng.choice(["", "\n"]) + str(rand_value(rng) if rng.random() < 0.5 else "look")
                     + rng.choice(["", "\n"]) + rng.choice(["</parameter>", ""])
                     for _ in range(rng.randrange(0, 4)))
    space = " " * rng.randrange(0, 300)
    body = (f"<function={rng.choice([TOOL_NAME, '', 'python', 'alfworld_step>'])}>{space}{params}{space}"
            f"{rng.choice(['</function>', '', '</function>x'])}")
    return wrap(body)


GENERATORS = [reply_soup, reply_random_bytes, reply_random_unicode, reply_odd_fields, reply_raw_field,
              reply_truncated, reply_misplaced_tags, reply_xml]


def test_fuzzed_replies_never_raise_and_always_say_why():
    rng = random.Random(0)
    outcomes = {g.__name__: {"valid": 0, "invalid": 0} for g in GENERATORS}
    reasons = set()
    start = time.perf_counter()
    for n in range(4000):
        generator = GENERATORS[n % len(GENERATORS)]
        parsed = assert_well_formed(generator(rng))
        outcomes[generator.__name__]["valid" if parsed.valid else "invalid"] += 1
        reasons.add(parsed.reason.split(" (")[0])
    assert time.perf_counter() - start < 20
    # the fuzz reached both sides of the parser, and its adversarial corners
    assert outcomes["reply_odd_fields"]["valid"] > 0 and outcomes["reply_truncated"]["valid"] > 0
    assert all(o["invalid"] > 0 for o in outcomes.values())
    assert {"the tool call is not valid JSON", "the tool call's arguments are not a JSON object",
            "no tool call; end your reply with <tool_call>...</tool_call>",
            'the arguments must be {"action": "<one available action>"}'} <= reasons
