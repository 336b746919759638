#!/usr/bin/env bash
# One command from a fresh clone to a finished game:
#   1. set up .venv with alfrl installed (scripts/setup_venv.sh)
#   2. python -m alfrl setup : make the bundled games ready
#   3. python -m alfrl demo  : play one game to the end with ALFWorld's expert
# Extra arguments go to the demo, e.g.  bash scripts/quickstart.sh --help
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '[quickstart] %s\n' "$*"; }

say "step 1/3: virtualenv and install"
bash scripts/setup_venv.sh
say "step 2/3: python -m alfrl setup (making the games ready)"
.venv/bin/python -m alfrl setup
say "step 3/3: python -m alfrl demo $* (one game played by ALFWorld's expert)"
.venv/bin/python -m alfrl demo "$@"
say "done. Next: open the notebooks with  .venv/bin/jupyter lab notebooks/"
