"""Where the course keeps its data: ``data/packs`` (in git) and ``data/games`` (expanded).

Used from notebook 00 on (where data, games and runs live).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout the package was installed from (``pip install -e .``)."""
PACK_DIR = REPO_ROOT / "data" / "packs"
"""Compact generated games, committed: one ``<split>.jsonl.xz`` per split."""
WARM_START_DIR = REPO_ROOT / "data" / "warmstart"
"""The first expert warm start for the bundled model (150 short walkthroughs), committed (a float16 LoRA
adapter; its README says how it was made)."""
EXPERT_WARM_START_DIR = REPO_ROOT / "data" / "warmstart_expert"
"""The default warm start: the first one continued on 320 more walkthroughs of up to 20 steps, committed
(a float16 LoRA adapter; its README has the command, the cost and what it wins on held-out rooms)."""
GRPO_DIR = REPO_ROOT / "data" / "grpo"
"""The first warm start after the 12-update GRPO run of docs/results.md (cpu preset, seed 0), committed; its README
gives the command that made it and what it does on held-out games."""


def games_dir() -> Path:
    """Where games are expanded and looked up by default: ``$ALFRL_DATA_DIR`` or ``data/games``."""
    return Path(os.environ.get("ALFRL_DATA_DIR", REPO_ROOT / "data" / "games"))
