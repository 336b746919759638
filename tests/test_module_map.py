"""The map between the package and the course: each module's docstring names the notebook that teaches it,
that notebook's first cell names the module, each subpackage's ``__init__.py`` indexes its modules and
``alfrl/__init__.py`` every subpackage. Reads files only."""

from __future__ import annotations

import ast
import json
import re

import pytest
from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "alfrl"
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
MODULES = sorted(f"{p.parent.name}.{p.stem}" for p in PACKAGE.glob("*/*.py") if not p.stem.startswith("__"))
"""Every module, as ``subpackage.module`` (``rl.rollout``)."""
NOTEBOOKS = {p.name[:2]: p for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}


def docstring(module: str) -> str:
    path = PACKAGE / f"{module.replace('.', '/')}.py"
    return " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())


def first_cell_modules(notebook: str) -> set[str]:
    """The modules a notebook's first cell names on its "In the package" line."""
    cell = "".join(json.loads(NOTEBOOKS[notebook].read_text())["cells"][0]["source"])
    line = re.search(r"\*\*In the package:\*\*(.*?)\.(\s|$)", cell, re.S)
    assert line, f"notebook {notebook}'s first cell has no '**In the package:**' line"
    return set(re.findall(r"`alfrl\.(\w+\.\w+)`", line.group(1)))


def taught_in(module: str) -> list[str]:
    """The notebooks a module's docstring says teach it ("Taught in notebook 02 ... and 03")."""
    found = re.search(r"Taught in notebooks? ([^.;:(]*(?:\([^)]*\)[^.;:(]*)*)", docstring(module))
    return re.findall(r"\b(0\d)\b", re.sub(r"\([^)]*\)", "", found.group(1))) if found else []


def test_every_notebook_has_a_module_line():
    assert sorted(NOTEBOOKS) == ["00", "01", "02", "03", "04", "05", "06", "07", "08"]
    for notebook in NOTEBOOKS:
        assert first_cell_modules(notebook), notebook


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS))
def test_named_modules_exist_and_name_their_notebook(notebook):
    for module in first_cell_modules(notebook):
        assert module in MODULES, f"notebook {notebook} names alfrl.{module}, which does not exist"
        assert re.search(rf"\b{notebook}\b", docstring(module)), (
            f"alfrl.{module} is listed by notebook {notebook} but its docstring does not name that notebook")


def test_taught_modules_are_listed_by_their_notebooks():
    taught = {module: taught_in(module) for module in MODULES}
    assert taught["agent.sampler"] == ["02", "03"] and taught["rl.advantage"] == ["04"]  # the parser, on two known lines
    for module, notebooks in taught.items():
        for notebook in notebooks:
            assert module in first_cell_modules(notebook), (
                f"alfrl.{module} says it is taught in notebook {notebook}; add it to that notebook's first cell")


def test_every_module_has_a_home_in_the_course():
    """Each module's docstring names a notebook (or the README section) it belongs to."""
    for module in MODULES:
        assert re.search(r"notebooks? \d\d|README|docs/", docstring(module)), f"alfrl.{module}'s docstring names no notebook"


def test_package_index_lists_every_module():
    """The root indexes every subpackage; each subpackage's docstring lists its own modules, each once, and names
    the notebooks that teach it."""
    index = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    assert sorted(re.findall(r":mod:`alfrl\.(\w+)`", index)) == SUBPACKAGES
    for sub in SUBPACKAGES:
        listed = re.findall(rf":mod:`alfrl\.({sub}\.\w+)`", docstring(f"{sub}.__init__"))
        assert sorted(listed) == [m for m in MODULES if m.startswith(f"{sub}.")], f"alfrl/{sub}/__init__.py's index"
        assert re.search(r"notebooks? \d\d", docstring(f"{sub}.__init__")), sub
