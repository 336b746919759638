#!/usr/bin/env bash
# One command from a fresh clone to a finished game, played by the expert and by the course's agent:
#   1. set up .venv with alfrl installed (scripts/setup_venv.sh)
#   2. python -m alfrl setup : make the bundled games ready
#   3. python -m alfrl demo  : play one game to the end with ALFWorld's expert
#   4. python -m alfrl demo --agent warmstart_epoch : the course's agent (the default warm start on the
#      bundled SmolLM2-135M) plays a held-out game turn by turn (the first run converts the model, ~20 s)
# Extra arguments go to the expert's demo, e.g.  bash scripts/quickstart.sh --help
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '[quickstart] %s\n' "$*"; }

say "step 1/4: virtualenv and install"
bash scripts/setup_venv.sh
say "step 2/4: python -m alfrl setup (making the games ready)"
.venv/bin/python -m alfrl setup
say "step 3/4: python -m alfrl demo $* (one game played by ALFWorld's expert)"
.venv/bin/python -m alfrl demo "$@"
say "step 4/4: python -m alfrl demo --agent warmstart_epoch (the course's agent plays a held-out game: about 8 s of play on 2 cores, docs/install.md)"
.venv/bin/python -m alfrl demo --agent warmstart_epoch
say "done. Next: open the notebooks with  .venv/bin/jupyter lab notebooks/"
