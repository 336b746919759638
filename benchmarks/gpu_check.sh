#!/usr/bin/env bash
# The whole GPU check as one command, for a lent GPU machine (offline, its own Python and torch):
#
#   bash benchmarks/gpu_check.sh              # on the GPU machine: writes one JSON per step to $OUT
#   bash benchmarks/gpu_check.sh --dry-run    # on a CPU (CI): the same steps on tiny shapes, --device cpu
#
# 1. Installs the wheels carried beside the tree ($WHEELS, default runs/gpu_wheels, made here by
#    scripts/gpu_wheels.sh; docs/gpu.md lists them) into a target folder, never into the image's own packages,
#    points $ALFRL_CACHE at the tokenizer carried with them, and writes $OUT/env.json: the versions the checks
#    ran at.
# 2. Runs benchmarks/device_check.py in five steps, each under its own time cap, each writing $OUT/STEP.json as it
#    goes (a step cut by its cap keeps what it measured). Then $OUT/summary.json: each step's exit code, seconds
#    and ok. At most 7 files.
#
# Its own estimate on one H100, from the sizes (docs/gpu.md): about 6 minutes; the caps add up to 8.
# Exit code 0 when every step passed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/runs/gpu_check}"
WHEELS="${WHEELS:-$ROOT/runs/gpu_wheels}"
SITE="${SITE:-$(mktemp -d)}"  # a fresh folder: pip --target keeps what an older install left there
DRY=()
SLOWER=1  # a dry run's caps: 4 times the GPU's, for a 2-core CPU with other work on it
if [[ "${1:-}" == "--dry-run" ]]; then DRY=(--dry-run --device cpu); SLOWER=4; fi
mkdir -p "$OUT"
rm -f "$OUT"/*.json  # a reused folder: no step's JSON from an earlier run
say() { printf '[gpu_check] %s\n' "$*"; }

# ---- 1. the carried wheels, into a folder of their own
start=$(date +%s)
installed=()
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    say "installing $(ls "$WHEELS"/*.whl | wc -l) carried wheels into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl > "$OUT/pip.log" 2>&1 \
        || { say "FAILED: pip install of the carried wheels (see $OUT/pip.log)"; exit 2; }
    rm -f "$OUT/pip.log"
    installed=("$WHEELS"/*.whl)
    export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -d "$WHEELS/cache" ]]; then export ALFRL_CACHE="$WHEELS/cache"; fi  # the bundled tokenizer, carried
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" - "$OUT/env.json" "$(( $(date +%s) - start ))" "${installed[@]##*/}" <<'EOF'
import json, platform, sys
from importlib.metadata import PackageNotFoundError, version
out, seconds, wheels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
versions = {}
for name in ("torch", "transformers", "peft", "accelerate", "textworld", "alfworld"):
    try:
        versions[name] = version(name)
    except PackageNotFoundError:  # a missing package is a finding, not a crash
        versions[name] = "missing"
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
except ImportError:
    gpu = "unknown: torch does not import"
json.dump({"python": platform.python_version(), "gpu": gpu, "packages": versions, "carried_wheels": wheels,
           "install_seconds": seconds}, open(out, "w"), indent=1)
print(f"[gpu_check] python {platform.python_version()}, gpu {gpu}, " + ", ".join(f"{k} {v}" for k, v in versions.items()))
EOF

# ---- 2. the checks, step by step
STEPS=(
    "basics 90 attention,batched_greedy,ppo_gradients,naive_gradient"
    "sampler 90 sampler_gap"
    "train 60 train_resume"
    "update 90 update_4b"
    "rollout 150 rollout_4b"
)
summary=()
failed=0
for step in "${STEPS[@]}"; do
    read -r name gpu_cap checks <<< "$step"
    cap=$(( gpu_cap * SLOWER ))
    say "$name: $checks (cap ${cap} s)"
    t0=$(date +%s)
    timeout --kill-after=10 "$cap" "$PY" benchmarks/device_check.py --only "$checks" --out "$OUT/$name.json" \
        "${DRY[@]}"
    rc=$?
    seconds=$(( $(date +%s) - t0 ))
    [[ $rc -eq 0 ]] || failed=1
    [[ $rc -eq 124 || $rc -eq 137 ]] && say "$name: cut at its cap of $cap s (what it measured is in $OUT/$name.json)"
    summary+=("{\"step\": \"$name\", \"checks\": \"$checks\", \"cap_seconds\": $cap, \"gpu_cap_seconds\": $gpu_cap, \"seconds\": $seconds, \"exit_code\": $rc, \"ok\": $([[ $rc -eq 0 ]] && echo true || echo false)}")
done
( IFS=,; printf '{"dry_run": %s, "steps": [%s], "ok": %s}\n' "$([[ ${#DRY[@]} -gt 0 ]] && echo true || echo false)" \
    "${summary[*]}" "$([[ $failed -eq 0 ]] && echo true || echo false)" ) > "$OUT/summary.json"
say "wrote $OUT: $(ls "$OUT" | tr '\n' ' ')"
if [[ $failed -eq 0 ]]; then say "every step passed"; else say "SOME STEPS FAILED (see $OUT/summary.json)"; fi
exit $failed
