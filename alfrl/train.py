"""The training loop: pick games -> group rollouts -> advantages -> PPO update -> log -> checkpoint.

``python -m alfrl train --preset cpu`` runs it headless; notebook 05 runs the same
:func:`train` with live plots. Every field of :class:`TrainConfig` is a command-line flag
and a papermill parameter; a preset sets many at once and explicit flags win over it.

Exact resume: the games of update ``u`` and every branch's sampling seed depend only on
the run's seed and ``u``; the adapter, Adam's state and the RNG states are checkpointed
after every update (``checkpoint_every=1``). A run killed at any point and resumed with
``--resume RUN_DIR`` replays at most the update that was in flight and logs the same
metrics as a run that never stopped.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from alfrl.advantage import AdvantageConfig, assign_advantages, batch_stats, episode_reward, is_degenerate
from alfrl.checkpoint import (append_jsonl, latest_checkpoint, load_state, read_jsonl, save_checkpoint,
                              truncate_jsonl)
from alfrl.games import check_games, load_games
from alfrl.models import BUNDLED, LoraSpec, load_policy, sampling_copy
from alfrl.plots import plot_training
from alfrl.ppo import PPOConfig, make_optimizer, ppo_update, summarize_steps
from alfrl.rollout import RolloutConfig, rollout_batch
from alfrl.rundir import EVAL, RUN, TRAIN, check_output_dir, folder_kind, prepare_output_dir


@dataclass
class TrainConfig:
    """Everything a training run needs; each field is a ``--flag`` of ``python -m alfrl train``."""

    run_dir: str = "runs/cpu"
    """Where the run writes config, metrics, trajectories, plots and checkpoints."""
    overwrite: bool = False
    """Replace an existing run directory instead of refusing."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled" (SmolLM2-135M-Instruct, offline)."""
    dtype: str = "auto"
    """Model dtype: "auto" (bfloat16 on a CUDA GPU, float32 elsewhere), or "float32", "bfloat16", "float16"."""
    device: str = "auto"
    """"auto" (a CUDA GPU if there is one, else Apple's mps, else the CPU), or "cpu", "cuda", "cuda:1", "mps"."""
    init_adapter: str | None = "warmstart"
    """Start from a saved LoRA adapter instead of a fresh one: a folder, "warmstart" (the expert warm
    start shipped for the bundled model, see python -m alfrl sft), or "none" for a fresh adapter."""
    lora_rank: int = 8
    """Rank of a fresh LoRA adapter."""
    lora_alpha: int = 16
    """Alpha of a fresh LoRA adapter."""
    data_dir: str | None = None
    """Games folder (default: the committed generated games)."""
    split: str = "train"
    """Split the training games come from."""
    max_expert_steps: int | None = 8
    """Only games the expert solves in at most this many steps (short tasks)."""
    max_receptacles: int | None = 20
    """Only rooms with at most this many receptacles (short prompts: every tool result lists them)."""
    updates: int = 4
    """PPO updates in the run."""
    games_per_update: int = 2
    """Groups (games) played per update."""
    k: int = 4
    """Trajectories per game."""
    max_steps: int = 10
    """Turns per trajectory."""
    max_trajectory_tokens: int = 4000
    """Token budget of one trajectory."""
    max_new_tokens: int = 48
    """Tokens the model may sample per reply."""
    temperature: float = 1.0
    """Sampling temperature (the update recomputes logprobs at the same one)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    groups_per_batch: int = 2
    """Groups decoded together (k x this many rows per forward pass; see RolloutConfig)."""
    invalid_penalty: float = 0.1
    """Reward lost per invalid action."""
    normalize_std: bool = False
    """Divide advantages by the group's std."""
    clip_low: float = 0.8
    """PPO ratio clip, lower bound."""
    clip_high: float = 1.2
    """PPO ratio clip, upper bound."""
    lr: float = 2e-4
    """Adam learning rate."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    kl_coef: float = 0.0
    """KL-to-reference penalty weight (0 = off)."""
    epochs: int = 1
    """Passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass. With epochs = minibatches = 1 the ratio is 1 whenever a gradient is taken,
    so the clip never acts: the update is group-baseline REINFORCE. From 2 on, later steps are clipped."""
    old_logprobs: str = "trainer"
    """The ratio's denominator: "trainer" (recomputed by the update at the sampling weights: exact in any
    precision) or "sampler" (the sampler's own logprobs, exact only in float32)."""
    bf16: bool = False
    """bfloat16 autocast in the update (about 1.7x on a CPU with avx512_bf16); LoRA and Adam stay float32."""
    sample_dtype: str | None = None
    """Roll out with a copy of the policy whose adapter is merged and cast to this dtype ("bfloat16":
    half the bytes per decode step, KV cache included); None: sample with the trained model itself."""
    prefill_dtype: str | None = None
    """Read prompts and tool results in rollouts under this autocast ("bfloat16": ~1.7x faster reads on a
    CPU with AMX/avx512_bf16; decode steps stay in the sampling model's precision). None: off."""
    dynamic_sampling: bool = False
    """DAPO-style: drop groups whose rewards are all equal and play more games (groups_per_batch at a
    time) until games_per_update groups have a reward spread, or max_groups_per_update were played."""
    max_groups_per_update: int = 8
    """With dynamic_sampling: the most groups played for one update (the cap on extra rollouts)."""
    keep_groups: str = "spread"
    """With dynamic_sampling, which groups count: "spread" (rewards differ at all, DAPO's rule) or "win"
    (some branch won and some lost: only the success signal, not invalid actions alone)."""
    micro_batch_tokens: int = 4096
    """Padded tokens per forward/backward pass (lower it if memory runs out)."""
    gradient_checkpointing: bool = True
    """Trade compute for memory in the update (recompute activations in the backward pass): without
    it a 4K-token micro-batch of the small model stores about 1 MB of activations per token."""
    checkpoint_every: int = 1
    """Updates between checkpoints (1 = an interrupted run loses at most the update in flight)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept (0 = all)."""
    seed: int = 0
    """Seeds the game order, the adapter's init and every branch's sampler."""
    workers: int = 2
    """Processes stepping the game copies."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""

    def rollout(self, step: int) -> RolloutConfig:
        return RolloutConfig(k=self.k, max_steps=self.max_steps, max_trajectory_tokens=self.max_trajectory_tokens,
                             max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                             groups_per_batch=self.groups_per_batch, prefill_dtype=self.prefill_dtype,
                             seed=self.seed * 1_000_003 + step, workers=self.workers)

    def ppo(self) -> PPOConfig:
        return PPOConfig(clip_low=self.clip_low, clip_high=self.clip_high, lr=self.lr, beta1=self.beta1,
                         beta2=self.beta2, max_grad_norm=self.max_grad_norm, kl_coef=self.kl_coef,
                         temperature=self.temperature, micro_batch_tokens=self.micro_batch_tokens,
                         gradient_checkpointing=self.gradient_checkpointing, epochs=self.epochs,
                         minibatches=self.minibatches, top_p=self.top_p, old_logprobs=self.old_logprobs,
                         bf16=self.bf16)

    def advantage(self) -> AdvantageConfig:
        return AdvantageConfig(invalid_penalty=self.invalid_penalty, normalize_std=self.normalize_std)


PRESETS: dict[str, dict] = {
    "cpu": dict(k=8, temperature=0.6, bf16=True, gradient_checkpointing=False, sample_dtype="float32",
                prefill_dtype="bfloat16", dynamic_sampling=True, keep_groups="win", max_groups_per_update=4,
                lr=1e-4, updates=6),
    "reference": dict(run_dir="runs/reference", model="Qwen/Qwen3-4B", dtype="bfloat16", device="cuda",
                      init_adapter=None, max_expert_steps=None, max_receptacles=None,
                      lora_rank=32, lora_alpha=64, updates=80, games_per_update=8, k=8, max_steps=50,
                      max_trajectory_tokens=12000, max_new_tokens=2048, temperature=1.0, lr=1e-6,
                      checkpoint_every=20, keep_checkpoints=0, micro_batch_tokens=12000, groups_per_batch=1),
}
"""cpu: the bundled small model from the shipped warm start, small rooms and short episodes, 6 updates of
2 groups of 8 at temperature 0.6, only groups with a win and a loss trained (dynamic sampling, at most 4
groups played per update), rollouts with the adapter merged into a float32 copy and prompts read in
bfloat16, bf16 update; about 7 minutes an update on 2 cores (see the README's learning
section for what this does and does not achieve). reference: the reference run's settings (8 games x 8, 50 steps, 12K tokens, temperature 1,
LoRA rank 32, lr 1e-6) for a GPU."""


def preset(name: str, **overrides) -> TrainConfig:
    """A config from a preset, with ``overrides`` on top."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return TrainConfig(**{**PRESETS[name], **overrides})


def training_games(config: TrainConfig) -> list:
    return load_games(config.split, config.data_dir, seed=config.seed, max_expert_steps=config.max_expert_steps,
                      max_receptacles=config.max_receptacles)


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
    return load_policy(config.model, lora=lora, dtype=config.dtype, device=config.device)


_AT_LEAST = {"updates": 1, "games_per_update": 1, "max_groups_per_update": 1, "k": 1, "max_steps": 1, "max_trajectory_tokens": 1,
             "max_new_tokens": 1, "groups_per_batch": 1, "epochs": 1, "minibatches": 1, "micro_batch_tokens": 1,
             "checkpoint_every": 1, "keep_checkpoints": 0, "workers": 0, "threads": 1, "lora_rank": 1,
             "lora_alpha": 1, "max_expert_steps": 1, "max_receptacles": 1, "kl_coef": 0, "clip_high": 1,
             "beta1": 0, "beta2": 0}
_ABOVE = {"temperature": 0, "top_p": 0, "lr": 0, "max_grad_norm": 0, "clip_low": 0}
_AT_MOST = {"top_p": 1, "clip_low": 1}
_BELOW = {"beta1": 1, "beta2": 1}


def _fits(value, tp) -> bool:
    """Whether ``value`` has the field type ``tp`` (as JSON gives it back); unknown types pass."""
    import types
    import typing
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_fits(value, t) for t in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp in (str, bool):
        return isinstance(value, tp)
    return True


def check_config(config: TrainConfig) -> None:
    """A clear error for any setting that cannot work: types, ranges, device and dtype, a local model
    folder, the initial adapter. :func:`train` calls it before it makes a run directory or loads a model,
    so a failed start leaves nothing behind."""
    import dataclasses
    import typing

    from alfrl.models import check_adapter, resolve_device, resolve_dtype, resolve_model
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        value = getattr(config, f.name)
        if not _fits(value, hints[f.name]):
            raise ValueError(f"{f.name} must be of type {hints[f.name]} (got {value!r})")
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    for name, value in ((n, getattr(config, n, None)) for n in {**_AT_LEAST, **_ABOVE, **_AT_MOST, **_BELOW}):
        if value is None:
            continue
        if name in _AT_LEAST and not value >= _AT_LEAST[name]:
            raise ValueError(f"{flag(name)} must be at least {_AT_LEAST[name]} (got {value!r})")
        if name in _ABOVE and not value > _ABOVE[name]:
            why = (": the update divides the logits by it; sample near-greedily with a small value such as 0.1 "
                   "(python -m alfrl eval --temperature 0 evaluates greedily)") if name == "temperature" else ""
            raise ValueError(f"{flag(name)} must be above {_ABOVE[name]} (got {value!r}){why}")
        if name in _AT_MOST and not value <= _AT_MOST[name]:
            raise ValueError(f"{flag(name)} must be at most {_AT_MOST[name]} (got {value!r})")
        if name in _BELOW and not value < _BELOW[name]:
            raise ValueError(f"{flag(name)} must be below {_BELOW[name]} (got {value!r})")
    if config.keep_groups not in ("spread", "win"):
        raise ValueError(f"--keep-groups must be 'spread' or 'win' (got {config.keep_groups!r})")
    if config.dynamic_sampling and config.max_groups_per_update < config.games_per_update:
        raise ValueError(f"--max-groups-per-update ({config.max_groups_per_update}) must be at least "
                         f"--games-per-update ({config.games_per_update}) with --dynamic-sampling")
    config.ppo(), config.rollout(1), config.advantage()  # their own checks (old_logprobs, top_p, ...)
    resolve_dtype(config.dtype, resolve_device(config.device))
    if config.sample_dtype is not None and config.sample_dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"--sample-dtype must be float32, bfloat16 or float16 (got {config.sample_dtype!r})")
    if config.sample_dtype not in (None, "float32") and config.old_logprobs != "trainer":
        raise ValueError(f"--sample-dtype {config.sample_dtype} samples in another precision than the trainer's: "
                         "use --old-logprobs trainer, or the PPO ratio starts away from 1")
    if config.prefill_dtype is not None and config.old_logprobs != "trainer":
        raise ValueError(f"--prefill-dtype {config.prefill_dtype} reads prompts in another precision than the "
                         "trainer's: use --old-logprobs trainer, or the PPO ratio starts away from 1")
    if config.model != BUNDLED:
        resolve_model(config.model)  # a local folder must hold a model; a hub id is checked when loaded
    if config.init_adapter not in (None, "", "none"):
        check_adapter(config.init_adapter, config.model)


def _saved_config(run_dir: Path, updates: int | None) -> TrainConfig:
    """The config a run directory was started with (``updates`` may raise its number of updates), with a
    clear error naming the file if it is not this alfrl's TrainConfig."""
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


def train(config: TrainConfig | None = None, resume: str | Path | None = None, updates: int | None = None,
          progress: bool = True, on_update=None) -> list[dict]:
    """Run training, or ``resume`` the run in that directory with its saved config (``updates``
    raises its number of updates). Returns every update's metrics; ``on_update(metrics_so_far)``
    is called after each update (notebooks redraw their plots there).

    The config, the initial adapter, the games and the run directory (:mod:`alfrl.rundir`'s policy:
    never another command's folder) are checked before anything is written."""
    if resume is not None:
        run_dir = Path(resume)
        config = _saved_config(run_dir, updates)
    else:
        config = replace(config or TrainConfig(), updates=updates or (config or TrainConfig()).updates)
        run_dir = Path(config.run_dir)
    check_config(config)
    check_output_dir(run_dir, TRAIN, overwrite=config.overwrite and resume is None, resume=resume is not None,
                     flag="--resume" if resume is not None else "--run-dir")
    games = training_games(config)
    checkpoint = latest_checkpoint(run_dir) if resume is not None else None
    state = json.loads((checkpoint / "state.json").read_text()) if checkpoint else {}
    done = state.get("step", 0)
    cursor = state.get("cursor", done * config.games_per_update)  # the next game to play
    # damaged PDDL in the games this run may play (a few ms a game), before anything is written
    per_update = config.max_groups_per_update if config.dynamic_sampling else config.games_per_update
    upcoming = games_at(games, cursor, (config.updates - done) * per_update)
    check_games(list({g.path: g for g in upcoming}.values()))
    if resume is None:
        run_dir = prepare_output_dir(run_dir, TRAIN, overwrite=config.overwrite, flag="--run-dir").path
    (run_dir / "config.json").write_text(json.dumps(asdict(config), indent=2))
    if config.threads:
        torch.set_num_threads(config.threads)
    truncate_jsonl(run_dir / "metrics.jsonl", done)
    truncate_jsonl(run_dir / "trajectories.jsonl", done)
    history = read_jsonl(run_dir / "metrics.jsonl")
    if done >= config.updates:  # nothing to do: no model to load
        print(f"{run_dir}: all {config.updates} updates already done")
        return history
    policy = load_for_training(config, str(checkpoint / "adapter") if checkpoint else None)
    ppo = config.ppo()
    optimizer = make_optimizer(policy, ppo)
    if checkpoint:
        load_state(checkpoint, optimizer)
    bar = tqdm(range(done + 1, config.updates + 1), desc="updates", unit="update", disable=not progress,
               initial=done, total=config.updates)
    try:
        for step in bar:
            metrics = _one_update(policy, optimizer, config, ppo, games, step, cursor, run_dir, progress)
            cursor += metrics["groups"]
            history.append(metrics)
            append_jsonl(run_dir / "metrics.jsonl", [metrics])
            if step % config.checkpoint_every == 0 or step == config.updates:
                save_checkpoint(run_dir, step, policy, optimizer, {"cursor": cursor},
                                keep_last=config.keep_checkpoints)
            plot_training(history, run_dir / "plots.png", title=str(run_dir))
            bar.set_postfix(reward=f"{metrics['reward']:.2f}", success=f"{metrics['success']:.2f}")
            if on_update:
                on_update(history)
    except KeyboardInterrupt:
        last = latest_checkpoint(run_dir)
        print(f"\ninterrupted; the last checkpoint is {last.name if last else 'none'}. "
              f"Continue with: python -m alfrl train --resume {run_dir}")
        raise
    print(summary(history, run_dir))
    return history


def play_update(policy, config: TrainConfig, games: list, step: int, cursor: int, progress: bool = True
                ) -> tuple[list[list], list[list]]:
    """The groups of update ``step``: ``games_per_update`` games from ``cursor`` on. With
    ``dynamic_sampling``, groups that do not teach (:func:`teaches`: no reward spread, or with
    ``keep_groups="win"`` no win and loss) are set aside and more games are played, ``groups_per_batch``
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
    """Whether dynamic sampling keeps ``group``: its rewards differ ("spread"), or some branch won and
    some lost ("win")."""
    if config.keep_groups == "win":
        return any(t.won for t in group) and not all(t.won for t in group)
    return not is_degenerate([episode_reward(t, config.invalid_penalty) for t in group])


def _one_update(policy, optimizer, config: TrainConfig, ppo: PPOConfig, games: list, step: int, cursor: int,
                run_dir: Path, progress: bool) -> dict:
    begin = time.perf_counter()
    kept, played = play_update(policy, config, games, step, cursor, progress)
    rollout_seconds = time.perf_counter() - begin
    stats = batch_stats(played, config.advantage())  # what the policy did: every group played
    assign_advantages(played, config.advantage())
    trainable = assign_advantages(kept, config.advantage())
    tick = time.perf_counter()
    steps = ppo_update(policy, optimizer, trainable, ppo) if trainable else []
    update_seconds = time.perf_counter() - tick
    ppo_metrics = summarize_steps(steps, ppo.epochs) if steps else {
        "loss": None, "clip_fraction": None, "approx_kl": None, "ratio_mean": None, "ratio_max": None,
        "grad_norm": None, "kl_penalty": None, "tokens_trained": 0, "trajectories_trained": 0}
    append_jsonl(run_dir / "trajectories.jsonl",
                 [{"step": step, **asdict(t)} for g in played for t in g])
    return {"step": step, **stats, "groups_dropped": len(played) - len(kept) if config.dynamic_sampling else 0,
            **ppo_metrics, "optimizer_steps": len(steps), "rollout_seconds": rollout_seconds,
            "update_seconds": update_seconds, "episodes_per_minute": 60 * stats["trajectories"] / max(
                rollout_seconds + update_seconds, 1e-9), "peak_rss_gb": peak_rss_gb(),
            "games": [g[0].game_id for g in played]}


def peak_rss_gb() -> float:
    """The most memory this process has held so far (resident set, GB; 0 where unknown)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20  # bytes on macOS, KB on Linux


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
            f"{max(m.get('peak_rss_gb', 0) for m in history):.1f} GB\n"
            f"  success {first['success']:.2f} -> {last['success']:.2f}; reward {first['reward']:.2f} -> "
            f"{last['reward']:.2f}; invalid/episode {first['invalid_per_episode']:.1f} -> "
            f"{last['invalid_per_episode']:.1f}\n"
            f"  {trained} tokens trained; {sum(m['degenerate_groups'] for m in history)} of "
            f"{sum(m['groups'] for m in history)} groups had no signal (all rewards equal)\n"
            f"  plots: {run_dir / 'plots.png'}; checkpoints: {run_dir / 'checkpoints'}")

