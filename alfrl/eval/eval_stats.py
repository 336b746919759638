"""The statistics of an evaluation: success per split and task type, a Wilson interval for a success
rate, the paired sign test between two checkpoints evaluated on the same games, and that test's
power (how many games a gain of a given size needs before it can show), and the permutation tests of
the practice result: a sign-flip test on per-game differences, and practised against control games.

Pure functions of the records :mod:`alfrl.eval.evaluate` writes (one per game). Taught in notebook 06
(the summary by hand, the interval, the paired test and, simulated, its power).
"""

from __future__ import annotations

from collections import defaultdict
from math import comb
from pathlib import Path
from statistics import fmean

from alfrl import TASK_TYPES
from alfrl.base.checkpoint import read_jsonl
from alfrl.rl.trajectory import END_REASONS


def read_records(out: str | Path) -> list[dict]:
    """The records of an evaluation folder (a torn last line is skipped with a warning)."""
    return read_jsonl(Path(out) / "records.jsonl")


def summarize(records: list[dict]) -> dict:
    """Success per split (and "all"), per task type within each split, invalid actions per episode,
    mean steps, end reasons, valid tool-call rate and admissible rate (None from outcomes, which keep
    no turns: :func:`outcomes`)."""
    if not records:
        raise ValueError("no records to summarise")

    def stats(rows: list[dict]) -> dict:
        if any("turns" not in r for r in rows):
            return {**counts(rows), "valid_call_rate": None, "admissible_rate": None}
        turns = sum(r["turns"] for r in rows)
        return {**counts(rows), "valid_call_rate": sum(r["valid_calls"] for r in rows) / turns if turns else 0.0,
                "admissible_rate": sum(r["admissible"] for r in rows) / turns if turns else 0.0}

    def counts(rows: list[dict]) -> dict:
        return {"games": len(rows), "won": sum(r["won"] for r in rows),
                "success": fmean(r["won"] for r in rows),
                "invalid_per_episode": fmean(r["invalid"] for r in rows),
                "mean_steps": fmean(r["steps"] for r in rows),
                "end_reasons": {e: sum(r["end_reason"] == e for r in rows) for e in END_REASONS}}

    by_split = defaultdict(list)
    for r in records:
        by_split[r["split"]].append(r)
    out = {"splits": {s: stats(rows) for s, rows in sorted(by_split.items())}, "all": stats(records)}
    out["tasks"] = {s: {t: stats([r for r in rows if r["task_type"] == t]) for t in TASK_TYPES
                        if any(r["task_type"] == t for r in rows)} for s, rows in sorted(by_split.items())}
    return out


def wilson_interval(won: int, games: int, z: float = 1.96) -> tuple[float, float]:
    """A 95% confidence interval for a success rate of ``won`` out of ``games`` (Wilson score):
    with 20 games, 5 solved is 11%-47%, so small differences between checkpoints are noise."""
    if games == 0:
        return 0.0, 1.0
    p = won / games
    centre = (p + z * z / (2 * games)) / (1 + z * z / games)
    half = z * ((p * (1 - p) / games + z * z / (4 * games * games)) ** 0.5) / (1 + z * z / games)
    return max(0.0, centre - half), min(1.0, centre + half)


OUTCOME_FIELDS = ("split", "game_id", "task_type", "won", "steps", "invalid", "end_reason")
"""What a game's evaluation record keeps without its trajectory: enough for every statistic here."""


def outcomes(records: list[dict], checkpoint: str) -> list[dict]:
    """Each game's outcome without its trajectory, labelled with the checkpoint: a few dozen bytes a
    game, so a comparison's outcomes can be committed (``scripts/cpu_learning_result.py`` writes them)
    and a later checkpoint paired with them without evaluating the old one again."""
    return [{"checkpoint": checkpoint, **{name: r[name] for name in OUTCOME_FIELDS}} for r in records]


def _records(source: str | Path | list[dict]) -> list[dict]:
    """Records from an evaluation folder, a JSONL file of records or outcomes, or a list of them."""
    if isinstance(source, list):
        return source
    return read_jsonl(source) if Path(source).is_file() else read_records(source)


def paired_outcomes(before: str | Path | list[dict], after: str | Path | list[dict]) -> dict:
    """Before vs after on the games both played: how many games were ``gained`` (lost, then won) and
    ``lost`` (won, then lost), and the exact two-sided sign-test (McNemar) p-value of that split.
    Pairing removes the games' difficulty from the comparison, so it is sharper than two separate
    intervals: 5 gained and 0 lost gives p = 0.0625, 6 and 0 gives p = 0.03125. Each side is an
    evaluation folder, a records or outcomes file, or a list of records (:func:`outcomes`)."""
    won_before = {(r["split"], r["game_id"]): r["won"] for r in _records(before)}
    won_after = {(r["split"], r["game_id"]): r["won"] for r in _records(after)}
    common = won_before.keys() & won_after.keys()
    if not common:
        raise ValueError(f"{before} and {after} share no games; evaluate both on the same split and data")
    gained = sum(won_after[g] and not won_before[g] for g in common)
    lost = sum(won_before[g] and not won_after[g] for g in common)
    n = gained + lost
    p_value = min(1.0, 2 * sum(comb(n, i) for i in range(min(gained, lost) + 1)) / 2 ** n) if n else 1.0
    return {"games": len(common), "gained": gained, "lost": lost, "p_value": p_value}


def _binomial_pmf(n: int, p: float) -> list[float]:
    """P(X = k) for k = 0..n, X ~ Binomial(n, p), by the ratio of successive terms (no huge integers)."""
    if p <= 0.0 or p >= 1.0:
        return [float(k == (n if p >= 1.0 else 0)) for k in range(n + 1)]
    pmf = [(1 - p) ** n]
    for k in range(n):
        pmf.append(pmf[-1] * (n - k) / (k + 1) * p / (1 - p))
    if pmf[0] == 0.0:  # (1 - p) ** n underflowed: build the terms in log space instead
        from math import exp, lgamma, log
        pmf = [exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p) + (n - k) * log(1 - p))
               for k in range(n + 1)]
    return pmf


def sign_test_power(games: int, gain: float, changed: float, alpha: float = 0.05) -> float:
    """The chance that :func:`paired_outcomes` finds a real gain significant (two-sided p < ``alpha``,
    more games gained than lost) when each of ``games`` games changes outcome with probability
    ``changed`` and the success rate rises by ``gain``: a game is gained with probability
    (changed + gain) / 2 and lost with (changed - gain) / 2. Exact: summed over the number of games that
    change, with the sign test's own critical count for each."""
    if not 0.0 <= gain <= changed <= 1.0:
        raise ValueError(f"need 0 <= gain <= changed <= 1 (a gain of {gain} needs at least that share of games "
                         f"to change outcome); got gain={gain}, changed={changed}")
    up = (changed + gain) / (2 * changed) if changed else 0.5
    power = 0.0
    for n, p_n in enumerate(_binomial_pmf(games, changed)):
        if p_n < 1e-15 or n == 0:
            continue
        # smallest gained count k (above n/2) whose two-sided p-value 2 P(X >= k | fair coin) is under alpha
        tail, k = 0.0, n + 1
        null = _binomial_pmf(n, 0.5)
        while k > 0 and 2 * (tail + null[k - 1]) < alpha:
            k -= 1
            tail += null[k]
        if k <= n and 2 * k > n:
            power += p_n * sum(_binomial_pmf(n, up)[k:])
    return power


def games_needed(gain: float, changed: float, power: float = 0.8, alpha: float = 0.05,
                 most: int = 20_000) -> int | None:
    """How many games the held-out set needs for :func:`sign_test_power` to reach ``power``: for a gain
    of ``gain`` (e.g. 0.04, the reference run's) to show at p < ``alpha`` when a share ``changed`` of the
    games changes outcome between the checkpoints (0.18 in the cpu run). Found by doubling, then
    bisection; the exact test's power wobbles a little from one count to the next, so a few counts just
    below the answer may reach it too. None when ``most`` games are not enough."""
    low, high = 1, 1
    while sign_test_power(high, gain, changed, alpha) < power:
        if high >= most:
            return None
        low, high = high + 1, min(most, high * 2)
    while low < high:
        mid = (low + high) // 2
        if sign_test_power(mid, gain, changed, alpha) >= power:
            high = mid
        else:
            low = mid + 1
    return high


def _sums_distribution(values: list[float], digits: int = 9) -> dict[float, int]:
    """How many of the 2^n sign patterns give each sum of +-values, built one value at a time (2^n patterns
    in at most (number of distinct sums) x n steps: exact and fast when the values are multiples of 1/K)."""
    counts: dict[float, int] = {0.0: 1}
    for v in values:
        grown: dict[float, int] = {}
        for total, c in counts.items():
            for s in (round(total + v, digits), round(total - v, digits)):
                grown[s] = grown.get(s, 0) + c
        counts = grown
    return counts


def sign_flip_test(differences: list[float], alternative: str = "greater", digits: int = 9) -> dict:
    """The paired permutation (sign-flip) test on per-game differences after minus before: under "training
    changed nothing" each game's difference is as likely to have either sign, so the observed sum is
    compared with the sums of all 2^n sign patterns. Exact, by :func:`_sums_distribution`. ``alternative``:
    "greater" (a gain), "less", or "two-sided". It needs no model of the games: a difference may be a
    fraction of 16 samples, a single greedy win, or anything else measured per game, and the games may
    differ as much as they like (each game is its own control). Returns n, the mean difference and p."""
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided' (got {alternative!r})")
    if not differences:
        raise ValueError("no differences to test")
    observed = round(sum(differences), digits)
    counts = _sums_distribution([abs(d) for d in differences], digits)
    total = 2 ** len(differences)
    tol = 10 ** -digits
    if alternative == "greater":
        hits = sum(c for s, c in counts.items() if s >= observed - tol)
    elif alternative == "less":
        hits = sum(c for s, c in counts.items() if s <= observed + tol)
    else:
        hits = sum(c for s, c in counts.items() if abs(s) >= abs(observed) - tol)
    return {"n": len(differences), "mean": sum(differences) / len(differences), "p_value": hits / total}


def two_sample_permutation_test(first: list[float], second: list[float], alternative: str = "greater") -> dict:
    """Whether ``first``'s mean exceeds ``second``'s by more than chance: the difference of means compared
    with that of every split of the pooled values into groups of the same sizes (exact, all C(n, m)
    splits). For practice: each game's gain, practised games against control games; under "practice does
    nothing beyond what every game drifts" the labels are exchangeable."""
    from itertools import combinations
    if not first or not second:
        raise ValueError("both groups need at least one value")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided' (got {alternative!r})")
    pooled, m, total = first + second, len(first), sum(first) + sum(second)
    n = len(pooled)

    def gap(sum_first: float) -> float:
        return sum_first / m - (total - sum_first) / (n - m)

    observed = gap(sum(first))
    gaps = [gap(sum(pooled[i] for i in chosen)) for chosen in combinations(range(n), m)]
    tol = 1e-9
    if alternative == "greater":
        hits = sum(g >= observed - tol for g in gaps)
    elif alternative == "less":
        hits = sum(g <= observed + tol for g in gaps)
    else:
        hits = sum(abs(g) >= abs(observed) - tol for g in gaps)
    return {"difference": observed, "splits": len(gaps), "p_value": hits / len(gaps)}
