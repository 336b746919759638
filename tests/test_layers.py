"""The package's floors: each subpackage of ``alfrl`` imports only from the floors below it, and no imports run in
a circle, in the package or between the files of ``benchmarks/`` and ``scripts/``. Reads files only.

Every import counts, those inside functions too: a lazy import that runs upward is still an upward dependency."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from conftest import REPO_ROOT

FLOORS = {"base": 0, "world": 1, "agent": 2, "rl": 3, "eval": 4, "imitation": 4, "training": 5}
"""From the ground up. ``eval`` and ``imitation`` share a floor: neither may import the other. The package root
(``alfrl/__init__.py``) is below them all; ``alfrl/__main__.py`` is above them all."""
TOP = 6


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (``alfrl.rl.rollout``; a subpackage by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(path: Path, known: set[str], siblings: set[str] = frozenset()) -> set[str]:
    """The known modules (or sibling files, by stem) that the file at ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]  # modules imported by name,
            names = [n for n in names if n in known] or [node.module]  # else the module the names come from
        else:
            continue
        for name in names:
            if name in known or name in siblings:
                found.add(name)
    return found


def floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # the package root
    if parts[1] == "__main__":
        return TOP
    return FLOORS[parts[1]]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of imports once (by depth-first search), as the modules along it."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if state.get(other) == "open":
                found.append(stack[stack.index(other):] + [other])
            elif other not in state:
                visit(other)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def layering_problems(root: Path) -> list[str]:
    """Every upward, sideways or circular import in ``root``'s ``alfrl/``, ``benchmarks/`` and ``scripts/``."""
    package = modules(root / "alfrl")
    known = set(package)
    problems = []
    unplaced = sorted(m for m in known if m.count(".") == 1 and m.split(".")[1] not in FLOORS | {"__main__": 0})
    problems += [f"{m}: not in a subpackage of {sorted(FLOORS)}" for m in unplaced]
    graph = {m: imports(path, known) - {m} for m, path in package.items()}
    for module, targets in sorted(graph.items()):
        if module in unplaced:
            continue
        for target in sorted(targets):
            mine, theirs = module.split(".")[:2], target.split(".")[:2]
            if mine == theirs or target == "alfrl" or (len(theirs) > 1 and module == ".".join(theirs)):
                continue  # the same subpackage, the package root, or a subpackage's __init__ importing its own
            if target not in unplaced and floor(target) >= floor(module):
                how = "sideways" if floor(target) == floor(module) else "upward"
                problems.append(f"{module} imports {target}: {how}")
    problems += [f"circular imports: {' -> '.join(c)}" for c in circles(graph)]
    for folder in ("benchmarks", "scripts"):
        files = {p.stem: p for p in sorted((root / folder).glob("*.py"))}
        graph = {name: imports(path, known, set(files)) & set(files) - {name} for name, path in files.items()}
        problems += [f"circular imports in {folder}/: {' -> '.join(c)}" for c in circles(graph)]
    return problems


def test_every_import_runs_down_the_floors_and_none_in_a_circle():
    problems = layering_problems(REPO_ROOT)
    assert not problems, "\n".join(problems)


def test_alfrl_has_a_short_top_level():
    entries = sorted(p.name for p in (REPO_ROOT / "alfrl").iterdir() if p.name != "__pycache__")
    assert entries == ["__init__.py", "__main__.py", *sorted(FLOORS)], entries


def _copy(tmp_path: Path) -> Path:
    for folder in ("alfrl", "benchmarks", "scripts"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_planted_upward_import_is_caught(tmp_path):
    root = _copy(tmp_path)
    tracking = root / "alfrl" / "base" / "tracking.py"
    tracking.write_text(tracking.read_text() + "\n\ndef _late():\n    from alfrl.rl.gigpo import step_rewards  # noqa\n")
    assert layering_problems(root) == ["alfrl.base.tracking imports alfrl.rl.gigpo: upward"]


def test_a_planted_sideways_import_and_circles_are_caught(tmp_path):
    root = _copy(tmp_path)
    report = root / "alfrl" / "eval" / "eval_report.py"
    report.write_text(report.read_text() + "\nfrom alfrl.imitation import sft  # noqa\n")
    trajectory = root / "alfrl" / "rl" / "trajectory.py"
    trajectory.write_text(trajectory.read_text() + "\nimport alfrl.rl.ppo  # noqa\n")
    (root / "benchmarks" / "device_shapes.py").write_text("import device_check  # noqa\n")
    problems = layering_problems(root)
    assert "alfrl.eval.eval_report imports alfrl.imitation.sft: sideways" in problems
    assert any(p.startswith("circular imports: alfrl.rl.") and "alfrl.rl.trajectory" in p for p in problems), problems
    assert any(p.startswith("circular imports in benchmarks/:") and "device_shapes" in p for p in problems), problems
