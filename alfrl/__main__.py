"""``python -m alfrl <command>``: the course's command line.

Commands:
  setup      expand the committed game packs into data/games (seconds) and list them
  demo       play one game to the end with ALFWorld's expert, in the real engine
             (--agent warmstart_epoch|grpo_scale|PATH: the course's agent plays a held-out game)
  games      count the games of a data dir per split and task type
  generate   make new games offline (train / valid_seen / valid_unseen)
  train      GRPO-style PPO on a LoRA adapter (--preset cpu | practice | scale | reference; --resume RUN_DIR)
  eval       success per split and task type of a model (+ adapter) on valid_seen / valid_unseen
  sft        expert warm start: fine-tune a LoRA adapter on the expert's walkthroughs
  dagger     play, let the expert label the states reached, fine-tune on them, round after round
  profile    play listed games K times each: each game's wins out of K (difficulty, or before/after practice)
  pool       pick a practice pool and matched control games from a profile
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from alfrl import TASK_TYPES

if TYPE_CHECKING:  # for annotations only: each command imports what it needs when it runs
    from alfrl.training.train_config import TrainConfig


def _table(data_dir: str | None) -> str:
    from alfrl.world.games import available_splits, load_games, resolve_data_dir
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
    from alfrl.base.paths import games_dir
    from alfrl.world.pack import default_packs, expand
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


AGENT_GAME = ("valid_unseen", 14)
"""The agent's default game: (split, index) among the small rooms (``--max-expert-steps 8
--max-receptacles 20``, the cpu preset's and the learning result's filters) of the committed games,
sorted by id: pick_and_place_simple-Watch-None-Drawer-205/trial_alfrl_s0_valid_unseen_00010, a held-out
game (a floor plan never used for training, 15 receptacles) and one of the 12 of these 20 games that the
default warm start wins in ``python -m alfrl eval --adapter warmstart_epoch --split valid_unseen
--max-expert-steps 8 --max-receptacles 20 --max-steps 10 --max-new-tokens 48`` (``warmstart_expert`` wins 11,
the first warm start 5): it looks on the sofa first, finds the watch on the next table and wins in 7 turns
of 10, in about 8 s on 2 idle cores (``warmstart_expert`` plays it the same way)."""

HELD_OUT = {"valid_unseen": "held out: a room on a floor plan never used in training",
            "valid_seen": "held out: a new room on a training floor plan, never trained on",
            "train": "a training game: the warm start and RL train on this split"}


def cmd_demo(args: argparse.Namespace) -> None:
    if args.agent:
        return _agent_demo(args)
    from alfrl.world.expert import replay
    from alfrl.world.games import load_games
    games = load_games(args.split or "valid_seen", args.data_dir, task_types=(args.task,) if args.task else None,
                       max_expert_steps=args.max_expert_steps, max_receptacles=args.max_receptacles)
    game = games[(args.index or 0) % len(games)]
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


def agent_adapter(agent: str, model: str | None) -> tuple[Path | str, str, str]:
    """``--agent``'s adapter, the model it belongs to, and a description: a shipped one (``warmstart_epoch``,
    ``grpo_scale``; ``warmstart_expert``, ``warmstart`` and ``grpo`` once rebuilt), a LoRA adapter folder, a checkpoint folder (its
    ``adapter/``) or a training run directory (the adapter of its newest checkpoint, on the model its
    config.json names unless ``model`` is given). A clear FileNotFoundError when PATH holds none of these."""
    from alfrl.agent.models import BUNDLED, SHIPPED, resolve_adapter
    from alfrl.base.checkpoint import latest_checkpoint
    from alfrl.base.rundir import read_config
    if agent in SHIPPED:
        return agent, model or BUNDLED, f"{SHIPPED[agent][0]} in {_shown(resolve_adapter(agent))}"
    path = Path(agent)
    how = ("pass --agent warmstart_epoch (the default warm start), --agent grpo_scale (the scale run's GRPO "
           "adapter), a LoRA adapter folder (holding adapter_config.json, "
           "e.g. runs/sft/adapter or runs/cpu/checkpoints/step_00006/adapter), or a training run directory "
           "(e.g. runs/cpu: its newest checkpoint's adapter)")
    if not path.exists():
        raise FileNotFoundError(f"--agent {agent}: {path} does not exist; {how}")
    if (path / "adapter_config.json").is_file():
        return path, model or BUNDLED, f"the adapter in {path}"
    if (path / "adapter" / "adapter_config.json").is_file():  # a checkpoint folder
        return path / "adapter", model or BUNDLED, f"the adapter of checkpoint {path}"
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise FileNotFoundError(f"--agent {agent}: {path} holds no LoRA adapter (no adapter_config.json) and no "
                                f"training checkpoint (no {path / 'checkpoints'}/step_*); {how}")
    run_model = (read_config(path) or {}).get("model")
    return (checkpoint / "adapter", model or run_model or BUNDLED,
            f"the newest checkpoint of the run {path} ({checkpoint.name})")


def _shown(path: Path) -> str:
    from alfrl.base.paths import REPO_ROOT
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


class _ShowTurns:
    """A one-game GroupEnv that prints the game's start and each turn as it is played, so the agent's demo
    shows the game live while the real rollout code (:func:`alfrl.rl.rollout.rollout_games`) plays it.
    Everything else is the env's."""

    def __init__(self, env):
        self._env, self.turn = env, 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, game):
        start = self._env.reset(game)
        print(start.observation, "\n", flush=True)
        return start

    def step(self, actions):
        results = self._env.step(actions)
        for b, action in actions.items():
            self.turn += 1
            result = results[b]
            if action is None:
                line = "(no valid tool call: the game does not move; the reason is below)"
            elif not result.admissible:
                line = f"> {action}   [invalid: not in the list of available actions]"
            else:
                line = f"> {action}"
            print(f"[{self.turn:>2}] {line}\n     {result.observation}", flush=True)
        return results


def _agent_demo(args: argparse.Namespace) -> None:
    from alfrl.agent.models import BUNDLED, check_adapter, load_policy
    from alfrl.eval.evaluate import EvalConfig
    from alfrl.rl.rollout import RolloutConfig, rollout_games
    from alfrl.training.train_config import TrainConfig
    from alfrl.world.env import GroupEnv
    from alfrl.world.games import load_games

    small = TrainConfig()  # the cpu preset's rooms and episodes (the learning result's evaluation too)
    greedy = EvalConfig()  # evaluation's sampling: near-greedy, its seed, its dtype and device
    if args.max_steps < 1 or args.max_new_tokens < 1:
        raise ValueError(f"--max-steps and --max-new-tokens must be at least 1 (got {args.max_steps}, "
                         f"{args.max_new_tokens})")
    adapter, model, described = agent_adapter(args.agent, args.model)
    check_adapter(adapter, model)  # before anything loads: a clear error naming the folder
    default_game = args.split is None and args.task is None and args.index is None and args.data_dir is None
    split, index = AGENT_GAME if default_game else (args.split or AGENT_GAME[0], args.index or 0)
    limits = dict(max_expert_steps=small.max_expert_steps if args.max_expert_steps is None else args.max_expert_steps,
                  max_receptacles=small.max_receptacles if args.max_receptacles is None else args.max_receptacles)
    games = load_games(split, args.data_dir, task_types=(args.task,) if args.task else None, **limits)
    game = games[index % len(games)]
    base = "SmolLM2-135M-Instruct (bundled)" if model == BUNDLED else model
    print(f"game  {game.split}/{game.game_id} ({HELD_OUT.get(split, 'not a training game')}; "
          f"{game.receptacles} receptacles, the expert needs {len(game.walkthrough)} steps)\n"
          f"task  {game.goal}\n"
          f"The course's agent plays it: {base} with {described}, through the alfworld_step tool, "
          f"greedy (temperature {greedy.temperature}), at most {args.max_steps} turns of {args.max_new_tokens} "
          "new tokens.\n")
    start = time.time()
    policy = load_policy(model, lora=str(adapter), dtype=greedy.dtype, device=greedy.device)
    policy.model.eval()
    loaded = time.time() - start
    config = RolloutConfig(k=1, max_steps=args.max_steps, max_trajectory_tokens=small.max_trajectory_tokens,
                           max_new_tokens=args.max_new_tokens, temperature=greedy.temperature, seed=greedy.seed,
                           workers=0, draft_tokens=greedy.draft_tokens)
    start = time.time()
    with GroupEnv(k=1, max_steps=args.max_steps, workers=0) as env:
        [played] = rollout_games(policy, [game], config, env=_ShowTurns(env))
    seconds = time.time() - start
    bad = [(i, t) for i, t in enumerate(played.turns, 1) if not t.valid_format]
    if bad:
        print("\nreplies that were not a valid tool call:")
    for i, t in bad:
        cut = f" (cut at --max-new-tokens {args.max_new_tokens})" if t.stopped_on == "budget" else ""
        print(f"turn {i}: {t.reason}{cut}; the reply was {t.reply[:200]!r}")
    end = {"won": "won", "max_steps": f"out of turns ({args.max_steps})",
           "max_tokens": "out of tokens"}.get(played.end_reason, played.end_reason)
    print(f"\nwon: {played.won} after {played.steps} steps, {played.invalid} invalid actions; {end} "
          f"({seconds:.1f} s playing, {played.sampled} tokens sampled; model loaded in {loaded:.1f} s)")


def cmd_generate(args: argparse.Namespace) -> None:
    from alfrl.base.cli import build_dataclass
    from alfrl.world.generate import GenerateConfig, generate
    from alfrl.world.generate import continue_from_pack, pack_journal, settings_key
    from alfrl.world.pack import write_pack
    cfg = build_dataclass(GenerateConfig, args)
    packs = {split: Path(args.pack_dir) / f"{split}.jsonl.xz" for split in cfg.splits} if args.pack_dir else {}
    if args.pack_so_far:
        if not packs:
            raise SystemExit("--pack-so-far needs --pack-dir: where to write the games made so far")
        for split, path in packs.items():
            print(f"packed the {pack_journal(cfg, split, path)} games made so far into {path}")
        return
    for split, path in packs.items():
        if taken := continue_from_pack(cfg, split, path):
            print(f"continuing from {path}: {taken} games already made")
    start = time.time()
    records = generate(cfg)
    total = sum(len(r) for r in records.values())
    print(f"made {total} games in {cfg.out} ({time.time() - start:.0f} s, {cfg.workers} workers)")
    for split, path in packs.items():
        write_pack(records[split], path)
        path.with_name(f"{split}.settings.json").write_text(settings_key(cfg) + "\n")
        print(f"packed {len(records[split])} games into {path} ({path.stat().st_size / 1e6:.2f} MB)")


def cmd_train(args: argparse.Namespace) -> None:
    from alfrl.base.cli import given_flags
    from alfrl.training.train import TrainConfig, preset, train
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
    from alfrl.base.cli import build_dataclass
    from alfrl.eval.evaluate import EvalConfig, evaluate
    config = build_dataclass(EvalConfig, args)
    summary = evaluate(config)
    print(f"\n{config.out}: {summary['all']['won']}/{summary['all']['games']} games won")
    for split, s in summary["splits"].items():
        print(f"  {split:<13} success {100 * s['success']:5.1f}% ({s['won']}/{s['games']}), "
              f"invalid/episode {s['invalid_per_episode']:.2f}, valid calls {100 * s['valid_call_rate']:.0f}%, "
              f"admissible {100 * s['admissible_rate']:.0f}%")
    print(f"  records: {config.out}/records.jsonl; summary: {config.out}/summary.json")


def cmd_sft(args: argparse.Namespace) -> None:
    from alfrl.base.cli import build_dataclass
    from alfrl.imitation.sft import SFTConfig, train_sft
    adapter = train_sft(build_dataclass(SFTConfig, args))
    print(f"adapter saved to {adapter}; train from it with: python -m alfrl train --init-adapter {adapter}")


def cmd_dagger(args: argparse.Namespace) -> None:
    from alfrl.base.cli import build_dataclass
    from alfrl.imitation.dagger import DaggerConfig, dagger
    config = build_dataclass(DaggerConfig, args)
    adapter = dagger(config)
    print(f"adapter saved to {adapter}; per round: {config.out}/metrics.jsonl; "
          f"evaluate it with: python -m alfrl eval --adapter {adapter}")


def cmd_profile(args: argparse.Namespace) -> None:
    from alfrl.base.cli import build_dataclass
    from alfrl.eval.practice import PROFILE, ProfileConfig, profile
    config = build_dataclass(ProfileConfig, args)
    lines = profile(config)
    wins, episodes = sum(r["wins"] for r in lines), sum(r["k"] for r in lines)
    print(f"\n{len(lines)} games, {wins}/{episodes} episodes won; per game (wins out of {config.k}):")
    for r in sorted(lines, key=lambda r: (r["wins"], r["game_id"])):
        print(f"  {r['wins']:>3}  {r['game_id']}")
    print(f"profile: {Path(config.out) / PROFILE}")


def cmd_pool(args: argparse.Namespace) -> None:
    import json
    from alfrl.eval.practice import matched_pools, read_profile
    pool = matched_pools(read_profile(args.profile), size=args.size, low=args.low, high=args.high, seed=args.seed)
    pool["profile"] = args.profile
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(pool, indent=2) + "\n")
    print(f"{out}: {len(pool['practice'])} practised and {len(pool['control'])} control games")
    for name in ("practice", "control"):
        for game, wins in zip(pool[name], pool[f"{name}_wins"]):
            print(f"  {name:<8} {wins}/{pool['k']}  {game}")


def _add_demo(sub: argparse._SubParsersAction, cpu: TrainConfig) -> None:
    """``python -m alfrl demo``: the expert's or the agent's game, its defaults those of ``cpu`` (the
    training settings the agent plays with)."""
    p = sub.add_parser("demo", help="play one game to the end with ALFWorld's expert (or --agent: the course's agent)",
                       description="Play one game to the end in the real ALFWorld engine, turn by turn: ALFWorld's "
                                   "handcoded expert, or with --agent the course's own agent (a LoRA adapter on "
                                   "the model) through the alfworld_step tool, by the real rollout code.")
    p.add_argument("--data-dir", help="games folder, or $ALFWORLD_DATA for official games")
    p.add_argument("--split", help="valid_seen (the expert's default), valid_unseen (the agent's), or train")
    p.add_argument("--task", choices=TASK_TYPES, help="only games of this task type")
    p.add_argument("--index", type=int, help="which game of the split (sorted by id; default 0, or for --agent "
                                             f"{AGENT_GAME[0]} game {AGENT_GAME[1]}, which the default warm start "
                                             "wins)")
    p.add_argument("--agent", metavar="warmstart_epoch|grpo_scale|PATH",
                   help="the agent plays instead of the expert: warmstart_epoch (the default warm start, "
                        "data/warmstart_epoch), grpo_scale (the default warm start after the scale run's 80 GRPO "
                        "updates), a LoRA adapter folder, or a training run directory (its newest checkpoint). "
                        "warmstart, warmstart_expert and grpo name the course's earlier adapters, once their "
                        "weights are rebuilt (their READMEs say how)")
    p.add_argument("--model", help="the agent's base model (default: the bundled SmolLM2-135M, or the run's model)")
    p.add_argument("--max-steps", type=int, default=cpu.max_steps,
                   help=f"the agent's turns (default {cpu.max_steps}, as the cpu preset)")
    p.add_argument("--max-new-tokens", type=int, default=cpu.max_new_tokens,
                   help=f"tokens per reply of the agent (default {cpu.max_new_tokens}, as the cpu preset)")
    p.add_argument("--max-expert-steps", type=int, help="only games the expert solves in at most this many steps "
                                                        f"(default: none; {cpu.max_expert_steps} for --agent; 0 = any)")
    p.add_argument("--max-receptacles", type=int, help="only rooms with at most this many receptacles "
                                                       f"(default: none; {cpu.max_receptacles} for --agent; 0 = any)")
    p.set_defaults(func=cmd_demo)


CONFIG_COMMANDS = {
    # command: (module, config class, help, description)
    "generate": ("alfrl.world.generate", "GenerateConfig", "make new games offline", None),
    "eval": ("alfrl.eval.evaluate", "EvalConfig", "evaluate a model (+ LoRA adapter) on valid_seen / valid_unseen", None),
    "sft": ("alfrl.imitation.sft", "SFTConfig", "expert warm start: supervised LoRA fine-tuning on expert walkthroughs", None),
    "dagger": ("alfrl.imitation.dagger", "DaggerConfig", "DAgger: the expert labels the states the policy reaches; fine-tune on "
               "them", "Each round: the policy plays new train games, the expert labels every state it reached, and "
               "the adapter is fine-tuned on the expert's walkthroughs and all labels so far. --resume continues an "
               "interrupted run."),
    "profile": ("alfrl.eval.practice", "ProfileConfig", "each listed game's wins out of K at the rollout temperature",
                "Play each game K times (the cpu preset's rollouts by default) and record its wins out of K: a "
                "difficulty profile, or the before/after evaluation of practised and control games."),
}
"""The commands whose flags are one dataclass config's fields (each runs ``cmd_<command>``)."""


def build_parser() -> argparse.ArgumentParser:
    """``python -m alfrl``'s commands and their flags (the dataclass configs' fields)."""
    import importlib

    from alfrl.base.cli import add_dataclass_args
    from alfrl.training.train import TrainConfig

    parser = argparse.ArgumentParser(prog="python -m alfrl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_setup_and_games(sub)
    _add_demo(sub, TrainConfig())
    _add_train(sub)
    for name, (module, config, help_text, description) in CONFIG_COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=description)
        add_dataclass_args(p, getattr(importlib.import_module(module), config))
        if name == "generate":
            p.add_argument("--pack-dir", help="also write compact packs (<split>.jsonl.xz) here, e.g. data/packs; a pack "
                           "already there from the same settings is continued: only its missing games are made")
            p.add_argument("--pack-so-far", action="store_true", help="only pack the games made so far in --out "
                           "(a long generation cut short) into --pack-dir, to continue it elsewhere, and stop")
        p.set_defaults(func=globals()[f"cmd_{name}"])
    _add_pool(sub)
    return parser


def _add_setup_and_games(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="expand the committed game packs into data/games")
    p.add_argument("--data-dir", help="where to expand (default: $ALFRL_DATA_DIR or data/games)")
    p.add_argument("--force", action="store_true", help="rewrite games even if already expanded")
    p.set_defaults(func=cmd_setup)
    p = sub.add_parser("games", help="count games per split and task type")
    p.add_argument("--data-dir", help="games folder, or $ALFWORLD_DATA for official games")
    p.set_defaults(func=cmd_games)


def _add_train(sub: argparse._SubParsersAction) -> None:
    from alfrl.base.cli import add_dataclass_args
    from alfrl.training.train import PRESETS, TrainConfig
    p = sub.add_parser("train", help="train a LoRA adapter with group rollouts and PPO",
                       description="Train with GRPO-style advantages and a clipped PPO loss on a LoRA adapter. "
                                   "A preset sets many flags at once; flags given explicitly win.")
    p.add_argument("--preset", default="cpu", choices=sorted(PRESETS),
                   help="cpu: the bundled small model, minutes on 2 cores; practice: its method on a fixed pool of "
                        "8 games; scale: its method for the reference run's 80 updates (at most 5,120 episodes), "
                        "hours; reference: the reference run's settings for a GPU (default: cpu; "
                        "alfrl.training.train_config.PRESETS)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                                                       "(with its saved config; --updates may raise the total)")
    add_dataclass_args(p, TrainConfig)
    p.set_defaults(func=cmd_train)


def _add_pool(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pool", help="pick practised and matched control games from a profile")
    p.add_argument("--profile", required=True, help="a profile folder or its profile.jsonl")
    p.add_argument("--out", default="data/practice/pool.json", help="the pool file to write")
    p.add_argument("--size", type=int, default=8, help="practised games (and as many controls)")
    p.add_argument("--low", type=float, default=1 / 8, help="lowest win rate of a pool game")
    p.add_argument("--high", type=float, default=6 / 8, help="highest win rate of a pool game")
    p.add_argument("--seed", type=int, default=0, help="seeds the coin that splits each matched pair")
    p.set_defaults(func=cmd_pool)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alfrl.base.checkpoint import RunDirError
    from alfrl.world.games import GameDataError
    try:
        args.func(args)
    except (GameDataError, FileNotFoundError, FileExistsError, ValueError, RuntimeError, RunDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("\ninterrupted; finished work is kept (generate resumes from its journal, train from its last "
              "checkpoint with --resume, dagger from its last game)", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
