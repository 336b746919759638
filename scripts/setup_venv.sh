#!/usr/bin/env bash
# Create (if needed) the course virtualenv in <repo>/.venv and install alfrl
# with its test extras. Safe to run again: it does nothing when the install is
# already up to date (stamp file .venv/.alfrl-installed newer than pyproject.toml).
#
# Environment variables (all optional):
#   ALFRL_PYTHON           interpreter to build the venv with (default: python3,
#                          else the newest of python3.13 .. python3.10 found)
#   ALFRL_TORCH_INDEX_URL  PyTorch wheel index to take torch==2.13.0 from first
#                          (a CUDA build or the CPU-only build; see README)
set -euo pipefail

say() { printf '[setup_venv] %s\n' "$*"; }
die() { printf '[setup_venv] ERROR: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
STAMP="$VENV/.alfrl-installed"
TORCH_VERSION="2.13.0"
TORCH_INDEX="${ALFRL_TORCH_INDEX_URL:-}"

py_ok() {  # $1: interpreter; true if it exists and is Python >= 3.10
    command -v "$1" >/dev/null 2>&1 &&
        "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}

# 1. the virtualenv
if [[ -x "$VPY" ]]; then
    py_ok "$VPY" || die "$VENV uses $("$VPY" -V 2>&1); alfrl needs Python >= 3.10. Remove .venv and rerun."
    say "using existing $VENV ($("$VPY" -V 2>&1))"
else
    PY=""
    if [[ -n "${ALFRL_PYTHON:-}" ]]; then
        py_ok "$ALFRL_PYTHON" || die "ALFRL_PYTHON=$ALFRL_PYTHON is missing or older than Python 3.10."
        PY="$ALFRL_PYTHON"
    else
        for cand in python3 python3.13 python3.12 python3.11 python3.10; do
            if py_ok "$cand"; then PY="$cand"; break; fi
        done
    fi
    [[ -n "$PY" ]] || die "no Python >= 3.10 found (tried python3, python3.13 .. python3.10). Install one, or set ALFRL_PYTHON=/path/to/python3."
    [[ -e "$VENV" ]] && { say "removing incomplete $VENV"; rm -rf "$VENV"; }
    say "creating $VENV with $(command -v "$PY") ($("$PY" -V 2>&1))"
    "$PY" -m venv "$VENV" ||
        die "'$PY -m venv' failed. On Debian/Ubuntu install the venv module: sudo apt-get install python3-venv"
fi

# 2. the install (skipped when the stamp is newer than pyproject.toml and was
#    made with the same torch index choice)
want_stamp="torch_index=${TORCH_INDEX}"
if [[ -f "$STAMP" && "$STAMP" -nt "$ROOT/pyproject.toml" && "$(cat "$STAMP")" == "$want_stamp" ]]; then
    say "alfrl already installed in .venv (stamp newer than pyproject.toml); nothing to do"
    exit 0
fi

start=$SECONDS
if [[ -n "$TORCH_INDEX" ]]; then
    say "installing torch==$TORCH_VERSION from ALFRL_TORCH_INDEX_URL=$TORCH_INDEX"
    "$VPY" -m pip install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX"
fi
say "installing alfrl and its pinned dependencies: pip install -e \".[test]\" (first time: a few minutes)"
"$VPY" -m pip install -e ".[test]"
printf '%s\n' "$want_stamp" > "$STAMP"
say "torch $("$VPY" -c 'import torch; print(torch.__version__, "(CUDA available)" if torch.cuda.is_available() else "(CPU only)")')"
say "done in $((SECONDS - start)) s; interpreter: $VPY"
