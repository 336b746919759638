"""Experiment tracking (``--log``): every update's metrics, beside ``metrics.jsonl``, in the trackers
practitioners read: TensorBoard (the default; a dependency of the course), Weights & Biases and
SwanLab (used when installed, offline unless you have logged in; never required).

``metrics.jsonl`` stays the source of truth: a tracker gets a copy of each line's numbers under their
own names (``success``, ``reward``, ``loss``, ...; held-out evaluations as ``eval_success``, ...), with
the update as the step, and the run's config once, as text.

    python -m alfrl train --preset cpu --log tensorboard          # RUN_DIR/tensorboard/
    tensorboard --logdir runs                                      # every run's curves side by side
    python -m alfrl train --preset cpu --log tensorboard,wandb    # several at once
    python -m alfrl sft --log none                                 # none at all

A resumed run continues the same TensorBoard log: the events from the first step it logs again on (the
update it replays, or an evaluation an interruption cut short) are dropped (TensorBoard's
``purge_step``), so every step appears once. W&B and SwanLab continue the same run (an id kept in the
run folder); W&B ignores a step below one it already has, so there a replayed update keeps the values
the interrupted process logged.

Taught in notebook 05 (the training loop and its curves).
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os
import uuid
from collections.abc import Sequence
from numbers import Real
from pathlib import Path

TRACKERS = ("tensorboard", "wandb", "swanlab")
"""The trackers ``--log`` knows (``none`` turns tracking off); each is also the package it needs."""

TENSORBOARD_DIR = "tensorboard"
"""The folder of a run (or SFT run) where TensorBoard's event files go."""


class TrackerMissing(RuntimeError):
    """A tracker was asked for whose package is not installed."""


def parse_log(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The trackers named by ``--log``: ``"tensorboard,wandb"``, ``["tensorboard", "wandb"]``, ``"none"``
    (or empty: none). A clear ValueError for a name it does not know."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [v for part in value for v in str(part).split(",")]
    names = []
    for item in (i.strip().lower() for i in items):
        if item in ("", "none"):
            continue
        if item not in TRACKERS:
            raise ValueError(f"--log {item!r} is not a tracker alfrl knows; use none, or one or more of "
                             f"{', '.join(TRACKERS)} separated by commas (e.g. --log tensorboard,wandb)")
        if item not in names:
            names.append(item)
    return tuple(names)


def check_log(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The trackers of ``--log``, each one's package checked: a clear error that says how to install a
    missing one (before a run folder is made or a model loaded)."""
    names = parse_log(value)
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise TrackerMissing(
                f"--log {name}: the {name} package is not installed. Install it into the course's "
                f"environment (.venv/bin/pip install {name}), or leave {name} out of --log "
                f"(--log none turns tracking off; metrics.jsonl is written either way)")
    return names


def scalars(metrics: dict, prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics line, by name (nested dicts as ``outer/inner``); lists, text and
    None (a metric an update did not have) are left out."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, prefix=f"{name}/"))
        elif isinstance(value, Real):  # bools too, as 0/1
            out[name] = float(value)
    return out


def _logged_in(env_key: str, netrc_files: Sequence[Path], host: str | None = None) -> bool:
    """Whether a tracker's key is set up: its environment variable, or an entry (for ``host``, or any
    machine) in one of the ``netrc`` files where ``wandb login`` and ``swanlab login`` keep it."""
    if os.environ.get(env_key):
        return True
    for path in netrc_files:
        try:
            if path.is_file():
                hosts = netrc.netrc(str(path)).hosts
                if (host in hosts) if host else hosts:
                    return True
        except (netrc.NetrcParseError, OSError):
            continue
    return False


def _wandb_mode() -> str:
    """W&B's mode: $WANDB_MODE, else online once ``wandb login`` has stored a key, else offline."""
    from urllib.parse import urlparse
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    return os.environ.get("WANDB_MODE") or (
        "online" if _logged_in("WANDB_API_KEY", [Path.home() / ".netrc"], host) else "offline")


def _swanlab_mode() -> str:
    """SwanLab's mode: $SWANLAB_MODE, else cloud once ``swanlab login`` has stored a key, else offline."""
    return os.environ.get("SWANLAB_MODE") or (
        "cloud" if _logged_in("SWANLAB_API_KEY", [Path.cwd() / ".swanlab" / ".netrc",
                                                  Path.home() / ".swanlab" / ".netrc"]) else "offline")


class Trackers:
    """The trackers of one run. ``log(metrics, step)`` after every update (or SFT step); ``close()``
    at the end (or use it as a context manager). ``first_step`` is the first step this process will log:
    a resumed run's TensorBoard events from it on, left by the interrupted process, are dropped."""

    def __init__(self, names: Sequence[str], run_dir: str | Path, config: dict, first_step: int = 1,
                 project: str = "alfrl"):
        self.names = tuple(names)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._tensorboard = self._wandb = self._swanlab = None
        try:
            self._open(config, first_step, project)
        except BaseException:
            self.close()  # the trackers already opened
            raise

    def _open(self, config: dict, first_step: int, project: str) -> None:
        if "tensorboard" in self.names:
            from torch.utils.tensorboard import SummaryWriter
            folder = self.run_dir / TENSORBOARD_DIR
            fresh = not any(folder.glob("events.out.tfevents.*"))
            self._tensorboard = SummaryWriter(log_dir=str(folder), purge_step=first_step)
            if fresh:  # TensorBoard renders text as Markdown: indented lines are a code block
                text = json.dumps(config, indent=2, default=str)
                self._tensorboard.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)
        if "wandb" in self.names:
            import wandb
            self._wandb = wandb.init(project=os.environ.get("WANDB_PROJECT", project), name=self.run_dir.name,
                                     dir=str(self.run_dir), config=config, mode=_wandb_mode(),
                                     id=self._run_id("wandb"), resume="allow")
        if "swanlab" in self.names:
            import swanlab
            self._swanlab = swanlab.init(project=os.environ.get("SWANLAB_PROJ_NAME", project),
                                         experiment_name=self.run_dir.name, config=config, mode=_swanlab_mode(),
                                         logdir=str(self.run_dir / "swanlog"), id=self._run_id("swanlab"),
                                         resume="allow")

    def _run_id(self, tracker: str) -> str:
        """A stable id per run folder, so a resumed run continues the same W&B or SwanLab run."""
        path = self.run_dir / f".{tracker}_id"
        if not path.is_file():
            path.write_text(uuid.uuid4().hex[:16])
        return path.read_text().strip()

    def log(self, metrics: dict, step: int) -> None:
        """Every number of ``metrics`` under its own name, at ``step``."""
        values = scalars(metrics)
        values.pop("step", None)
        if self._tensorboard is not None:
            for name, value in values.items():
                self._tensorboard.add_scalar(name, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(values, step=step)
        if self._swanlab is not None:
            self._swanlab.log(values, step=step)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._swanlab is not None:
            self._swanlab.finish()
            self._swanlab = None

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_tensorboard(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars a run's TensorBoard log holds, as ``{name: [(step, value), ...]}`` (what TensorBoard
    shows: purged events left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(Path(run_dir) / TENSORBOARD_DIR), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
