"""The learning result on a CPU (docs/results.md): a warm start, then GRPO with the cpu preset from it,
evaluated before and after with the same settings on the generated valid_unseen small rooms. The warm
start is the first one (``--init-adapter warmstart``, as in docs/results.md's figures) unless
``--init-adapter`` names another (e.g. ``warmstart_expert``, the preset's default).

    python scripts/cpu_learning_result.py --seeds 0 1 --out runs/learning

Writes ``OUT/eval/<checkpoint>/`` (records and summary per checkpoint; ``OUT/eval_<split>_<data>/``
with ``--data-dir``, e.g. the official games: ``--data-dir $ALFWORLD_DATA/json_2.1.1 --split
valid_seen`` evaluates the same runs there; ``--data-dir data/heldout`` on the 85 held-out small rooms
generated for this measurement), ``OUT/seed<S>/`` (the training runs), ``OUT/table.md``
``OUT/figure.png``, ``OUT/summaries.json`` (every checkpoint's evaluation summary: commit it with the
table), ``OUT/outcomes.jsonl`` (every game's outcome per checkpoint, for paired tests: commit it too) and
``OUT/seconds.json``, and prints the wall time of each part.
Re-running it continues where it stopped: finished evaluations and runs are reused.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from alfrl.agent.models import WARM_START
from alfrl.base.checkpoint import latest_checkpoint
from alfrl.base.cli import parse_overrides
from alfrl.eval.eval_report import write_comparison
from alfrl.eval.evaluate import EvalConfig, evaluate
from alfrl.training.train import preset, train


def eval_config(train_config, out: Path, adapter: str, split: str, limit: int | None,
                data_dir: str | None) -> EvalConfig:
    """Evaluation with the training episodes' settings (rooms, steps, reply length)."""
    resume = (out / "records.jsonl").exists()
    return EvalConfig(out=str(out), resume=resume, adapter=adapter, split=split, limit=limit, data_dir=data_dir,
                      max_expert_steps=train_config.max_expert_steps, max_receptacles=train_config.max_receptacles,
                      max_steps=train_config.max_steps, max_new_tokens=train_config.max_new_tokens,
                      max_trajectory_tokens=train_config.max_trajectory_tokens, threads=train_config.threads)


def timed(what: str, seconds: dict, fn, *args, **kwargs):
    tick = time.perf_counter()
    out = fn(*args, **kwargs)
    seconds[what] = time.perf_counter() - tick
    print(f"{what}: {seconds[what] / 60:.1f} min")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", default="runs/learning")
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--data-dir", default=None,
                        help="evaluate on these games (e.g. $ALFWORLD_DATA/json_2.1.1) instead of the "
                             "generated ones; training always uses the generated train split")
    parser.add_argument("--limit", type=int, default=None, help="games per split (default: all small rooms)")
    parser.add_argument("--updates", type=int, default=None,
                        help="PPO updates (default: the cpu preset's; runs are then named after it)")
    parser.add_argument("--init-adapter", default=WARM_START,
                        help="the warm start evaluated first and trained from (default: warmstart, the first one; "
                             "runs from another are named after it)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="change the cpu preset, e.g. --set temperature=0.7 (runs are then named after it)")
    args = parser.parse_args()
    overrides = parse_overrides(args.set, preset("cpu"))
    warm = overrides.pop("init_adapter", None) or args.init_adapter  # --set init_adapter=X as --init-adapter X
    tag = "".join(f"_{k}{v}" for k, v in overrides.items())
    if args.updates is not None and args.updates != preset("cpu").updates:
        tag += f"_updates{args.updates}"
    slug = Path(warm).parent.name if Path(warm).name == "adapter" else Path(warm).name  # a checkpoint: its step
    warm_name = "warm start" if warm == WARM_START else f"warm start {slug}"
    tag += "" if warm == WARM_START else f"_from_{slug}"
    overrides["init_adapter"] = warm
    out = Path(args.out)
    data = Path(args.data_dir).resolve() if args.data_dir else None
    data_name = (data.parent.name if data.name == "json_2.1.1" else data.name) if data else ""
    evals = out / ("eval" if data is None and args.split == "valid_unseen" else
                   f"eval_{args.split}" + (f"_{data_name}" if data else ""))
    seconds: dict[str, float] = {}
    results = {}
    base = preset("cpu", seed=args.seeds[0], **overrides)
    timed(f"eval {warm_name}", seconds, evaluate,  # reused when done (same settings)
          eval_config(base, evals / warm_name, warm, args.split, args.limit, args.data_dir))
    results[warm_name] = evals / warm_name
    for seed in args.seeds:
        run_dir = out / f"seed{seed}{tag}"
        config = preset("cpu", run_dir=str(run_dir), seed=seed, **overrides)
        if (run_dir / "config.json").exists():
            timed(f"train seed {seed}", seconds, train, resume=run_dir, updates=args.updates)
        else:
            timed(f"train seed {seed}", seconds, train, config, updates=args.updates)
        adapter = latest_checkpoint(run_dir) / "adapter"
        name = f"GRPO seed {seed}{tag.replace('_', ' ')}"
        timed(f"eval {name}", seconds, evaluate, eval_config(config, evals / name, str(adapter), args.split,
                                                             args.limit, args.data_dir))
        results[name] = evals / name
    tag += "" if evals.name == "eval" else "_" + evals.name.removeprefix("eval_")
    (out / f"seconds{tag}.json").write_text(json.dumps(seconds, indent=2))
    print(write_comparison(results, out / f"table{tag}.md", out / f"figure{tag}.png", out / f"summaries{tag}.json",
                           out / f"outcomes{tag}.jsonl"))
    print(f"figure: {out / f'figure{tag}.png'}; wall time {sum(seconds.values()) / 60:.1f} min "
          f"({', '.join(f'{k} {v / 60:.1f}' for k, v in seconds.items())})")


if __name__ == "__main__":
    main()
