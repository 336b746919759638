"""The training loop: pick games -> group rollouts -> advantages -> PPO update -> log -> checkpoint.

``--algo rft`` or ``--algo dpo`` (notebook 07) plays groups the same way and changes the update:
fine-tuning on the winners, or DPO on each group's preference pairs (:func:`learn`); with dynamic
sampling each keeps the groups it can learn from (:func:`teaches`), so later games can differ.

``python -m alfrl train --preset cpu`` runs it headless; notebook 05 runs the same
:func:`train` with live plots. Every field of :class:`TrainConfig` is a command-line flag
and a papermill parameter; a preset sets many at once and explicit flags win over it.

Exact resume: the games of update ``u`` and every branch's sampling seed depend only on
the run's seed and ``u``; the adapter, Adam's state and the RNG states are checkpointed
after every update (``checkpoint_every=1``). A run killed at any point and resumed with
``--resume RUN_DIR`` replays at most the update that was in flight and logs the same
metrics as a run that never stopped. With ``checkpoint_every`` > 1, an exception (a failed rollout, an
out-of-memory error in the update, an interrupt, SIGTERM) first writes the checkpoint of the last finished
update, unless the update in flight had already taken an optimizer step; then the run stops with a message that
says how to continue.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from alfrl.agent.models import LoraSpec, load_policy, sampling_copy, save_adapter, torch_threads
from alfrl.agent.protocol import resolve_actions
from alfrl.agent.vllm_engine import serve_weights, start_for
from alfrl.base.checkpoint import (append_jsonl, latest_checkpoint, load_state, read_jsonl, rng_state, save_checkpoint,
                                   signal_handlers, signals_held, truncate_jsonl)
from alfrl.base.rundir import EVAL, RUN, TRAIN, check_output_dir, folder_kind, prepare_output_dir
from alfrl.base.tracking import Trackers, parse_log
from alfrl.eval.practice import game_wins
from alfrl.imitation.dpo import FrozenAdapter, dpo_update, preference_pairs
from alfrl.imitation.rft import rft_step, winners
from alfrl.rl.advantage import assign_advantages, batch_stats, is_degenerate, progress_spread
from alfrl.rl.gigpo import anchor_stats
from alfrl.rl.ppo import PPOConfig, make_optimizer, ppo_update, summarize_steps
from alfrl.rl.rollout import rollout_batch
from alfrl.training.plots import plot_training
from alfrl.training.train_config import PRESETS, TRAIN_RANGES, TrainConfig, check_config, preset  # noqa: F401 (re-exported)
from alfrl.training.train_eval import EVAL_LOG, check_eval_games, drop_later_evals, eval_due, evaluate_step, evaluated_steps
from alfrl.world.games import check_games, load_games, shuffled


def training_games(config: TrainConfig) -> list:
    """The games a run trains on, in the order it plays them: the split's games after the filters, shuffled
    by the run's seed, then ``more_data_dir``'s the same way; with ``pool``, only the pool's practised games
    (:mod:`alfrl.eval.practice`), shuffled too."""
    if config.pool is not None:
        if config.more_data_dir:
            raise ValueError("--pool trains on its practised games alone, so --more-data-dir adds nothing: leave "
                             "one of them out")
        from alfrl.eval.practice import read_pool, resolve_pool, select_games
        games = select_games(config.split, config.data_dir, read_pool(resolve_pool(config.pool))["practice"],
                             config.max_expert_steps, config.max_receptacles)
        return shuffled(games, config.seed)

    def split_of(folder: str | None) -> list:
        return load_games(config.split, folder, seed=config.seed, max_expert_steps=config.max_expert_steps,
                          max_receptacles=config.max_receptacles)

    games, more = split_of(config.data_dir), split_of(config.more_data_dir) if config.more_data_dir else []
    shared = sorted({g.game_id for g in games} & {g.game_id for g in more})
    if shared:
        raise ValueError(f"{len(shared)} games of --more-data-dir {config.more_data_dir} are in --data-dir too "
                         f"(first: {shared[0]}); it must hold new games (generate them with another --seed)")
    return games + more


def games_for_update(games: list, step: int, per_update: int) -> list:
    """The games of update ``step`` (1-based) when every update plays ``per_update`` games: the next
    ``per_update`` of the shuffled list, wrapping."""
    return games_at(games, (step - 1) * per_update, per_update)


def games_at(games: list, cursor: int, n: int) -> list:
    """``n`` games of the shuffled list from position ``cursor`` on, wrapping. The cursor counts games
    played so far; it is checkpointed, so a resumed run continues with the next game."""
    return [games[(cursor + i) % len(games)] for i in range(n)]


def load_for_training(config: TrainConfig, adapter: str | None = None):
    """The policy a run trains: ``adapter`` (a checkpoint's) if given, else the config's initial
    adapter (e.g. the warm start), else a fresh seeded LoRA."""
    torch.manual_seed(config.seed)  # a fresh adapter's initial weights
    init = config.init_adapter if config.init_adapter not in (None, "", "none") else None
    lora = adapter or init or LoraSpec(rank=config.lora_rank, alpha=config.lora_alpha)
    policy = load_policy(config.model, lora=lora, dtype=config.dtype, device=config.device, thinking=config.thinking)
    policy.actions = resolve_actions(config.actions, policy)  # what it plays, and what its checkpoints record
    return policy


def saved_config(run_dir: str | Path, updates: int | None = None) -> TrainConfig:
    """The config a run directory was started with (``updates`` may raise its number of updates), with a
    clear error naming the file if it is not this alfrl's TrainConfig."""
    run_dir = Path(run_dir)
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json); start a run with "
                                "python -m alfrl train --run-dir ...")
    try:
        saved = json.loads(path.read_text())
    except ValueError as e:  # not JSON, or not text
        raise ValueError(f"{path} is not valid JSON ({e}): the run's config is damaged; repair it by hand "
                         "(see TrainConfig for its fields) or start a new run with --run-dir") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path} holds a JSON {type(saved).__name__}, not a run's settings; repair it by hand "
                         "(see TrainConfig for its fields) or start a new run with --run-dir")
    if folder_kind(run_dir) in (EVAL, RUN):  # another command's folder: say so, not which keys differ
        check_output_dir(run_dir, TRAIN, resume=True, flag="--resume")
    fields = {f for f in TrainConfig.__dataclass_fields__}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise ValueError(f"{path} has settings this version of alfrl does not know: {', '.join(unknown)}; it was "
                         "written by another version or another program. Start a new run with --run-dir, or "
                         "remove those keys from the file if you know they change nothing")
    # Missing keys are fields added to TrainConfig after the run started. Taking their defaults is safe
    # (every field has one that works), but where a default differs from what the older code did, the
    # resumed updates differ from the earlier ones: the note names them.
    missing = sorted(fields - set(saved))
    if missing:
        defaults = TrainConfig()
        print(f"note: {path} has no {', '.join(missing)} (written by an older alfrl); resuming with the "
              f"defaults {', '.join(f'{k}={getattr(defaults, k)!r}' for k in missing)}", file=sys.stderr)
    config = TrainConfig(**saved)
    return replace(config, run_dir=str(run_dir), updates=max(updates or 0, config.updates))  # only raises


def _start_config(config: TrainConfig | None, resume: str | Path | None, updates: int | None
                  ) -> tuple[TrainConfig, Path]:
    """The run's config (a resumed run's saved one) and folder, both checked; nothing is written yet."""
    if resume is not None:
        run_dir = Path(resume)
        config = saved_config(run_dir, updates)
    else:
        config = replace(config or TrainConfig(), updates=updates or (config or TrainConfig()).updates)
        run_dir = Path(config.run_dir)
    check_config(config)
    check_output_dir(run_dir, TRAIN, overwrite=config.overwrite and resume is None, resume=resume is not None,
                     flag="--resume" if resume is not None else "--run-dir")
    return config, run_dir


def _open_run_dir(run_dir: Path, config: TrainConfig, done: int, fresh: bool) -> list[dict]:
    """Make (or reopen) the run folder: its config, the logs cut back to the ``done`` checkpointed
    updates; returns the metrics logged so far."""
    if fresh:
        run_dir = prepare_output_dir(run_dir, TRAIN, overwrite=config.overwrite, flag="--run-dir").path
    (run_dir / "config.json").write_text(json.dumps(asdict(config), indent=2))
    truncate_jsonl(run_dir / "metrics.jsonl", done)
    truncate_jsonl(run_dir / "trajectories.jsonl", done)
    drop_later_evals(run_dir, done)
    return read_jsonl(run_dir / "metrics.jsonl")


def train(config: TrainConfig | None = None, resume: str | Path | None = None, updates: int | None = None,
          progress: bool = True, on_update=None) -> list[dict]:
    """Run training, or ``resume`` the run in that directory with its saved config (``updates``
    raises its number of updates). Returns every update's metrics; ``on_update(metrics_so_far)``
    is called after each update (notebooks redraw their plots there).

    The config, the initial adapter, the games and the run directory (:mod:`alfrl.base.rundir`'s policy:
    never another command's folder) are checked before anything is written. Runs on ``config.threads``
    torch threads, and puts the count back afterwards."""
    config, run_dir = _start_config(config, resume, updates)
    with torch_threads(config.threads), sigterm_stops():
        return _train(config, run_dir, resume, progress, on_update)


class Terminated(SystemExit):
    """SIGTERM (a scheduler's stop, a machine handed back) during training: the run saves what it can and the
    process exits with status 143, as a process killed by SIGTERM does."""


@contextmanager
def sigterm_stops():
    """While training, SIGTERM raises :class:`Terminated` in the main thread, so the run's own error path
    saves the last finished update before the process ends (elsewhere, and outside, SIGTERM is left alone)."""
    def stop(signum, frame):
        raise Terminated(128 + signum)
    with signal_handlers({signal.SIGTERM: stop}):
        yield


def _train(config: TrainConfig, run_dir: Path, resume, progress: bool, on_update) -> list[dict]:
    games = training_games(config)
    checkpoint = latest_checkpoint(run_dir) if resume is not None else None
    state = json.loads((checkpoint / "state.json").read_text()) if checkpoint else {}
    done = state.get("step", 0)
    cursor = state.get("cursor", done * config.games_per_update)  # the next game to play
    # damaged PDDL in the games this run may play (a few ms a game), before anything is written
    per_update = config.max_groups_per_update if config.dynamic_sampling else config.games_per_update
    check_games(list({g.path: g for g in games_at(games, cursor, (config.updates - done) * per_update)}.values()))
    check_eval_games(config, run_dir)
    history = _open_run_dir(run_dir, config, done, fresh=resume is None)
    pending_eval = eval_due(config, done) and done not in evaluated_steps(run_dir)
    if done >= config.updates and not pending_eval:  # nothing to do: no model to load
        print(f"{run_dir}: all {config.updates} updates already done")
        return history
    policy = load_for_training(config, str(checkpoint / "adapter") if checkpoint else None)
    ppo = config.ppo()
    optimizer = make_optimizer(policy, ppo)
    if checkpoint:
        load_state(checkpoint, optimizer)
    bar = tqdm(range(done + 1, config.updates + 1), desc="updates", unit="update", disable=not progress,
               initial=done, total=config.updates)
    trackers = _open_trackers(config, run_dir, history, done, pending_eval)
    server = None
    unsaved = None  # (step, cursor, RNG states) of a finished update not yet checkpointed
    phase = {"stepped": False}  # whether the update in flight has begun to change the weights
    stepping = optimizer.register_step_pre_hook(lambda *_: phase.update(stepped=True))  # the first change
    try:
        if config.sampler == "vllm":
            server = start_for(policy, config, run_dir / "vllm_serve.log")
        if pending_eval:  # the policy before training, or an evaluation an interruption cut short
            _serve(policy, run_dir, done)
            trackers.log(evaluate_step(policy, config, run_dir, done, progress), done)
            _plot(history, run_dir)
        for step in bar:
            metrics = _one_update(policy, optimizer, config, ppo, games, step, cursor, run_dir, progress, phase)
            cursor += metrics["groups"]
            history.append(metrics)
            append_jsonl(run_dir / "metrics.jsonl", [metrics])
            trackers.log(metrics, step)
            if step % config.checkpoint_every == 0 or step == config.updates:
                save_checkpoint(run_dir, step, lambda folder: save_adapter(policy, folder), optimizer,
                                {"cursor": cursor}, keep_last=config.keep_checkpoints)
                unsaved = None
            else:
                unsaved = (step, cursor, rng_state())
            phase["stepped"] = False  # the weights are this update's, checkpointed or not
            if eval_due(config, step):
                _serve(policy, run_dir, step)
                trackers.log(evaluate_step(policy, config, run_dir, step, progress), step)
            _plot(history, run_dir)
            bar.set_postfix(reward=f"{metrics['reward']:.2f}", success=f"{metrics['success']:.2f}")
            if progress:
                tqdm.write(progress_line(history, config.updates))
            if on_update:
                on_update(history)
    except BaseException as error:
        if unsaved and not phase["stepped"]:  # the weights are still those of the last finished update
            step, at, rng = unsaved
            with signals_held():  # a second Ctrl-C or SIGTERM waits for the rescue to be written
                save_checkpoint(run_dir, step, lambda folder: save_adapter(policy, folder), optimizer,
                                {"cursor": at}, keep_last=config.keep_checkpoints, rng=rng)
        last = latest_checkpoint(run_dir)
        what = ("interrupted" if isinstance(error, KeyboardInterrupt) else "stopped by SIGTERM"
                if isinstance(error, Terminated) else f"stopped by {type(error).__name__}")
        print(f"\n{what}; the last checkpoint is {last.name if last else 'none'}. "
              f"Continue with: python -m alfrl train --resume {run_dir}", file=sys.stderr)
        raise
    finally:
        stepping.remove()
        trackers.close()
        if server:
            server.stop()
    print(summary(history, run_dir))
    return history


def progress_line(history: list[dict], updates: int) -> str:
    """One log line after an update: what it played and trained, and when the run should end (the mean
    time of every update so far, resumed ones included, times the updates left)."""
    last = history[-1]
    seconds = [m["rollout_seconds"] + m["update_seconds"] for m in history]
    left = (updates - last["step"]) * sum(seconds) / len(seconds)
    trained = sum(m.get("trajectories_trained") or 0 for m in history)
    played = sum(m["trajectories"] for m in history)
    finish = time.strftime("%H:%M", time.localtime(time.time() + left))
    return (f"update {last['step']}/{updates}: success {last['success']:.2f}, trained "
            f"{last.get('trajectories_trained') or 0} of {last['trajectories']} episodes played "
            f"({trained} of {played} in all), {seconds[-1] / 60:.1f} min; ETA {left / 3600:.1f} h (about {finish})")


def _open_trackers(config: TrainConfig, run_dir: Path, history: list[dict], done: int, pending_eval: bool
                   ) -> Trackers:
    """The run's trackers (``--log``), from the first step this process logs on: the update after the
    checkpoint ``done``, or ``done`` itself when its evaluation is still to run (an interrupted one may have
    reached the tracker); that update's metrics are then logged again, so every step appears once."""
    again = pending_eval and done > 0 and bool(history)
    trackers = Trackers(parse_log(config.log), run_dir, asdict(config), first_step=done if again else done + 1)
    if again:
        trackers.log(history[-1], done)
    return trackers


def _plot(history: list[dict], run_dir: Path) -> None:
    plot_training(history, run_dir / "plots.png", title=f"training run {run_dir.name}",
                  evals=read_jsonl(run_dir / EVAL_LOG))


def play_update(policy, config: TrainConfig, games: list, step: int, cursor: int, progress: bool = True
                ) -> tuple[list[list], list[list]]:
    """The groups of update ``step``: ``games_per_update`` games from ``cursor`` on. With
    ``dynamic_sampling``, groups that do not teach (:func:`teaches`: by ``keep_groups`` for GRPO, a win for
    RFT, a preference pair for DPO) are set aside and more games are played, ``groups_per_batch``
    at a time, until ``games_per_update`` groups teach or ``max_groups_per_update`` groups were played. Returns (groups to train on, every group played);
    the next update's games start at ``cursor + len(every group played)``."""
    rollout = config.rollout(step)
    if config.sample_dtype:
        policy = sampling_copy(policy, config.sample_dtype)  # the weights of this update, merged
    played = rollout_batch(policy, games_at(games, cursor, config.games_per_update), rollout, progress=progress)
    if not config.dynamic_sampling:
        return played, played
    spread = [g for g in played if teaches(g, config)]
    extra = 0
    while len(spread) < config.games_per_update and len(played) < config.max_groups_per_update:
        extra += 1
        n = min(max(1, config.groups_per_batch), config.max_groups_per_update - len(played))
        more = rollout_batch(policy, games_at(games, cursor + len(played), n),
                             replace(rollout, seed=rollout.seed + 7919 * extra), progress=progress)
        played += more
        spread += [g for g in more if teaches(g, config)]
    return spread, played


def teaches(group: list, config: TrainConfig) -> bool:
    """Whether dynamic sampling keeps ``group``: whether the run's ``algo`` can learn from it. GRPO by
    ``keep_groups``: its rewards differ ("spread"), some branch won and some lost ("win"), or the branches
    differ in wins or subgoals reached ("progress"). RFT: some branch won. DPO: it makes a preference pair."""
    if config.algo == "rft":
        return any(t.won for t in group)
    if config.algo == "dpo":
        return bool(group_pairs(group, config))
    if config.keep_groups == "win":
        return any(t.won for t in group) and not all(t.won for t in group)
    if config.keep_groups == "progress":
        return progress_spread(group)
    rewards = config.advantage()
    return not is_degenerate([rewards.reward(t) for t in group])


def group_pairs(group: list, config: TrainConfig) -> list:
    """The preference pairs of one group under the run's reward and ``pair_margin`` (:mod:`alfrl.imitation.dpo`)."""
    rewards = config.advantage()
    return preference_pairs(group, [rewards.reward(t) for t in group], config.pair_margin)


NO_STEP = {"loss": None, "clip_fraction": None, "approx_kl": None, "ratio_mean": None, "ratio_max": None,
           "grad_norm": None, "kl_penalty": None, "tokens_trained": 0, "tokens_run": 0, "trajectories_trained": 0}
"""An update's step metrics when it took no optimizer step (nothing in its groups to learn from)."""


def learn(policy, optimizer, config: TrainConfig, ppo: PPOConfig, kept: list[list], step: int, run_dir: Path
          ) -> tuple[dict, int]:
    """The update's optimizer step(s) on the groups kept, by ``config.algo``; (metrics, optimizer steps).

    grpo: PPO on group-relative advantages. rft: the NLL of the winning trajectories (:mod:`alfrl.imitation.rft`).
    dpo: DPO on each group's preference pairs against the run's starting adapter (:mod:`alfrl.imitation.dpo`),
    whose weights the first update saves in ``RUN_DIR/reference_adapter.pt`` (a resumed run reads them)."""
    if config.algo == "rft":
        chosen = winners(kept)
        if not chosen:
            return dict(NO_STEP), 0
        return {**NO_STEP, **rft_step(policy, optimizer, chosen, ppo.micro_batch_tokens, ppo.bf16,
                                       ppo.max_grad_norm, ppo.gradient_checkpointing)}, 1
    if config.algo == "dpo":
        pairs = [p for g in kept for p in group_pairs(g, config)]
        reference = _reference(policy, run_dir, step)
        if not pairs:
            return {**NO_STEP, "pairs": 0}, 0
        metrics = dpo_update(policy, optimizer, pairs, reference, ppo, config.dpo_beta)
        return {**NO_STEP, **metrics, "loss": metrics["dpo_loss"]}, 1
    trainable = assign_advantages(kept, config.advantage())
    steps = ppo_update(policy, optimizer, trainable, ppo) if trainable else []
    return (summarize_steps(steps, ppo.epochs) if steps else dict(NO_STEP)), len(steps)


REFERENCE_FILE = "reference_adapter.pt"


def _reference(policy, run_dir: Path, step: int) -> FrozenAdapter:
    """The run's starting adapter: saved before the first update's step, read back on every later one."""
    path = run_dir / REFERENCE_FILE
    if path.is_file():
        return FrozenAdapter(policy.model, torch.load(path, map_location=next(policy.model.parameters()).device))
    if step > 1:
        raise FileNotFoundError(f"{path} is missing: DPO needs the weights this run started from. Start the run "
                                "again (or copy the file back from a backup)")
    frozen = FrozenAdapter(policy.model)
    partial = path.with_suffix(".partial")
    torch.save(frozen.weights, partial)
    os.replace(partial, path)  # whole or absent: a kill mid-save leaves no torn reference to resume from
    return frozen


def _one_update(policy, optimizer, config: TrainConfig, ppo: PPOConfig, games: list, step: int, cursor: int,
                run_dir: Path, progress: bool, phase: dict | None = None) -> dict:
    begin = time.perf_counter()
    phase = phase if phase is not None else {}
    phase["stepped"] = False
    _serve(policy, run_dir, step - 1)  # the rollouts sample the weights after the previous update
    kept, played = play_update(policy, config, games, step, cursor, progress)
    rollout_seconds = time.perf_counter() - begin
    stats = batch_stats(played, config.advantage())  # what the policy did: every group played
    assign_advantages(played, config.advantage())
    tick = time.perf_counter()  # from the first optimizer step on, the weights are not the last update's
    step_metrics, optimizer_steps = learn(policy, optimizer, config, ppo, kept, step, run_dir)
    update_seconds = time.perf_counter() - tick
    if config.credit == "gigpo":  # how many turns had a state to be compared in
        step_metrics.update(anchor_stats(kept, config.invalid_penalty, config.gigpo_gamma))
    append_jsonl(run_dir / "trajectories.jsonl",
                 [{"step": step, **t.record()} for g in played for t in g])
    return {"step": step, **stats, "groups_dropped": len(played) - len(kept) if config.dynamic_sampling else 0,
            **step_metrics, "optimizer_steps": optimizer_steps, "rollout_seconds": rollout_seconds,
            "update_seconds": update_seconds, "episodes_per_minute": 60 * stats["trajectories"] / max(
                rollout_seconds + update_seconds, 1e-9), "peak_rss_gb": peak_rss_gb(),
            "peak_gpu_gb": peak_gpu_gb(), "games": [g[0].game_id for g in played], "game_wins": game_wins(played)}


def _serve(policy, run_dir: Path, version: int) -> None:
    """With --sampler vllm: the server gets the adapter as it is after ``version`` updates."""
    if getattr(policy, "engine", None) is not None:
        serve_weights(policy, run_dir / "vllm_adapter", version)


def peak_rss_gb() -> float:
    """The most memory this process has held so far (resident set, GB; 0 where unknown)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20  # bytes on macOS, KB on Linux


def peak_gpu_gb() -> float:
    """The most GPU memory torch has allocated in this process so far (GB, all CUDA devices; 0 without CUDA).
    The driver holds somewhat more (torch's cache, the CUDA context): ``nvidia-smi`` shows that."""
    import torch
    if not torch.cuda.is_available():
        return 0.0
    return sum(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())) / 2**30


def summary(history: list[dict], run_dir: Path) -> str:
    """A few lines on how the run went."""
    if not history:
        return f"{run_dir}: no updates yet"
    first, last = history[0], history[-1]
    seconds = sum(m["rollout_seconds"] + m["update_seconds"] for m in history)
    trained = sum(m["tokens_trained"] for m in history)
    return (f"\n{run_dir}: {len(history)} updates in {seconds / 60:.1f} min "
            f"(rollouts {sum(m['rollout_seconds'] for m in history) / 60:.1f}, "
            f"updates {sum(m['update_seconds'] for m in history) / 60:.1f}); peak memory "
            f"{max(m.get('peak_rss_gb', 0) for m in history):.1f} GB"
            + (f", GPU {gpu:.1f} GB" if (gpu := max(m.get("peak_gpu_gb", 0) for m in history)) else "") + "\n"
            f"  success {first['success']:.2f} -> {last['success']:.2f}; reward {first['reward']:.2f} -> "
            f"{last['reward']:.2f}; invalid/episode {first['invalid_per_episode']:.1f} -> "
            f"{last['invalid_per_episode']:.1f}\n"
            f"  {trained} tokens trained; {sum(m['degenerate_groups'] for m in history)} of "
            f"{sum(m['groups'] for m in history)} groups had no signal (all rewards equal)\n"
            f"  plots: {run_dir / 'plots.png'}; checkpoints: {run_dir / 'checkpoints'}" + _eval_line(run_dir))


def _eval_line(run_dir: Path) -> str:
    evals = read_jsonl(run_dir / EVAL_LOG)
    if not evals:
        return ""
    curve = ", ".join(f"{e['step']}: {e['eval_won']}/{e['eval_games']}" for e in evals)
    return f"\n  held-out success by update ({evals[0]['eval_split']}): {curve}; records in {run_dir / 'eval'}"

