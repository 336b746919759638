"""Carry a long run's resumable state across machines in git history, without keeping it in the tree.

    .venv/bin/python scripts/carry_run.py save runs/long_sft      # before the machine goes away
    .venv/bin/python scripts/carry_run.py restore runs/long_sft   # on the next one, then run with --resume

A run that takes longer than one machine is lent for (the long-game SFT: about 7 hours of 2 cores) continues from
its last checkpoint on the next machine, and git is the only thing that crosses. Its state (a float32 adapter
and Adam's two moments, 20 to 30 MB) must not stay in the tracked tree, which a GPU machine copies whole
(``tests/test_tree_size.py``). So ``save`` makes two commits: the first adds the state under ``carry/<name>/``,
the second takes it out again. The tree never holds it; the history does, and ``restore`` reads it back from
the newest commit whose subject starts with ``carry: <name>``.

What is carried: the run's ``config.json``, its ``metrics.jsonl`` up to the last checkpoint, its ``milestones/``
adapters, and the last checkpoint (adapter, ``state.json`` with the data cursor and RNG states, and
``optimizer.pt``), with Adam's moments stored in bfloat16, half their float32 size: ``torch.optim`` casts them
back to the parameters' float32 on load, so the resumed run steps with moments rounded to 8 bits of mantissa
(Adam's own estimates of noisy gradients, and the only change; the adapter and the cursor are exact).
TensorBoard's event files are not carried: ``metrics.jsonl`` holds the same numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import torch

from alfrl.base.checkpoint import CHECKPOINTS, latest_checkpoint, read_jsonl

CARRY = "carry"


def compact_optimizer(source: Path, dest: Path) -> None:
    """``optimizer.pt`` with every floating-point state tensor but Adam's ``step`` in bfloat16."""
    state = torch.load(source, weights_only=True)
    for per_param in state["state"].values():
        for key, value in per_param.items():
            if key != "step" and torch.is_tensor(value) and value.is_floating_point():
                per_param[key] = value.to(torch.bfloat16)
    torch.save(state, dest)


def pack(run: Path, dest: Path) -> int:
    """Copy what resumes ``run`` into ``dest`` (see the module's docstring); returns the checkpoint's step."""
    last = latest_checkpoint(run)
    if last is None:
        raise SystemExit(f"{run} has no checkpoint yet: nothing to carry (it saves one every --checkpoint-every "
                         "steps; wait for the first, or start the run again on the next machine)")
    step = json.loads((last / "state.json").read_text())["step"]
    if dest.exists():
        shutil.rmtree(dest)
    checkpoint = dest / CHECKPOINTS / last.name
    checkpoint.mkdir(parents=True)
    shutil.copy2(run / "config.json", dest / "config.json")
    metrics = [m for m in read_jsonl(run / "metrics.jsonl") if m["step"] <= step]
    (dest / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if (run / "milestones").is_dir():
        shutil.copytree(run / "milestones", dest / "milestones")
    shutil.copytree(last / "adapter", checkpoint / "adapter")
    shutil.copy2(last / "state.json", checkpoint / "state.json")
    compact_optimizer(last / "optimizer.pt", checkpoint / "optimizer.pt")
    return step


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def save(run: Path, repo: Path) -> str:
    """Commit ``run``'s state under carry/<name>, then commit its removal; returns the first commit's hash."""
    name = run.resolve().name
    folder = repo / CARRY / name
    step = pack(run, folder)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    try:
        git(repo, "add", "-f", "--", f"{CARRY}/{name}")
        git(repo, "commit", "-q", "-m", f"carry: {name} at step {step} ({size / 1e6:.1f} MB; the next commit takes "
            f"it out of the tree, scripts/carry_run.py restore {run} brings it back)", "--", f"{CARRY}/{name}")
    except subprocess.CalledProcessError as e:  # nothing committed: leave nothing staged either
        subprocess.run(["git", "-C", str(repo), "reset", "-q", "--", f"{CARRY}/{name}"], check=False)
        shutil.rmtree(folder, ignore_errors=True)
        raise SystemExit(f"git could not commit the carried state: {e.stderr.strip()}") from None
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "rm", "-r", "-q", "--", f"{CARRY}/{name}")
    git(repo, "commit", "-q", "-m", f"carry: {name} out of the tree again (held by {commit[:10]})",
        "--", f"{CARRY}/{name}")
    if (repo / CARRY).is_dir() and not any((repo / CARRY).iterdir()):
        (repo / CARRY).rmdir()
    print(f"carried {run} at step {step} ({size / 1e6:.1f} MB) in commit {commit[:10]}; its removal is HEAD")
    return commit


def carried_commit(name: str, repo: Path) -> str | None:
    """The newest commit that added ``carry/<name>`` (in the history's order, not the clocks')."""
    found = git(repo, "log", "--format=%H", "-n", "1", "--topo-order", "--diff-filter=A", "--", f"{CARRY}/{name}")
    return found or None


def restore(run: Path, repo: Path, force: bool = False) -> int:
    """Write the newest carried state of ``run`` back into ``run``; returns its step."""
    name = run.resolve().name
    commit = carried_commit(name, repo)
    if commit is None:
        raise SystemExit(f"no commit added {CARRY}/{name}: save it first with scripts/carry_run.py save {run}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "carry.tar"
        archive.write_bytes(subprocess.run(["git", "-C", str(repo), "archive", commit, f"{CARRY}/{name}"],
                                           check=True, capture_output=True).stdout)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        source = Path(tmp) / CARRY / name
        step = json.loads(next(source.glob(f"{CHECKPOINTS}/step_*/state.json")).read_text())["step"]
        here = latest_checkpoint(run)
        if here is not None and not force:
            have = json.loads((here / "state.json").read_text())["step"]
            raise SystemExit(f"{run} already has a checkpoint (step {have}; the carried one is step {step}): "
                             "resume it as it is, or pass --force to replace the folder with the carried state")
        if run.exists() and any(run.iterdir()) and not force:
            raise SystemExit(f"{run} is not empty (a run without a checkpoint yet?): move it away, or pass --force "
                             "to replace it with the carried state")
        if run.exists():
            shutil.rmtree(run)
        run.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, run)
    print(f"restored {run} at step {step} from commit {commit[:10]}; continue it with the same command and --resume")
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("save", "restore"))
    parser.add_argument("run", type=Path, help="the run's output folder, e.g. runs/long_sft")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="the git checkout")
    parser.add_argument("--force", action="store_true", help="restore: replace a folder that has a checkpoint")
    args = parser.parse_args()
    if args.action == "save":
        save(args.run, args.repo)
    else:
        restore(args.run, args.repo, args.force)


if __name__ == "__main__":
    main()
