"""The README's and docs/'s figures come from committed files: every data/results file they name exists, the
results page's table of the learning signal is what scripts/signal_table.py prints from the committed metrics,
and the README stays a landing page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}
RESULTS = DOCS["results.md"]
SECTION = RESULTS[RESULTS.index("## A learning result on a CPU"):RESULTS.index("## Beyond GRPO")]


def test_every_results_file_the_readme_names_exists():
    named = set(re.findall(r"data/results/[\w.\-/]+\.\w+", README + "".join(DOCS.values())))
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


def test_the_readme_is_a_landing_page():
    """At most about 200 lines, the two quick-start commands, every docs page linked, no development history."""
    assert len(README.splitlines()) <= 200
    quick = README[README.index("## Quick start"):README.index("## The notebooks")]
    assert re.findall(r"^bash (\S+)", quick, re.M) == ["scripts/quickstart.sh", "scripts/test.sh"]
    for name in DOCS:
        assert f"(docs/{name})" in README, f"the README does not link docs/{name}"
    for text in [README, *DOCS.values()]:
        assert not re.search(r"\b[Ii]ssue \d+|\bsessions?\b|another day's machine", text)
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), f"the README links {target}, which does not exist"
    for name, text in DOCS.items():
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (REPO / "docs" / target).exists(), f"docs/{name} links {target}, which does not exist"


def test_the_update_rules_line_is_what_the_outcomes_say():
    """The README's "other update rules" figures (rooms won, gained/lost against the start, two-sided p) are
    recomputed from the committed outcomes of every checkpoint in data/results/beyond_grpo_scale.md."""
    from alfrl.base.checkpoint import read_jsonl
    from alfrl.eval.eval_stats import paired_outcomes

    records = read_jsonl(REPO / "data/results/beyond_grpo_scale_outcomes.jsonl")

    def outcomes(checkpoint: str) -> list[dict]:
        return [r for r in records if r["checkpoint"] == checkpoint]

    start = outcomes("start")
    assert len(start) == 325
    assert f"against the start's {sum(r['won'] for r in start)} " in README
    for checkpoint, name in [("GRPO online, 10 updates", "GRPO online"), ("RFT", "RFT on the winners"),
                             ("GRPO + subgoal reward", "GRPO with a subgoal reward"), ("DPO", "DPO pairs")]:
        after = outcomes(checkpoint)
        paired = paired_outcomes(start, after)
        p = f"{paired['p_value']:.2f}" if paired["p_value"] >= 0.01 else f"{paired['p_value']:.1g}"
        figure = f"{name} {sum(r['won'] for r in after)} (+{paired['gained']}/-{paired['lost']}, p = {p})"
        assert figure in " ".join(README.split()), f"the README's figure for {checkpoint} is not {figure}"
