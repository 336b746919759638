"""A training run's directory: config, metrics, trajectories, checkpoints, and resuming from them.

    runs/<name>/
      config.json            the TrainConfig the run was started with
      metrics.jsonl          one line per update
      trajectories.jsonl     every trajectory played, with its update's step
      plots.png              curves, redrawn after every update
      checkpoints/step_00003/
        adapter/             the LoRA adapter (written by the saver the trainer passes in)
        optimizer.pt         Adam's state
        state.json           step, data cursor, RNG states

A checkpoint is written to a temporary folder and renamed into place, so a kill leaves
either the old checkpoint or the new one, never half of one. On resume, lines that
metrics.jsonl and trajectories.jsonl gained after the last checkpoint are dropped: the
update they came from is played again, so nothing is counted twice; a line torn by a kill in the
middle of its write is dropped with a warning (:func:`read_jsonl`).

Taught in notebook 05 (checkpoints and exact resume); 06 reads them.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import threading
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from alfrl.base.rundir import RUN, RunDirError, prepare_output_dir  # noqa: F401 (RunDirError: its old home)

CHECKPOINTS = "checkpoints"


def prepare_run_dir(run_dir: str | Path, overwrite: bool = False, kind: str = RUN, flag: str = "--out") -> Path:
    """Create a fresh output folder of ``kind`` (see :mod:`alfrl.base.rundir`); refuse to reuse a non-empty one
    unless ``overwrite``, and never replace a folder of another kind or one no alfrl command marked."""
    return prepare_output_dir(run_dir, kind, overwrite=overwrite, flag=flag).path


def rng_state() -> dict:
    version, internal, gauss = random.getstate()
    return {"torch": torch.get_rng_state().tolist(), "python": [version, list(internal), gauss]}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:05d}"


def save_checkpoint(run_dir: str | Path, step: int, save_adapter: Callable[[Path], object], optimizer, state: dict,
                    keep_last: int = 2, rng: dict | None = None) -> Path:
    """Write checkpoint ``step`` atomically; keep the newest ``keep_last`` (0 = all). ``save_adapter(folder)``
    writes the model's trainable part (the trainer passes ``alfrl.agent.models.save_adapter`` for its policy), so
    this module needs no model code. ``rng``: the RNG states to store (default: the current ones), for a
    checkpoint written later than the step it holds."""
    final = step_dir(Path(run_dir), step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_adapter(tmp / "adapter")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step, "rng": rng or rng_state()}))
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
    """Keep only lines whose ``step`` is at most ``max_step`` (the work a checkpoint holds); a torn last
    line is dropped too (see :func:`read_jsonl`)."""
    if not path.is_file():
        return
    keep = [line for line, record in _parse_jsonl(Path(path)) if record["step"] <= max_step]
    path.write_text("".join(line + "\n" for line in keep))


def append_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def read_jsonl(path: str | Path, repair: bool = False) -> list[dict]:
    """The records of a JSONL file (none if it does not exist): the one reader of the package's
    metrics.jsonl, trajectories.jsonl and records.jsonl.

    A kill in the middle of a write leaves a torn last line: it is skipped with a warning naming the
    file, and with ``repair`` the file is rewritten without it (do that before appending). A damaged
    line before the last is an error naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        return []
    text = path.read_text()
    parsed = _parse_jsonl(path, text)
    if repair and text != "".join(line + "\n" for line, _ in parsed):
        path.write_text("".join(line + "\n" for line, _ in parsed))
    return [record for _, record in parsed]


def _parse_jsonl(path: Path, text: str | None = None) -> list[tuple[str, dict]]:
    """(line, record) for every complete line of ``path`` (whose ``text`` may be given); a torn last line
    is left out with a warning."""
    lines = (path.read_text() if text is None else text).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            if i == last:
                warnings.warn(f"{path}: skipped its torn last line {i + 1} (a write cut short, e.g. by a "
                              f"kill): {line[:60]!r}", stacklevel=3)
                break
            raise ValueError(f"{path}, line {i + 1}: not a JSON record ({e}); the file is damaged: delete or "
                             "fix that line (and the lines after it if they are damaged too), or start "
                             "over in a new folder") from None
        out.append((line, record))
    return out


@contextmanager
def signal_handlers(handlers: dict):
    """``handlers`` (signal -> handler) installed while the block runs, and the ones that were there put back
    after it. Only in the main thread, the one Python runs handlers in; elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, handler) for s, handler in handlers.items()}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)  # None: set outside Python


@contextmanager
def signals_held():
    """SIGINT and SIGTERM held back while the block runs, and raised again after it, to the handlers that were
    there: for a change of the model's weights that must happen whole or not at all (a signal in the middle would
    leave a model a rescue checkpoint could save half swapped)."""
    pending = []
    try:
        with signal_handlers({s: lambda signum, frame: pending.append(signum)
                              for s in (signal.SIGINT, signal.SIGTERM)}):
            yield
    finally:
        for s in pending:
            signal.raise_signal(s)
