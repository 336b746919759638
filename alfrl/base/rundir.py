"""Output folders: one policy for ``python -m alfrl train`` (run directories), ``eval`` (result folders),
``dagger`` and ``sft``.

Each command marks its folder with the ``config.json`` it writes there first: a training run's holds
``run_dir``, a DAgger run's ``out`` and ``games_per_round``, an evaluation's ``out`` and ``resume``,
another command's (sft) ``out`` only. The policy:

* a missing or empty folder is created, and so is a folder holding nothing but its own command's
  ``config.json`` (a start that failed before doing any work);
* a folder of the same kind is continued with ``--resume``, replaced with ``--overwrite``, else refused;
* a folder of another kind, or one without such a ``config.json`` (``runs/`` holding every run, a
  folder of your own), is always refused: ``--overwrite`` deletes only a folder of its own kind.

Used by notebooks 05 and 06 (run and evaluation folders).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

TRAIN, EVAL, DAGGER, RUN, FOREIGN = "train", "eval", "dagger", "run", "foreign"
"""Kinds of folder: a training run, an evaluation, a DAgger run, another command's output (sft), none of these."""
CONFIG = "config.json"

WHAT = {TRAIN: "a training run directory (python -m alfrl train)",
        EVAL: "an evaluation folder (python -m alfrl eval)",
        DAGGER: "a DAgger run folder (python -m alfrl dagger)",
        RUN: "the output folder of another alfrl command (python -m alfrl sft)",
        FOREIGN: "not a folder any alfrl command wrote (no alfrl config.json in it)"}
NOUN = {TRAIN: "training run directory", EVAL: "evaluation folder", DAGGER: "DAgger run folder",
        RUN: "folder of its own command"}


class RunDirError(FileExistsError):
    """A run or output folder that cannot be used as asked; the message says why and what to do."""


def read_config(folder: str | Path) -> dict | None:
    """The ``config.json`` of ``folder`` as a dict; None if it is missing, unreadable or not an object."""
    try:
        data = json.loads((Path(folder) / CONFIG).read_text())
    except (OSError, ValueError):  # missing, unreadable, not JSON (UnicodeDecodeError is a ValueError)
        return None
    return data if isinstance(data, dict) else None


def folder_kind(folder: str | Path) -> str | None:
    """None for a missing or empty folder; else TRAIN, EVAL, RUN or FOREIGN (see the module's docstring)."""
    path = Path(folder)
    if not path.exists():
        return None
    if not path.is_dir():
        return FOREIGN
    if not any(path.iterdir()):
        return None
    config = read_config(path)
    if config is None:
        return FOREIGN
    if "run_dir" in config:
        return TRAIN
    if "out" in config:
        if "games_per_round" in config:
            return DAGGER
        return RUN if "save_dtype" in config else EVAL if "resume" in config else RUN  # sft has both
    return FOREIGN


def holds_work(folder: str | Path) -> bool:
    """Whether the folder holds anything besides its config.json."""
    path = Path(folder)
    return path.is_dir() and any(p.name != CONFIG for p in path.iterdir())


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare_output_dir` found and did."""

    path: Path
    created: bool
    """The folder did not exist before: a start that fails before any work may remove it."""
    kept: bool
    """Earlier work in the folder is kept (``resume``)."""


_REFUSE_SAME = {
    TRAIN: "run directory {path} already exists and is not empty; continue it with --resume {path}, choose "
           "another {flag}, or pass --overwrite to replace it",
    EVAL: "{path} already holds evaluation results; pass --resume to continue them, --overwrite to replace "
          "them, or choose another {flag}",
    DAGGER: "{path} already holds a DAgger run; pass --resume to continue it, --overwrite to replace it, "
            "or choose another {flag}",
    RUN: "{path} already exists and is not empty; continue it with --resume (sft), choose another {flag}, "
         "or pass --overwrite to replace it",
}


def check_output_dir(folder: str | Path, kind: str, overwrite: bool = False, resume: bool = False,
                     flag: str = "--out") -> str | None:
    """Raise if :func:`prepare_output_dir` would refuse ``folder``; touches nothing. Returns its kind."""
    if resume and overwrite:
        raise ValueError(f"pass --resume (continue the work in {flag}) or --overwrite (replace it), not both")
    path = Path(folder)
    found = folder_kind(path)
    if found not in (None, kind):
        action = "continue" if resume else "replace" if overwrite else "write into"
        raise RunDirError(f"{path} is {WHAT[found]}, not {WHAT[kind]}; refusing to {action} it "
                          f"(--overwrite only replaces an existing {NOUN[kind]}). Choose another {flag}, "
                          "e.g. a new folder beside it")
    if found == kind and holds_work(path) and not (resume or overwrite):
        raise RunDirError(_REFUSE_SAME[kind].format(path=path, flag=flag))
    return found


def prepare_output_dir(folder: str | Path, kind: str, overwrite: bool = False, resume: bool = False,
                       flag: str = "--out") -> Prepared:
    """Make ``folder`` ready for a command whose folders are of ``kind`` (TRAIN, EVAL or RUN), by the
    module's policy; ``flag`` names the command's folder option in messages. The folder exists afterwards
    (``resume`` of a missing or empty folder starts afresh: the caller decides whether that is an error)."""
    path = Path(folder)
    found = check_output_dir(path, kind, overwrite=overwrite, resume=resume, flag=flag)
    existed = path.exists()
    if found == kind and holds_work(path):
        if resume:
            return Prepared(path, created=False, kept=True)
        shutil.rmtree(path)  # overwrite: a folder of this very kind, checked above
    path.mkdir(parents=True, exist_ok=True)
    return Prepared(path, created=not existed, kept=False)


BEFORE_ADDED = {"actions": "auto", "sample_dtype": None, "prefill_dtype": None}
"""Settings added to the configs later, with the value every run saved before them had."""


def changed_settings(saved: dict, wanted: dict, ignore: tuple[str, ...] = (), added_ok: bool = False) -> list[str]:
    """The settings (sorted) whose values differ between a folder's saved config and the wanted one; ``ignore``
    ones never count. With ``added_ok`` a setting the saved config lacks (one added to the code since) counts
    as unchanged: right for results a newer version may extend, not for a run whose training it would change."""
    keys = set(wanted) if added_ok else set(saved) | set(wanted)
    return sorted(k for k in keys - set(ignore)
                  if not (added_ok and k not in saved and k not in BEFORE_ADDED)
                  and saved.get(k, BEFORE_ADDED.get(k)) != wanted.get(k))


def check_resumed_config(out: Path, config, resumable: tuple[str, ...]) -> None:
    """Refuse to continue the run in ``out`` with settings that change what it plays or learns (any field
    but ``resumable``); then write ``config`` as the run's config.json."""
    path = out / "config.json"
    if path.is_file():
        changed = changed_settings(json.loads(path.read_text()), asdict(config), resumable)
        if changed:
            raise ValueError(f"{out} was started with other settings ({', '.join(changed)}); resume with the same "
                             "settings, or pass --overwrite, or choose another --out")
    path.write_text(json.dumps(asdict(config), indent=2))
