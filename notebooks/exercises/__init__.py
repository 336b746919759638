"""Checks for the notebooks' exercises: ``exercises.nbNN`` holds notebook NN's.

Each check takes the learner's code (a function, or a value), runs it on cases whose answers come
from ``alfrl`` (so an exercise can never drift from the package), prints what is wrong or that it
is right, and returns True when it is right. It never raises: a notebook with an unfinished
exercise still runs top to bottom. The worked solutions are in ``notebooks/solutions/nbNN.py``,
and ``tests/test_exercises_nbNN.py`` checks them with these same checks.
"""

from __future__ import annotations

from collections.abc import Callable


def verdict(problems: list[str], done: str) -> bool:
    """Print the problems found (at most three), or ``done``; True when there are none."""
    if problems:
        print("✗ not yet:")
        for p in problems[:3]:
            print("  -", p)
        if len(problems) > 3:
            print(f"  ... and {len(problems) - 3} more")
        return False
    print("✓", done)
    return True


def attempt(fn: Callable, *args, **kwargs):
    """Call the learner's ``fn``; (result, None), or (None, a problem) if it raised."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        return None, "not written yet (it raises NotImplementedError): replace the `raise` with your code"
    except Exception as e:  # the learner's bug, reported, not raised
        return None, f"it raised {type(e).__name__}: {e}"
