"""Train RFT or DPO (or GRPO) on the episodes a training run already played, update by update.

    python scripts/replay_training.py --algo rft --out runs/replay_rft \
        data/results/cpu_12updates_seed0_trajectories.jsonl.xz

Rollouts are most of a CPU run's cost, so comparing algorithms on the *same* episodes is the cheap
comparison at equal cost: each update of the run (its groups, in the order it played them) becomes
one update of ``--algo`` (:func:`alfrl.training.train.learn`, the code ``python -m alfrl train --algo`` runs).
By default it starts from the first warm start with the cpu preset's settings, as the committed cpu runs
did; ``--from-run RUN_DIR`` takes that run's own settings and starting adapter instead (its config.json),
and ``--until-step N`` replays only its first N updates. ``--set key=value`` changes one setting. The
episodes were sampled by the run's own policy, so for any algorithm but the run's they are off-policy:
say so next to any figure made this way. Writes ``OUT/metrics.jsonl`` (one line per update) and
``OUT/adapter`` (evaluate it with ``python -m alfrl eval --adapter OUT/adapter``). After every update the
adapter, Adam's state and the random state are checkpointed in ``OUT/checkpoints``: a replay that was stopped
continues with ``--resume`` (the same command plus the flag) from the update after its last checkpoint, and
ends where an unbroken one would.

RFT on the scale run's GRPO arm's first ten updates, from the default warm start that run started from::

    python scripts/replay_training.py data/scale/grpo/trajectories_u01-10.jsonl.xz --from-run data/scale/grpo \
        --until-step 10 --algo rft --out runs/replay_scale_rft

GRPO with the subgoal reward, on the same episodes (``--set`` takes every KEY=VALUE after it, so it comes last)::

    python scripts/replay_training.py data/results/cpu_12updates_seed0_trajectories.jsonl.xz \
        --algo grpo --out runs/replay_grpo_subgoals --set subgoal_reward=0.1 keep_groups=progress

With ``--set subgoal_reward=ALPHA`` the subgoals each episode reached are needed: episodes recorded
before they were counted get them by replaying their actions in the real engine
(:func:`alfrl.world.subgoals.replay_progress`, on the games the config trains on).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import time
from dataclasses import replace
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.agent.models import WARM_START, save_adapter
from alfrl.base.checkpoint import append_jsonl, latest_checkpoint, load_state, save_checkpoint, truncate_jsonl
from alfrl.base.cli import parse_overrides
from alfrl.base.rundir import changed_settings
from alfrl.rl.ppo import make_optimizer
from alfrl.rl.trajectory import Trajectory, groups_of
from alfrl.training.train import (check_config, learn, load_for_training, preset, saved_config, teaches,
                                  training_games)
from alfrl.training.train_config import TrainConfig
from alfrl.world.engine import make_fast_engine
from alfrl.world.subgoals import replay_progress


def updates_of(path: str | Path, k: int) -> dict[int, list[list[Trajectory]]]:
    """The run's groups by update: ``{step: [group, ...]}``, K consecutive branches of one game each."""
    opener = lzma.open if str(path).endswith(".xz") else open
    by_step: dict[int, list[Trajectory]] = {}
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                by_step.setdefault(json.loads(line)["step"], []).append(Trajectory.from_json(line))
    return {step: groups_of(rows, k) for step, rows in sorted(by_step.items())}


def count_subgoals(trajectories: list[Trajectory], games: dict[str, Path]) -> int:
    """Fill in ``subgoals``/``subgoals_total`` of episodes recorded without them, by replaying their
    actions in the engine; ``games`` maps a game id to its ``game.tw-pddl``. Returns how many were filled."""
    engine = make_fast_engine(facts=True)
    filled = 0
    for t in tqdm(trajectories, desc="subgoals", unit="episode"):
        if t.subgoals_total:
            continue
        if t.game_id not in games:
            raise KeyError(f"game {t.game_id} is not among the config's training games: replay with the run's "
                           f"own settings (--set data_dir=... split=... max_receptacles=...)")
        t.subgoals, t.subgoals_total = replay_progress(engine, games[t.game_id], [turn.action for turn in t.turns])
        filled += 1
    return filled


def replay_config(algo: str, out: Path, k: int, from_run: str | None, overrides: list[str]) -> TrainConfig:
    """The replay's settings: the run's own (``from_run``, its config.json) or, without it, the cpu preset's
    from the first warm start, which the committed cpu runs started from; then ``overrides`` (KEY=VALUE)."""
    base = saved_config(from_run) if from_run else preset("cpu", init_adapter=WARM_START)
    return replace(base, **{**parse_overrides(overrides, base), "algo": algo, "run_dir": str(out), "k": k})


def start_replay(out: Path, record: dict, resume: bool) -> Path | None:
    """Make ``out`` for a new replay (writing ``record``, its settings), or check that a resumed one has the same
    settings; returns the newest checkpoint of a resumed replay (None: start from the first update)."""
    saved = out / "config.json"
    if not resume:
        if out.exists():
            raise SystemExit(f"{out} already exists: add --resume to continue that replay, or give another --out")
        out.mkdir(parents=True)
        saved.write_text(json.dumps(record, indent=2))
        return None
    if not saved.is_file():
        raise SystemExit(f"--resume: {out} holds no replay (no config.json); run the command without --resume")
    changed = changed_settings(json.loads(saved.read_text()), record)
    if changed:
        raise SystemExit(f"--resume: {out} was started with other settings ({', '.join(changed)}); give the "
                         "command it was started with, or another --out")
    return latest_checkpoint(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trajectories", help="a training run's trajectories.jsonl(.xz)")
    parser.add_argument("--algo", choices=("grpo", "rft", "dpo"), required=True)
    parser.add_argument("--out", required=True, help="folder for metrics.jsonl and adapter/")
    parser.add_argument("--k", type=int, default=8, help="branches per group in the run")
    parser.add_argument("--from-run", metavar="RUN_DIR",
                        help="take the settings and starting adapter from this run's config.json, not the cpu preset's")
    parser.add_argument("--until-step", type=int, metavar="N", help="replay only the run's updates 1..N")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="TrainConfig settings on top of the base ones (e.g. dpo_beta=0.2); last, after the file")
    parser.add_argument("--resume", action="store_true", help="continue the stopped replay in --out")
    args = parser.parse_args()
    out = Path(args.out)
    config = replay_config(args.algo, out, args.k, args.from_run, args.set)
    check_config(config)
    updates = updates_of(args.trajectories, args.k)
    if args.until_step is not None:
        updates = {step: groups for step, groups in updates.items() if step <= args.until_step}
        if len(updates) != args.until_step:
            raise SystemExit(f"{args.trajectories} holds updates {sorted(updates)} up to {args.until_step}, not "
                             f"1-{args.until_step}: a run stopped early, or another file")
    checkpoint = start_replay(out, {**config.__dict__, "trajectories": args.trajectories,
                                    "until_step": args.until_step}, args.resume)
    if (out / "adapter").is_dir():
        print(f"{out} is a finished replay: its adapter is {out / 'adapter'}")
        return
    done = json.loads((checkpoint / "state.json").read_text())["step"] if checkpoint else 0
    truncate_jsonl(out / "metrics.jsonl", list(updates)[done - 1] if done else 0)  # an update after the checkpoint
    if config.subgoal_reward:
        games = {g.game_id: g.path for g in training_games(config)}
        episodes = [t for groups in updates.values() for group in groups for t in group]
        print(f"counted the subgoals of {count_subgoals(episodes, games)} of {len(episodes)} episodes in the engine")
    policy = load_for_training(config, str(checkpoint / "adapter") if checkpoint else None)
    ppo = config.ppo()
    optimizer = make_optimizer(policy, ppo)
    if checkpoint:
        load_state(checkpoint, optimizer)
        print(f"resuming {out} after update {done} of {len(updates)}")
    bar = tqdm(list(updates.items())[done:], desc=f"{args.algo} on {Path(args.trajectories).name}", unit="update",
               initial=done, total=len(updates))
    for update, (step, groups) in enumerate(bar, start=done + 1):  # update 1 saves DPO's reference, whatever the file's step
        kept = [g for g in groups if teaches(g, config)]
        tick = time.perf_counter()
        metrics, steps = learn(policy, optimizer, config, ppo, kept, update, out)
        append_jsonl(out / "metrics.jsonl", [{"step": step, "groups": len(groups), "groups_kept": len(kept),
                                               **metrics, "optimizer_steps": steps,
                                               "update_seconds": time.perf_counter() - tick}])
        save_checkpoint(out, update, lambda folder: save_adapter(policy, folder), optimizer, {}, keep_last=1)
    partial = out / "adapter.partial"  # the adapter appears whole or not at all: a finished replay has one
    shutil.rmtree(partial, ignore_errors=True)
    save_adapter(policy, partial)
    partial.rename(out / "adapter")
    print(f"adapter: {out / 'adapter'}")


if __name__ == "__main__":
    main()
