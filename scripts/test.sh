#!/usr/bin/env bash
# Set up .venv (if needed) and run the test suite. Arguments go to pytest.
#   bash scripts/test.sh              # default run (skips tests marked slow)
#   bash scripts/test.sh -m slow      # the full, slow checks
#   bash scripts/test.sh -k protocol  # a subset
# The suite includes executing every notebook with papermill. It runs in two pytest-xdist workers of one
# torch thread each (ALFRL_TEST_WORKERS=N to change, 0 for one process); the shared data they read (the
# expanded games, the bundled model) is prepared first, once, so that no two workers write it at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '[test] %s\n' "$*"; }

bash scripts/setup_venv.sh
if ! .venv/bin/python -c "import trl" 2>/dev/null; then  # the optional extra, for the TRL bridge's tests
    say "installing the trl extra: pip install -e \".[trl]\""
    .venv/bin/python -m pip install -q -e ".[trl]"
fi
WORKERS="${ALFRL_TEST_WORKERS:-2}"
say "preparing shared test data: the expanded games and the bundled model"
.venv/bin/python -c "
from alfrl.agent.bundled import bundled_model_dir
from alfrl.world.pack import ensure_games, expand_folder
from alfrl.base.paths import REPO_ROOT
ensure_games(); expand_folder(REPO_ROOT / 'data' / 'heldout'); bundled_model_dir()"
DIST=()
[[ "$WORKERS" != 0 ]] && DIST=(--dist worksteal)  # an idle worker takes tests queued for the busy one
say "running: python -m pytest -n $WORKERS ${DIST[*]} $*"
rc=0
.venv/bin/python -m pytest -n "$WORKERS" "${DIST[@]}" --durations=30 "$@" || rc=$?  # the 30 slowest, to keep CI's time in view
if [[ $rc -eq 5 ]]; then
    say "FAILED: pytest collected no tests (exit code 5). Check the tests/ folder and the -k/-m selection." >&2
    exit 5
fi
if [[ $rc -eq 0 ]]; then say "all selected tests passed"; else say "FAILED: pytest exit code $rc" >&2; fi
exit $rc
