"""Write course notebooks the same way every time: nbformat v4, no outputs, one kernelspec.

    python scripts/new_notebook.py build  SRC.txt notebooks/NN_name.ipynb
    python scripts/new_notebook.py export notebooks/NN_name.ipynb SRC.txt
    python scripts/new_notebook.py clean  notebooks/*.ipynb

SRC is plain text, one cell after each header line:

    # %% [markdown]
    # Title            <- markdown is written as is (not commented out)
    # %% tags=["parameters"]
    data_dir = None
    # %%
    print("a code cell")

``clean`` strips outputs and execution counts in place (a notebook being written). The
notebooks in git carry the outputs of a run at their defaults: after editing one, store them
again with ``.venv/bin/python scripts/time_notebooks.py --write NN`` (scripts/notebook_outputs.py
checks them, and so does the test suite).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")
METADATA = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"}}


def from_text(text: str) -> nbformat.NotebookNode:
    """Parse the cell-header text format into a notebook without outputs."""
    cells, kind, tags, lines = [], None, [], []

    def flush():
        if kind is None:
            return
        source = "\n".join(lines).strip("\n")
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            flush()
            kind, tags, lines = ("md" if m["md"] else "code"), json.loads(m["tags"] or "[]"), []
        else:
            lines.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells, metadata=METADATA)
    return clean(nb)


def to_text(nb: nbformat.NotebookNode) -> str:
    out = []
    for cell in nb.cells:
        tags = cell.metadata.get("tags")
        head = "# %%" + (" [markdown]" if cell.cell_type == "markdown" else "")
        out.append(head + (f" tags={json.dumps(tags)}" if tags else ""))
        out.append(cell.source)
    return "\n".join(out) + "\n"


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop outputs, execution counts and run-time cell metadata; set the course's kernelspec."""
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: re-building does not churn the diff
        tags = cell.metadata.get("tags")
        cell.metadata = {"tags": tags} if tags else {}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata = dict(METADATA)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in ("build", "export", "clean"):
        sys.exit(__doc__)
    command, args = argv[0], [Path(a) for a in argv[1:]]
    if command == "build":
        nbformat.write(from_text(args[0].read_text()), args[1])
    elif command == "export":
        args[1].write_text(to_text(nbformat.read(args[0], as_version=4)))
    else:
        for path in args:
            nbformat.write(clean(nbformat.read(path, as_version=4)), path)
    print(f"{command}: done")


if __name__ == "__main__":
    main(sys.argv[1:])
