"""benchmarks/device_check.py, the GPU machine's check, run dry on the CPU as CI can: every check that
needs no GPU runs on small sizes and passes; the 4B timings are skipped with the reason in the report."""

from __future__ import annotations

import json
import subprocess
import sys

from alfrl.paths import REPO_ROOT


def test_the_device_check_runs_dry_on_the_cpu(tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "benchmarks/device_check.py", "--dry-run", "--device", "cpu", "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] and set(report["checks"]) == {"attention", "batched_greedy", "ppo_step"}
    assert "CUDA" in report["skipped"]["decode_4b"]
    cases = report["checks"]["attention"]["cases"]
    assert [(c["q"], c["dtype"]) for c in cases] == [(1, "float32"), (1, "bfloat16"), (300, "float32"),
                                                      (300, "bfloat16")]
    assert all(c["max_abs_diff"] < 1e-5 for c in cases if c["dtype"] == "float32")
    runs = report["checks"]["ppo_step"]["gradient_checkpointing"]
    assert runs["off"]["loss"] == -0.25 == runs["on"]["loss"]  # ratio 1: -(100 x 1 - 100 x 0.5) / 200 tokens
    assert runs["off"]["lora_dtypes"] == ["torch.float32"] and runs["off"]["lora_max_change"] > 0
