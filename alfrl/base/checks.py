"""Check a settings dataclass before anything runs: each field's type, and the range it must lie in.

One checker for every command's config (training, evaluation), so a bad flag gets the same clear
error everywhere: ``--k must be at least 1 (got 0)``.

Used by every command's config; notebook 05 shows a bad setting's error.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Bounds a numeric setting must respect (None: no bound on that side)."""

    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    why: str = ""
    """Appended to the error: what to do instead."""

    def problem(self, value) -> str | None:
        """What is wrong with ``value``, or None."""
        for bound, ok, words in ((self.at_least, lambda b: value >= b, "at least"),
                                 (self.above, lambda b: value > b, "above"),
                                 (self.at_most, lambda b: value <= b, "at most"),
                                 (self.below, lambda b: value < b, "below")):
            if bound is not None and not ok(bound):
                return f"must be {words} {bound:g} (got {value!r}){self.why}"
        return None


def fits(value, tp) -> bool:
    """Whether ``value`` has the field type ``tp`` (as JSON gives it back); unknown types pass."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(fits(value, t) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp in (str, bool):
        return isinstance(value, tp)
    return True


def flag(name: str) -> str:
    """The command-line flag of a field: ``max_steps`` -> ``--max-steps``."""
    return "--" + name.replace("_", "-")


def check_fields(config, ranges: dict[str, Range], check_types: bool = True) -> None:
    """Raise a ValueError naming the flag of the first field with a wrong type or out of its range
    (a field set to None is not range-checked)."""
    if check_types:
        hints = typing.get_type_hints(type(config))
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if not fits(value, hints[f.name]):
                raise ValueError(f"{f.name} must be of type {hints[f.name]} (got {value!r})")
    for name, bounds in ranges.items():
        value = getattr(config, name)
        if value is not None and (problem := bounds.problem(value)):
            raise ValueError(f"{flag(name)} {problem}")
