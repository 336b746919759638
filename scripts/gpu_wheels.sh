#!/usr/bin/env bash
# What a GPU machine's image lacks, made here for it to carry: runs/gpu_wheels (git-ignored, about 22 MB).
#
#   bash scripts/gpu_wheels.sh            # then run the device tool with carry ["runs/gpu_wheels"]
#
# The image (docs/gpu.md) has Python 3.12, torch, transformers, peft, accelerate and matplotlib, but not the game
# engine, and no registry to fetch it from. This puts in runs/gpu_wheels:
#   *.whl   textworld, alfworld and what they need beyond the image's packages, for CPython 3.12 on x86_64
#           (jericho and fast-downward-textworld have no wheel on PyPI: built here from their sources);
#   cache/  the bundled model's tokenizer and chat template alone (3.4 MB), as $ALFRL_CACHE for the tiny
#           training run of the device check (the 538 MB weights are not needed there).
# benchmarks/gpu_check.sh installs the wheels into a folder of their own and points ALFRL_CACHE at cache/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEST="${1:-runs/gpu_wheels}"
PY=".venv/bin/python"
mkdir -p "$DEST"
say() { printf '[gpu_wheels] %s\n' "$*"; }

# binary wheels for the image's Python, exactly the versions the course pins (pyproject.toml) and tests with
BINARY=(textworld==1.7.0 alfworld==0.4.2 tatsu==5.8.3 hashids==1.3.1 mementos==1.3.1 more-itertools==11.2.1
        prompt-toolkit==3.0.53 termcolor==3.3.0 wcwidth==0.9.5)
say "downloading ${#BINARY[@]} wheels for CPython 3.12"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 --platform any -d "$DEST" "${BINARY[@]}"
# pure-Python packages that PyPI ships as source only: their wheels run on any Python 3
say "building jericho and fast-downward-textworld from their sources"
"$PY" -m pip wheel -q --no-deps -w "$DEST" jericho==3.3.1 fast-downward-textworld==20.6.4

say "copying the bundled model's tokenizer"
"$PY" - "$DEST/cache/models/SmolLM2-135M-Instruct" <<'EOF'
import shutil, sys
from pathlib import Path
from alfrl.agent.bundled import bundled_tokenizer_dir
source, target = bundled_tokenizer_dir(), Path(sys.argv[1])
target.mkdir(parents=True, exist_ok=True)
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (source / name).is_file():
        shutil.copy2(source / name, target / name)
EOF
say "$(ls "$DEST"/*.whl | wc -l) wheels and a tokenizer in $DEST: $(du -sh "$DEST" | cut -f1)"
