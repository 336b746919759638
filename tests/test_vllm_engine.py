"""The vLLM client's logic, against a small fake of vLLM's HTTP API (what requests it sends, how it
reads the answers, how adapters are named and replaced). The real server is tested in
tests/test_vllm_real.py, which skips when the vLLM venv is absent."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from alfrl.agent.sampler import SampleConfig, new_group_session
from alfrl.agent.vllm_engine import VLLMEngine, VLLMSession, completion_body, request_seed, sample_from_choice

STOP = {2, 7}


class FakeVLLM(BaseHTTPRequestHandler):
    """Replies to /v1/completions with the prompt's last token + 1, +2, then stop id 7 (logprob -0.5 each);
    records every request body; load/unload keep a set of served adapter names."""

    requests: list[tuple[str, dict]] = []
    served: set[str] = {"base"}
    failures = 0
    """The next this many completion requests get a 503 (an overloaded or restarting server)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append((self.path, body))
        if self.path == "/v1/completions" and FakeVLLM.failures > 0:
            FakeVLLM.failures -= 1
            self.send_error(503, "busy")
        elif self.path == "/v1/completions":
            last = body["prompt"][-1]
            tokens = [last + 1, last + 2, 7][:body["max_tokens"]]
            choice = {"token_ids": tokens, "logprobs": {"token_logprobs": [-0.5] * len(tokens)}}
            self._answer({"choices": [choice]})
        elif self.path == "/v1/load_lora_adapter":
            if body["lora_name"] in self.served:
                self.send_error(400, "already loaded")
                return
            self.served.add(body["lora_name"])
            self._answer("Success")
        elif self.path == "/v1/unload_lora_adapter":
            self.served.discard(body["lora_name"])
            self._answer("Success")

    def do_GET(self):  # noqa: N802
        self._answer({"data": [{"id": name} for name in sorted(self.served)]})

    def _answer(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake():
    FakeVLLM.requests, FakeVLLM.served, FakeVLLM.failures = [], {"base"}, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield VLLMEngine(f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()


def test_a_request_carries_token_ids_stop_ids_seed_and_the_sampled_tokens_logprob():
    body = completion_body([5, 6], SampleConfig(temperature=0.6, top_p=0.9, max_new_tokens=48), STOP, 11, "m")
    assert body == {"model": "m", "prompt": [5, 6], "max_tokens": 48, "temperature": 0.6, "top_p": 0.9,
                    "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                    "frequency_penalty": 0.0, "seed": 11, "stop_token_ids": [2, 7], "logprobs": 0, "return_token_ids": True,
                    "skip_special_tokens": False, "include_stop_str_in_output": True}
    greedy = completion_body([5], SampleConfig(temperature=0.0, top_p=0.9), STOP, 0, "m")
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0  # top-p means nothing when greedy


def test_the_server_takes_no_sampling_defaults_from_the_models_generation_config(tmp_path, monkeypatch):
    """A model's generation_config.json (Qwen3's: top_k 20) must not reach the sampler: the server is told to
    use vLLM's own neutral defaults, and every request names its settings anyway."""
    import alfrl.agent.vllm_engine as engine
    monkeypatch.setattr(engine, "missing_reason", lambda venv=None: None)
    command = engine.VLLMServer(tmp_path, venv=tmp_path).command()
    assert command[command.index("--generation-config") + 1] == "vllm"


def test_a_choice_becomes_a_sample_that_ends_on_its_stop_token_or_its_budget():
    eos = sample_from_choice({"token_ids": [4, 7], "logprobs": {"token_logprobs": [-1.0, -0.25]}}, STOP, 3)
    assert (eos.tokens, eos.logprobs, eos.stopped_on, eos.prefilled) == ([4, 7], [-1.0, -0.25], "eos", 3)
    cut = sample_from_choice({"token_ids": [4, 5], "logprobs": {"token_logprobs": [-1.0, -0.25]}}, STOP, 0)
    assert cut.stopped_on == "budget"
    with pytest.raises(RuntimeError, match="2 tokens but 1 logprobs"):
        sample_from_choice({"token_ids": [4, 5], "logprobs": {"token_logprobs": [-1.0]}}, STOP, 0)


def test_a_session_sends_one_request_per_live_branch_and_counts_only_new_prompt_tokens(fake):
    session = VLLMSession(fake, STOP, seeds=[100, 200])
    first = session.sample({0: [1, 2, 3], 1: [1, 2, 3]}, SampleConfig(max_new_tokens=8))
    assert first[0].tokens == [4, 5, 7] and first[0].prefilled == 3 and first[0].stopped_on == "eos"
    seeds = sorted(body["seed"] for _, body in FakeVLLM.requests)
    assert seeds == [request_seed(100, 0), request_seed(200, 0)]
    session.drop([1])
    # Turn 2 of branch 0: its prompt extends what it read (3 prompt + 3 reply tokens) by 2 tool tokens.
    second = session.sample({0: [1, 2, 3, 4, 5, 7, 8, 9]}, SampleConfig(max_new_tokens=2))
    assert second[0].prefilled == 2 and second[0].tokens == [10, 11] and second[0].stopped_on == "budget"
    assert FakeVLLM.requests[-1][1]["seed"] == request_seed(100, 1) != request_seed(200, 1)
    with pytest.raises(ValueError, match="live branches are \\[0\\]"):
        session.sample({0: [1], 1: [1]}, SampleConfig())
    with pytest.raises(ValueError, match="draft-tokens"):
        session.sample({0: [1]}, SampleConfig(draft_tokens=4))


def test_each_update_serves_a_never_reused_adapter_name_and_unloads_the_last(fake, tmp_path):
    names = [fake.load_adapter(tmp_path / f"update{i}") for i in range(3)]
    assert len(set(names)) == 3 and fake.loaded == names and fake.model == names[-1]
    assert fake.served_models() == sorted(["base", names[-1]])  # the old ones are gone
    loads = [body for path, body in FakeVLLM.requests if path == "/v1/load_lora_adapter"]
    assert [b["lora_path"] for b in loads] == [str((tmp_path / f"update{i}").resolve()) for i in range(3)]
    fake.complete([1], SampleConfig(), STOP, 0)
    assert FakeVLLM.requests[-1][1]["model"] == names[-1]  # requests use the newest adapter


def test_a_policy_with_an_engine_gets_its_sessions_from_it(fake, policy):
    from dataclasses import replace
    on_vllm = replace(policy, engine=fake)
    session = new_group_session(on_vllm, seeds=[1, 2, 3])
    assert isinstance(session, VLLMSession) and session.branches == [0, 1, 2]
    assert session.stop_ids == {policy.tokenizer.eos_token_id, policy.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert not isinstance(new_group_session(policy, seeds=[1]), VLLMSession)


def test_the_served_adapter_changes_only_when_the_weights_do(fake, policy, tmp_path):
    from dataclasses import replace

    from alfrl.agent.vllm_engine import serve_weights
    on_vllm = replace(policy, engine=fake)
    serve_weights(on_vllm, tmp_path, 0)  # before update 1's rollouts
    serve_weights(on_vllm, tmp_path, 0)  # an evaluation of the same weights: nothing to load
    assert len(fake.loaded) == 1 and fake.version == 0
    serve_weights(on_vllm, tmp_path, 1)  # after update 1
    assert len(fake.loaded) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["weights1"]
    assert (tmp_path / "weights1" / "adapter_config.json").is_file()


def test_a_vllm_training_config_that_cannot_work_is_refused(tmp_path):
    from alfrl.training.train_config import TrainConfig, check_config
    with pytest.raises(ValueError, match="--sampler must be builtin or vllm"):
        check_config(TrainConfig(sampler="sglang", init_adapter=None))
    with pytest.raises(ValueError, match="--old-logprobs trainer"):
        check_config(TrainConfig(sampler="vllm", old_logprobs="sampler", init_adapter=None))
    with pytest.raises(ValueError, match="leave them at their defaults"):
        check_config(TrainConfig(sampler="vllm", draft_tokens=4, init_adapter=None))


def test_the_server_is_sized_to_the_adapters_rank(policy):
    from alfrl.agent.vllm_engine import lora_rank
    assert lora_rank(policy) == 8  # the fixture's rank 4, rounded up to the smallest rank vLLM takes


def test_the_servers_gpu_settings_come_from_the_training_flags(policy, tmp_path, monkeypatch):
    """Memory share, tensor parallelism, the server's own GPUs and its rows reach the command and its environment."""
    import alfrl.agent.vllm_engine as engine
    from alfrl.training.train import TrainConfig
    monkeypatch.setattr(engine, "missing_reason", lambda venv=None: None)
    config = TrainConfig(sampler="vllm", k=8, groups_per_batch=2, vllm_gpu_memory=0.9, vllm_tensor_parallel=2,
                         vllm_gpus="2,3", init_adapter=None)
    server = engine.VLLMServer(tmp_path, engine.server_config(policy, config), venv=tmp_path)
    command = server.command()
    flag = {name: command[command.index(name) + 1] for name in
            ("--gpu-memory-utilization", "--tensor-parallel-size", "--max-num-seqs", "--max-model-len")}
    assert flag == {"--gpu-memory-utilization": "0.9", "--tensor-parallel-size": "2", "--max-num-seqs": "16",
                    "--max-model-len": str(config.max_trajectory_tokens + config.max_new_tokens)}
    assert server.environment()["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert engine.server_config(policy, replace(config, vllm_max_seqs=64)).max_num_seqs == 64
    inherited = engine.VLLMServer(tmp_path, venv=tmp_path).environment()  # no --vllm-gpus: the trainer's GPUs
    assert inherited.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_an_external_server_is_attached_not_started(fake, policy):
    from copy import copy

    from alfrl.agent.vllm_engine import start_for
    from alfrl.training.train import TrainConfig
    mine = copy(policy)
    assert start_for(mine, TrainConfig(sampler="vllm", vllm_url=fake.url + "/", init_adapter=None), "unused.log") is None
    assert mine.engine.url == fake.url


def test_server_flags_without_vllm_are_refused():
    from alfrl.training.train import TrainConfig, check_config
    for flags in ({"vllm_url": "http://gpu1:8000"}, {"vllm_lockstep": True}):
        with pytest.raises(ValueError, match="add --sampler vllm"):
            check_config(TrainConfig(**flags, init_adapter=None))
    assert TrainConfig(sampler="vllm", vllm_lockstep=True).rollout(1).lockstep
    assert not TrainConfig(sampler="vllm").rollout(1).lockstep

FAST = (0.01, 0.01)
"""Retry delays for the tests (the engine's own are 1, 2, 4 and 8 s)."""


def test_a_failed_request_is_retried_and_a_bad_one_is_not(fake):
    engine = VLLMEngine(fake.url, delays=FAST)
    FakeVLLM.failures = 2  # two 503s, then an answer: within the retries
    sample = engine.complete([5], SampleConfig(temperature=0.6, max_new_tokens=8), STOP, seed=1)
    assert sample.tokens == [6, 7, 7] and len([r for r in FakeVLLM.requests if r[0] == "/v1/completions"]) == 3
    FakeVLLM.failures = 3  # one more than the retries
    from alfrl.agent.vllm_engine import ServerUnreachable
    with pytest.raises(ServerUnreachable, match="failed 3 times"):
        engine.complete([5], SampleConfig(temperature=0.6, max_new_tokens=8), STOP, seed=1)
    engine.load_adapter("/tmp/a")
    FakeVLLM.served.add("taken")
    with pytest.raises(RuntimeError, match="answered 400"):  # a bad request is not retried
        engine._post("/v1/load_lora_adapter", {"lora_name": "taken", "lora_path": "/tmp/a"})


def test_a_dead_server_is_replaced_and_served_the_current_adapter(fake, tmp_path):
    """The first server stops answering: the engine asks for a new one, loads the adapter it was serving under a
    new name, and sends the completion again with the same seed."""
    from alfrl.agent.vllm_engine import free_port
    restarts = []

    def revive() -> str:
        restarts.append(1)
        return fake.url
    engine = VLLMEngine(f"http://127.0.0.1:{free_port()}", revive=revive, delays=FAST)  # nothing listens there
    engine.adapter_dir, engine.model = str(tmp_path), "alfrl-1-dead"
    sample = engine.complete([5], SampleConfig(temperature=0.6, max_new_tokens=8), STOP, seed=9)
    assert sample.tokens == [6, 7, 7] and restarts == [1] and engine.url == fake.url
    (load, loaded), (path, completion) = FakeVLLM.requests
    assert load == "/v1/load_lora_adapter" and loaded["lora_path"] == str(tmp_path.resolve())
    assert path == "/v1/completions" and completion["model"] == loaded["lora_name"] == engine.model
    assert completion["seed"] == 9


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_server_dies_with_the_process_that_started_it(tmp_path):
    """SIGKILL the trainer (here: a process that started a stand-in server and waits): the server ends too."""
    import subprocess

    starter = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "from alfrl.agent.vllm_engine import spawn\n"
        "server = spawn([sys.executable, '-c', 'import time; time.sleep(300)'], subprocess.DEVNULL, dict(os.environ))\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(300)\n")], stdout=subprocess.PIPE, text=True)
    server = int(starter.stdout.readline())
    os.kill(server, 0)  # it runs
    assert _ends_with(starter, server)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_server_restarted_from_a_request_thread_outlives_that_thread_not_its_trainer():
    """A dead server is restarted from whichever request thread found it dead. The parent-death signal is tied to
    the thread that forked: the new server must survive that thread's end, and still end with its trainer."""
    import subprocess
    import time

    starter = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, threading, time\n"
        "from alfrl.agent.vllm_engine import spawn\n"
        "pids = []\n"
        "def restart():\n"
        "    pids.append(spawn([sys.executable, '-c', 'import time; time.sleep(300)'], subprocess.DEVNULL,\n"
        "                      dict(os.environ)).pid)\n"
        "    time.sleep(3)  # the rest of the rollout: the launcher has asked for its signal by now\n"
        "thread = threading.Thread(target=restart)\n"
        "thread.start()\n"
        "thread.join()\n"
        "print(pids[0], flush=True)\n"
        "time.sleep(300)\n")], stdout=subprocess.PIPE, text=True)
    server = int(starter.stdout.readline())
    time.sleep(2)  # time for a parent-death signal to land, had the thread's end sent one
    assert _running(server), "the server died with the thread that started it"
    assert _ends_with(starter, server)


def _ends_with(starter, server: int) -> bool:
    """SIGKILL ``starter``; whether process ``server`` ends within 20 s."""
    import signal
    import time
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _running(server):
        time.sleep(0.1)
    return not _running(server)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


class StandInEngine:
    """A vLLM stand-in for the turn loop: a request's reply depends only on its seed (a tool call, valid or not,
    and a length). Branch 1's first answer is slow: it waits until branch 0 has sent its 4th request, or
    ``patience`` seconds. Every send and answer is logged in order."""

    ACTIONS = ["look", "inventory", "fly to the moon", None]  # None: a reply with no tool call

    def __init__(self, tokenizer, patience: float):
        self.tokenizer, self.patience, self.log = tokenizer, patience, []
        self.lock, self.fourth_sent = threading.Lock(), threading.Event()

    def complete(self, prompt, cfg, stop_ids, seed, prefilled=None):
        import random
        import time

        from alfrl.agent.sampler import Sample
        from alfrl.rl.scripted import tool_call
        rng = random.Random(seed)
        branch = next(b for b, s in self.seeds.items() if seed in {request_seed(s, n) for n in range(50)})
        with self.lock:
            self.log.append(("send", branch, len(prompt)))
            if sum(e[:2] == ("send", 0) for e in self.log) == 4:
                self.fourth_sent.set()
        if branch == 1 and sum(e[:2] == ("send", 1) for e in self.log) == 1:
            self.fourth_sent.wait(self.patience)
        time.sleep(0.01 * branch)
        action = rng.choice(self.ACTIONS)
        text = "Let me " + "think " * rng.randrange(8) + (tool_call(action) if action else "look around")
        tokens = self.tokenizer.encode(text, add_special_tokens=False)[:cfg.max_new_tokens]
        tokens += [sorted(stop_ids)[0]] if len(tokens) < cfg.max_new_tokens else []
        with self.lock:
            self.log.append(("answer", branch, len(prompt)))
        return Sample(tokens=tokens, logprobs=[-0.01 * (i + 1) for i in range(len(tokens))],
                      stopped_on="eos" if tokens[-1] in stop_ids else "budget", prefilled=prefilled or 0)

    def session(self, stop_ids, seeds):
        self.seeds = dict(enumerate(seeds))
        return VLLMSession(self, stop_ids, seeds)


def test_rows_without_a_barrier_play_the_same_episodes_and_do_not_wait_for_each_other(policy, tiny_games):
    from alfrl.rl.rollout import RolloutConfig, rollout_group
    game = tiny_games.games("valid_seen")[0]
    config = RolloutConfig(k=3, max_steps=4, max_new_tokens=40, max_trajectory_tokens=2000, workers=0, seed=5)
    played = {}
    for lockstep in (True, False):
        engine = StandInEngine(policy.tokenizer, patience=0.5 if lockstep else 60)
        played[lockstep] = (rollout_group(replace(policy, engine=engine), game, replace(config, lockstep=lockstep)),
                            engine.log)
    (barred, barred_log), (free, free_log) = played[True], played[False]
    for a, b in zip(barred, free):  # the same replies, so the same episodes, token for token
        assert (a.tokens, a.mask, a.logprobs, a.end_reason, a.won) == (b.tokens, b.mask, b.logprobs, b.end_reason,
                                                                       b.won)
        assert [t.action for t in a.turns] == [t.action for t in b.turns]
    assert {t.end_reason for t in free} == {"max_steps"} and sum(t.invalid for t in free) > 0

    def sends_before_slow_answer(log):
        """Requests the fast branch 0 sent before the slow branch 1's first answer."""
        first_slow = log.index(next(e for e in log if e[:2] == ("answer", 1)))
        return sum(e[:2] == ("send", 0) for e in log[:first_slow])

    assert sends_before_slow_answer(barred_log) == 1  # lockstep: turn 2 waits for the slowest reply of turn 1
    assert sends_before_slow_answer(free_log) == 4  # no barrier: branch 0 went on to its last turn meanwhile


def test_stopping_a_server_whose_api_process_was_killed_ends_the_rest_of_its_group(tmp_path):
    """vLLM's API process starts an engine core that can outlive it: stop() ends the whole process group."""
    import signal
    import subprocess
    import time

    from alfrl.agent.vllm_engine import VLLMServer, spawn
    pid_file = tmp_path / "core.pid"
    leader = ("import subprocess, sys, time\n"
              "core = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(core.pid))\n"
              "time.sleep(300)\n")
    server = object.__new__(VLLMServer)  # a stand-in: no vLLM venv needed
    server.process = spawn([sys.executable, "-c", leader], subprocess.DEVNULL, dict(os.environ))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.1)
    core = int(pid_file.read_text())
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    assert _running(core)  # the API process is gone, its engine core is not
    server.stop()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _running(core):
        time.sleep(0.1)
    assert not _running(core) and server.process is None
