#!/usr/bin/env bash
# Set up .venv (if needed) and run the test suite. Arguments go to pytest.
#   bash scripts/test.sh              # default run (skips tests marked slow)
#   bash scripts/test.sh -m slow      # the full, slow checks
#   bash scripts/test.sh -k protocol  # a subset
# The suite includes executing every notebook with papermill.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '[test] %s\n' "$*"; }

bash scripts/setup_venv.sh
say "running: python -m pytest $*"
rc=0
.venv/bin/python -m pytest --durations=30 "$@" || rc=$?  # the 30 slowest, to keep CI's time in view
if [[ $rc -eq 5 ]]; then
    say "FAILED: pytest collected no tests (exit code 5). Check the tests/ folder and the -k/-m selection." >&2
    exit 5
fi
if [[ $rc -eq 0 ]]; then say "all selected tests passed"; else say "FAILED: pytest exit code $rc" >&2; fi
exit $rc
