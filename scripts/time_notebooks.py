"""Run every course notebook top to bottom at its DEFAULT parameters, as a learner would, and print a
table of wall time and peak memory (the README's course map quotes it).

    .venv/bin/python scripts/time_notebooks.py                 # all notebooks, in order
    .venv/bin/python scripts/time_notebooks.py 05 06           # some of them
    .venv/bin/python scripts/time_notebooks.py --out /tmp/nb   # keep the executed copies there
    .venv/bin/python scripts/time_notebooks.py --write         # and store their outputs in notebooks/ (to commit)

Each notebook runs in a fresh process (papermill, kernel python3, working directory notebooks/), so
its peak memory is its own: the largest resident set of that process and its kernel. Run it on an
idle machine: two heavy jobs on 2 cores distort every figure. A notebook that fails is reported as
such, with its error, and the others still run. With ``--write`` every notebook that ran is written back
into notebooks/ with its outputs, made lean by scripts/notebook_outputs.py (what the repository page shows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
BUDGET_S = 300
"""The course's budget per notebook at its defaults on an idle 2-core machine."""
READS_BACK = {"06": ROOT / "runs" / "eval"}
"""Folders a notebook resumes from at its defaults (06's ``out_dir``): games recorded there are read back, not
played, so its time would not be a learner's first run."""

CHILD = """
import json, resource, sys, papermill
try:
    papermill.execute_notebook(sys.argv[1], sys.argv[2], kernel_name="python3", cwd=sys.argv[3], progress_bar=False)
    error = None
except Exception as e:  # a failing cell: report it, the table goes on
    error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"[:200]
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"peak_mb": peak / 1024, "error": error}))
"""


def run(notebook: Path, out_dir: Path) -> dict:
    """Run one notebook at its defaults in a fresh process; wall seconds, peak MB (Linux ru_maxrss), error."""
    tick = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(notebook), str(out_dir / notebook.name), str(NOTEBOOKS)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - tick
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        report = {"peak_mb": float("nan"), "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return {"notebook": notebook.name, "wall_s": wall, **report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("only", nargs="*", help="notebook number prefixes, e.g. 00 05 (default: all)")
    parser.add_argument("--out", help="folder for the executed notebooks (default: a temporary folder)")
    parser.add_argument("--write", action="store_true",
                        help="store each notebook that ran, with its outputs (lean), in notebooks/")
    args = parser.parse_args()
    notebooks = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")
                       if not args.only or p.name[:2] in args.only)
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="alfrl-notebooks-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for notebook in notebooks:
        cache = READS_BACK.get(notebook.name[:2])
        if cache is not None and any(cache.glob("*/records.jsonl")):
            print(f"warning: {cache.relative_to(ROOT)} holds played games, which {notebook.name} reads back instead "
                  f"of playing: its time is not a first run's (move the folder away for one)", flush=True)
        print(f"running {notebook.name} at its defaults ...", flush=True)
        rows.append(run(notebook, out_dir))
        r = rows[-1]
        print(f"  {r['wall_s']:.0f} s, peak {r['peak_mb']:.0f} MB" + (f", FAILED: {r['error']}" if r["error"] else ""),
              flush=True)
        if args.write and not r["error"]:
            import nbformat

            from notebook_outputs import lean
            nbformat.write(lean(nbformat.read(out_dir / notebook.name, as_version=4)), notebook)
            print(f"  outputs stored in {notebook.relative_to(ROOT)} ({notebook.stat().st_size / 1e6:.2f} MB)")
    print(f"\n| notebook | wall time | peak memory | within {BUDGET_S // 60} min |\n|---|---|---|---|")
    for r in rows:
        minutes, seconds = divmod(round(r["wall_s"]), 60)
        status = "failed" if r["error"] else ("yes" if r["wall_s"] <= BUDGET_S else "no")
        print(f"| {r['notebook']} | {minutes} min {seconds:02d} s | {r['peak_mb'] / 1024:.1f} GB | {status} |")
    print(f"\nexecuted copies: {out_dir}")
    sys.exit(1 if any(r["error"] for r in rows) else 0)


if __name__ == "__main__":
    main()
