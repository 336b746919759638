"""Step-level credit (GiGPO): which turns of a group's episodes helped, beside which episodes won.

GRPO gives every sampled token of an episode the same advantage, the episode's reward minus its group's
mean: a win credits its wasted turns as much as the turn that took the right object. GiGPO (Feng et
al. 2025, "Group-in-Group Policy Optimization") adds a second, finer baseline that the group already
holds: the K copies of a game start in the same state, so their turns keep meeting the same states
(the start, a receptacle everyone opened after the same two actions). Turns whose state matches form an
**anchor group**, and within it the turns can be compared like episodes within a group:

- a turn's **step reward** is what that turn earned: +1 on the winning turn, -``invalid_penalty`` on an
  invalid reply (bad format or an action not in the list), 0 otherwise; the episode's reward is their
  sum, so nothing new is rewarded, only located;
- its **step return** is the discounted sum of the step rewards from that turn on (``gamma`` 0.95): the
  turn that leads to a win in two steps earns more than one that leads to it in six;
- its **step advantage** is that return minus the mean return of its anchor group (0 for a turn whose
  state no other turn shared: no baseline, no step credit);
- every sampled token of the turn gets episode advantage + ``omega`` x step advantage.

A state's key is the observation the turn answered plus the last two actions before it: the same
observation text after different histories ("You arrive at drawer 1. The drawer 1 is closed.") is not
the same state, since the history is in the prompt. Turn 0's state is the reset, shared by the whole
group. Taught in notebook 04 (after the episode advantage); chosen with ``--credit gigpo``.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from alfrl.rl.trajectory import Trajectory

START = "<reset>"
"""The observation key of turn 0: every copy of a game starts in the same state."""


def step_rewards(trajectory: Trajectory, invalid_penalty: float = 0.1) -> list[float]:
    """One reward per turn: -``invalid_penalty`` on an invalid reply, +1 on the turn that won; they add
    up to the episode reward (won - ``invalid_penalty`` x invalid)."""
    rewards = [0.0 if turn.valid_format and turn.admissible else -invalid_penalty for turn in trajectory.turns]
    if trajectory.won and rewards:
        rewards[-1] += 1.0
    return rewards


def discounted_returns(rewards: list[float], gamma: float = 0.95) -> list[float]:
    """G_t = r_t + gamma x G_{t+1}, from the last turn back."""
    returns, running = [0.0] * len(rewards), 0.0
    for i in range(len(rewards) - 1, -1, -1):
        running = rewards[i] + gamma * running
        returns[i] = running
    return returns


def state_keys(trajectory: Trajectory, history: int = 2) -> list[tuple]:
    """The anchor key of each turn's state: the observation it answered and the last ``history`` actions
    (None for a reply that broke the format)."""
    keys, actions, observation = [], [], START
    for turn in trajectory.turns:
        keys.append((observation, tuple(actions[-history:]) if history else ()))
        actions.append(turn.action)
        observation = turn.observation
    return keys


def step_advantages(group: list[Trajectory], invalid_penalty: float = 0.1, gamma: float = 0.95
                    ) -> list[list[float]]:
    """Each turn's step return minus its anchor group's mean return, for every trajectory of ``group``
    (one list per trajectory, one value per turn); 0 for a turn whose state no other turn shared."""
    returns = [discounted_returns(step_rewards(t, invalid_penalty), gamma) for t in group]
    keys = [state_keys(t) for t in group]
    anchors: dict[tuple, list[float]] = defaultdict(list)
    for key_row, return_row in zip(keys, returns):
        for key, value in zip(key_row, return_row):
            anchors[key].append(value)
    return [[value - fmean(anchors[key]) if len(anchors[key]) > 1 else 0.0
             for key, value in zip(key_row, return_row)]
            for key_row, return_row in zip(keys, returns)]


def assign_turn_advantages(group: list[Trajectory], omega: float = 1.0, invalid_penalty: float = 0.1,
                           gamma: float = 0.95) -> None:
    """Set ``turn_advantages`` on every trajectory of a group whose episode ``advantage`` is set:
    episode advantage + ``omega`` x step advantage, one value per turn."""
    for trajectory, steps in zip(group, step_advantages(group, invalid_penalty, gamma)):
        if trajectory.advantage is None:
            raise ValueError("set the episode advantages first (alfrl.rl.advantage.assign_advantages)")
        trajectory.turn_advantages = [trajectory.advantage + omega * s for s in steps]


def turn_of_token(trajectory: Trajectory) -> list[int]:
    """For every token, the turn whose reply sampled it (-1 for a token the model did not sample): the
    mask's sampled tokens in order, ``turn.sampled`` of them per turn."""
    sizes = [turn.sampled for turn in trajectory.turns]
    if sum(sizes) != sum(trajectory.mask):
        raise ValueError(f"{trajectory.game_id} branch {trajectory.branch}: its turns sampled {sum(sizes)} tokens "
                         f"but its mask marks {sum(trajectory.mask)}; the record is damaged")
    owners, turn, left = [], 0, sizes[0] if sizes else 0
    for m in trajectory.mask:
        if not m:
            owners.append(-1)
            continue
        while left == 0:
            turn += 1
            left = sizes[turn]
        owners.append(turn)
        left -= 1
    return owners


def token_advantage_values(trajectory: Trajectory) -> list[float]:
    """The advantage of every token: its turn's (``turn_advantages``) where step credit was assigned, else
    the episode's; 0 on tokens the model did not sample."""
    if trajectory.turn_advantages is None:
        episode = float(trajectory.advantage or 0.0)
        return [episode * m for m in trajectory.mask]
    per_turn = trajectory.turn_advantages
    return [per_turn[owner] if owner >= 0 else 0.0 for owner in turn_of_token(trajectory)]


def anchor_stats(groups: list[list[Trajectory]], invalid_penalty: float = 0.1, gamma: float = 0.95
                 ) -> dict[str, float]:
    """How much step credit a batch had to give: ``anchored_turn_rate``, the share of turns whose state
    another turn of their group shared; ``step_credit_rate``, the share whose step advantage is not 0."""
    turns = anchored = credited = 0
    for group in groups:
        keys = [state_keys(t) for t in group]
        counts: dict[tuple, int] = defaultdict(int)
        for row in keys:
            for key in row:
                counts[key] += 1
        steps = step_advantages(group, invalid_penalty, gamma)
        for row, step_row in zip(keys, steps):
            turns += len(row)
            anchored += sum(counts[key] > 1 for key in row)
            credited += sum(abs(s) > 1e-12 for s in step_row)
    return {"anchored_turn_rate": anchored / max(turns, 1), "step_credit_rate": credited / max(turns, 1)}
