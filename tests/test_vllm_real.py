"""vLLM as the rollout engine, for real: a `vllm serve` of the bundled model on this machine (CPU or GPU).

Skips when the vLLM venv is absent (CI, most laptops). To run: `bash scripts/setup_vllm.sh`, then
`.venv/bin/python -m pytest tests/test_vllm_real.py` (the server's first start takes about a minute).
ALFRL_VLLM_THREADS=N gives the server N threads (default: vLLM's, every core)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from alfrl.agent.models import load_policy, resolve_adapter, resolve_model, save_adapter
from alfrl.agent.vllm_engine import VLLMConfig, VLLMEngine, VLLMServer, missing_reason
from alfrl.rl.logprobs import sequence_logprobs
from alfrl.rl.rollout import RolloutConfig, rollout_group

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

LOGPROB_TOLERANCE = 2e-3
"""Largest |vLLM - trainer| logprob per token, in nats, both in float32: different kernels, same math."""
GREEDY = RolloutConfig(k=2, temperature=0.0, max_steps=4, max_new_tokens=48, max_trajectory_tokens=3000)


@pytest.fixture(scope="module")
def engine():
    config = VLLMConfig(max_model_len=4096, kv_cache_gb=1, threads=int(os.environ.get("ALFRL_VLLM_THREADS", "0")))
    with VLLMServer(resolve_model("bundled"), config) as server:
        yield VLLMEngine(server.url)


@pytest.fixture(scope="module")
def warm():
    return load_policy(lora="warmstart_epoch")


@pytest.fixture(scope="module")
def game(tiny_games):
    return tiny_games.games("valid_seen")[0]


def sampled_gaps(policy, trajectories, temperature: float) -> list[float]:
    """|sampler logprob - trainer logprob| on every sampled token of ``trajectories``."""
    with torch.no_grad():
        trainer = sequence_logprobs(policy.model, [t.tokens for t in trajectories], temperature=temperature)
    return [abs(t.logprobs[i] - float(trainer[row, i])) for row, t in enumerate(trajectories)
            for i, m in enumerate(t.mask) if m]


def test_greedy_replies_through_vllm_equal_the_built_in_samplers(engine, warm, game):
    engine.load_adapter(resolve_adapter("warmstart_epoch"))
    builtin = rollout_group(warm, game, GREEDY)
    served = rollout_group(replace(warm, engine=engine), game, GREEDY)
    assert [t.tokens for t in served] == [t.tokens for t in builtin]
    assert [t.mask for t in served] == [t.mask for t in builtin]
    assert [t.won for t in served] == [t.won for t in builtin]
    assert max(sampled_gaps(warm, served, 1.0)) < LOGPROB_TOLERANCE  # greedy logprobs are reported at T=1


def test_sampled_logprobs_are_the_processed_distributions(engine, warm, game):
    engine.load_adapter(resolve_adapter("warmstart_epoch"))
    sampled = rollout_group(replace(warm, engine=engine), game, replace(GREEDY, temperature=0.6, seed=3))
    gaps = sampled_gaps(warm, sampled, 0.6)
    assert len(gaps) > 20 and max(gaps) < LOGPROB_TOLERANCE


def test_after_an_update_vllm_serves_the_new_adapter_under_a_new_name(engine, warm, game, tmp_path):
    import copy

    policy = copy.deepcopy(warm)
    engine.load_adapter(resolve_adapter("warmstart_epoch"))
    old_name = engine.model
    trajectory = rollout_group(replace(policy, engine=engine), game, replace(GREEDY, k=1))[0]
    # One update: a gradient step that makes the trajectory's own replies likelier.
    optimizer = torch.optim.Adam([p for p in policy.model.parameters() if p.requires_grad], lr=1e-3)
    logp = sequence_logprobs(policy.model, [trajectory.tokens])[0]
    mask = torch.tensor(trajectory.mask, dtype=torch.float32)
    (-(logp * mask).sum() / mask.sum()).backward()
    optimizer.step()
    new_name = engine.load_adapter(save_adapter(policy, tmp_path / "update1"))
    assert new_name != old_name and new_name in engine.served_models() and old_name not in engine.served_models()
    prompt, reply = trajectory.tokens[:trajectory.prompt_tokens], trajectory.tokens[trajectory.prompt_tokens:]
    served = engine.token_logprobs(prompt, reply)
    with torch.no_grad():
        before = sequence_logprobs(warm.model, [trajectory.tokens])[0, trajectory.prompt_tokens:].tolist()
        after = sequence_logprobs(policy.model, [trajectory.tokens])[0, trajectory.prompt_tokens:].tolist()
    assert max(abs(a - b) for a, b in zip(after, before)) > 20 * LOGPROB_TOLERANCE  # the update moved them
    assert max(abs(s - a) for s, a in zip(served, after)) < LOGPROB_TOLERANCE


def test_a_training_run_samples_on_vllm_and_serves_each_updates_adapter(tiny_games, tmp_path):
    import json

    from alfrl.training.train import TrainConfig, train

    config = TrainConfig(run_dir=str(tmp_path / "run"), data_dir=str(tiny_games.root), split="valid_seen",
                         updates=2, games_per_update=2, k=4, max_steps=4, max_new_tokens=48, temperature=1.0,
                         max_trajectory_tokens=3000, lr=1e-3, lora_rank=4, lora_alpha=8, workers=0,
                         init_adapter="warmstart_epoch", max_expert_steps=None, max_receptacles=None,
                         sampler="vllm", tis_cap=2.0, subgoal_reward=0.1,
                         threads=int(os.environ.get("ALFRL_VLLM_THREADS", "0")) or None)
    history = train(config, progress=False)
    assert [m["step"] for m in history] == [1, 2]
    assert all(m["trajectories"] == 8 for m in history)
    trained = [m for m in history if "sampler_abs_logprob_diff" in m]  # updates whose group had a reward spread
    assert trained
    for m in trained:  # the sampler/trainer gap is logged; vLLM's float32 logprobs are the trainer's, nearly
        assert m["sampler_abs_logprob_diff"] < LOGPROB_TOLERANCE and abs(m["sampler_ratio_mean"] - 1) < 0.01
    served = sorted(p.name for p in (tmp_path / "run" / "vllm_adapter").iterdir())
    assert served == ["weights1"]  # update 2's rollouts sampled the weights after update 1; older ones deleted
    assert (tmp_path / "run" / "vllm_serve.log").stat().st_size > 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sampler"] == "vllm"


def test_a_models_own_top_k_never_reaches_the_sampler(warm, game, tmp_path):
    """A copy of the bundled model whose generation_config.json asks for top_k 2 (Qwen3's asks for 20; on a model
    as confident as the warm start, 20 tokens hold nearly all the mass, so only a small k shows the harm): served
    the course's way, the sampled tokens' logprobs are still the trainer's full softmax at the temperature. Had the
    server sampled from the top 2, each logprob would be renormalised over 2 tokens and sit above the trainer's."""
    import json
    import shutil

    model = tmp_path / "bundled-top-k-2"
    shutil.copytree(resolve_model("bundled"), model)
    config_file = model / "generation_config.json"
    generation = json.loads(config_file.read_text()) if config_file.is_file() else {}
    config_file.write_text(json.dumps({**generation, "top_k": 2, "do_sample": True}))
    config = VLLMConfig(max_model_len=4096, kv_cache_gb=1, threads=int(os.environ.get("ALFRL_VLLM_THREADS", "0")))
    with VLLMServer(model, config) as server:
        engine = VLLMEngine(server.url)
        engine.load_adapter(resolve_adapter("warmstart_epoch"))
        sampled = rollout_group(replace(warm, engine=engine), game, replace(GREEDY, temperature=1.0, seed=5))
    gaps = sampled_gaps(warm, sampled, 1.0)
    assert len(gaps) > 20 and max(gaps) < LOGPROB_TOLERANCE


def test_a_server_killed_mid_rollout_is_replaced_and_the_episodes_are_unchanged(warm, game):
    """The fault drill on a real server: kill it while a (barrier-free) rollout is in flight. The requests fail,
    a new server starts on a new port, is served the same adapter, and the requests are sent again with their
    seeds: the greedy episodes are those of an undisturbed rollout."""
    config = VLLMConfig(max_model_len=4096, kv_cache_gb=1, threads=int(os.environ.get("ALFRL_VLLM_THREADS", "0")))
    with VLLMServer(resolve_model("bundled"), config) as server:
        engine = VLLMEngine(server.url, revive=server.restart, delays=(0.5, 0.5))
        engine.load_adapter(resolve_adapter("warmstart_epoch"))
        policy = replace(warm, engine=engine)
        undisturbed = rollout_group(policy, game, GREEDY)
        first_url, first_name, complete, calls = server.url, engine.model, engine.complete, []

        first_group = os.getpgid(server.process.pid)

        def complete_then_kill(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:  # a branch's second turn: kill the server under every request in flight
                server.process.kill()
            return complete(*args, **kwargs)

        engine.complete = complete_then_kill
        disturbed = rollout_group(policy, game, GREEDY)
        assert server.starts == 2 and engine.url == server.url != first_url
        assert engine.model != first_name and engine.model in engine.served_models()
        assert not _live_in_group(first_group)  # nothing of the killed server is left
    assert [t.tokens for t in disturbed] == [t.tokens for t in undisturbed]
    assert [t.won for t in disturbed] == [t.won for t in undisturbed]


def test_a_sigkilled_trainer_takes_its_server_down_and_resumes_where_it_stopped(tiny_games, tmp_path):
    """SIGKILL a `--sampler vllm` training run after update 1's checkpoint: its server (the API process and the
    engine core it started, one process group) ends with it; `--resume` starts a new one and trains update 2
    only: no update lost or repeated."""
    import json
    import re
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    config = dict(run_dir=str(run), data_dir=str(tiny_games.root), split="valid_seen", updates=2, games_per_update=1,
                  k=4, max_steps=3, max_new_tokens=48, temperature=1.0, max_trajectory_tokens=3000, lora_rank=4,
                  lora_alpha=8, workers=0, init_adapter="warmstart_epoch", max_expert_steps=None, max_receptacles=None,
                  sampler="vllm", threads=int(os.environ.get("ALFRL_VLLM_THREADS", "0")) or None)
    log = tmp_path / "trainer.log"
    with open(log, "w") as out:
        trainer = subprocess.Popen([sys.executable, "-c", (
            "import json, sys\n"
            "from alfrl.training.train import TrainConfig, train\n"
            "train(TrainConfig(**json.loads(sys.argv[1])), progress=False)\n"), json.dumps(config)],
            stdout=out, stderr=subprocess.STDOUT)
    deadline, group = time.monotonic() + 900, None
    while time.monotonic() < deadline and not (run / "checkpoints" / "step_00001").is_dir():
        if group is None and (port := re.search(r"answering at http://127\.0\.0\.1:(\d+)", log.read_text())):
            group = _server_group(port.group(1))
        time.sleep(0.5)
    assert group is not None and (run / "checkpoints" / "step_00001").is_dir(), log.read_text()[-3000:]
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    first = (run / "metrics.jsonl").read_text().splitlines()
    assert len(first) == 1, "the run ended before the kill; nothing is left to resume"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _live_in_group(group):
        time.sleep(0.5)
    assert not _live_in_group(group), "the killed trainer's vLLM server still runs"
    resumed = subprocess.run([sys.executable, "-m", "alfrl", "train", "--resume", str(run), "--updates", "2"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2] and lines[0] == first[0]


def _live_processes():
    """(pid, process group, argv) of every live process (not a zombie)."""
    from pathlib import Path
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            yield int(proc.name), os.getpgid(int(proc.name)), (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue


def _server_group(port: str) -> int | None:
    """The process group of the vLLM server answering on ``port`` (it runs in a session of its own)."""
    return next((group for _, group, argv in _live_processes()
                 if b"vllm.entrypoints.openai.api_server" in argv and port.encode() in argv), None)


def _live_in_group(group: int) -> list[int]:
    return [pid for pid, g, _ in _live_processes() if g == group]
