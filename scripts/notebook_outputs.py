"""The course's notebooks are committed with the outputs of a run at their default parameters, so a
repository page shows their figures and tables. This module makes an executed notebook lean enough to
commit, and says what is wrong with a committed one.

    .venv/bin/python scripts/time_notebooks.py --write         # run every notebook, store its outputs
    .venv/bin/python scripts/notebook_outputs.py                # check the committed ones (the test does too)

lean(): drops papermill's and the widgets' metadata (a widget needs a live kernel; its text fallback
stays), keeps only the last state of every progress bar (a stream's carriage returns) and drops a
progress widget's text fallback (its first state, a bar frozen at 0%, which no page would update), writes paths
under the repository relative to it, and stamps every code cell with a hash of its source, so a cell
edited after the run is caught. problems(): cells not executed or edited since, error outputs,
absolute paths, and the size limits.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
MAX_NOTEBOOK_BYTES = 1_000_000
MAX_TOTAL_BYTES = 8_000_000
ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/(?:home|root|tmp|work|Users|private|var/folders|opt|mnt)/[\w.-]")
"""An absolute path on someone's machine (a learner's would differ): what an output must not show."""
WIDGET = "application/vnd.jupyter.widget-view+json"
FROZEN_BAR = re.compile(r"^[^\n]*\d+%\|[^\n]*\| *\d+/\d+ \[[^\n]*\]$")
"""A tqdm bar as text (``desc:   0%|          | 0/8 [00:00<?, ?game/s]``): in a display output, the text
fallback of a progress widget, stored in the state it was created in."""


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _last_frames(text: str) -> str:
    """A stream's text as a terminal shows it at the end: of each line rewritten with carriage
    returns (a progress bar), only its last state."""
    return "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
                     for line in text.split("\n"))


def _relative(text: str, root: Path) -> str:
    return text.replace(str(root) + "/", "").replace(str(root), ".")


def lean(nb: nbformat.NotebookNode, root: Path = ROOT) -> nbformat.NotebookNode:
    """``nb`` (executed) made small and machine-independent, in place; returned for chaining."""
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for key in ("papermill", "execution"):
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            continue
        cell.metadata["alfrl_source"] = source_hash(cell.source)
        kept = []
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = _relative(_last_frames(output.text), root)
            elif output.output_type in ("display_data", "execute_result"):
                output.data.pop(WIDGET, None)
                if not output.data or FROZEN_BAR.match(output.data.get("text/plain", "")) and len(output.data) == 1:
                    continue
                for mime in ("text/plain", "text/html", "text/markdown"):
                    if mime in output.data:
                        output.data[mime] = _relative(output.data[mime], root)
            elif output.output_type == "error":
                output.traceback = [_relative(line, root) for line in output.traceback]
            kept.append(output)
        cell.outputs = kept
    return nb


def problems(path: Path) -> list[str]:
    """What keeps a committed notebook from showing a default run: one line per problem."""
    nb = nbformat.read(path, as_version=4)
    found = []
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        found.append(f"{size / 1e6:.2f} MB, over the {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB a notebook may take")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.execution_count is None:
            found.append(f"cell {i} was not executed")
        elif cell.metadata.get("alfrl_source") != source_hash(cell.source):
            found.append(f"cell {i} was edited after the run")
        for output in cell.outputs:
            if output.output_type == "error":
                found.append(f"cell {i} stores an error: {output.ename}: {output.evalue[:120]}")
            text = output.get("text", "") + "".join(str(v) for v in output.get("data", {}).values()
                                                    if isinstance(v, str) and not v.startswith("iVBOR"))
            match = ABSOLUTE_PATH.search(text)
            if match:
                found.append(f"cell {i} shows an absolute path: ...{text[max(0, match.start() - 20):match.end() + 30]}...")
    return found


def main() -> None:
    notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    bad = {p.name: problems(p) for p in notebooks}
    total = sum(p.stat().st_size for p in notebooks)
    for name, found in bad.items():
        size = (NOTEBOOKS / name).stat().st_size / 1e6
        print(f"{name}: {size:.2f} MB" + ("".join(f"\n  - {f}" for f in found) if found else ", ok"))
    print(f"all {len(notebooks)}: {total / 1e6:.2f} MB (limit {MAX_TOTAL_BYTES / 1e6:.0f} MB)")
    if any(bad.values()) or total > MAX_TOTAL_BYTES:
        print("re-run them: .venv/bin/python scripts/time_notebooks.py --write", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
