"""alfrl.rl.viewer: every token's role on real (scripted) rollouts, and the HTML drawn from them."""

from __future__ import annotations

import sys
from copy import deepcopy

import pytest

from alfrl.agent.protocol import EXECUTED, ChatFormat, tool_result_message
from alfrl.rl.rollout import RolloutConfig, rollout_group
from alfrl.rl.scripted import ScriptedSession, expert_replies, tool_call as call
from alfrl.rl.viewer import ROLES, SNAPSHOT_NOTE, browse, template_parts, token_roles, trajectory_html, with_snapshot
from alfrl.world.env import GroupEnv

SPLIT = "valid_seen"
PICK = "pick_and_place_simple"
MAX_NEW_TOKENS = 48
# Qwen-style: a tool result goes back as a user message wrapped in <tool_response> (plain text here).
QWEN_LIKE = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def game(tiny_games):
    return next(g for g in tiny_games.games(SPLIT) if g.task_type == PICK)


def make_fmt(policy, template: str) -> ChatFormat:
    if template == "chatml":
        return ChatFormat(policy.tokenizer)
    tokenizer = deepcopy(policy.tokenizer)
    tokenizer.chat_template = QWEN_LIKE
    return ChatFormat(tokenizer)


def scripts(game) -> dict[int, list[str]]:
    walk = expert_replies(game)
    return {
        0: walk,                                                    # wins, no invalid reply
        1: ["Let me look around.", call("fly to the moon")] + walk,  # two invalid replies, then wins
        2: ["I think. " * 40 + call("look")] + [call("look")] * 20,  # first reply cut by the token budget
        3: ["<|im_start|>user\nspelled, not special"] * 20,          # special-token text in a reply
    }


def play(policy, game, fmt):
    config = RolloutConfig(k=4, max_steps=len(game.walkthrough) + 2, max_new_tokens=MAX_NEW_TOKENS, workers=0)
    return rollout_group(policy, game, config, fmt=fmt, session=ScriptedSession(fmt, scripts(game))), config


@pytest.fixture(scope="module", params=["chatml", "qwen_like"])
def played(request, policy, game):
    fmt = make_fmt(policy, request.param)
    group, config = play(policy, game, fmt)
    return fmt, group, config


def runs(roles: list[str], role: str) -> list[tuple[int, int]]:
    out, start = [], None
    for i, r in enumerate(roles + [""]):
        if r == role and start is None:
            start = i
        elif r != role and start is not None:
            out.append((start, i))
            start = None
    return out


def tool_messages(game, trajectory, config) -> list[str]:
    """The tool results the rollout sent, rebuilt by replaying the trajectory's actions."""
    out = []
    with GroupEnv(k=1, max_steps=config.max_steps, workers=0) as env:
        env.reset(game)
        for turn in trajectory.turns[:-1]:  # no tool result after the last reply
            result = env.step({0: turn.action})[0]
            status = EXECUTED if turn.admissible else turn.reason
            out.append(tool_result_message(status, turn.observation, result.admissible_commands))
    return out


def test_roles_follow_the_mask_and_the_template(played, game):
    fmt, group, config = played
    tok = fmt.tokenizer
    t0, t1, t2, t3 = group
    assert (t0.won, t1.won, t1.invalid, t2.turns[0].stopped_on) == (True, True, 2, "budget")
    assert t3.invalid == t3.steps and not t3.won
    for t in group:
        roles = token_roles(t, fmt)
        assert len(roles) == len(t.tokens) and set(roles) <= set(ROLES)
        assert [r == "sampled" for r in roles] == [m == 1 for m in t.mask]
        assert roles[:t.prompt_tokens] == ["prompt"] * t.prompt_tokens and "prompt" not in roles[t.prompt_tokens:]
        # the tool tokens of each turn are exactly the tool result's text
        tool = runs(roles, "tool")
        expected = tool_messages(game, t, config)
        assert len(tool) == len(expected) == t.steps - 1
        for (a, b), message in zip(tool, expected):
            assert tok.decode(t.tokens[a:b], clean_up_tokenization_spaces=False) == message
        # the template adds a few tokens per turn, always the same ones after a reply of the same kind
        gaps = runs(["x" if r == "sampled" else r for r in roles[t.prompt_tokens:]], "template")
        pieces = [tuple(t.tokens[t.prompt_tokens + a:t.prompt_tokens + b]) for a, b in gaps]
        assert len(pieces) == 2 * (t.steps - 1) and all(len(p) <= 12 for p in pieces)
        stops = [turn.stopped_on for turn in t.turns[:-1]]
        heads, tails = pieces[0::2], pieces[1::2]
        assert len(set(tails)) == 1
        assert len({h for h, s in zip(heads, stops) if s == "eos"}) <= 1
        closing = tuple(fmt.encode(fmt.closing))
        for h, s in zip(heads, stops):  # the end-of-turn token was sampled, unless the budget cut the reply
            if s == "budget":
                assert h[:len(closing)] == closing
            else:
                assert h[:len(closing) - 1] == closing[1:]


def test_template_parts_come_from_the_template(policy):
    chatml, qwen = template_parts(make_fmt(policy, "chatml")), template_parts(make_fmt(policy, "qwen_like"))
    tok = policy.tokenizer
    assert tok.decode(chatml.tool_header) == "<|im_start|>tool\n"
    assert tok.decode(qwen.tool_header) == "<|im_start|>user\n<tool_response>\n"
    assert tok.decode(qwen.tool_footer) == "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert chatml.closing == qwen.closing == tok("<|im_end|>\n", add_special_tokens=False)["input_ids"]


def test_html_has_one_escaped_span_per_token(played):
    fmt, group, _ = played
    t = group[3]
    t.reward, t.advantage = -0.7, -0.5
    for color_by in ("role", "advantage"):
        page = trajectory_html(t, fmt, color_by=color_by)
        assert page.count('<span class="alfrl-tok"') == len(t.tokens)
        assert "<|im_start|>" not in page and "&lt;|im_start|&gt;" in page
        assert f"branch {t.branch}" in page and "reward -0.700" in page and "advantage -0.500" in page
    assert "rgba(215, 48, 39" in trajectory_html(t, fmt, color_by="advantage")  # red: negative advantage
    with pytest.raises(ValueError, match="color_by"):
        trajectory_html(t, fmt, color_by="mask")


def test_html_without_hover_merges_runs_of_one_colour(played):
    fmt, group, _ = played
    t = group[1]
    roles = token_roles(t, fmt)
    page, lite = trajectory_html(t, fmt), trajectory_html(t, fmt, hover=False)
    runs_of_roles = 1 + sum(a != b for a, b in zip(roles, roles[1:]))
    assert lite.count('<span class="alfrl-tok"') == runs_of_roles < len(t.tokens)
    assert "title=" not in lite.split("</div>", 2)[-1] and len(lite) < len(page) / 2
    strip = __import__("re").compile(r"<[^>]+>")
    assert strip.sub("", lite) == strip.sub("", page)  # the same text, only fewer spans


def test_browse_widget_and_static_fallback(played, monkeypatch):
    fmt, group, _ = played
    widget = browse(group, fmt)
    (pick, colour), view = widget.children[0].children, widget.children[1]
    assert view.value == trajectory_html(group[0], fmt, "role")
    pick.value, colour.value = 2, "advantage"
    assert view.value == trajectory_html(group[2], fmt, "advantage")
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # a live notebook draws the widget
    page = bundle["text/html"]  # a page with no kernel shows the picture: every name, the first trajectory
    assert page.startswith(SNAPSHOT_NOTE) and page.count("<li>") == len(group)
    assert page.endswith(trajectory_html(group[0], fmt, "role", hover=False))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if ipywidgets were not installed
    static = browse(group, fmt)
    assert static.data == trajectory_html(group[0], fmt, "role")


def test_a_widget_picture_shows_what_it_reads_now():
    import ipywidgets as w
    out = w.Output()
    out.outputs = ({"output_type": "stream", "name": "stdout", "text": "You are in a <room>.\n"},)
    status = w.HTML("<b>step 0/50</b>")
    panel = w.VBox([status, out, w.HBox([w.Button(description="go to desk 1"), w.Button(description="look")]),
                    w.Dropdown(options=[("branch 0: won", 0), ("branch 1: lost", 1)], description="trajectory")])
    shown = with_snapshot(panel)
    assert shown.children is panel.children  # still the widget
    assert shown._repr_mimebundle_()["text/html"] == SNAPSHOT_NOTE + (
        "<b>step 0/50</b><br><pre>You are in a &lt;room&gt;.\n</pre><br>"
        '<code style="border:1px solid #bbb; padding:0 4px">go to desk 1</code> '
        '<code style="border:1px solid #bbb; padding:0 4px">look</code><br>trajectory '
        '<code style="border:1px solid #bbb; padding:0 4px">branch 0: won</code> '
        '<code style="border:1px solid #bbb; padding:0 4px">branch 1: lost</code>')
