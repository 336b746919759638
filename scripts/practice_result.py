"""The practice result: the warm start practises a fixed pool of 8 training games (``--preset practice``),
and it is measured before and after on those games and on 8 matched controls it never trained on.

    python scripts/practice_result.py --seed 0 --out runs/practice_result

Stages (each skipped when its output is complete, so a re-run continues where it stopped):
  before   the warm start on the 16 pool games: 16 samples a game at the rollout temperature (seed 1), and greedy
  bare     the bare model (no adapter) on the pool games, greedy: the table's first row
  train    python -m alfrl train --preset practice --seed S --run-dir OUT/seedS (resumed if it exists)
  after    the trained adapter, measured as "before" (the same sampling seeds: common random numbers)
  heldout  greedy on 60 held-out small rooms (data/heldout valid_unseen, as the learning result of docs/results.md)
  report   OUT/seedS/result.json and result.md: per-game paired sign-flip tests, practised minus control

``--stages before train`` runs only those. The wall time of each stage goes into OUT/seconds.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from alfrl.checkpoint import latest_checkpoint, read_jsonl
from alfrl.eval_stats import paired_outcomes, wilson_interval
from alfrl.evaluate import EvalConfig, evaluate, selected_records
from alfrl.paths import REPO_ROOT
from alfrl.practice import ProfileConfig, practice_result, profile, read_pool, read_profile, resolve_pool
from alfrl.train import preset, train

STAGES = ("before", "bare", "train", "after", "heldout", "report")
SAMPLES = 16
WARM_HELDOUT = REPO_ROOT / "data" / "results" / "cpu_learning_lr3e-4_outcomes.jsonl"
"""The warm start's greedy outcomes on the 123 held-out small rooms, committed (paired with the 60 played here)."""


def measure(out: Path, adapter: str, pool_file: str, greedy: bool) -> list[dict]:
    """A profile of the pool's games: SAMPLES episodes at the rollout temperature, or one greedy."""
    config = ProfileConfig(out=str(out), games=pool_file, adapter=adapter, k=1 if greedy else SAMPLES,
                           temperature=0.0 if greedy else 0.6, seed=1, resume=True)
    return profile(config)


def heldout_config(out: Path, adapter: str | None = None) -> EvalConfig:
    """Greedy on the first 60 of the held-out small rooms' seeded order, with the training episodes' budgets."""
    cpu = preset("practice")
    return EvalConfig(out=str(out), resume=(out / "records.jsonl").exists(), adapter=adapter, split="valid_unseen",
                      data_dir=str(REPO_ROOT / "data" / "heldout"), limit=60, max_expert_steps=cpu.max_expert_steps,
                      max_receptacles=cpu.max_receptacles, max_steps=cpu.max_steps,
                      max_new_tokens=cpu.max_new_tokens, max_trajectory_tokens=cpu.max_trajectory_tokens)


def report(out: Path, seed_dir: Path, pool: dict) -> dict:
    result = {"seed": seed_dir.name, "pool": pool["practice"], "control": pool["control"], "samples": SAMPLES}
    for measure_name, folder in (("sampled", "sampled"), ("greedy", "greedy")):
        result[measure_name] = practice_result(pool, read_profile(out / f"before_{folder}"),
                                               read_profile(seed_dir / f"after_{folder}"))
    after = selected_records(heldout_config(seed_dir / "heldout"))
    played = {r["game_id"] for r in after}
    warm = [r for r in read_jsonl(WARM_HELDOUT) if r["checkpoint"] == "warm start" and r["game_id"] in played]
    paired = paired_outcomes(warm, after)
    result["heldout"] = {"games": len(after), "warm_start_won": sum(r["won"] for r in warm),
                         "after_won": sum(r["won"] for r in after), **{k: paired[k] for k in ("gained", "lost", "p_value")}}
    if (out / "bare_greedy" / "profile.jsonl").is_file():
        bare = {r["game_id"]: r for r in read_profile(out / "bare_greedy")}
        result["bare_greedy"] = {side: sum(bare[g]["wins"] for g in pool[key]) for side, key in
                                 (("practised", "practice"), ("control", "control"))}
    result["visits"] = [m.get("game_wins") for m in read_jsonl(seed_dir / "run" / "metrics.jsonl")]
    (seed_dir / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    (seed_dir / "result.md").write_text(markdown(result) + "\n")
    print(markdown(result))
    return result


def _cell(won: int, n: int) -> str:
    low, high = wilson_interval(won, n)
    return f"{won}/{n} ({100 * won / n:.0f}%, {100 * low:.0f}-{100 * high:.0f}%)"


def markdown(result: dict) -> str:
    rows = ["| games | measure | warm start | after practice | gain (points) | p |", "|---|---|---|---|---|---|"]
    for name, label in (("sampled", f"{result['samples']} samples a game, T=0.6"), ("greedy", "greedy")):
        r = result[name]
        for side in ("practised", "control"):
            s = r[side]
            p = f"{s['p_value']:.4f}" if side == "practised" else f"{s['p_two_sided']:.3f} (two-sided)"
            rows.append(f"| {s['games']} {side} | {label} | {_cell(s['before_won'], s['before_episodes'])} | "
                        f"{_cell(s['after_won'], s['after_episodes'])} | {s['gain_points']:+.1f} | {p} |")
        b = r["beyond_control"]
        rows.append(f"| practised minus control | {label} | | | {b['gain_points']:+.1f} | {b['p_value']:.4f} |")
    h = result["heldout"]
    rows.append(f"| {h['games']} held-out rooms | greedy | {_cell(h['warm_start_won'], h['games'])} | "
                f"{_cell(h['after_won'], h['games'])} | {100 * (h['after_won'] - h['warm_start_won']) / h['games']:+.1f} "
                f"| {h['p_value']:.3f} (sign test, {h['gained']} gained, {h['lost']} lost) |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/practice_result")
    parser.add_argument("--pool", default="data/practice/pool.json")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    args = parser.parse_args()
    out, pool_file = Path(args.out), str(resolve_pool(args.pool))
    pool = read_pool(pool_file)
    seed_dir = out / f"seed{args.seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    seconds_file = out / "seconds.json"
    seconds = json.loads(seconds_file.read_text()) if seconds_file.is_file() else {}

    def timed(stage: str, fn) -> None:
        tick = time.perf_counter()
        fn()
        seconds[stage] = time.perf_counter() - tick
        seconds_file.write_text(json.dumps(seconds, indent=1) + "\n")
        print(f"{stage}: {seconds[stage] / 60:.1f} min", flush=True)

    run = seed_dir / "run"
    for stage in args.stages:
        if stage == "before":
            timed("before", lambda: [measure(out / f"before_{m}", "warmstart", pool_file, m == "greedy")
                                     for m in ("sampled", "greedy")])
        elif stage == "bare":
            timed("bare", lambda: measure(out / "bare_greedy", "none", pool_file, greedy=True))
        elif stage == "train":
            config = preset("practice", run_dir=str(run), seed=args.seed, pool=pool_file)
            timed(f"train_seed{args.seed}", lambda: train(resume=run) if (run / "config.json").is_file()
                  else train(config))
        elif stage in ("after", "heldout"):
            checkpoint = latest_checkpoint(run)
            if checkpoint is None:
                raise SystemExit(f"{run} has no checkpoint: run the train stage first")
            adapter = str(checkpoint / "adapter")
            if stage == "after":
                timed(f"after_seed{args.seed}", lambda: [measure(seed_dir / f"after_{m}", adapter, pool_file,
                                                                  m == "greedy") for m in ("sampled", "greedy")])
            else:
                timed(f"heldout_seed{args.seed}", lambda: evaluate(heldout_config(seed_dir / "heldout", adapter)))
        else:
            report(out, seed_dir, pool)


if __name__ == "__main__":
    main()
