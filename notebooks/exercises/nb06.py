"""Checks for notebook 06's exercises: a Wilson interval, and the paired sign test.

The right answers come from ``alfrl.eval.evaluate.wilson_interval`` and ``alfrl.eval.evaluate.paired_outcomes``
(the latter on evaluation folders written for the check), so the exercises cannot drift from the package.
"""

from __future__ import annotations

import json
import random
import tempfile
from math import sqrt
from pathlib import Path

from alfrl.eval.evaluate import paired_outcomes, wilson_interval

from . import attempt, verdict

WILSON_CASES = [(5, 20), (0, 20), (20, 20), (1, 8), (3, 27), (7, 10), (50, 100), (0, 1), (2, 3), (0, 0)]


def _wald(won: int, games: int, z: float = 1.96) -> tuple[float, float]:
    p = won / games
    half = z * sqrt(p * (1 - p) / games)
    return p - half, p + half


def check_wilson(wilson) -> bool:
    """``wilson(won, games, z=1.96)`` -> (low, high), against alfrl.eval.evaluate.wilson_interval."""
    problems = []
    for won, games in WILSON_CASES:
        expected = wilson_interval(won, games)
        got, problem = attempt(wilson, won, games)
        if problem:
            return verdict([problem], "")
        try:
            low, high = (float(x) for x in got)
        except Exception:
            problems.append(f"return two numbers (low, high); for {won}/{games} it returned {got!r}")
            break
        if max(abs(low - expected[0]), abs(high - expected[1])) < 1e-6:
            continue
        where = f"{won}/{games}: yours is {low:.4f}-{high:.4f}, Wilson's is {expected[0]:.4f}-{expected[1]:.4f}"
        if games == 0:
            problems.append(f"{where}: with no games every success rate is possible, so the interval is 0 to 1")
        elif games and all(abs(a - b) < 1e-6 for a, b in zip((low, high), _wald(won, games))):
            problems.append(f"{where}: that is the normal (Wald) interval p ± z·sqrt(p(1-p)/n); Wilson's centre "
                            "is (p + z²/2n) / (1 + z²/n), and its half-width has the extra z²/4n² term")
        elif low < -1e-9 or high > 1 + 1e-9:
            problems.append(f"{where}: a success rate lies in 0-1; clip the interval there")
        else:
            problems.append(where)
    return verdict(problems, f"your interval equals alfrl.eval.evaluate.wilson_interval on {len(WILSON_CASES)} cases")


def _pairs(seed: int) -> tuple[dict, dict]:
    """Two checkpoints' outcomes (game id -> won), on overlapping but not equal sets of games."""
    rng = random.Random(seed)
    games = [f"game{i:02d}" for i in range(rng.randint(6, 30))]
    before = {g: rng.random() < 0.3 for g in games[:-2]}
    after = {g: (not won if rng.random() < 0.3 else won) for g, won in before.items() if g != games[0]}
    after.update({games[-1]: True, games[-2]: rng.random() < 0.5})  # games only one of them played
    return before, after


CASES = [_pairs(seed) for seed in range(8)] + [
    ({f"g{i}": i < 3 for i in range(10)}, {f"g{i}": 1 <= i < 8 for i in range(10)}),  # 5 gained, 1 lost
    ({f"g{i}": False for i in range(20)}, {f"g{i}": i < 6 for i in range(20)}),  # 6 gained, 0 lost
    ({f"g{i}": i % 2 == 0 for i in range(8)}, {f"g{i}": i % 2 == 1 for i in range(8)}),  # 4 and 4
    ({"a": True, "b": False}, {"a": True, "b": False}),  # nothing changed
]


def _paired_by_alfrl(before: dict, after: dict) -> dict:
    """alfrl.eval.evaluate.paired_outcomes on two evaluation folders holding these outcomes."""
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for name, outcomes in (("before", before), ("after", after)):
            folder = Path(tmp) / name
            folder.mkdir()
            (folder / "records.jsonl").write_text("".join(
                json.dumps({"split": "valid_unseen", "game_id": g, "won": won}) + "\n" for g, won in outcomes.items()))
            folders.append(folder)
        return paired_outcomes(*folders)


def check_sign_test(sign_test) -> bool:
    """``sign_test(before, after)`` -> {"games", "gained", "lost", "p_value"}, against
    alfrl.eval.evaluate.paired_outcomes on the same outcomes."""
    problems = []
    for before, after in CASES:
        expected = _paired_by_alfrl(before, after)
        got, problem = attempt(sign_test, dict(before), dict(after))
        if problem:
            return verdict([problem], "")
        if not isinstance(got, dict) or not set(expected) <= set(got):
            problems.append(f"return a dict with the keys {sorted(expected)}; got {got!r}")
            break
        counts = {k: got[k] for k in ("games", "gained", "lost")}
        want = {k: expected[k] for k in ("games", "gained", "lost")}
        if counts != want:
            if (got["gained"], got["lost"]) == (expected["lost"], expected["gained"]):
                problems.append(f"gained and lost are swapped ({want}): gained = lost before and won after")
            elif got["games"] != expected["games"]:
                problems.append(f"games: {got['games']}, but the two played {expected['games']} games in common; "
                                "count (and compare) only the games both played")
            else:
                problems.append(f"yours {counts}, expected {want}")
            continue
        p = float(got["p_value"])
        if abs(p - expected["p_value"]) > 1e-9:
            if abs(2 * p - expected["p_value"]) < 1e-9:
                problems.append(f"{want}: p = {p:.4f}, expected {expected['p_value']:.4f}: the test is two-sided "
                                "(a split this uneven either way), so double the one-sided tail")
            elif p > 1:
                problems.append(f"{want}: p = {p:.4f} is above 1: cap it at 1 (an even split doubles a tail past 1/2)")
            else:
                problems.append(f"{want}: p = {p:.4f}, expected {expected['p_value']:.4f} (the exact binomial "
                                "sign test on the gained + lost games, each a coin flip under no difference)")
    return verdict(problems, f"your test equals alfrl.eval.evaluate.paired_outcomes on {len(CASES)} pairs of checkpoints")
