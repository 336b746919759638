"""Dataclass configs as command-line flags: one field, one ``--flag``, its docstring as help.

Every command of ``python -m alfrl`` (README quick start; notebook 05's shell equivalents).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import typing
from functools import lru_cache


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass (``x: int = 1`` then ``\"\"\"...\"\"\"``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _parser_for(tp) -> tuple[typing.Callable, str | None]:
    """(converter, nargs) for a field type such as ``int``, ``int | None``, ``tuple[str, ...]``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return (args[0] if args else str), "+"
    if args and origin is not None and origin is not tuple:  # X | None
        return _parser_for(args[0])
    return tp, None


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, prefix: str = "") -> None:
    """Add a ``--flag`` per field of dataclass ``cls`` (nested dataclasses get ``--sub-field``)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            add_dataclass_args(parser, tp, prefix=prefix + f.name + ".")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        flag = "--" + (prefix + f.name).replace("_", "-").replace(".", "-")
        help_ = f"{docs.get(f.name, '')} (default: {default})"
        if tp is bool:
            parser.add_argument(flag, dest=prefix + f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=help_)
            continue
        convert, nargs = _parser_for(tp)
        parser.add_argument(flag, dest=prefix + f.name, type=convert, nargs=nargs, default=None, help=help_)


def build_dataclass(cls: type, ns: argparse.Namespace, prefix: str = ""):
    """An instance of ``cls`` from parsed flags; unset flags keep the dataclass defaults."""
    return cls(**given_flags(cls, ns, prefix))


def given_flags(cls: type, ns: argparse.Namespace, prefix: str = "") -> dict:
    """The fields of ``cls`` whose flags were given on the command line (nested dataclasses built)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = build_dataclass(tp, ns, prefix + f.name + ".")
            continue
        value = getattr(ns, prefix + f.name)
        if value is not None:
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return kwargs


def parse_overrides(items: list[str], config) -> dict:
    """``["lr=0.0003", "minibatches=2"]`` as ``{"lr": 0.0003, "minibatches": 2}``, each value converted to
    the type of that field's value in ``config`` (a dataclass instance); a clear error for an unknown key."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not hasattr(config, key):
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with a field of {type(config).__name__}")
        kind = type(getattr(config, key))
        if kind is bool:
            out[key] = value.lower() in ("1", "true", "yes")
        else:
            out[key] = kind(value) if kind is not type(None) else value
    return out
