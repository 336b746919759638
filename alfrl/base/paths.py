"""Where the course keeps its data: ``data/packs`` (in git) and ``data/games`` (expanded).

Used from notebook 00 on (where data, games and runs live).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout the package was installed from (``pip install -e .``)."""
PACK_DIR = REPO_ROOT / "data" / "packs"
"""Compact generated games, committed: one ``<split>.jsonl.xz`` per split."""
WARM_START_DIR = REPO_ROOT / "data" / "warmstart"
"""The first expert warm start for the bundled model (150 short walkthroughs): its config and record are
committed, its float16 weights are not (its README says how to rebuild them)."""
EXPERT_WARM_START_DIR = REPO_ROOT / "data" / "warmstart_expert"
"""The first warm start continued on 320 more walkthroughs of up to 20 steps (step 80 of the fine-tune that made
:data:`EPOCH_WARM_START_DIR`): its config and record committed, its float16 weights not (its README has the command,
the cost and what it wins on held-out rooms). The RL and DAgger runs of docs/results.md started from it."""
EPOCH_WARM_START_DIR = REPO_ROOT / "data" / "warmstart_epoch"
"""The default warm start: the same fine-tune run to the end of its epoch (all 880 walkthroughs of up to 20 steps,
1,030 expert games with the first one's), committed (a float16 LoRA adapter; its README has the command, the cost
and what it wins)."""
GRPO_DIR = REPO_ROOT / "data" / "grpo"
"""The first warm start after the 12-update GRPO run of docs/results.md (cpu preset, seed 0): its config and
record committed, its weights not; its README gives the command that made it and what it does on held-out games."""
SCALE_GRPO_DIR = REPO_ROOT / "data" / "scale" / "grpo" / "adapters" / "step_00080"
"""The default warm start after the scale run's 80 GRPO updates (docs/results.md, data/scale/PREREGISTRATION.md),
committed in float16; its README gives the command, the wall time and what it does on the held-out panel."""


def games_dir() -> Path:
    """Where games are expanded and looked up by default: ``$ALFRL_DATA_DIR`` or ``data/games``."""
    return Path(os.environ.get("ALFRL_DATA_DIR", REPO_ROOT / "data" / "games"))
