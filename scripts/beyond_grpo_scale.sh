#!/usr/bin/env bash
# Beyond GRPO at the scale run's size: three other update rules trained on the episodes the scale run's GRPO
# arm played in its first 10 updates (1,056 episodes, data/scale/grpo/trajectories_u01-10.jsonl.xz), from the
# same default warm start with the run's own settings, each then played on the pre-registered panel (greedy,
# and official valid_seen where those games are here), and compared with the start and with GRPO online at
# update 10. Hours of both cores on a 2-core CPU (on the cpu preset's 368 episodes the three replays took 16,
# 27 and 33 minutes; here there are about three times as many, and each panel is about 25 minutes); run it alone.
#
#   bash scripts/beyond_grpo_scale.sh            # run what is not done yet; rerun to continue after a stop
#
# Resumable: a rule whose panel parts are committed (data/scale/panel/RULE_replay_u10_seconds.json names them) is
# done, even on a fresh clone; a replay that finished (its adapter/ exists) is not trained again, one that was
# stopped continues from its last update (replay_training.py --resume), and each panel part continues where it
# stopped (scripts/scale_panel.py). Writes data/results/beyond_grpo_scale.*
# (greedy panel) and data/results/beyond_grpo_scale_official.*, and each replay's per-update metrics as
# data/results/beyond_grpo_scale_RULE_metrics.jsonl. Off-policy: the episodes were sampled by GRPO's policy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
RUN=data/scale/grpo
EPISODES=$RUN/trajectories_u01-10.jsonl.xz
say() { printf '[beyond_grpo_scale] %s\n' "$*"; }
run() { say "$(printf '%q ' "$@")"; "$@"; }

declare -A ALGO=([rft]=rft [dpo]=dpo [grpo_subgoals]=grpo)
declare -A EXTRA=([rft]="" [dpo]="" [grpo_subgoals]="--set subgoal_reward=0.1 keep_groups=progress")
for rule in rft dpo grpo_subgoals; do
    out=runs/replay_scale_$rule
    if [[ -f data/results/beyond_grpo_scale_${rule}_metrics.jsonl ]] \
        && "$PY" scripts/scale_panel.py "${rule}_replay_u10" "$out/adapter" --parts greedy official --played; then
        say "$rule: replayed and played on the panel (data/scale/panel/${rule}_replay_u10_*)"
        continue
    fi
    if [[ ! -d $out/adapter ]]; then
        resume=()
        if [[ -f $out/config.json ]]; then resume=(--resume); else rm -rf "$out"; fi  # a stopped replay continues
        # shellcheck disable=SC2086  # EXTRA holds several words on purpose
        run "$PY" scripts/replay_training.py "$EPISODES" --from-run "$RUN" --until-step 10 --algo "${ALGO[$rule]}" \
            --out "$out" "${resume[@]}" ${EXTRA[$rule]}
    else
        say "$rule: replay already trained ($out/adapter)"
    fi
    cp "$out/metrics.jsonl" "data/results/beyond_grpo_scale_${rule}_metrics.jsonl"
    run "$PY" scripts/scale_panel.py "${rule}_replay_u10" "$out/adapter" --parts greedy official
done

NOTE="The start (the default warm start) and GRPO online at update 10 are read from their committed panel outcomes (data/scale/panel); RFT, DPO and GRPO with the subgoal reward (alpha 0.1, groups kept by wins or subgoals) were trained on the 1,056 episodes GRPO played in its updates 1-10, update by update, from the same start with the run's own settings (scripts/replay_training.py --from-run data/scale/grpo --until-step 10; off-policy for each of them), and played greedy like every panel checkpoint (scripts/scale_panel.py). Made by bash scripts/beyond_grpo_scale.sh. Every p is an exact two-sided sign test on the rooms gained and lost against the start."
for part in greedy official; do
    suffix=$([[ $part == greedy ]] && echo "" || echo "_official")
    if [[ ! -f data/scale/panel/rft_replay_u10_$part.jsonl ]]; then
        say "$part: not played here (no official ALFWorld games?); no comparison written"
        continue
    fi
    run "$PY" scripts/compare_evals.py \
        "start=data/scale/panel/start_$part.jsonl@start" \
        "GRPO online, 10 updates=data/scale/panel/grpo_u10_$part.jsonl@grpo_u10" \
        "RFT=data/scale/panel/rft_replay_u10_$part.jsonl@rft_replay_u10" \
        "DPO=data/scale/panel/dpo_replay_u10_$part.jsonl@dpo_replay_u10" \
        "GRPO + subgoal reward=data/scale/panel/grpo_subgoals_replay_u10_$part.jsonl@grpo_subgoals_replay_u10" \
        --out "data/results/beyond_grpo_scale$suffix" --note "$NOTE"
done
