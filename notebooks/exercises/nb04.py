"""Notebook 04's exercises: a group's per-token advantages (advantage x mask), and the one-position shift
between logits and the tokens they predict.

Both checks are cheap: hand-built trajectories, and a tiny random model (a few thousand weights) for the
shift; the answers come from ``alfrl.rl.advantage`` and ``alfrl.rl.ppo.sequence_logprobs``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

from exercises import attempt, verdict


def _trajectory(won: bool, invalid: int, mask: list[int], branch: int = 0):
    from alfrl.rl.rollout import Trajectory
    return Trajectory(game_id="g", task_type="t", branch=branch, seed=0, tokens=list(range(len(mask))), mask=mask,
                      logprobs=[0.0] * len(mask), turns=[], won=won, steps=3, invalid=invalid,
                      end_reason="won" if won else "max_steps", prompt_tokens=0, prefilled=0, sampled=sum(mask),
                      model_seconds=0.0, env_seconds=0.0)


def advantage_cases() -> dict[str, list]:
    """Groups of hand-built trajectories (0 = prompt / tool / template token, 1 = sampled)."""
    m1, m2, m3 = [0, 0, 1, 1, 0, 1, 1, 1], [0, 0, 1, 0, 0, 1], [0, 0, 0, 1, 1, 1, 1, 0, 0, 1]
    return {
        "wins and losses": [_trajectory(True, 0, m1), _trajectory(True, 2, m2, 1), _trajectory(False, 3, m3, 2),
                            _trajectory(False, 0, m1, 3)],
        "all lost, invalid replies differ": [_trajectory(False, 0, m2), _trajectory(False, 0, m1, 1),
                                             _trajectory(False, 3, m3, 2)],
        "degenerate (all won cleanly)": [_trajectory(True, 0, m1), _trajectory(True, 0, m2, 1)],
        "degenerate (all lost the same way)": [_trajectory(False, 2, m3, b) for b in range(3)],
    }


def check_group_token_advantages(group_token_advantages: Callable) -> bool:
    """``group_token_advantages(group)`` returns, per trajectory, one float per token: the trajectory's
    advantage (reward - the group's mean reward, reward = won - 0.1 x invalid) where its mask is 1, 0
    elsewhere. Compared with ``alfrl.rl.advantage.assign_advantages`` + ``token_advantages``."""
    from alfrl.rl.advantage import assign_advantages, token_advantages
    problems = []
    for name, group in advantage_cases().items():
        theirs_group = copy.deepcopy(group)
        assign_advantages([theirs_group])
        theirs = [token_advantages(t).tolist() for t in theirs_group]
        mine, problem = attempt(group_token_advantages, copy.deepcopy(group))
        if problem:
            return verdict([problem], "")
        try:
            mine = [[float(x) for x in row] for row in mine]
        except TypeError:
            return verdict([f"return one list of numbers per trajectory, not {type(mine).__name__}"], "")
        if len(mine) != len(theirs):
            problems.append(f"{name}: {len(mine)} rows for {len(theirs)} trajectories")
            continue
        for t, a, b in zip(theirs_group, mine, theirs):
            who = f"{name}, branch {t.branch} (reward {t.reward:+.1f}, advantage {t.advantage:+.3f})"
            if len(a) != len(b):
                problems.append(f"{who}: {len(a)} values for {len(b)} tokens: one per token, the masked ones too")
            elif any(x != 0 for x, m in zip(a, t.mask) if not m):
                problems.append(f"{who}: nonzero where the mask is 0: only sampled tokens (mask 1) get the advantage")
            elif not all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a, b)):
                got = next((x for x, m in zip(a, t.mask) if m), None)
                hint = ("every branch of a degenerate group (all rewards equal) has advantage 0"
                        if all(y == 0 for y in b) else "the advantage is the reward minus the group's mean reward")
                problems.append(f"{who}: your sampled tokens get {got}, expected {t.advantage:+.3f}: {hint}")
    return verdict(problems, "per-token advantages agree with alfrl.rl.advantage on every group")


# --- the shift ------------------------------------------------------------------------------------

def _tiny_model():
    """A randomly initialised 1-layer Llama with a 40-token vocabulary: real logits, no download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def check_token_logprobs(token_logprobs: Callable) -> bool:
    """``token_logprobs(logits, tokens)``: logits of shape [T, vocab] from one forward pass over ``tokens``
    (length T); returns the T log-probabilities log p(token_i | tokens before i), 0 at position 0.
    Compared with ``alfrl.rl.ppo.sequence_logprobs``, the function the PPO update uses."""
    try:
        import torch

        from alfrl.rl.logprobs import sequence_logprobs
        model = _tiny_model()
        gen = torch.Generator().manual_seed(1)
        sequences = [torch.randint(0, 40, (n,), generator=gen).tolist() for n in (12, 5, 2)]
    except Exception as e:
        print(f"✗ could not set up the check ({type(e).__name__}: {e})")
        return False
    problems = []
    for tokens in sequences:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens])).logits[0]
            theirs = sequence_logprobs(model, [tokens])[0]
        mine, problem = attempt(token_logprobs, logits.clone(), torch.tensor(tokens))
        if problem:
            return verdict([problem], "")
        mine = torch.as_tensor(mine, dtype=torch.float32).flatten()
        if mine.shape != theirs.shape:
            problems.append(f"{len(tokens)} tokens: {tuple(mine.shape)} values, expected {tuple(theirs.shape)}: "
                            "one per token, with 0 at position 0 (nothing predicts the first token)")
            continue
        if torch.allclose(mine, theirs, atol=1e-5):
            continue
        logp = torch.log_softmax(logits.float(), dim=-1)
        unshifted = logp.gather(1, torch.tensor(tokens)[:, None])[:, 0]
        if torch.allclose(mine, unshifted, atol=1e-5) or torch.allclose(mine[1:], unshifted[1:], atol=1e-5):
            problems.append(f"{len(tokens)} tokens: you read token i's logprob from logits[i]; logits[i] predicts "
                            "token i+1, so token i's logprob is in logits[i-1]")
        elif mine[0] != 0:
            problems.append(f"{len(tokens)} tokens: position 0 is {float(mine[0]):.3f}; make it 0")
        elif (mine[1:] > 0).any():
            problems.append(f"{len(tokens)} tokens: positive values: take log_softmax over the vocabulary, not the logits")
        else:
            i = int((mine - theirs).abs().argmax())
            problems.append(f"{len(tokens)} tokens: position {i} is {float(mine[i]):.4f}, expected {float(theirs[i]):.4f}")
    return verdict(problems, "token_logprobs agrees with alfrl.rl.ppo.sequence_logprobs, shift included")
