"""docs/troubleshooting.md points at real things: metrics that a run writes, files that exist, flags
that the command line takes, notebook sections that are there. Reads files only (fast)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "troubleshooting.md"
METRIC_WRITERS = ("alfrl/training/train.py", "alfrl/rl/advantage.py", "alfrl/rl/ppo.py", "alfrl/eval/evaluate.py", "alfrl/eval/eval_stats.py",
                  "alfrl/training/train_eval.py")
"""The code that writes metrics.jsonl (train, batch_stats, the PPO step's summary), summary.json (its splits, its rates)
and eval.jsonl (evaluation during training)."""
PATH_PREFIXES = ("data/", "docs/", "notebooks/", "benchmarks/", "scripts/", "alfrl/")
IDENTIFIER = re.compile(r"`([a-z][a-z0-9_]*)`")


def guide() -> str:
    return GUIDE.read_text()


def bullet(label: str) -> list[str]:
    """The text of every ``- **label:**`` bullet (with its continuation lines)."""
    items = re.findall(rf"^- \*\*{label}:?\*\*:?(.*?)(?=^- \*\*|^## |\Z)", guide(), re.S | re.M)
    assert items, f"no '- **{label}:**' bullets in {GUIDE}"
    return items


def metric_names() -> set[str]:
    """Every key of a committed metrics file, and every quoted name in the code that writes metrics."""
    names: set[str] = set()
    for path in (REPO_ROOT / "data" / "results").glob("*metrics.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                names |= set(json.loads(line))
    for writer in METRIC_WRITERS:
        names |= set(re.findall(r'"([a-z][a-z0-9_]*)"', (REPO_ROOT / writer).read_text()))
    return names


def test_every_symptom_has_its_parts():
    sections = re.split(r"^## \d+\. ", guide(), flags=re.M)[1:]
    assert len(sections) == 9, [s.splitlines()[0] for s in sections]
    for section in sections:
        title = section.splitlines()[0]
        for part in ("Shows in", "In the course's runs", "Likely cause", "Knobs", "Notebook"):
            assert f"- **{part}" in section, f"{title}: no '{part}'"
        runs = section.split("- **In the course's runs:**")[1].split("- **Likely cause")[0]
        assert re.search(r"data/results/|scripts/", runs), f"{title}: its numbers name no committed file or command"


def test_cited_metrics_exist():
    known = metric_names()
    cited = {name for text in bullet("Shows in") for name in IDENTIFIER.findall(text)}
    assert {"sampler_ratio_mean", "sampler_ratio_min", "sampler_ratio_max", "sampler_abs_logprob_diff"} <= cited
    missing = sorted(cited - known)
    assert not missing, f"{GUIDE.name} cites metrics no run writes: {missing}"


def test_linked_and_named_files_exist():
    text = guide()
    links = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert links
    for target in links:
        assert (GUIDE.parent / target).exists(), f"broken link {target}"
    named = {m for m in re.findall(r"`([^`\s]+)`", text) if m.startswith(PATH_PREFIXES)}
    named |= set(re.findall(r"(?:data/results|scripts|benchmarks)/[A-Za-z0-9_.]+\.(?:py|md|log|png|jsonl|xz)", text))
    assert named
    for path in named:
        assert (REPO_ROOT / path).exists(), f"{GUIDE.name} names {path}, which does not exist"
    for anchor in re.findall(r"\]\(#([^)]+)\)", text):  # the table of symptoms
        headings = [re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", text, re.M)]
        assert anchor in headings, f"no heading for #{anchor}"


def test_flags_are_real():
    from alfrl.__main__ import build_parser
    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "train" in a.choices).choices
    options = {name: {o for a in p._actions for o in a.option_strings} for name, p in commands.items()}
    everywhere = set().union(*options.values())
    for text in bullet("Knobs"):
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text.split("Measure with")[0]):
            assert flag in options["train"] | options["eval"], f"knob {flag} is not a train flag"
    for line in guide().splitlines():
        if "benchmarks/" in line or "scripts/" in line:
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
            assert flag in everywhere, f"{flag} is no flag of python -m alfrl"


def notebook_headings(name: str) -> set[str]:
    path = REPO_ROOT / "notebooks" / f"{name}.ipynb"
    assert path.is_file(), f"no notebook {path}"
    cells = json.loads(path.read_text())["cells"]
    lines = [line for c in cells if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()]
    return {re.sub(r"^#+\s*(\d+\.\s*)?", "", line).strip() for line in lines if line.startswith("#")}


@pytest.mark.parametrize("item", range(9))
def test_cited_notebook_sections_exist(item):
    text = bullet("Notebook")[item]
    cited = re.findall(r"`(\d\d_[a-z_]+)`((?:,? (?:and )?\"[^\"]+\"(?: \([^)]*\))?)+)", " ".join(text.split()))
    assert cited, text
    for name, sections in cited:
        headings = notebook_headings(name)
        for section in re.findall(r"\"([^\"]+)\"", sections):
            assert section in headings, f"{name} has no section {section!r}"


def test_readme_links_the_guide():
    assert "(docs/troubleshooting.md)" in (REPO_ROOT / "README.md").read_text()
