"""Checks for notebook 02's exercises (the tool protocol).

- :func:`check_reply_tokens`: the tokens a model must sample to play an action: one tool call, then the
  end-of-turn token (what the expert warm start teaches the model to write).
- :func:`check_next_prompt`: turn t+1's prompt built from turn t's by prefix extension, token for token
  as :func:`alfrl.agent.protocol.build_next_prompt` builds it.
- :func:`check_expert_nll`: the imitation loss, the mean negative log-likelihood of the expert's reply tokens
  (mask 1), as :func:`alfrl.imitation.sft.nll_loss` computes it (checked on random logits, no model loaded).

Both use the bundled model's tokenizer (or the ``fmt`` passed in). Every check prints what is wrong,
or ✓, returns a bool, and never raises.
"""

from __future__ import annotations

from collections.abc import Callable

from exercises import attempt, verdict


def _fmt(fmt=None):
    if fmt is not None:
        return fmt
    from alfrl.agent.models import load_tokenizer
    from alfrl.agent.protocol import ChatFormat

    return ChatFormat(load_tokenizer())


def _game_start(split: str, data_dir):
    """A real game: (game, its shared start, the result of the expert's first move)."""
    from alfrl.world.env import GroupEnv
    from alfrl.world.games import load_games

    game = load_games(split, data_dir)[0]
    with GroupEnv(k=1, max_steps=3, workers=0) as env:
        start = env.reset(game)
        step = env.step({0: game.walkthrough[1]})[0]
    return game, start, step


def _show(tokenizer, ids, limit: int = 80) -> str:
    text = repr(tokenizer.decode(ids))
    return text if len(text) <= limit else text[:limit] + "..."


# --- exercise 1 (section 3): the tokens of one valid reply ------------------------------------

ACTIONS = ["look", "go to countertop 1", "take mug 1 from countertop 1", "Move  Mug 1 to CoffeeMachine 1"]


def check_reply_tokens(fn: Callable, fmt=None) -> bool:
    """Check ``fn(fmt, action) -> list[int]``: a reply the parser reads as ``action``, ended by the end-of-turn
    token, whose text tokens are the tokenizer's own encoding of that text."""
    try:
        from alfrl.agent.protocol import canonical_action, parse_reply
        from alfrl.agent.sampler import stop_ids

        fmt = _fmt(fmt)
        tok = fmt.tokenizer
        end_of_turn = fmt.encode(fmt.closing)[0]  # the token a reply stops on (<|im_end|> for ChatML)
        stops = stop_ids(tok)
    except Exception as e:
        return verdict([f"could not set up the check ({type(e).__name__}: {e})"], "")
    problems = []
    for action in ACTIONS:
        got, problem = attempt(fn, fmt, action)
        if problem:
            problems.append(f"{action!r}: {problem}")
            continue
        if not isinstance(got, (list, tuple)) or not got or not all(isinstance(t, int) for t in got):
            problems.append(f"{action!r}: return a non-empty list of token ids (ints), not {str(got)[:100]}")
            continue
        got = list(got)
        if got[-1] != end_of_turn:
            problems.append(f"{action!r}: the last token is {_show(tok, got[-1:])}; a reply ends with the "
                            f"end-of-turn token {_show(tok, [end_of_turn])} (id {end_of_turn}), or the sampler "
                            "never stops")
            continue
        early = [i for i, t in enumerate(got[:-1]) if t in stops]
        if early:
            problems.append(f"{action!r}: an end-of-turn token at position {early[0]}: the reply would stop there")
            continue
        text = tok.decode(got[:-1])
        parsed = parse_reply(text)
        if parsed.action != canonical_action(action):
            why = parsed.reason or f"it reads as {parsed.action!r}"
            problems.append(f"{action!r}: the reply {text[:80]!r} is not a valid call of this action: {why}")
            continue
        if fmt.encode(text) != got[:-1]:
            problems.append(f"{action!r}: these ids decode to the right text but are not how the tokenizer "
                            "encodes it (fmt.encode(text)); build the ids from text, never by hand")
    return verdict(problems, f"{len(ACTIONS)} actions: each reply parses to its action and ends with "
                             f"{tok.decode([end_of_turn])!r}")


# --- exercise 2 (section 4): the next prompt, by prefix ------------------------------------------

def prompt_cases(fmt, split: str = "valid_seen", data_dir=None) -> list[dict]:
    """Turns to extend, with the package's answer: a reply that stopped on the end-of-turn token, one cut
    off by the token budget, one whose tokens do not re-encode to themselves, and a third turn."""
    from alfrl.agent.protocol import EXECUTED, build_next_prompt, tool_result_message
    from alfrl.rl.scripted import tool_call

    game, start, step = _game_start(split, data_dir)
    messages = fmt.messages(game.goal, start.observation, start.admissible_commands)
    prompt = fmt.initial_prompt(game.goal, start.observation, start.admissible_commands)
    result = tool_result_message(EXECUTED, step.observation, step.admissible_commands)
    end_of_turn = fmt.encode(fmt.closing)[0]
    call = tool_call(game.walkthrough[1])
    piecewise = [t for ch in call for t in fmt.encode(ch)] + [end_of_turn]  # same text, other tokens
    replies = {
        "a reply that stopped on the end-of-turn token": fmt.encode(call) + [end_of_turn],
        "a reply cut off by the token budget": fmt.encode("I should look for the object first, so I")[:8],
        "a reply whose tokens do not re-encode to themselves": piecewise,
    }
    cases = []
    for name, completion in replies.items():
        history = messages + [{"role": "assistant", "content": fmt.tokenizer.decode(completion,
                                                                                    skip_special_tokens=True)}]
        cases.append({"name": name, "prompt": prompt, "completion": completion, "history": history,
                      "tool_content": result,
                      "right": build_next_prompt(fmt, prompt, completion, history, result)})
    # a third turn: extend the first case's second prompt
    first = cases[0]
    history = first["history"] + [{"role": fmt.tool_role, "content": result}]
    second_reply = fmt.encode(tool_call("look")) + [end_of_turn]
    history = history + [{"role": "assistant", "content": tool_call("look")}]
    cases.append({"name": "the third turn", "prompt": first["right"], "completion": second_reply,
                  "history": history, "tool_content": result,
                  "right": build_next_prompt(fmt, first["right"], second_reply, history, result)})
    return cases


def check_next_prompt(fn: Callable, fmt=None, split: str = "valid_seen", data_dir=None) -> bool:
    """Check ``fn(fmt, prompt, completion, history, tool_content) -> list[int]`` against build_next_prompt."""
    try:
        fmt = _fmt(fmt)
        cases = prompt_cases(fmt, split, data_dir)
    except Exception as e:
        return verdict([f"could not set up the check ({type(e).__name__}: {e})"], "")
    tok = fmt.tokenizer
    end_of_turn = fmt.encode(fmt.closing)[0]
    problems = []
    for case in cases:
        name, prompt, completion, right = case["name"], case["prompt"], case["completion"], case["right"]
        got, problem = attempt(fn, fmt, list(prompt), list(completion), [dict(m) for m in case["history"]],
                               case["tool_content"])
        if problem:
            problems.append(f"{name}: {problem}")
            continue
        if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) for t in got):
            problems.append(f"{name}: return a list of token ids (ints), not {type(got).__name__}")
            continue
        got = list(got)
        if got == right:
            continue
        head = list(prompt) + list(completion)
        if got[:len(head)] != head:
            problems.append(f"{name}: the new prompt must start with the old prompt and the sampled tokens, "
                            "unchanged (re-encoding the conversation changes tokens the model chose)")
            continue
        at = next((i for i, (a, b) in enumerate(zip(got, right)) if a != b), min(len(got), len(right)))
        twice = completion[-1] == end_of_turn and got[len(head):len(head) + 1] == [end_of_turn]
        problems.append(f"{name}: {len(got)} tokens, should be {len(right)}; first difference at token {at}: "
                        f"yours {_show(tok, got[at:at + 6])}, right {_show(tok, right[at:at + 6])}"
                        + (" (the end-of-turn token twice: a reply that stopped on it already holds it)"
                           if twice else ""))
    return verdict(problems, f"{len(cases)} turns extended token for token as build_next_prompt does")


def _nll_case(seed: int):
    """Random logits over a 13-token vocabulary for a 12-token sequence whose mask marks two replies."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(12, 13, generator=gen) * 2
    tokens = torch.randint(0, 13, (12,), generator=gen)
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0][::1 if seed % 2 == 0 else -1])
    return logits, tokens, mask


def _nll(logits, tokens, mask, shift: bool = True, masked: bool = True, mean: bool = True):
    """The expert tokens' negative log-likelihood, and the classic mistakes (shift, mask, mean off)."""
    import torch
    logp = torch.log_softmax(logits, dim=-1)
    if shift:  # the logits at position t predict token t + 1
        picked, m = logp[:-1].gather(-1, tokens[1:, None])[:, 0], mask[1:].float()
    else:
        picked, m = logp.gather(-1, tokens[:, None])[:, 0], mask.float()
    if not masked:
        m = torch.ones_like(m)
    return -(picked * m).sum() / (m.sum() if mean else 1)


def check_expert_nll(expert_nll: Callable) -> bool:
    """``expert_nll(logits, tokens, mask)``: the mean negative log-likelihood of the tokens with mask 1 (the
    expert's reply tokens), each predicted by the logits one position before it; as ``alfrl.imitation.sft.nll_loss``."""
    import torch
    hints = [(dict(shift=False), "the logits at position t predict token t + 1: score token t with logits[t - 1] "
              "(logits[:-1] against tokens[1:] and mask[1:])"),
             (dict(masked=False), "average over the expert's reply tokens only (mask 1), not over every token"),
             (dict(mean=False), "divide by the number of reply tokens: the loss is a mean, not a sum"),
             (dict(shift=False, masked=False), "score token t with logits[t - 1], and only where mask is 1")]
    problems = []
    for seed in range(3):
        logits, tokens, mask = _nll_case(seed)
        leaf = logits.clone().requires_grad_(True)
        got, problem = attempt(expert_nll, leaf, tokens.clone(), mask.clone())
        if problem:
            return verdict([problem], "")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return verdict([f"return the loss as a one-number tensor, not {type(got).__name__}"], "")
        expected = float(_nll(logits, tokens, mask))
        value = float(got.detach())
        if abs(value - expected) > 1e-5:
            if abs(value + expected) < 1e-5:
                return verdict(["the sign: the loss is the NEGATIVE log-likelihood (minus the mean logprob)"], "")
            wrong = [hint for kwargs, hint in hints if abs(value - float(_nll(logits, tokens, mask, **kwargs))) < 1e-5]
            return verdict([wrong[0] if wrong else f"seed {seed}: your loss is {value:.5f}, expected {expected:.5f}"], "")
        if not got.requires_grad:
            problems.append("the loss has no gradient: compute it with torch operations from the logits")
            break
    return verdict(problems, "expert_nll is the mean negative log-likelihood of the reply tokens, as alfrl.imitation.sft's")
