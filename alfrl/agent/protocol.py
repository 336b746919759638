"""The tool protocol: one tool, ``alfworld_step(action)``, prompts, reply parsing, token-exact prompts.

Each turn the model writes a reply that must end with exactly one tool call::

    <tool_call>
    {"name": "alfworld_step", "arguments": {"action": "go to countertop 1"}}
    </tool_call>

(Qwen3.5-style templates write the same call as XML parameters; both are accepted.)
The game's answer comes back as a tool result: a status line, the observation, and
"Available actions (copy one exactly)".

Hierarchical play (``--plan-every N``) uses the same protocol: on a planner turn the message
ends with :data:`PLAN_REQUEST`, and the reply begins with one line ``Subgoal: ...`` before its
tool call (:func:`parse_plan`, :func:`plan_token_count`); the line is sampled, so it is trained.

Prompts grow by prefix extension, never by re-tokenising history:
``prompt_{t+1} = prompt_t + completion_t + closing tokens + tool-result tokens``, where
the closing tokens (what the chat template puts after an assistant message) and the
tool-result tokens are derived from the model's own chat template.

Taught in notebook 02 (the tool protocol); used by every later notebook; notebook 07 adds planner turns;
notebook 08 measures the action lists (:data:`ACTION_LISTS`) against the context window.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

TOOL_NAME = "alfworld_step"
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Send one command to the ALFWorld household game and get back what happens.",
        "parameters": {
            "type": "object",
            "properties": {"action": {"type": "string",
                                      "description": "One of the available actions, copied exactly."}},
            "required": ["action"],
        },
    },
}

_INTRO = ("You are an agent in a text-based household game (ALFWorld). Each turn you see what happened "
          f"and the actions available now; you act by calling the tool {TOOL_NAME}.")
_TOOL_LINE = f"Tool: {json.dumps(TOOL_SCHEMA['function'])}"
_CALL_FORMAT = f"""Think briefly if you need to, then end every reply with exactly one tool call, and nothing after it:
<tool_call>
{{"name": "{TOOL_NAME}", "arguments": {{"action": "go to countertop 1"}}}}
</tool_call>
Copy the action exactly from the list of available actions."""
SYSTEM_PROMPT = f"{_INTRO}\n\n{_TOOL_LINE}\n\n{_CALL_FORMAT}"
"""The system prompt for templates that ignore ``tools=``: it describes the tool itself."""
SYSTEM_PROMPT_WITH_TOOLS = f"{_INTRO}\n\n{_CALL_FORMAT}"
"""The system prompt where the chat template renders the tool schema itself."""

EXECUTED = "Action executed."
COMPLETED = "Task completed successfully."
NOT_ADMISSIBLE = "Action not admissible: {action!r} is not in the list of available actions."
BAD_FORMAT = "Invalid tool-call format: {reason}"


PLAN_PREFIX = "Subgoal:"
PLAN_REQUEST = (f'Plan first: begin your reply with one short line "{PLAN_PREFIX} ..." naming your next subgoal '
                "toward the task, then end the reply with the tool call.")
"""What a planner turn's message ends with (hierarchical play, ``RolloutConfig.plan_every``)."""


def is_planner_turn(steps_done: int, subgoal_just_reached: bool, plan_every: int) -> bool:
    """Whether the next turn plans: the first, every ``plan_every``-th, and the one right after a subgoal is
    reached (never with ``plan_every`` 0)."""
    return plan_every > 0 and (steps_done % plan_every == 0 or subgoal_just_reached)


ACTION_LISTS = ("every", "first", "local")
"""Which tool results list the available actions (``--actions``). The first message always lists them all.

- ``"every"``: every tool result ends with the whole list. In a large official room that is 30-70 lines a
  turn, so a 50-step game does not fit a small model's 8,192 positions.
- ``"first"``: later tool results list them again only after an invalid reply (not admissible, or a
  malformed call); otherwise the status and the observation alone. Prompts still grow by prefix extension.
- ``"local"``: like ``"first"``, but every tool result also lists the actions that are not ``go to ...``
  (take, open, heat, move ... where the agent stands).

``benchmarks/context_budget.py`` measures each on ALFWorld's official games. A policy carries the protocol
its adapter was trained in (``Policy.actions``, saved beside the adapter); ``"auto"`` in a config means that one.
"""
DEFAULT_ACTIONS = "every"
"""The protocol of a policy that records none: the bare model, a fresh adapter, and the shipped adapters (all
trained in it). ``--actions first``, which holds a 50-step game of the largest official room, is chosen by flag,
and an adapter trained in it records it (:func:`alfrl.agent.models.adapter_actions`)."""
_LIST_NOTES = {
    "every": "",
    "first": ("\n\nThe first message lists every available action. Later results show the list again only "
              "after an action that was not available; the observations name what you can act on."),
    "local": ("\n\nThe first message lists every available action. Later results list the actions other than "
              "\"go to\" (the whole list again after an action that was not available)."),
}


def check_action_list(actions: str, auto_ok: bool = False) -> str:
    """``actions`` if it names a protocol of :data:`ACTION_LISTS` (or ``"auto"`` where allowed), else a clear
    error."""
    if actions not in ACTION_LISTS + (("auto",) if auto_ok else ()):
        names = ", ".join(ACTION_LISTS + (("auto",) if auto_ok else ()))
        raise ValueError(f"--actions must be one of {names} (got {actions!r})")
    return actions


def resolve_actions(actions: str, policy) -> str:
    """The protocol a rollout plays: ``actions``, or with ``"auto"`` the one the policy's adapter was trained in."""
    check_action_list(actions, auto_ok=True)
    return getattr(policy, "actions", DEFAULT_ACTIONS) if actions == "auto" else actions


def listed_actions(actions: str, admissible: list[str], valid: bool) -> list[str] | None:
    """The actions a tool result lists under protocol ``actions`` after a ``valid`` (or invalid) reply;
    None: no list at all."""
    check_action_list(actions)
    if actions == "every" or not valid:
        return list(admissible)
    if actions == "local":
        return [a for a in admissible if not a.startswith("go to ")]
    return None


def actions_block(admissible: list[str]) -> str:
    return "Available actions (copy one exactly):\n" + "\n".join(f"- {a}" for a in admissible)


def _with_request(message: str, request: str) -> str:
    return f"{message}\n\n{request}" if request else message


def first_user_message(task: str, observation: str, admissible: list[str], request: str = "") -> str:
    """The opening user message: the task, the first observation, the available actions (and a
    ``request`` such as :data:`PLAN_REQUEST` after them).

    ALFWorld's first observation ends with "Your task is to: ..."; that sentence is moved to
    the top rather than said twice.
    """
    observation = re.sub(r"\s*Your task is to: [^\n]*$", "", observation.strip())
    return _with_request(f"Your task is to: {task}\n\nObservation: {observation}\n\n{actions_block(admissible)}",
                         request)


def tool_result_message(status: str, observation: str, admissible: list[str] | None, request: str = "") -> str:
    """A tool result: status line, observation, available actions (none when ``admissible`` is None; see
    :func:`listed_actions`), and a ``request`` after them."""
    text = f"{status}\nObservation: {observation.strip()}"
    if admissible is not None:
        text += f"\n\n{actions_block(admissible)}"
    return _with_request(text, request)


@dataclass(frozen=True)
class ParsedReply:
    """A reply checked against the protocol: the canonical action, or why it was rejected."""

    action: str | None
    reason: str = ""

    @property
    def valid(self) -> bool:
        return self.action is not None


_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION_OPEN, _FUNCTION_CLOSE = "<function=", "</function>"
_PARAM_OPEN, _PARAM_CLOSE = "<parameter=", "</parameter>"
_NAME_END = re.compile(r"[>\n]")


def canonical_action(action: str) -> str:
    """Lower case, single spaces: ``Go  to CounterTop 1`` -> ``go to countertop 1``."""
    return " ".join(action.lower().split())


def _reject(reason: str) -> ParsedReply:
    return ParsedReply(action=None, reason=reason)


def _json(text: str) -> tuple[object, str]:
    """(value, error) from JSON text. A sampled reply is untrusted: no input raises."""
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as e:
        return None, f"{e.msg} at character {e.pos}"
    except RecursionError:  # ~1,000 nested [ or {: in SmolLM2's tokenizer "[[" is one token
        return None, "nested too deeply"
    except ValueError:  # an integer longer than Python's int max str digits (4,300 by default)
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        return None, f"a number has more than {limit} digits"


def _shown(text: str, limit: int = 60) -> str:
    """``text`` as repr, shortened: a reason is shown to the model and must stay short."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _xml_function(body: str) -> tuple[str, str] | None:
    """(name, inside) of ``<function=NAME> ... </function>`` filling all of ``body``, else None.

    Plain string scanning, linear in the length: a regex with ``\\s*(.*?)\\s*`` backtracks
    cubically on long runs of spaces, which a sampled reply can hold.
    """
    if not body.startswith(_FUNCTION_OPEN) or not body.endswith(_FUNCTION_CLOSE):
        return None
    name_end = _NAME_END.search(body, len(_FUNCTION_OPEN))
    if name_end is None or name_end.group() != ">" or name_end.end() > len(body) - len(_FUNCTION_CLOSE):
        return None
    return body[len(_FUNCTION_OPEN):name_end.start()], body[name_end.end():-len(_FUNCTION_CLOSE)].strip()


def _xml_parameters(text: str) -> dict[str, str]:
    """Every ``<parameter=NAME>\\nVALUE\\n</parameter>`` in ``text`` (one newline each side is dropped)."""
    params, pos = {}, 0
    while (start := text.find(_PARAM_OPEN, pos)) >= 0:
        name_end = _NAME_END.search(text, start + len(_PARAM_OPEN))
        if name_end is None:
            break
        if name_end.group() == "\n":  # no parameter name spans a line: go on after it
            pos = name_end.end()
            continue
        close = text.find(_PARAM_CLOSE, name_end.end())
        if close < 0:
            break
        value = text[name_end.end():close]
        value = value[1:] if value.startswith("\n") else value
        params[text[start + len(_PARAM_OPEN):name_end.start()].strip()] = value[:-1] if value.endswith("\n") else value
        pos = close + len(_PARAM_CLOSE)
    return params


def _call_body(body: str) -> tuple[str | None, object, str]:
    """(tool name, arguments, error) from the inside of one ``<tool_call>`` block."""
    body = body.strip()
    if body.startswith("{"):
        call, error = _json(body)
        if error:
            return None, None, f"the tool call is not valid JSON ({error})"
        if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
            return None, None, 'the tool call must be {"name": ..., "arguments": {"action": ...}}'
        if not isinstance(call["name"], str):
            return None, None, f'the tool\'s "name" must be the string "{TOOL_NAME}"'
        arguments = call["arguments"]
        if isinstance(arguments, str):  # some models encode the arguments as a JSON string
            arguments, error = _json(arguments)
            if error:
                return None, None, "the tool call's arguments are not a JSON object"
        return call["name"], arguments, ""
    function = _xml_function(body)
    if function:
        name, inside = function
        return name.strip(), _xml_parameters(inside), ""
    return None, None, "the tool call must hold a JSON object or <function=...> parameters"


def after_thinking(text: str) -> str | None:
    """What a reply says after its ``<think>`` block (all of it when it has none); None when it ends
    inside one (a ``<think>`` that is never closed)."""
    if THINK_CLOSE in text:
        return text.rsplit(THINK_CLOSE, 1)[1]
    return None if THINK_OPEN in text else text


def parse_reply(text: str) -> ParsedReply:
    """Check a reply: exactly one ``alfworld_step`` call, at the end, with a one-line action. A thought
    in ``<think>...</think>`` is not read: a call drafted there is not a call."""
    answer = after_thinking(text)
    if answer is None:
        return _reject(f"the reply ended inside its thought; close it with {THINK_CLOSE}, then end with "
                       f"{_CALL_OPEN}...{_CALL_CLOSE}")
    text = answer
    opens, closes = text.count(_CALL_OPEN), text.count(_CALL_CLOSE)
    if opens == 0:
        return _reject(f"no tool call; end your reply with {_CALL_OPEN}...{_CALL_CLOSE}")
    if opens > 1 or closes > 1:
        return _reject("more than one tool call; send exactly one per reply")
    if closes == 0:
        return _reject(f"the tool call is not closed with {_CALL_CLOSE}")
    start, end = text.index(_CALL_OPEN), text.index(_CALL_CLOSE)
    if end < start:
        return _reject(f"{_CALL_CLOSE} comes before {_CALL_OPEN}")
    if text[end + len(_CALL_CLOSE):].strip():
        return _reject("text after the tool call; the tool call must end the reply")
    name, arguments, error = _call_body(text[start + len(_CALL_OPEN):end])
    if error:
        return _reject(error)
    if name != TOOL_NAME:
        return _reject(f"unknown tool {_shown(name)}; the only tool is {TOOL_NAME}")
    if not isinstance(arguments, dict) or not isinstance(arguments.get("action"), str):
        return _reject('the arguments must be {"action": "<one available action>"}')
    action = arguments["action"]
    if "\n" in action.strip():
        return _reject("the action spans several lines; send one action on one line")
    action = canonical_action(action)
    if not action:
        return _reject("the action is empty")
    return ParsedReply(action=action)


def parse_plan(text: str) -> str | None:
    """The subgoal a planner turn's reply names: what follows ``Subgoal:`` on its line, before the
    tool call; None when no such line (or an empty one) comes first."""
    head = text.split(_CALL_OPEN, 1)[0]
    line = head.strip().split("\n", 1)[0].strip()
    if not line.startswith(PLAN_PREFIX):
        return None
    return line[len(PLAN_PREFIX):].strip() or None


def plan_token_count(tokenizer, tokens: list[int], text: str) -> int:
    """How many of a reply's first ``tokens`` (whose decoded text is ``text``) write its subgoal line,
    through the line's end (newline, or the tool call right after it); 0 when it has none."""
    if parse_plan(text) is None:
        return 0
    start = text.index(PLAN_PREFIX)
    ends = [i for i in (text.find("\n", start), text.find(_CALL_OPEN, start)) if i >= 0]
    end = min(ends) if ends else len(text)  # the line's last character is text[end - 1], or the newline at end
    want = end + 1 if end < len(text) and text[end] == "\n" else end
    for n in range(1, len(tokens) + 1):
        if len(tokenizer.decode(tokens[:n], skip_special_tokens=True)) >= want:
            return n
    return len(tokens)


# --- token-exact prompts -------------------------------------------------------------

class TemplateError(ValueError):
    """The chat template cannot be extended by prefix (it rewrites earlier turns)."""


_PROBE = "\u2063ALFRL-PROBE\u2063"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_STEADY_REPLY = f"{THINK_OPEN}\n{_PROBE}\n{THINK_CLOSE}\n\n{_PROBE}"
"""A reply every template renders alike as the last message and before a tool result. Reasoning
templates (Qwen3's) show the last reply with a ``<think>`` block, an empty one added if it had none,
and drop an empty or missing block once a tool result follows; a reply with a non-empty thought is
shown with it either way."""


def check_thinking_switch(chat_template: str | None, thinking: bool | None) -> None:
    """A clear error when ``thinking`` is set (on or off) but the template has no ``enable_thinking`` switch."""
    if thinking is not None and "enable_thinking" not in (chat_template or ""):
        raise ValueError(f"--thinking {'on' if thinking else 'off'} needs a chat template with a thinking switch "
                         "(enable_thinking, as Qwen3's has); this model's template has none: leave --thinking auto")


class ChatFormat:
    """What a model's chat template puts around turns, derived from the template itself.

    ``closing`` is the text after an assistant message's content (``<|im_end|>\\n`` for
    ChatML templates); :meth:`tool_turn` is the text a tool result adds, up to and
    including the next assistant header. Both come from rendering probe conversations,
    so no template's tokens are hard-coded.
    """

    def __init__(self, tokenizer, tool_role: str = "tool", thinking: bool | None = None, actions: str = "every"):
        self.tokenizer = tokenizer
        self.tool_role = tool_role
        self.actions = check_action_list(actions)
        """Which tool results list the available actions (:data:`ACTION_LISTS`)."""
        self.thinking = thinking
        """Passed to the template as ``enable_thinking`` (Qwen3's switch): False opens every reply with an
        empty thought, so the model answers at once; None leaves the template's default."""
        check_thinking_switch(tokenizer.chat_template, thinking)
        self.uses_tools = self._render(self._probe_messages()[:2], tools=[TOOL_SCHEMA]) != \
            self._render(self._probe_messages()[:2])
        self.system_prompt = (SYSTEM_PROMPT_WITH_TOOLS if self.uses_tools else SYSTEM_PROMPT) + _LIST_NOTES[actions]
        with_reply = self._render(self._probe_messages())
        end = with_reply.rindex(_PROBE) + len(_PROBE)
        self.closing = with_reply[end:]

    def _probe_messages(self) -> list[dict]:
        return [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": _PROBE}]

    def _render(self, messages: list[dict], generation_prompt: bool = False, tools=None) -> str:
        switch = {} if self.thinking is None else {"enable_thinking": self.thinking}
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=generation_prompt, **switch)

    def tools(self):
        return [TOOL_SCHEMA] if self.uses_tools else None

    def messages(self, task: str, observation: str, admissible: list[str], request: str = "") -> list[dict]:
        """The opening conversation: system prompt (with the tool where the template shows none) and task."""
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": first_user_message(task, observation, admissible, request)}]

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self._render(messages, generation_prompt, tools=self.tools())

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def initial_prompt(self, task: str, observation: str, admissible: list[str], request: str = "") -> list[int]:
        """Token ids of the first prompt, ending with the assistant header."""
        return self.encode(self.render(self.messages(task, observation, admissible, request), True))

    def tool_turn(self, history: list[dict], content: str) -> str:
        """The text a tool result adds after ``history`` (which ends with an assistant reply).

        What follows a reply does not depend on it, so the last reply is rendered as
        :data:`_STEADY_REPLY`: a reasoning template would otherwise show a reply with no thought, an
        empty one or one cut off mid-thought differently before and after the tool result. The
        prompt itself keeps the reply's tokens as sampled (:func:`build_next_prompt`)."""
        history = history[:-1] + [{**history[-1], "content": _STEADY_REPLY}]
        before = self.render(history, False)
        after = self.render(history + [{"role": self.tool_role, "content": content}], True)
        if not after.startswith(before):
            raise TemplateError("this chat template rewrites earlier turns when a tool result is added, so "
                                "prompts cannot grow by prefix extension; use a prefix-stable template")
        return after[len(before):]


    def tool_content(self, status: str, observation: str, admissible: list[str], valid: bool,
                     request: str = "") -> str:
        """A tool result's text under this format's action lists (:func:`listed_actions`)."""
        return tool_result_message(status, observation, listed_actions(self.actions, admissible, valid), request)


def policy_format(policy, actions: str = "auto") -> ChatFormat:
    """The :class:`ChatFormat` of a loaded policy, with its thinking switch (``policy.thinking``) and the
    action lists of protocol ``actions`` ("auto": the policy's own, :func:`resolve_actions`)."""
    return ChatFormat(policy.tokenizer, thinking=getattr(policy, "thinking", None),
                      actions=resolve_actions(actions, policy))


def build_next_prompt(fmt: ChatFormat, prompt: list[int], completion: list[int], history: list[dict],
                      tool_content: str) -> list[int]:
    """``prompt + completion + closing tokens + tool-result tokens``: no history re-tokenized.

    ``completion`` is what the sampler returned (ending with the end-of-turn token when it
    stopped there, which the closing text then starts with and is not repeated). ``history``
    is the conversation so far as messages, the last one the assistant reply: the template
    needs it only to know how a tool turn looks after it.
    """
    closing = fmt.encode(fmt.closing)
    if completion and closing and completion[-1] == closing[0]:  # the sampler stopped on the end-of-turn token
        closing = closing[1:]
    return list(prompt) + list(completion) + closing + fmt.encode(fmt.tool_turn(history, tool_content))
