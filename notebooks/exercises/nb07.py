"""Checks for notebook 07's exercises: a group's advantages under the subgoal-shaped reward, and the DPO
loss with its gradient for one pair.

The right answers come from ``alfrl.rl.advantage`` (``AdvantageConfig(subgoal_reward=...)`` and
``assign_advantages``) and from autograd through ``alfrl.imitation.dpo.dpo_loss``, so the exercises cannot drift
from the package.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

from exercises import attempt, verdict


def _trajectory(won: bool, subgoals: int, invalid: int, branch: int = 0, total: int = 3):
    from alfrl.rl.trajectory import Trajectory
    return Trajectory(game_id="g", task_type="t", branch=branch, seed=0, tokens=[1, 2], mask=[0, 1],
                      logprobs=[0.0, 0.0], turns=[], won=won, steps=3, invalid=invalid,
                      end_reason="won" if won else "max_steps", prompt_tokens=1, prefilled=0, sampled=1,
                      model_seconds=0.0, env_seconds=0.0, subgoals=subgoals, subgoals_total=total)


def shaped_cases() -> dict[str, tuple[list, float]]:
    """Groups of (won, subgoals reached, invalid) branches, and alpha."""
    def group(*rows):
        return [_trajectory(w, s, i, b) for b, (w, s, i) in enumerate(rows)]
    return {
        "no win, different progress": (group((False, 0, 0), (False, 1, 0), (False, 2, 1), (False, 0, 2)), 0.1),
        "a win and losses": (group((True, 3, 0), (False, 2, 0), (False, 0, 3), (False, 1, 0)), 0.1),
        "alpha 0 is the reference reward": (group((True, 3, 1), (False, 2, 0), (False, 0, 0)), 0.0),
        "a larger alpha": (group((False, 2, 0), (False, 1, 0), (True, 3, 2)), 0.25),
        "all equal (degenerate)": (group((False, 1, 0), (False, 1, 0), (False, 1, 0)), 0.1),
    }


def check_shaped_advantages(shaped_advantages: Callable) -> bool:
    """``shaped_advantages(group, alpha)`` returns one advantage per branch: reward minus the group's mean,
    with reward = won + alpha x subgoals reached - 0.1 x invalid. Compared with ``alfrl.rl.advantage``."""
    from alfrl.rl.advantage import AdvantageConfig, assign_advantages
    problems = []
    for name, (group, alpha) in shaped_cases().items():
        theirs = copy.deepcopy(group)
        assign_advantages([theirs], AdvantageConfig(subgoal_reward=alpha))
        mine, problem = attempt(shaped_advantages, copy.deepcopy(group), alpha)
        if problem:
            return verdict([problem], "")
        try:
            mine = [float(x) for x in mine]
        except TypeError:
            return verdict([f"return one number per branch, not {type(mine).__name__}"], "")
        want = [t.advantage for t in theirs]
        if len(mine) != len(want):
            problems.append(f"{name}: {len(mine)} advantages for {len(want)} branches")
            continue
        if all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(mine, want)):
            continue
        rewards = [t.reward for t in theirs]

        def centred(values: list[float]) -> list[float]:
            return [v - sum(values) / len(values) for v in values]

        def same(values: list[float]) -> bool:
            return all(math.isclose(a, v, abs_tol=1e-9) for a, v in zip(mine, values))

        if alpha and same(centred([float(t.won) - 0.1 * t.invalid for t in group])):
            problems.append(f"{name}: those are the reference reward's advantages: add alpha x subgoals reached")
        elif same(rewards):
            problems.append(f"{name}: those are the rewards themselves: subtract the group's mean reward")
        elif same(centred([float(t.won) + alpha * t.subgoals for t in group])):
            problems.append(f"{name}: each invalid action costs 0.1")
        else:
            problems.append(f"{name} (alpha {alpha}): yours {[round(a, 3) for a in mine]}, "
                            f"expected {[round(b, 3) for b in want]} (rewards {[round(r, 2) for r in rewards]})")
    return verdict(problems, f"your advantages equal alfrl.rl.advantage's with the subgoal reward on "
                             f"{len(shaped_cases())} groups")


DPO_CASES = [(-30.0, -42.0, -31.0, -40.0, 0.1), (-12.5, -9.0, -12.0, -10.0, 0.1), (-5.0, -5.0, -5.0, -5.0, 0.5),
             (-80.0, -20.0, -60.0, -40.0, 0.2), (-3.0, -50.0, -40.0, -10.0, 1.0)]
"""(s(w), s(l), s_ref(w), s_ref(l), beta): summed sampled-token logprobs of a chosen and a rejected trajectory."""


def check_dpo_pair(dpo_pair: Callable) -> bool:
    """``dpo_pair(s_w, s_l, ref_w, ref_l, beta)`` returns (loss, dloss/ds_w, dloss/ds_l) for one pair.
    Compared with ``alfrl.imitation.dpo.dpo_loss`` and its gradient by autograd."""
    import torch

    from alfrl.imitation.dpo import dpo_loss
    problems = []
    for s_w, s_l, ref_w, ref_l, beta in DPO_CASES:
        policy = torch.tensor([s_w, s_l], dtype=torch.float64, requires_grad=True)
        loss = dpo_loss(policy[:1], policy[1:], torch.tensor([ref_w], dtype=torch.float64),
                        torch.tensor([ref_l], dtype=torch.float64), beta)
        loss.backward()
        want = (float(loss.detach()), float(policy.grad[0]), float(policy.grad[1]))
        mine, problem = attempt(dpo_pair, s_w, s_l, ref_w, ref_l, beta)
        if problem:
            return verdict([problem], "")
        try:
            mine = tuple(float(x) for x in mine)
            assert len(mine) == 3
        except (TypeError, AssertionError):
            return verdict([f"return three numbers (loss, dloss/ds_w, dloss/ds_l), not {mine!r}"], "")
        case = f"s_w={s_w}, s_l={s_l}, ref_w={ref_w}, ref_l={ref_l}, beta={beta}"
        if all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for a, b in zip(mine, want)):
            continue
        if not math.isclose(mine[0], want[0], rel_tol=1e-6, abs_tol=1e-9):
            z = beta * ((s_w - ref_w) - (s_l - ref_l))
            if math.isclose(mine[0], math.log1p(math.exp(z)), rel_tol=1e-6):
                problems.append(f"{case}: loss {mine[0]:.4f} is -log sigmoid(-z); DPO's is -log sigmoid(z), "
                                f"z = beta((s_w - ref_w) - (s_l - ref_l)) = {z:.3f}")
            else:
                problems.append(f"{case}: loss {mine[0]:.4f}, expected {want[0]:.4f}")
        elif mine[1] > 0 or mine[2] < 0:
            problems.append(f"{case}: gradients {mine[1]:+.4f}, {mine[2]:+.4f}: descending the loss must raise the "
                            "chosen trajectory (dloss/ds_w < 0) and lower the rejected one (dloss/ds_l > 0)")
        else:
            problems.append(f"{case}: gradients {mine[1]:+.4f}, {mine[2]:+.4f}, expected {want[1]:+.4f}, "
                            f"{want[2]:+.4f}: the weight is beta x sigmoid(-z)")
    return verdict(problems, f"your loss and gradients equal alfrl.imitation.dpo.dpo_loss's (autograd) on {len(DPO_CASES)} pairs")
