"""Seeing a trajectory's tokens: which ones the model sampled (and is trained on), and which not.

Every token of a :class:`alfrl.rl.rollout.Trajectory` has one **role**:

- ``"prompt"``: the first prompt (system prompt, task, first observation), shared by the group;
- ``"sampled"``: written by the model (mask 1), its end-of-turn token included;
- ``"planner"``: the sampled subgoal line that begins a planner turn's reply (hierarchical play,
  ``--plan-every``); the rest of that reply, the actor's, is ``"sampled"``;
- ``"template"``: what the chat template puts between turns: the rest of the closing after a
  reply, and the tool turn's header and footer with the next assistant header;
- ``"tool"``: the tool result's content: status line, observation, available actions.

The template's pieces are derived from the template itself (a probe tool result is rendered
and split around), as :class:`alfrl.agent.protocol.ChatFormat` does, so no template is hard-coded.
:func:`trajectory_html` draws the tokens coloured by role or by advantage; :func:`browse` is a
small widget to page through a group (static HTML where ipywidgets is missing). A widget needs a
live kernel; :func:`with_snapshot` gives it a static HTML picture too, which a page that runs no
kernel (the repository's, nbconvert's) shows instead.

Taught in notebook 04 (tokens by role and by advantage); 06 browses failures with it; 07 shows a
hierarchical episode's planner and actor tokens.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from alfrl.agent.protocol import ChatFormat
from alfrl.rl.rollout import Trajectory

ROLES = ("prompt", "sampled", "template", "tool")
"""The roles of every trajectory's tokens; a hierarchical one's also has :data:`PLANNER`."""
PLANNER = "planner"
ROLE_COLORS = {"prompt": "#e3e3e3", "sampled": "#ffd54f", "planner": "#ffab91", "template": "#d1c4e9",
               "tool": "#b3e5fc"}
ROLE_HELP = {"prompt": "first prompt", "sampled": "sampled by the model (mask 1: trained)",
             "planner": "a planner turn's subgoal line (sampled, trained)", "template": "chat template",
             "tool": "tool result"}
SAMPLED_ROLES = ("sampled", PLANNER)

_PROBE = "\u2063ALFRL-VIEWER\u2063"
_PROBE_HISTORY = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                  {"role": "assistant", "content": "a"}]


@dataclass(frozen=True)
class TemplateParts:
    """Token ids the chat template puts around a tool result."""

    closing: list[int]
    """After an assistant reply (its first token, the end-of-turn token, is usually sampled)."""
    tool_header: list[int]
    """Before the tool result's content."""
    tool_footer: list[int]
    """After the content, up to and including the next assistant header."""


def template_parts(fmt: ChatFormat) -> TemplateParts:
    """Render a tool turn around a probe content and split it there."""
    turn = fmt.tool_turn(_PROBE_HISTORY, _PROBE)
    if turn.count(_PROBE) != 1:
        raise ValueError("the chat template does not show a tool result's content verbatim once; "
                         "cannot tell its tokens from the template's")
    header, footer = turn.split(_PROBE)
    return TemplateParts(fmt.encode(fmt.closing), fmt.encode(header), fmt.encode(footer))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _gap_roles(gap: list[int], after_end_of_turn: bool, parts: TemplateParts) -> list[str]:
    """Roles of the tokens between two replies: closing + tool header, content, tool footer.

    A token where content and template merged (none in the templates tried) counts as tool.
    """
    closing = parts.closing[1:] if after_end_of_turn else parts.closing
    head = _common_prefix(gap, closing + parts.tool_header)
    tail = _common_prefix(gap[head:][::-1], parts.tool_footer[::-1])
    return ["template"] * head + ["tool"] * (len(gap) - head - tail) + ["template"] * tail


def token_roles(trajectory: Trajectory, fmt: ChatFormat, parts: TemplateParts | None = None) -> list[str]:
    """One role per token: "prompt", "sampled", "planner", "template" or "tool" (see the module's docstring).
    The n-th run of sampled tokens is the n-th turn's reply; a planner turn's first ``plan_tokens`` are its
    subgoal line."""
    t = trajectory
    if not len(t.tokens) == len(t.mask) == len(t.logprobs):
        raise ValueError(f"tokens, mask and logprobs differ in length ({len(t.tokens)}, {len(t.mask)}, "
                         f"{len(t.logprobs)})")
    if any(t.mask[:t.prompt_tokens]):
        raise ValueError("the mask is 1 inside the first prompt; is prompt_tokens right?")
    parts = parts or template_parts(fmt)
    roles = ["prompt"] * t.prompt_tokens
    i, reply = t.prompt_tokens, 0
    while i < len(t.tokens):
        j = i
        while j < len(t.tokens) and t.mask[j] == t.mask[i]:
            j += 1
        if t.mask[i]:
            planned = min(j - i, t.turns[reply].plan_tokens) if reply < len(t.turns) else 0
            roles += [PLANNER] * planned + ["sampled"] * (j - i - planned)
            reply += 1
        else:  # between two replies (build_next_prompt): the closing's rest, then the tool turn
            after_eot = bool(parts.closing) and i > 0 and t.tokens[i - 1] == parts.closing[0]
            roles += _gap_roles(t.tokens[i:j], after_eot, parts)
        i = j
    return roles


# --- HTML --------------------------------------------------------------------------------

def _advantage_color(advantage: float, scale: float) -> str:
    alpha = 0.12 + 0.78 * min(1.0, abs(advantage) / scale) if advantage else 0.0
    rgb = "46, 160, 67" if advantage > 0 else "215, 48, 39"
    return f"rgba({rgb}, {alpha:.2f})" if alpha else "#ffffff"


def _legend(color_by: str, advantage_scale: float, planner: bool = False) -> str:
    def item(color, label):
        return (f'<span class="alfrl-legend" style="background:{color}; padding:0 6px; margin-right:8px; '
                f'border:1px solid #bbb">{html.escape(label)}</span>')

    if color_by == "role":
        items = [item(ROLE_COLORS[r], f"{r}: {ROLE_HELP[r]}") for r in ROLES + (PLANNER,) * planner]
    else:
        items = [item(_advantage_color(a, advantage_scale), f"sampled, advantage {a:+.2g}")
                 for a in (advantage_scale, advantage_scale / 4, -advantage_scale / 4, -advantage_scale)]
        items.append(item("#eeeeee", "not sampled (no gradient)"))
    return "<div>" + "".join(items) + "</div>"


def _header(t: Trajectory, roles: list[str]) -> str:
    def num(x):
        return "-" if x is None else f"{x:+.3f}"

    shown = ROLES + (PLANNER,) * (PLANNER in roles)
    counts = ", ".join(f"{roles.count(r)} {r}" for r in shown)
    return (f"<div><b>{html.escape(t.game_id)}</b> · branch {t.branch} · won {t.won} · steps {t.steps} · "
            f"invalid {t.invalid} · reward {num(t.reward)} · advantage {num(t.advantage)} · "
            f"{len(t.tokens)} tokens ({counts})</div>")


def trajectory_html(trajectory: Trajectory, fmt: ChatFormat, color_by: str = "role",
                    advantage_scale: float = 1.0, max_height: str = "480px", hover: bool = True) -> str:
    """Every token as a ``<span>``, coloured by role or by advantage, with a header and a legend.

    ``color_by="advantage"`` tints the sampled tokens green (advantage > 0) or red (< 0), the
    stronger the larger |advantage| (full at ``advantage_scale``); every other token is grey:
    it gets no gradient. Hover a token for its position, id, role and logprob; ``hover=False``
    draws each run of same-coloured tokens as one span instead, a tenth of the size.
    """
    if color_by not in ("role", "advantage"):
        raise ValueError(f"color_by must be 'role' or 'advantage', not {color_by!r}")
    t = trajectory
    roles = token_roles(t, fmt)
    pieces = fmt.tokenizer.batch_decode([[tok] for tok in t.tokens], clean_up_tokenization_spaces=False)
    spans = []
    for i, (tok, piece, role, logprob) in enumerate(zip(t.tokens, pieces, roles, t.logprobs)):
        if color_by == "role":
            style = f"background:{ROLE_COLORS[role]}"
        elif role in SAMPLED_ROLES:
            style = f"background:{_advantage_color(t.advantage or 0.0, advantage_scale)}"
        else:
            style = "background:#eeeeee; color:#888888"
        text = html.escape(piece).replace("\n", "\u21b5\n")
        if not hover and spans and spans[-1][0] == style:
            spans[-1][1].append(text)
            continue
        title = f' title="{html.escape(f"#{i} · id {tok} · {role} · logprob {logprob:.3f}")}"' if hover else ""
        spans.append((style, [text], title))
    body = (f'<div style="white-space:pre-wrap; font-family:monospace; font-size:80%; line-height:1.5; '
            f'max-height:{max_height}; overflow:auto; border:1px solid #ccc; padding:4px">'
            + "".join(f'<span class="alfrl-tok" style="{style}"{title}>{"".join(text)}</span>'
                      for style, text, title in spans) + "</div>")
    legend = _legend(color_by, advantage_scale, PLANNER in roles)
    return f'<div class="alfrl-trajectory">{_header(t, roles)}{legend}{body}</div>'


def show_trajectory(trajectory: Trajectory, fmt: ChatFormat, color_by: str = "role", **kwargs) -> None:
    """Display :func:`trajectory_html` in a notebook."""
    from IPython.display import HTML, display
    display(HTML(trajectory_html(trajectory, fmt, color_by, **kwargs)))


def browse(trajectories: list[Trajectory], fmt: ChatFormat, color_by: str = "role", labels: list[str] | None = None,
           **kwargs):
    """A dropdown of trajectories (named by ``labels``, or by branch and outcome) and a role/advantage
    toggle (ipywidgets); the first trajectory as static HTML where ipywidgets is missing. Returns
    the object to display."""
    if not trajectories:
        raise ValueError("no trajectories to browse")
    if labels is not None and len(labels) != len(trajectories):
        raise ValueError(f"{len(labels)} labels for {len(trajectories)} trajectories")
    try:
        import ipywidgets as w
    except ImportError:
        from IPython.display import HTML
        return HTML(trajectory_html(trajectories[0], fmt, color_by, **kwargs))

    def label(t: Trajectory) -> str:
        reward = "" if t.reward is None else f", reward {t.reward:+.2f}"
        return f"branch {t.branch}: {'won' if t.won else 'lost'}, {t.steps} steps, {t.invalid} invalid{reward}"

    names = labels or [label(t) for t in trajectories]
    pick = w.Dropdown(options=[(name, i) for i, name in enumerate(names)], value=0,
                      description="trajectory", layout=w.Layout(width="auto"))
    colour = w.ToggleButtons(options=["role", "advantage"], value=color_by, description="colour by")
    view = w.HTML()

    def refresh(_=None):
        view.value = trajectory_html(trajectories[pick.value], fmt, colour.value, **kwargs)

    pick.observe(refresh, names="value")
    colour.observe(refresh, names="value")
    refresh()
    listing = "".join(f"<li>{'<b>' * (i == 0)}{html.escape(n)}{'</b>' * (i == 0)}</li>" for i, n in enumerate(names))
    first = trajectory_html(trajectories[0], fmt, color_by, **{**kwargs, "hover": False})
    return with_snapshot(w.VBox([w.HBox([pick, colour]), view]),
                         f"<p>The widget pages through these {len(names)} trajectories:</p><ul>{listing}</ul>{first}")


# --- widgets on a page with no kernel ----------------------------------------------------

SNAPSHOT_NOTE = ("<p><i>A static picture of an interactive widget: run the notebook to use it.</i></p>")


class Snapshotted:
    """A widget that also carries a static HTML picture of itself. A live notebook draws the widget;
    a page that runs no kernel (the repository's, nbconvert's HTML) has only the picture to show."""

    def __init__(self, widget, snapshot: str):
        self.widget, self.snapshot = widget, snapshot

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        return {**bundle, "text/html": SNAPSHOT_NOTE + self.snapshot}

    def __getattr__(self, name):  # the widget's own attributes (children, value, ...)
        if name in ("widget", "snapshot"):
            raise AttributeError(name)
        return getattr(self.widget, name)


def widget_html(widget) -> str:
    """A static HTML picture of an ipywidgets tree as it stands: HTML and labels as they read,
    captured output as text, buttons and choices as labels. Other widgets are skipped."""
    import ipywidgets as w

    def label(text) -> str:
        return f'<code style="border:1px solid #bbb; padding:0 4px">{html.escape(str(text))}</code>'

    if isinstance(widget, (w.HTML, w.HTMLMath)):
        return widget.value
    if isinstance(widget, w.Label):
        return html.escape(widget.value)
    if isinstance(widget, w.Button):
        return label(widget.description)
    if isinstance(widget, (w.Dropdown, w.ToggleButtons, w.RadioButtons, w.Select)):
        names = [o[0] if isinstance(o, tuple) else o for o in widget.options]
        return f"{html.escape(widget.description)} " + " ".join(label(n) for n in names)
    if isinstance(widget, w.Output):
        text = "".join(o.get("text", "") for o in widget.outputs if o.get("output_type") == "stream")
        return f"<pre>{html.escape(text)}</pre>"
    if isinstance(widget, w.Box):
        sep = " " if isinstance(widget, w.HBox) or widget.layout.flex_flow == "row wrap" else "<br>"
        return sep.join(part for part in (widget_html(c) for c in widget.children) if part)
    return ""


def with_snapshot(widget, snapshot: str | None = None) -> Snapshotted:
    """``widget`` with a static picture for pages that run no kernel: ``snapshot`` (HTML), or
    :func:`widget_html` of the widget as it stands now."""
    return Snapshotted(widget, widget_html(widget) if snapshot is None else snapshot)
