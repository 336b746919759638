"""One check the exercise tests share: a notebook holds an exercise's stub, then its check call."""

from __future__ import annotations

from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def assert_has_exercise(notebook: str, stub: str, check: str) -> None:
    """``notebook`` (e.g. "07_beyond_grpo.ipynb") has a code cell with ``stub`` raising NotImplementedError,
    the next code cell imports from ``exercises.nbNN`` and calls ``check``, and its prose names the solutions."""
    number = notebook[:2]
    cells = nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
    code = [c.source for c in cells if c.cell_type == "code"]
    holders = [i for i, src in enumerate(code) if stub in src]
    assert len(holders) == 1, f"{notebook}: one code cell holds {stub!r} (found {len(holders)})"
    at = holders[0]
    assert "raise NotImplementedError  # your code here" in code[at]
    assert check in code[at + 1] and f"from exercises.nb{number} import" in code[at + 1]
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert f"notebooks/solutions/nb{number}.py" in text
