"""scripts/carry_run.py: a long run's state crosses machines in git history, never in the tracked tree."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from alfrl.base.checkpoint import load_state, read_jsonl, save_checkpoint
from tests.script_loader import load_script

carry = load_script("carry_run")


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def adam_after_steps(n: int):
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
    for _ in range(n):
        optimizer.zero_grad()
        layer(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
    return layer, optimizer


@pytest.fixture
def repo_and_run(tmp_path):
    """A git checkout whose runs/long_sft has metrics for 3 steps, a checkpoint at step 2 and a milestone."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "README.md").write_text("a course\n")
    (repo / ".gitignore").write_text("runs/\ncarry/\n")  # as the course's own
    git(repo, "add", "README.md", ".gitignore")
    git(repo, "commit", "-q", "-m", "start")
    run = repo / "runs" / "long_sft"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"out": "runs/long_sft", "lr": 3e-4}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3)))
    (run / "milestones" / "walkthroughs_00004").mkdir(parents=True)
    (run / "milestones" / "walkthroughs_00004" / "adapter_model.safetensors").write_bytes(b"milestone")
    _, optimizer = adam_after_steps(2)
    save_checkpoint(run, 2, lambda folder: (folder.mkdir(), (folder / "adapter_model.safetensors").write_bytes(b"w")),
                    optimizer, {"epoch": 0, "cursor": 8})
    return repo, run, optimizer


def test_save_commits_the_state_then_takes_it_out_of_the_tree(repo_and_run):
    repo, run, _ = repo_and_run
    commit = carry.save(run, repo)
    assert "carry/" not in git(repo, "ls-tree", "-r", "--name-only", "HEAD")  # the tree never keeps it
    held = git(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
    assert sorted(held) == [".gitignore", "README.md", "carry/long_sft/checkpoints/step_00002/adapter/adapter_model.safetensors",
                            "carry/long_sft/checkpoints/step_00002/optimizer.pt",
                            "carry/long_sft/checkpoints/step_00002/state.json", "carry/long_sft/config.json",
                            "carry/long_sft/metrics.jsonl",
                            "carry/long_sft/milestones/walkthroughs_00004/adapter_model.safetensors"]
    assert git(repo, "rev-parse", "HEAD~1") == commit and not (repo / "carry").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_restore_brings_back_the_checkpoint_with_adams_moments_rounded_to_bfloat16(repo_and_run, tmp_path):
    repo, run, optimizer = repo_and_run
    carry.save(run, repo)
    with pytest.raises(SystemExit, match="already has a checkpoint"):
        carry.restore(run, repo)  # never overwrites a run that can resume as it is
    moved = repo / "runs" / "elsewhere" / "long_sft"
    assert carry.restore(moved, repo) == 2
    assert [m["step"] for m in read_jsonl(moved / "metrics.jsonl")] == [1, 2]  # no line after the checkpoint
    assert (moved / "milestones/walkthroughs_00004/adapter_model.safetensors").read_bytes() == b"milestone"
    _, fresh = adam_after_steps(0)
    state = load_state(moved / "checkpoints" / "step_00002", fresh)
    assert state["step"] == 2 and state["cursor"] == 8
    for p, q in zip(optimizer.state.values(), fresh.state.values()):
        assert float(q["step"]) == float(p["step"]) == 2
        for key in ("exp_avg", "exp_avg_sq"):
            assert q[key].dtype == torch.float32  # cast back to the parameters' dtype on load
            assert torch.equal(q[key], p[key].to(torch.bfloat16).float())
            assert not torch.equal(q[key], p[key])  # rounded: the one thing a carried run changes


def test_a_run_without_a_checkpoint_or_a_carry_says_what_to_do(tmp_path, repo_and_run):
    repo, run, _ = repo_and_run
    with pytest.raises(SystemExit, match="save it first"):
        carry.restore(run, repo)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no checkpoint yet"):
        carry.save(empty, repo)
