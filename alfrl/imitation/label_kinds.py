"""Action kinds ("go to", "take", "move", ...) and DAgger labels weighted so each kind counts as when the expert plays.

The expert's labels on the policy's own states are not the walkthroughs' mix of actions. In round 1 of the
committed DAgger run, 71% of the labels the policy had not followed said ``go to`` and 2% ``take``, against 48%
and 11% of the walkthroughs' actions (``data/results/dagger/label_kinds.md``, made by
``scripts/dagger_label_kinds.py``): the few states where taking is right, where the policy would learn which
object is the task's, are drowned by searching. ``python -m alfrl dagger --weight-labels`` weights each such
label by its kind's share of the walkthroughs over its share of those labels (:func:`kind_weights`), so in the
loss every kind weighs what it weighs when the expert plays.

Taught in notebook 02 (why imitating an expert is not enough, in its imitation section).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace


def action_kind(action: str) -> str:
    """The verb of an ALFWorld command: "go to", "take", "move", "open", "heat", ..."""
    return "go to" if action.startswith("go to") else action.split()[0]


def kind_counts(actions: Iterable[str | None]) -> Counter:
    """How many of ``actions`` are of each kind (None, an unlabelled turn, is not counted)."""
    return Counter(action_kind(a) for a in actions if a)


def walkthrough_kinds(games: Iterable, max_expert_steps: int | None = None) -> Counter:
    """The kinds of every action of the games' walkthroughs (those of at most ``max_expert_steps`` steps)."""
    return kind_counts(a for g in games if max_expert_steps is None or len(g.walkthrough) <= max_expert_steps
                       for a in g.walkthrough)


def kind_weights(reference: Counter, labels: Counter) -> dict[str, float]:
    """Per kind of ``labels``: its share of ``reference`` over its share of ``labels`` (0 for a kind the
    reference never does). Weighted so, the labels' kinds have the reference's shares."""
    ref_total, label_total = sum(reference.values()), sum(labels.values())
    if not ref_total:
        raise ValueError("no reference actions to weight the labels by (no walkthroughs in the games?)")
    return {kind: (reference[kind] / ref_total) / (n / label_total) for kind, n in labels.items() if n}


def weigh_branches(labelled: list[tuple], reference: Counter) -> dict[str, float]:
    """Weight every branch of the DAgger examples in ``labelled`` (pairs of an example and its
    episode's labels, one per turn) from its label's kind, by :func:`kind_weights` over all their branches.
    Returns the weights."""
    weights = kind_weights(reference, kind_counts(labels[b.turn] for example, labels in labelled
                                                  for b in example.branches))
    for example, labels in labelled:
        example.branches = [replace(b, weight=weights[action_kind(labels[b.turn])]) for b in example.branches]
    return weights
