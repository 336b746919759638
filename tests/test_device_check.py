"""benchmarks/device_check.py, the GPU machine's check, run dry on the CPU as CI can: every check runs on small
sizes and passes, the report is written, and --only picks checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from alfrl.base.paths import REPO_ROOT

CHECK = [sys.executable, "benchmarks/device_check.py", "--dry-run", "--device", "cpu"]


def test_the_one_command_gpu_check_runs_dry_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.sh --dry-run, as CI runs it: every step of device_check.py passes on small shapes, each
    writes its JSON, and the summary and the versions are there: 7 files."""
    out = tmp_path / "out"
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=1200,
                          env={**os.environ, "OUT": str(out), "WHEELS": str(tmp_path / "none"), "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["basics.json", "env.json", "rollout.json", "sampler.json", "summary.json", "train.json",
                     "update.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and summary["dry_run"] and [s["exit_code"] for s in summary["steps"]] == [0] * 5
    assert sum(s["gpu_cap_seconds"] for s in summary["steps"]) <= 8 * 60  # room to rerun a failed step in the lease
    env = json.loads((out / "env.json").read_text())
    assert env["packages"]["torch"] == __import__("torch").__version__ and env["carried_wheels"] == []
    report = {"ok": True, "checks": {}}
    for step in ("basics", "sampler", "train", "update", "rollout"):
        part = json.loads((out / f"{step}.json").read_text())
        report["ok"] &= part["ok"] and part["dry_run"]
        report["checks"].update(part["checks"])
    checks = report["checks"]
    assert report["ok"] and set(checks) == {"attention", "batched_greedy", "ppo_gradients", "naive_gradient",
                                            "sampler_gap", "train_resume", "update_4b", "rollout_4b"}
    assert checks["naive_gradient"]["cosine"] > 0.9999 and checks["naive_gradient"]["fd_rel_error"] < 1e-3
    assert checks["sampler_gap"]["mean_abs_diff"] < 1e-5 and checks["sampler_gap"]["tokens"] == 4 * 2 * 24
    assert checks["update_4b"]["ceiling"] is None and checks["update_4b"]["under_ceiling"]  # none on a CPU
    cases = checks["attention"]["cases"]
    assert [(c["q"], c["dtype"]) for c in cases] == [(1, "float32"), (1, "bfloat16"), (300, "float32"),
                                                      (300, "bfloat16")]
    assert all(c["max_abs_diff"] < 1e-5 for c in cases if c["dtype"] == "float32")
    gradients = checks["ppo_gradients"]
    assert gradients["checkpointing_on_vs_off"]["cosine"] > 0.9999 and gradients["bf16_vs_fp32"]["cosine"] > 0.99
    tis = gradients["tis_cap_2"]  # ratio 1: (-(2 x 100) + 0.5 x e^-0.3 x 100) / 200, half the tokens capped at 2
    assert abs(tis["loss"] - (-200 + 50 * 2.718281828 ** -0.3) / 200) < 1e-4 and tis["tis_capped_fraction"] == 0.5
    assert checks["train_resume"]["updates"] == [1, 2] and checks["train_resume"]["same_log"]
    update = checks["update_4b"]
    assert update["tis_cap"] == 2.0 and update["gradient_checkpointing"] and update["lora_max_change"] > 0
    assert update["trajectory_tokens"] == [1200, 600] and len(update["lora_targets"]) == 7
    rollout = checks["rollout_4b"]
    assert all(rollout[engine]["columns"] >= 700 for engine in ("peft", "merged"))


def test_only_runs_the_named_checks_and_refuses_unknown_ones(tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run([*CHECK, "--only", "batched_greedy", "--out", str(out)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(json.loads(out.read_text())["checks"]) == {"batched_greedy"}
    wrong = subprocess.run([*CHECK, "--only", "decode", "--out", str(out)], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=120)
    assert wrong.returncode == 2 and "unknown check(s) ['decode']" in wrong.stderr


@pytest.fixture
def truth(monkeypatch):
    """benchmarks/device_check_truth.py, imported as device_check.py imports it (benchmarks/ on the path)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    import device_check_truth
    return device_check_truth


def test_the_naive_gradient_check_fails_on_a_shifted_mask(truth, monkeypatch):
    """A trainer that reads each sampled token's logprob one position late (its mask shifted right) trains the
    wrong tokens: the update's gradient no longer matches the one written from scratch."""
    import torch

    import alfrl.rl.ppo as ppo
    assert truth.check_naive_gradient(torch.device("cpu"))["ok"]
    real = ppo.sequence_logprobs

    def shifted(model, sequences, *args, masks=None, **kwargs):
        logp = real(model, sequences, *args, masks=[[0] + list(m[:-1]) for m in masks], **kwargs)
        return torch.nn.functional.pad(logp[:, 1:], (0, 1))  # the value of position i+1 read at i

    monkeypatch.setattr(ppo, "sequence_logprobs", shifted)
    planted = truth.check_naive_gradient(torch.device("cpu"))
    assert not planted["ok"] and planted["cosine"] < 0.9999


def test_the_sampler_gap_check_fails_on_a_wrong_temperature(truth, monkeypatch):
    """A sampler that samples and reports its logprobs at 0.8 of the temperature it was asked for: the trainer's
    logprobs at temperature 1 disagree with them beyond the stated limits."""
    import torch
    from device_check_scale import SMALL

    import alfrl.agent.sampler as sampler
    honest = truth.check_sampler_gap(torch.device("cpu"), SMALL.shape, 4, 100, 24)
    assert honest["ok"] and honest["mean_abs_diff"] < 1e-5 and honest["tis_weight_mean"] == pytest.approx(1.0)
    real = sampler.token_distribution
    monkeypatch.setattr(sampler, "token_distribution",
                        lambda logits, temperature, top_p: real(logits, temperature * 0.8, top_p))
    planted = truth.check_sampler_gap(torch.device("cpu"), SMALL.shape, 4, 100, 24)
    assert not planted["ok"] and planted["mean_abs_diff"] > truth.GAP_LIMITS["mean_abs_diff"]
