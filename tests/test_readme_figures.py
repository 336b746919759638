"""The README's figures come from committed files: every data/results file it names exists, and its table
of the learning signal is what scripts/signal_table.py prints from the committed metrics."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
SECTION = README[README.index("## A learning result on a CPU"):README.index("## The games")]


def test_every_results_file_the_readme_names_exists():
    named = set(re.findall(r"data/results/[\w.\-/]+\.\w+", README))
    named |= {f"data/results/{n}" for n in re.findall(r"`([\w.\-]+\.(?:jsonl|log|md|png|json|xz))`", SECTION)
              if not n.startswith(("metrics", "trajectories", "records", "summar", "config", "plots"))}
    assert named, "the learning section names no results file"
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert not missing, f"the README names results that are not committed: {missing}"


def test_the_signal_table_is_what_the_script_prints():
    command = SECTION[SECTION.index("scripts/signal_table.py"):]
    files = re.findall(r"data/results/[\w.\-]+_metrics\.jsonl", command[:command.index("```")])
    assert len(files) >= 4
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "signal_table.py"), *files], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| cpu_")]
    assert len(rows) == len(files)
    for line in rows:
        assert line in SECTION, f"the README's signal table differs from the script's output: {line}"
