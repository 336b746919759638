"""Worked solutions of notebook 06's exercises (try them first)."""

from __future__ import annotations

from math import comb, sqrt


def wilson(won, games, z=1.96):
    """The Wilson score interval (low, high) of a success rate of ``won`` out of ``games``."""
    if games == 0:
        return 0.0, 1.0  # no games: every rate is possible
    p = won / games
    centre = (p + z * z / (2 * games)) / (1 + z * z / games)
    half = z * sqrt(p * (1 - p) / games + z * z / (4 * games * games)) / (1 + z * z / games)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(before, after):
    """before, after: game id -> won. Games both played, gained, lost, and the exact two-sided sign test."""
    common = before.keys() & after.keys()
    gained = sum(after[g] and not before[g] for g in common)
    lost = sum(before[g] and not after[g] for g in common)
    n = gained + lost  # only the games that changed say anything about the difference
    tail = sum(comb(n, i) for i in range(min(gained, lost) + 1)) / 2 ** n  # P(a split this uneven), one side
    return {"games": len(common), "gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}
