"""``python -m alfrl <command>``: the course's command line.

Commands:
  setup      expand the committed game packs into data/games (seconds) and list them
  demo       play one game to the end with ALFWorld's expert, in the real engine
  games      count the games of a data dir per split and task type
  generate   make new games offline (train / valid_seen / valid_unseen)
  train      GRPO-style PPO on a LoRA adapter (--preset cpu | reference; --resume RUN_DIR)
  eval       success per split and task type of a model (+ adapter) on valid_seen / valid_unseen
  sft        expert warm start: fine-tune a LoRA adapter on the expert's walkthroughs
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from alfrl import TASK_TYPES


def _table(data_dir: str | None) -> str:
    from alfrl.games import available_splits, load_games, resolve_data_dir
    root = resolve_data_dir(data_dir)  # once: with the default data this checks the packs
    splits = available_splits(root)
    counts = {s: Counter(g.task_type for g in load_games(s, root)) for s in splits}
    width = max(len(t) for t in TASK_TYPES)
    lines = [f"{'task type':<{width}}  " + "  ".join(f"{s:>12}" for s in splits)]
    for t in TASK_TYPES:
        lines.append(f"{t:<{width}}  " + "  ".join(f"{counts[s][t]:>12}" for s in splits))
    lines.append(f"{'all':<{width}}  " + "  ".join(f"{sum(counts[s].values()):>12}" for s in splits))
    return "\n".join(lines)


def cmd_setup(args: argparse.Namespace) -> None:
    from alfrl.pack import default_packs, expand
    from alfrl.paths import games_dir
    root = Path(args.data_dir) if args.data_dir else games_dir()
    start = time.time()
    packs = default_packs()
    if not packs:
        raise FileNotFoundError("no game packs in data/packs: restore them with `git checkout -- data/packs`, "
                                "or make games with `python -m alfrl generate --out data/games`")
    written = sum(expand(p, root, force=args.force) for p in packs)
    note = f"expanded {written} games" if written else "games already expanded"
    print(f"{note} in {root} ({time.time() - start:.1f} s)\n")
    print(_table(str(root)))


def cmd_games(args: argparse.Namespace) -> None:
    print(_table(args.data_dir))


def cmd_demo(args: argparse.Namespace) -> None:
    from alfrl.expert import replay
    from alfrl.games import load_games
    games = load_games(args.split, args.data_dir, task_types=(args.task,) if args.task else None)
    game = games[args.index % len(games)]
    print(f"game  {game.split}/{game.game_id}\ntask  {game.goal}\n"
          f"The handcoded expert plays it in the real ALFWorld engine ({len(game.walkthrough)} steps):\n")
    start = time.time()
    result = replay(game.path, list(game.walkthrough))
    print(result.observations[0], "\n")
    for step, (command, obs) in enumerate(zip(game.walkthrough, result.observations[1:]), 1):
        print(f"[{step:>2}] > {command}\n     {obs}")
    print(f"\nwon: {result.won} after {result.steps} steps ({time.time() - start:.1f} s)")
    if not result.won:
        sys.exit(1)


def cmd_generate(args: argparse.Namespace) -> None:
    from alfrl.cli import build_dataclass
    from alfrl.generate import GenerateConfig, generate
    from alfrl.pack import write_pack
    cfg = build_dataclass(GenerateConfig, args)
    start = time.time()
    records = generate(cfg)
    total = sum(len(r) for r in records.values())
    print(f"made {total} games in {cfg.out} ({time.time() - start:.0f} s, {cfg.workers} workers)")
    if args.pack_dir:
        for split, recs in records.items():
            path = write_pack(recs, Path(args.pack_dir) / f"{split}.jsonl.xz")
            print(f"packed {len(recs)} games into {path} ({path.stat().st_size / 1e6:.2f} MB)")


def cmd_train(args: argparse.Namespace) -> None:
    from alfrl.cli import given_flags
    from alfrl.train import TrainConfig, preset, train
    flags = given_flags(TrainConfig, args)
    if args.resume:
        ignored = sorted(set(flags) - {"updates"})
        if ignored:
            print(f"note: --resume continues with the run's saved config; ignoring {', '.join(ignored)}",
                  file=sys.stderr)
        train(resume=args.resume, updates=flags.get("updates"))
    else:
        train(preset(args.preset, **flags))


def cmd_eval(args: argparse.Namespace) -> None:
    from alfrl.cli import build_dataclass
    from alfrl.evaluate import EvalConfig, evaluate
    config = build_dataclass(EvalConfig, args)
    summary = evaluate(config)
    print(f"\n{config.out}: {summary['all']['won']}/{summary['all']['games']} games won")
    for split, s in summary["splits"].items():
        print(f"  {split:<13} success {100 * s['success']:5.1f}% ({s['won']}/{s['games']}), "
              f"invalid/episode {s['invalid_per_episode']:.2f}, valid calls {100 * s['valid_call_rate']:.0f}%, "
              f"admissible {100 * s['admissible_rate']:.0f}%")
    print(f"  records: {config.out}/records.jsonl; summary: {config.out}/summary.json")


def cmd_sft(args: argparse.Namespace) -> None:
    from alfrl.cli import build_dataclass
    from alfrl.sft import SFTConfig, train_sft
    adapter = train_sft(build_dataclass(SFTConfig, args))
    print(f"adapter saved to {adapter}; train from it with: python -m alfrl train --init-adapter {adapter}")


def build_parser() -> argparse.ArgumentParser:
    """``python -m alfrl``'s commands and their flags (the dataclass configs' fields)."""
    from alfrl.cli import add_dataclass_args
    from alfrl.generate import GenerateConfig
    from alfrl.train import PRESETS, TrainConfig

    parser = argparse.ArgumentParser(prog="python -m alfrl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("setup", help="expand the committed game packs into data/games")
    p.add_argument("--data-dir", help="where to expand (default: $ALFRL_DATA_DIR or data/games)")
    p.add_argument("--force", action="store_true", help="rewrite games even if already expanded")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("games", help="count games per split and task type")
    p.add_argument("--data-dir", help="games folder, or $ALFWORLD_DATA for official games")
    p.set_defaults(func=cmd_games)

    p = sub.add_parser("demo", help="play one game to the end with ALFWorld's expert")
    p.add_argument("--data-dir", help="games folder, or $ALFWORLD_DATA for official games")
    p.add_argument("--split", default="valid_seen")
    p.add_argument("--task", choices=TASK_TYPES, help="only games of this task type")
    p.add_argument("--index", type=int, default=0, help="which game of the split (sorted by id)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("generate", help="make new games offline")
    add_dataclass_args(p, GenerateConfig)
    p.add_argument("--pack-dir", help="also write compact packs (<split>.jsonl.xz) here, e.g. data/packs")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("train", help="train a LoRA adapter with group rollouts and PPO",
                       description="Train with GRPO-style advantages and a clipped PPO loss on a LoRA adapter. "
                                   "A preset sets many flags at once; flags given explicitly win.")
    p.add_argument("--preset", default="cpu", choices=sorted(PRESETS),
                   help="cpu: the bundled small model, minutes on 2 cores; reference: the reference run's "
                        "settings for a GPU (default: cpu)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                                                       "(with its saved config; --updates may raise the total)")
    add_dataclass_args(p, TrainConfig)
    p.set_defaults(func=cmd_train)

    from alfrl.evaluate import EvalConfig
    p = sub.add_parser("eval", help="evaluate a model (+ LoRA adapter) on valid_seen / valid_unseen")
    add_dataclass_args(p, EvalConfig)
    p.set_defaults(func=cmd_eval)

    from alfrl.sft import SFTConfig
    p = sub.add_parser("sft", help="expert warm start: supervised LoRA fine-tuning on expert walkthroughs")
    add_dataclass_args(p, SFTConfig)
    p.set_defaults(func=cmd_sft)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alfrl.checkpoint import RunDirError
    from alfrl.games import GameDataError
    try:
        args.func(args)
    except (GameDataError, FileNotFoundError, FileExistsError, ValueError, RuntimeError, RunDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("\ninterrupted; finished work is kept (generate resumes from its journal, train from its last "
              "checkpoint with --resume)", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
