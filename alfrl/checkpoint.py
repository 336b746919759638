"""A training run's directory: config, metrics, trajectories, checkpoints, and resuming from them.

    runs/<name>/
      config.json            the TrainConfig the run was started with
      metrics.jsonl          one line per update
      trajectories.jsonl     every trajectory played, with its update's step
      plots.png              curves, redrawn after every update
      checkpoints/step_00003/
        adapter/             the LoRA adapter (alfrl.models.save_adapter)
        optimizer.pt         Adam's state
        state.json           step, data cursor, RNG states

A checkpoint is written to a temporary folder and renamed into place, so a kill leaves
either the old checkpoint or the new one, never half of one. On resume, lines that
metrics.jsonl and trajectories.jsonl gained after the last checkpoint are dropped: the
update they came from is played again, so nothing is counted twice.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import torch

from alfrl.models import save_adapter

CHECKPOINTS = "checkpoints"


class RunDirError(Exception):
    """A run directory that cannot be used as asked (exists, missing, or incomplete)."""


def prepare_run_dir(run_dir: str | Path, overwrite: bool = False) -> Path:
    """Create a fresh run directory; refuse to reuse a non-empty one unless ``overwrite``."""
    path = Path(run_dir)
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise RunDirError(f"run directory {path} already exists and is not empty; continue it with "
                              f"--resume {path}, choose another --run-dir, or pass --overwrite to replace it")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def rng_state() -> dict:
    version, internal, gauss = random.getstate()
    return {"torch": torch.get_rng_state().tolist(), "python": [version, list(internal), gauss]}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:05d}"


def save_checkpoint(run_dir: str | Path, step: int, policy, optimizer, state: dict, keep_last: int = 2) -> Path:
    """Write checkpoint ``step`` atomically; keep the newest ``keep_last`` (0 = all)."""
    final = step_dir(Path(run_dir), step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_adapter(policy, tmp / "adapter")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step, "rng": rng_state()}))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    if keep_last:
        for old in checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old)
    return final


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step_") and not p.name.endswith(".tmp")
                  and (p / "state.json").is_file())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def load_state(checkpoint: Path, optimizer) -> dict:
    """Restore the optimizer and RNG states; return the saved state (step, cursor, ...)."""
    optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", weights_only=True))
    state = json.loads((checkpoint / "state.json").read_text())
    set_rng_state(state["rng"])
    return state


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Keep only lines whose ``step`` is at most ``max_step`` (the work a checkpoint holds)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= max_step]
    path.write_text("".join(line + "\n" for line in keep))


def append_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
