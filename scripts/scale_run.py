"""Drive the scale run's two arms (data/scale/PREREGISTRATION.md): GRPO and GiGPO from the default warm start,
the same seed and room order, a few updates of each in turn, so that both stand at the same number of updates
whenever the run is stopped.

    python scripts/scale_run.py --until 40            # both arms to update 40, two updates at a time
    python scripts/scale_run.py --until 80 --arms gigpo

Each arm is a run directory, ``data/scale/ARM``, trained by the course's own command (printed before it runs):
``python -m alfrl train --preset scale --credit ARM --run-dir data/scale/ARM --updates N`` the first time,
``python -m alfrl train --resume data/scale/ARM --updates N`` after that, so a stopped run (a kill, a machine that is
turned off) continues from its last checkpoint without losing or repeating an update. At the pre-registered
updates (10, 20, 40, 80) the adapter is kept in ``data/scale/ARM/adapters/step_N`` for the panel
(``scripts/scale_panel.py``), since the run keeps only its newest checkpoint; it is stored in float16 (4.9 MB, as
the shipped warm starts are), small enough to commit. What can be committed: each arm's config.json, metrics.jsonl,
plots.png and those adapters; and the continued arm's newest checkpoint (a float32 adapter, Adam's state and the
run's cursor and random state, about 30 MB), committed each time the run stops so that a fresh checkout resumes it
exactly. The finished arm's checkpoint and the trajectories stay out (``.gitignore``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from alfrl.agent.models import cast_adapter
from alfrl.base.checkpoint import latest_checkpoint
from alfrl.base.paths import REPO_ROOT
from alfrl.training.train_config import preset

ARMS = ("grpo", "gigpo")
MILESTONES = (10, 20, 40, 80)
"""The updates whose adapters the panel plays: at most 640, 1,280, 2,560 and 5,120 trained episodes (8 groups of 8
an update, fewer where fewer groups have a spread)."""


def run_dir(arm: str) -> Path:
    return REPO_ROOT / "data/scale" / arm


def updates_done(arm: str) -> int:
    checkpoint = latest_checkpoint(run_dir(arm)) if (run_dir(arm) / "config.json").is_file() else None
    return int(checkpoint.name.split("_")[-1]) if checkpoint else 0


def add_more_rooms(arm: str) -> bool:
    """Amendment 3 of PREREGISTRATION.md, before an arm's update 41: its saved config gets the scale preset's
    ``more_data_dir``, the rooms it plays once the 909 of data/rl_rooms are used up (the rooms before keep their
    places). Returns whether the config changed."""
    path = run_dir(arm) / "config.json"
    saved = json.loads(path.read_text())
    more = preset("scale").more_data_dir
    if saved.get("more_data_dir") == more:
        return False
    saved["more_data_dir"] = more
    path.write_text(json.dumps(saved, indent=2))
    print(f"[scale_run] {arm}: after update 40 the rooms of {more} follow those of {saved['data_dir']} "
          f"(PREREGISTRATION.md, amendment 3)", flush=True)
    return True


def train_command(arm: str, until: int, threads: int) -> list[str]:
    folder = str(run_dir(arm).relative_to(REPO_ROOT))
    if (run_dir(arm) / "config.json").is_file():
        args = ["--resume", folder]
    else:
        args = ["--preset", "scale", "--credit", arm, "--run-dir", folder]
    return [sys.executable, "-m", "alfrl", "train", *args, "--updates", str(until), "--threads", str(threads)]


def keep_milestone(arm: str) -> None:
    """Keep the newest checkpoint's adapter, in float16, if its update is a milestone."""
    checkpoint = latest_checkpoint(run_dir(arm))
    step = int(checkpoint.name.split("_")[-1])
    target = run_dir(arm) / "adapters" / f"step_{step:05d}"
    if step in MILESTONES and not target.is_dir():
        cast_adapter(shutil.copytree(checkpoint / "adapter", target), "float16")
        (target / "README.md").write_text(milestone_readme(arm, step))  # in place of peft's empty model card
        print(f"[scale_run] {arm}: update {step}'s adapter kept in {target.relative_to(REPO_ROOT)}", flush=True)


def milestone_readme(arm: str, step: int) -> str:
    """What a kept adapter is and where it came from."""
    return (f"# The scale run's {arm} arm after update {step} (SmolLM2-135M-Instruct, LoRA, float16)\n\n"
            f"The adapter of `data/scale/{arm}`'s checkpoint after update {step}, kept by `scripts/scale_run.py` in "
            "float16 (the run trains it in float32) for the pre-registered panel (`data/scale/PREREGISTRATION.md`; "
            f"`python scripts/scale_panel.py {arm}_u{step} data/scale/{arm}/adapters/step_{step:05d}`). Its training "
            f"log is `data/scale/{arm}/metrics.jsonl`, lines 1-{step}. Load it like any adapter folder "
            f"(`--adapter data/scale/{arm}/adapters/step_{step:05d}`).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--until", type=int, required=True, help="train every arm to this update")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--chunk", type=int, default=2, help="updates of one arm before the next one's")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    while (behind := min(args.arms, key=updates_done)) and updates_done(behind) < args.until:
        for arm in args.arms:
            done = updates_done(arm)
            if done >= args.until:
                continue
            # stop at a milestone, so its adapter is kept before the next checkpoint replaces it
            until = min(done + args.chunk, args.until, min(m for m in (*MILESTONES, args.until) if m > done))
            if done >= MILESTONES[-2]:
                add_more_rooms(arm)
            command = train_command(arm, until, args.threads)
            print(f"[scale_run] {arm}: {shlex.join(command)}", flush=True)
            subprocess.run(command, cwd=REPO_ROOT, check=True)
            keep_milestone(arm)
    print(f"[scale_run] {', '.join(f'{a} at update {updates_done(a)}' for a in args.arms)}")


if __name__ == "__main__":
    main()
