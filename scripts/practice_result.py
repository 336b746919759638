"""The practice result: the warm start practises a fixed pool of 8 training games (``--preset practice``),
and it is measured before and after on those games and on 8 matched controls it never trained on.

    python scripts/practice_result.py --seed 0                 # from the default warm start, as the preset

Stages (each skipped when its output is complete, so a re-run continues where it stopped):
  before   the warm start on the 16 pool games: --samples episodes a game at the rollout temperature (seed 1), and greedy
  bare     the bare model (no adapter) on the pool games, greedy: the table's first row
  train    python -m alfrl train --preset practice --seed S --run-dir OUT/seedS (resumed if it exists)
  after    the trained adapter, measured as "before" (the same sampling seeds: common random numbers)
  heldout  greedy on 60 held-out small rooms (data/heldout valid_unseen, as the learning result of docs/results.md)
  report   OUT/seedS/result.json and result.md: per-game paired sign-flip tests, practised minus control
  collect  copy what is committed into data/results/practice_epoch/ (profiles, metrics, trajectories, plots,
           result, the example game, held-out outcomes, seconds, the float16 adapter): about 5 MB

``--warm-start warmstart`` measures the same pool from the first warm start, whose difficulty profile chose
it (output in runs/practice_result, committed in data/results/practice/, adapters in data/practice/); the
output folder remembers its warm start and pool, and refuses another.
``--stages before train`` runs only those. The wall time of each stage, summed over the runs that reached it (a
skipped stage adds next to nothing), goes into OUT/seconds.json.
``--warm-start warmstart --updates 12 --out runs/practice12`` trains a shorter run of the same preset (its
folder and files are named seed0_12updates); copy OUT/before_* from another output folder to reuse its "before"
stage.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from alfrl.agent.models import DEFAULT_WARM_START, EPOCH_WARM_START, SHIPPED, WARM_START
from alfrl.base.checkpoint import latest_checkpoint, read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.base.rundir import changed_settings
from alfrl.eval.eval_stats import paired_outcomes, wilson_interval
from alfrl.eval.evaluate import EvalConfig, evaluate, selected_records
from alfrl.eval.practice import ProfileConfig, practice_result, profile, read_pool, read_profile, resolve_pool
from alfrl.training.train import preset, train

STAGES = ("before", "bare", "train", "after", "heldout", "report", "collect")
WARM_HELDOUT = {WARM_START: (REPO_ROOT / "data/results/cpu_learning_lr3e-4_outcomes.jsonl", "warm start"),
                EPOCH_WARM_START: (REPO_ROOT / "data/results/rl_on_warmstart_epoch_heldout_outcomes.jsonl",
                                   "one epoch (the start)")}
"""Each warm start's committed greedy outcomes on the 123 held-out small rooms (the file, and the checkpoint's
name in it), paired with the 60 rooms played after practice."""
FOLDERS = {WARM_START: ("runs/practice_result", "data/results/practice"),
           EPOCH_WARM_START: ("runs/practice_epoch", "data/results/practice_epoch")}
"""Each warm start's default output folder (``--out``) and committed folder (``--dest``)."""


def warm_heldout(warm_start: str, games: set[str]) -> list[dict]:
    """``warm_start``'s committed greedy outcomes on ``games`` (held-out rooms)."""
    path, name = WARM_HELDOUT[warm_start]
    return [r for r in read_jsonl(path) if r["checkpoint"] == name and r["game_id"] in games]


def remember_settings(out: Path, settings: dict) -> None:
    """Write ``settings`` (the warm start and the pool) into OUT/settings.json, or refuse an output folder
    whose stages were run with other ones: its before stage and runs would belong to another experiment."""
    path = out / "settings.json"
    if path.is_file():
        changed = changed_settings(json.loads(path.read_text()), settings)
        if changed:
            raise SystemExit(f"{out} holds a practice result with other settings ({', '.join(changed)}): "
                             "give the ones it was made with, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1) + "\n")


def add_seconds(seconds_file: Path, stage: str, elapsed: float) -> float:
    """Add ``elapsed`` to ``stage``'s wall time in ``seconds_file`` and return its total. Summed over the runs that
    reached the stage, so a resumed stage counts both parts and one skipped because its output is complete keeps
    its time (it adds next to nothing); other stages' times, written meanwhile, are kept."""
    seconds = json.loads(seconds_file.read_text()) if seconds_file.is_file() else {}
    seconds[stage] = seconds.get(stage, 0.0) + elapsed
    seconds_file.write_text(json.dumps(seconds, indent=1) + "\n")
    return seconds[stage]


def measure(out: Path, adapter: str, pool_file: str, greedy: bool, samples: int, threads: int | None = None
            ) -> list[dict]:
    """A profile of the pool's games: ``samples`` episodes at the rollout temperature, or one greedy."""
    config = ProfileConfig(out=str(out), games=pool_file, adapter=adapter, k=1 if greedy else samples,
                           temperature=0.0 if greedy else 0.6, seed=1, resume=True, threads=threads)
    return profile(config)


def heldout_config(out: Path, adapter: str | None = None) -> EvalConfig:
    """Greedy on the first 60 of the held-out small rooms' seeded order, with the training episodes' budgets."""
    cpu = preset("practice")
    return EvalConfig(out=str(out), resume=(out / "records.jsonl").exists(), adapter=adapter, split="valid_unseen",
                      data_dir=str(REPO_ROOT / "data" / "heldout"), limit=60, max_expert_steps=cpu.max_expert_steps,
                      max_receptacles=cpu.max_receptacles, max_steps=cpu.max_steps,
                      max_new_tokens=cpu.max_new_tokens, max_trajectory_tokens=cpu.max_trajectory_tokens)


def report(out: Path, seed_dir: Path, pool: dict, warm_start: str = DEFAULT_WARM_START) -> dict:
    samples = read_profile(out / "before_sampled")[0]["k"]
    result = {"seed": seed_dir.name, "pool": pool["practice"], "control": pool["control"], "samples": samples}
    for measure_name, folder in (("sampled", "sampled"), ("greedy", "greedy")):
        result[measure_name] = practice_result(pool, read_profile(out / f"before_{folder}"),
                                               read_profile(seed_dir / f"after_{folder}"))
    if (seed_dir / "heldout" / "records.jsonl").is_file():
        after = selected_records(heldout_config(seed_dir / "heldout"))
        played = {r["game_id"] for r in after}
        warm = warm_heldout(warm_start, played)
        paired = paired_outcomes(warm, after)
        result["heldout"] = {"games": len(after), "warm_start_won": sum(r["won"] for r in warm),
                             "after_won": sum(r["won"] for r in after),
                             **{k: paired[k] for k in ("gained", "lost", "p_value")}}
    if (out / "bare_greedy" / "profile.jsonl").is_file():
        bare = {r["game_id"]: r for r in read_profile(out / "bare_greedy")}
        result["bare_greedy"] = {side: sum(bare[g]["wins"] for g in pool[key]) for side, key in
                                 (("practised", "practice"), ("control", "control"))}
    result["example"] = example(out, seed_dir, pool)
    result["visits"] = [m.get("game_wins") for m in read_jsonl(seed_dir / "run" / "metrics.jsonl")]
    (seed_dir / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    seed, _, length = seed_dir.name[4:].partition("_")  # "seed1", or "seed0_12updates"
    extra = ([f"--updates {length.removesuffix('updates')}"] if length else []) \
        + ([f"--warm-start {warm_start}"] if warm_start != DEFAULT_WARM_START else [])
    flags = " ".join([f"--seed {seed}", *extra, *([f"--out {out}"] if extra else [])])
    made_by = (f"Made by `python scripts/practice_result.py {flags} --samples {samples}`: "
               f"{SHIPPED[warm_start][0]} before, the newest checkpoint of `--preset practice` after, on the pool of "
               "`data/practice/pool.json`; sampled at T=0.6 with seed 1 on both sides (common random numbers), greedy "
               "at temperature 0. p: one-sided sign-flip test on per-game differences (practised), two-sided (control), "
               "a permutation of the practised/control labels (practised minus control), the exact sign test (held out).")
    (seed_dir / "result.md").write_text(made_by + "\n\n" + markdown(result) + "\n")
    print(markdown(result))
    return result


def example(out: Path, seed_dir: Path, pool: dict) -> dict | None:
    """One practised game that training turned from lost to won, before and after, for the viewer: the greedy
    episode if greedy play flipped, else the same branch (the same sampling seed) at the rollout temperature,
    from the game that gained most. Written to OUT/seedS/example.jsonl.xz (two trajectories)."""
    import lzma

    def episodes(folder: Path) -> dict:
        return {(t["game_id"], t["branch"]): t for t in read_jsonl(folder / "trajectories.jsonl")}
    for measure_name in ("greedy", "sampled"):
        before, after = episodes(out / f"before_{measure_name}"), episodes(seed_dir / f"after_{measure_name}")
        gains = {g: sum(after[k]["won"] - before[k]["won"] for k in after if k[0] == g) for g in pool["practice"]}
        for game in sorted(pool["practice"], key=lambda g: -gains[g]):
            flipped = sorted(b for (g, b) in after if g == game and after[g, b]["won"] and not before[g, b]["won"])
            if flipped:
                pair = [before[game, flipped[0]], after[game, flipped[0]]]
                with lzma.open(seed_dir / "example.jsonl.xz", "wt") as f:
                    f.writelines(json.dumps(t) + "\n" for t in pair)
                return {"game_id": game, "branch": flipped[0], "measure": measure_name}
    return None


def collect(out: Path, seed_dir: Path, seed: str, pool: dict, dest: Path) -> None:
    """The committed copy of a seed's results, in ``dest`` (``seed``: the seed, or e.g. "0_12updates" for a run
    of other length); its adapter in data/practice/ (the first warm start's) or in ``dest``."""
    import lzma
    import shutil

    from alfrl.eval.eval_stats import outcomes
    dest.mkdir(parents=True, exist_ok=True)
    def complete(profile: Path) -> bool:  # every pool game measured (an interrupted stage is not copied)
        return profile.is_file() and len(read_profile(profile)) == len(pool["practice"]) + len(pool["control"])
    for name in ("before_sampled", "before_greedy", "bare_greedy"):
        if complete(out / name / "profile.jsonl"):
            shutil.copy(out / name / "profile.jsonl", dest / f"{name}.jsonl")
    for name in ("after_sampled", "after_greedy"):
        if complete(seed_dir / name / "profile.jsonl"):
            shutil.copy(seed_dir / name / "profile.jsonl", dest / f"seed{seed}_{name}.jsonl")
    run = seed_dir / "run"
    shutil.copy(run / "metrics.jsonl", dest / f"seed{seed}_metrics.jsonl")
    shutil.copy(run / "plots.png", dest / f"seed{seed}_plots.png")
    with lzma.open(dest / f"seed{seed}_trajectories.jsonl.xz", "wt") as f:
        f.write((run / "trajectories.jsonl").read_text())
    (dest / f"seed{seed}_visits.md").write_text(visits_markdown(read_jsonl(run / "metrics.jsonl"), seed) + "\n")
    for name in ("result.json", "result.md", "example.jsonl.xz"):
        if (seed_dir / name).is_file():
            shutil.copy(seed_dir / name, dest / f"seed{seed}_{name}")
    if (seed_dir / "heldout" / "records.jsonl").is_file():
        records = selected_records(heldout_config(seed_dir / "heldout"))
        (dest / f"seed{seed}_heldout_outcomes.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in outcomes(records, f"practice seed {seed}")))
    if (out / "seconds.json").is_file():  # one file per output folder: seconds.json for runs/practice_result
        name = "seconds.json" if out.name == "practice_result" else f"seconds_{out.name}.json"
        shutil.copy(out / "seconds.json", dest / name)
    first = dest == REPO_ROOT / FOLDERS[WARM_START][1]  # the first warm start's adapters live beside its pool
    adapter = (REPO_ROOT / "data" / "practice" if first else dest) / f"adapter_seed{seed}"
    _half_adapter(latest_checkpoint(run) / "adapter", adapter)
    print(f"copied into {dest.relative_to(REPO_ROOT)}; the adapter, in float16, into {adapter.relative_to(REPO_ROOT)}")


def visits_markdown(metrics: list[dict], seed: int) -> str:
    """Each practised game's wins out of K at every visit, the batch's, and the run's time, as Markdown."""
    from alfrl.eval.practice import visit_curves
    from alfrl.training.plots import short_game_name
    curves = visit_curves(metrics)
    most = max(len(v) for v in curves.values())
    rows = ["| game | " + " | ".join(f"visit {i}" for i in range(1, most + 1)) + " |",
            "|---|" + "---|" * most]
    for game, visits in sorted(curves.items(), key=lambda kv: kv[1][0][1]):
        rows.append(f"| {short_game_name(game)} | " + " | ".join(f"{w}/{k}" for _, w, k in visits) + " |")
    totals = [(sum(v[i][1] for v in curves.values() if len(v) > i), sum(v[i][2] for v in curves.values() if len(v) > i))
              for i in range(most)]
    rows.append("| all | " + " | ".join(f"{w}/{n} ({100 * w / n:.0f}%)" for w, n in totals) + " |")
    rollout = sum(m["rollout_seconds"] for m in metrics) / 60
    update = sum(m["update_seconds"] for m in metrics) / 60
    peak = max(m.get("peak_rss_gb", 0) for m in metrics)
    return ("\n".join(rows) + f"\n\nSeed {seed}, {len(metrics)} updates: {rollout + update:.1f} minutes of training "
            f"({rollout:.1f} of rollouts, {update:.1f} of updates: the sums of `rollout_seconds` and `update_seconds` "
            f"in `seed{seed}_metrics.jsonl`), peak memory {peak:.1f} GB.")


def _half_adapter(source: Path, dest: Path) -> None:
    """A LoRA adapter folder stored in float16, as the shipped adapters are (half the bytes; loads as float32)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "adapter_config.json", dest / "adapter_config.json")
    weights = load_file(source / "adapter_model.safetensors")
    save_file({k: v.to(torch.float16) for k, v in weights.items()}, dest / "adapter_model.safetensors")


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
    h = result.get("heldout")
    if h is None:
        return "\n".join(rows + ["", "(held-out rooms: not evaluated yet; run the heldout stage)"])
    rows.append(f"| {h['games']} held-out rooms | greedy | {_cell(h['warm_start_won'], h['games'])} | "
                f"{_cell(h['after_won'], h['games'])} | {100 * (h['after_won'] - h['warm_start_won']) / h['games']:+.1f} "
                f"| {h['p_value']:.3f} (sign test, {h['gained']} gained, {h['lost']} lost) |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with ``--out`` and ``--dest`` filled in from the warm start's FOLDERS when not given."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="the output folder (default: runs/practice_epoch, or "
                                                           "runs/practice_result for the first warm start)")
    parser.add_argument("--pool", default="data/practice/pool.json")
    parser.add_argument("--warm-start", default=DEFAULT_WARM_START, choices=sorted(WARM_HELDOUT),
                        help="the adapter practice starts from and is measured against (default: the default warm "
                             "start, as --preset practice; warmstart: the first one, whose profile chose the pool)")
    parser.add_argument("--dest", default=None, help="where the collect stage copies what is committed (default: "
                                                     "data/results/practice_epoch, or data/results/practice)")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the measuring stages")
    parser.add_argument("--samples", type=int, default=16, help="episodes a game at the rollout temperature, "
                                                                 "before and after (the same for both)")
    parser.add_argument("--updates", type=int, default=None,
                        help="train for this many updates instead of the preset's; the seed's folder and its "
                             "committed files are then named seedS_Nupdates (the before stage is shared)")
    args = parser.parse_args(argv)
    default_out, default_dest = FOLDERS[args.warm_start]
    args.out, args.dest = args.out or default_out, args.dest or default_dest
    return args


def main() -> None:
    args = parse_args()
    out, dest, pool_file = Path(args.out), args.dest, str(resolve_pool(args.pool))
    pool = read_pool(pool_file)
    tag = f"{args.seed}" if args.updates in (None, preset("practice").updates) else f"{args.seed}_{args.updates}updates"
    remember_settings(out, {"warm_start": args.warm_start, "pool": pool_file})
    seed_dir = out / f"seed{tag}"
    seed_dir.mkdir(parents=True, exist_ok=True)

    def timed(stage: str, fn) -> None:
        tick = time.perf_counter()
        fn()
        total = add_seconds(out / "seconds.json", stage, time.perf_counter() - tick)
        print(f"{stage}: {total / 60:.1f} min", flush=True)

    run = seed_dir / "run"
    for stage in args.stages:
        if stage == "before":
            timed("before", lambda: [measure(out / f"before_{m}", args.warm_start, pool_file, m == "greedy", args.samples,
                                                     args.threads)
                                     for m in ("sampled", "greedy")])
        elif stage == "bare":
            timed("bare", lambda: measure(out / "bare_greedy", "none", pool_file, True, args.samples))
        elif stage == "train":
            config = preset("practice", run_dir=str(run), seed=args.seed, pool=pool_file, init_adapter=args.warm_start,
                            **({"updates": args.updates} if args.updates else {}))
            timed(f"train_seed{tag}", lambda: train(resume=run) if (run / "config.json").is_file()
                  else train(config))
        elif stage in ("after", "heldout"):
            checkpoint = latest_checkpoint(run)
            if checkpoint is None:
                raise SystemExit(f"{run} has no checkpoint: run the train stage first")
            adapter = str(checkpoint / "adapter")
            if stage == "after":
                timed(f"after_seed{tag}", lambda: [measure(seed_dir / f"after_{m}", adapter, pool_file,
                                                                  m == "greedy", args.samples) for m in ("sampled", "greedy")])
            else:
                timed(f"heldout_seed{tag}", lambda: evaluate(heldout_config(seed_dir / "heldout", adapter)))
        elif stage == "report":
            report(out, seed_dir, pool, args.warm_start)
        else:
            collect(out, seed_dir, tag, pool, REPO_ROOT / dest)


if __name__ == "__main__":
    main()
