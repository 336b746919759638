"""DPO from groups: preference pairs out of a group's trajectories, and the DPO update on the LoRA adapter.

A group is K trajectories of one game, so it already holds what preference learning needs: a
better and a worse answer to the same prompt. :func:`preference_pairs` pairs the best branch with
the worst, the second best with the second worst, and so on, while their rewards differ by at least
``margin``. For a pair (chosen w, rejected l) DPO's loss is

    z    = beta * ((s(w) - s_ref(w)) - (s(l) - s_ref(l)))
    loss = -log sigmoid(z)

where s is a trajectory's summed logprob over the tokens the model sampled (mask 1: the prompt and
tool results are not the model's choices) and s_ref the same under the frozen starting adapter.

**Why it is a weighted policy gradient.** dloss/ds(w) = -beta * sigmoid(-z) and dloss/ds(l) =
+beta * sigmoid(-z): the gradient pushes the chosen trajectory's sampled tokens up and the
rejected one's down, each with the weight beta * sigmoid(-z), largest for the pairs the policy
still ranks wrong. So :func:`dpo_update` measures s and s_ref without gradient (the same
logprob code PPO recomputes old logprobs with, :func:`alfrl.rl.ppo.recompute_old_logprobs`), turns the
weights into per-trajectory advantages, and takes one step of :func:`alfrl.rl.ppo.ppo_step` at the
sampling weights, where the PPO ratio is exactly 1: its gradient is then the DPO gradient, exactly,
with micro-batches, the shared prefix and bf16 as in PPO (a test checks it against autograd of the
loss above).

Taught in notebook 07 (pairs from a group, the DPO loss by hand).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from alfrl.base.checkpoint import signals_held
from alfrl.rl.ppo import RATIO_KEYS, PPOConfig, ppo_step, recompute_old_logprobs
from alfrl.rl.trajectory import Trajectory


@dataclass(frozen=True)
class Pair:
    """A better and a worse trajectory of the same game."""

    chosen: Trajectory
    rejected: Trajectory


def preference_pairs(group: list[Trajectory], rewards: list[float], margin: float = 0.5) -> list[Pair]:
    """Disjoint pairs from one group: best with worst, second best with second worst, ... while the
    chosen one's reward exceeds the rejected one's by at least ``margin`` (ties keep branch order)."""
    if len({t.game_id for t in group}) > 1:
        raise ValueError("a preference pair compares trajectories of one game; this group mixes games")
    order = sorted(range(len(group)), key=lambda i: -rewards[i])
    pairs = []
    for a, b in zip(order[:len(order) // 2], reversed(order[len(order) - len(order) // 2:])):
        if rewards[a] - rewards[b] < margin:
            break
        pairs.append(Pair(group[a], group[b]))
    return pairs


def sampled_logprob(trajectory: Trajectory) -> float:
    """s: the trajectory's logprob summed over its sampled tokens (its ``logprobs`` are 0 elsewhere)."""
    return sum(lp for lp, m in zip(trajectory.logprobs, trajectory.mask) if m)


def dpo_loss(policy_w: torch.Tensor, policy_l: torch.Tensor, ref_w: torch.Tensor, ref_l: torch.Tensor,
             beta: float) -> torch.Tensor:
    """Mean over pairs of -log sigmoid(beta * ((s(w) - s_ref(w)) - (s(l) - s_ref(l))))."""
    return -torch.nn.functional.logsigmoid(beta * ((policy_w - ref_w) - (policy_l - ref_l))).mean()


def dpo_weights(pairs: list[Pair], policy: dict[int, float], reference: dict[int, float], beta: float
                ) -> tuple[float, dict[int, float], float]:
    """(the DPO loss, dloss/ds for each trajectory by ``id``, the share of pairs ranked right: z > 0), from
    the summed logprobs ``policy`` and ``reference`` (keyed by ``id(trajectory)``)."""
    loss, grads, right = 0.0, {}, 0
    for p in pairs:
        w, l = id(p.chosen), id(p.rejected)
        z = beta * ((policy[w] - reference[w]) - (policy[l] - reference[l]))
        loss += -min(z, 0.0) + math.log1p(math.exp(-abs(z)))  # -log sigmoid(z), stable
        weight = beta * _sigmoid(-z) / len(pairs)  # over the pair count
        grads[w] = grads.get(w, 0.0) - weight
        grads[l] = grads.get(l, 0.0) + weight
        right += z > 0
    return loss / len(pairs), grads, right / len(pairs)


def _sigmoid(x: float) -> float:
    """1 / (1 + exp(-x)) without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


class FrozenAdapter:
    """The LoRA weights a run started from, kept to compute reference logprobs: :meth:`active` swaps
    them into the model for a ``with`` block and puts the trained ones back after."""

    def __init__(self, model, weights: dict[str, torch.Tensor] | None = None):
        self.model = model
        params = self.trainable()
        self.weights = weights if weights is not None else {n: p.detach().clone() for n, p in params.items()}
        if {n: tuple(w.shape) for n, w in self.weights.items()} != {n: tuple(p.shape) for n, p in params.items()}:
            raise ValueError("the saved reference adapter's weights do not match this model's LoRA adapter: "
                             "was the run resumed with another --model or --lora-rank?")

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    @contextmanager
    def active(self):
        """The reference weights in the model inside the ``with`` block, the trained ones back after."""
        params = self.trainable()
        saved = {n: p.detach().clone() for n, p in params.items()}
        try:  # an interrupt never leaves the model half swapped: it lands after a copy, and the trained come back
            with signals_held(), torch.no_grad():
                for name, p in params.items():
                    p.copy_(self.weights[name])
            yield
        finally:
            with signals_held(), torch.no_grad():
                for name, p in params.items():
                    p.copy_(saved[name])


def dpo_update(policy, optimizer, pairs: list[Pair], reference: FrozenAdapter, config: PPOConfig,
               beta: float = 0.1) -> dict[str, float]:
    """One DPO step on ``pairs`` (one per update: ``epochs``, ``minibatches`` and ``kl_coef`` are PPO's, unused
    here; the reference already holds the policy near its start); returns its metrics (``dpo_loss`` before the
    step, ``dpo_accuracy``: pairs the policy already ranked right, the PPO step's metrics, and the seconds each
    part took)."""
    if not pairs:
        raise ValueError("no preference pairs to train on: every group's rewards were within the margin")
    trajectories = list({id(t): t for p in pairs for t in (p.chosen, p.rejected)}.values())
    tick = time.perf_counter()
    now, _ = recompute_old_logprobs(policy, trajectories, config)
    with reference.active():
        ref, _ = recompute_old_logprobs(policy, trajectories, config)
    recompute_seconds = time.perf_counter() - tick
    policy_s = {id(t): sampled_logprob(n) for t, n in zip(trajectories, now)}
    ref_s = {id(t): sampled_logprob(r) for t, r in zip(trajectories, ref)}
    loss, grads, accuracy = dpo_weights(pairs, policy_s, ref_s, beta)
    # ppo_step at the sampling weights (ratio 1) has gradient sum_t -advantage_t / tokens * ds(t):
    # advantage_t = -tokens * dloss/ds(t) makes it dloss/ds(t) * ds(t), DPO's gradient.
    tokens = sum(sum(t.mask) for t in trajectories)
    weighted = [replace(t, advantage=-tokens * grads[id(t)]) for t in trajectories]
    step = ppo_step(policy, optimizer, weighted, replace(config, kl_coef=0.0), own_old=True)
    step.update({key: None for key in RATIO_KEYS})  # one step at ratio 1: nothing moved yet to measure
    return {**step, "dpo_loss": loss, "dpo_accuracy": accuracy, "pairs": len(pairs),
            "recompute_seconds": recompute_seconds}
