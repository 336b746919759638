"""Past one GPU: the course's games, rollouts and reward inside TRL's ``GRPOTrainer``.

The course's trainer is one process. For several GPUs or nodes the answer is an existing engine: TRL's
``GRPOTrainer`` under ``accelerate`` (DDP, DeepSpeed ZeRO, FSDP, several machines). This module plugs the
course into it through TRL's ``rollout_func`` and changes nothing the course built:

- :func:`game_dataset`: one row per game, its ``prompt`` the game id. TRL repeats each row ``num_generations``
  times (a group) and hands every process its share of the rows.
- :class:`CourseRollout`: the ``rollout_func``. It plays each group of its share with :func:`alfrl.rl.rollout.rollout_batch`
  (K copies of one game, the tool protocol, prefix extension, the course's branch seeds) and returns each episode
  as one prompt (the first prompt) and one completion (every reply and tool result after it), with
  ``env_mask`` 1 exactly on the sampled tokens: TRL's loss then trains what the course's trains.
- :func:`episode_reward`: the reward TRL reads, the course's ``won - 0.1 x invalid`` of each episode.
- :func:`grpo_config`: a ``GRPOConfig`` that mirrors a course :class:`alfrl.training.train_config.TrainConfig`: K
  generations, advantage = reward - group mean (``scale_rewards="none"``), clip 0.8/1.2, no KL, the loss
  summed over every sampled token of the update and divided by their count (``loss_type="dapo"``, the
  course's token mean, whatever the micro-batches), Adam's betas, the gradient-norm clip, one optimizer step per
  update.

Why ``rollout_func`` and not ``environment_factory``: with an environment TRL runs the conversation itself,
and then a reply with no tool call ends the episode (the course charges -0.1 and plays on), a win cannot end
the episode, the token cap is per episode, and SmolLM2's template is refused. With ``rollout_func`` the
course's own rollout plays every turn, so every rule holds. What still differs is in docs/scale.md.

Install the extra first: ``pip install -e ".[trl]"``. Run it: ``python -m alfrl.training.trl_bridge --updates 2``,
or on several processes ``accelerate launch --multi_gpu --num_processes 2 -m alfrl.training.trl_bridge ...`` (on a
CPU too: the processes then talk over gloo).
Taught in notebook 07 (section 7, the names side by side); docs/scale.md has the commands and what was verified.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from alfrl.agent.models import Policy, save_adapter
from alfrl.agent.protocol import DEFAULT_ACTIONS
from alfrl.rl.advantage import AdvantageConfig
from alfrl.rl.rollout import rollout_batch
from alfrl.rl.trajectory import Trajectory
from alfrl.training.train_config import TrainConfig, preset

TRL_VERSION = "1.16.0"
"""The TRL release this bridge is written against and tested with (the ``trl`` extra pins it)."""
INSTALL = 'pip install -e ".[trl]"'


def require_trl():
    """TRL, imported; a clear error naming the install when it is missing or another release."""
    try:
        import trl
    except ImportError:
        raise ImportError(f"alfrl.training.trl_bridge needs TRL {TRL_VERSION}, the optional extra: {INSTALL}") from None
    if trl.__version__ != TRL_VERSION:
        raise ImportError(f"alfrl.training.trl_bridge is tested with TRL {TRL_VERSION}; this environment has "
                          f"{trl.__version__}. Install the pinned one: {INSTALL}")
    return trl


def game_dataset(games: list):
    """A ``datasets.Dataset`` with one row per game, in the given order: ``prompt`` is the game id (the
    rollout builds the real prompt from the game, so nothing is templated twice)."""
    from datasets import Dataset
    return Dataset.from_dict({"prompt": [g.game_id for g in games]})


def episode_reward(prompts, completions, course_reward, **kwargs) -> list[float]:
    """TRL's reward function: the reward the course's rollout computed for each episode (``course_reward``, an
    extra field :class:`CourseRollout` returns), unchanged."""
    return [float(r) for r in course_reward]


class CourseRollout:
    """TRL's ``rollout_func``: the course's group rollout for each group in a process's share of the batch.

    ``played`` holds the groups of the latest call, as the course's :class:`~alfrl.rl.trajectory.Trajectory`
    records (a test or a notebook can compare them with what TRL trained on)."""

    __name__ = "CourseRollout"

    def __init__(self, games: list, config: TrainConfig, progress: bool = False):
        self.games = {g.game_id: g for g in games}
        self.config = config
        self.rewards = config.advantage()
        self.progress = progress
        self.played: list[list[Trajectory]] = []
        self.seconds = 0.0
        self.history: list[list[str]] = []
        """The game of each group played, one list per call (per update)."""
        self.thinking: bool | None = None
        self.actions = DEFAULT_ACTIONS
        """The thinking switch and action-list protocol the trained adapter plays (the loaded one's)."""

    def groups(self, prompts: list[str], k: int) -> list:
        """The games of ``prompts``, which must come as whole groups: runs of ``k`` identical game ids."""
        if len(prompts) % k:
            raise ValueError(f"a process got {len(prompts)} rows, not a multiple of num_generations={k}: make "
                             "per_device_train_batch_size x steps_per_generation a multiple of it (grpo_config does)")
        games = []
        for start in range(0, len(prompts), k):
            ids = set(prompts[start:start + k])
            if len(ids) != 1:
                raise ValueError(f"rows {start}-{start + k - 1} are not one group of one game: {sorted(ids)}")
            game_id = ids.pop()
            if game_id not in self.games:
                raise KeyError(f"unknown game {game_id!r}: the dataset and CourseRollout need the same games")
            games.append(self.games[game_id])
        return games

    def __call__(self, prompts: list[str], trainer) -> dict[str, list]:
        k = trainer.num_generations
        games = self.groups(list(prompts), k)
        model = trainer.accelerator.unwrap_model(trainer.model)
        policy = Policy(model=model, tokenizer=trainer.processing_class, name=self.config.model,
                        thinking=self.thinking, actions=self.actions)
        step = trainer.state.global_step + 1  # the course counts updates from 1
        was_training = model.training
        model.eval()
        tick = time.perf_counter()
        try:
            self.played = rollout_batch(policy, games, replace(self.config.rollout(step), k=k),
                                        progress=self.progress)
        finally:
            model.train(was_training)
        self.seconds = time.perf_counter() - tick
        self.history.append([g.game_id for g in games])
        return episodes_as_rows([t for g in self.played for t in g], self.rewards)


def episodes_as_rows(trajectories: list[Trajectory], rewards: AdvantageConfig) -> dict[str, list]:
    """The episodes in ``rollout_func``'s form: the first prompt, the rest as one completion with the
    sampler's logprobs and ``env_mask`` (1 on sampled tokens), and the course's reward of each."""
    rows: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                             "course_reward": [], "won": [], "invalid": []}
    for t in trajectories:
        p = t.prompt_tokens
        rows["prompt_ids"].append(t.tokens[:p])
        rows["completion_ids"].append(t.tokens[p:])
        rows["logprobs"].append(t.logprobs[p:])
        rows["env_mask"].append(t.mask[p:])
        rows["course_reward"].append(rewards.reward(t))
        rows["won"].append(t.won)
        rows["invalid"].append(t.invalid)
    return rows


def check_for_trl(config: TrainConfig) -> None:
    """Refuse a course setting the bridge cannot carry over, naming it and the fix."""
    problems = []
    if config.credit != "grpo":
        problems.append(f"credit={config.credit!r}: TRL's advantage is one number per episode; use credit='grpo'")
    if config.algo != "grpo":
        problems.append(f"algo={config.algo!r}: the bridge trains GRPO only")
    if config.kl_coef:
        problems.append(f"kl_coef={config.kl_coef}: the course's KL is to the adapter-free model; set it to 0")
    if config.epochs != 1 or config.minibatches != 1:
        problems.append("epochs and minibatches must be 1 (one optimizer step per update)")
    if config.normalize_std:
        problems.append("normalize_std: the bridge mirrors the course's default, no std scaling")
    if problems:
        raise ValueError("this config cannot be carried to TRL: " + "; ".join(problems))


def on_gpu(device: str) -> bool:
    """Whether the run trains on a CUDA GPU (``device`` "auto" with one present, or "cuda...")."""
    import torch
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def grpo_config(config: TrainConfig, output_dir: str | Path, groups_per_update: int, num_processes: int = 1,
                rows_per_micro_batch: int = 1, **overrides):
    """A ``GRPOConfig`` with the course's method: ``groups_per_update`` groups of ``config.k`` episodes an update
    (split evenly over ``num_processes``), ``rows_per_micro_batch`` episodes a forward pass, one optimizer step per
    update. One episode a pass keeps memory low (TRL makes every position's full-vocabulary logits and entropy)
    and wastes nothing on padding; raise it on a GPU."""
    check_for_trl(config)
    require_trl()
    from trl import GRPOConfig
    if groups_per_update % num_processes:
        raise ValueError(f"groups_per_update={groups_per_update} must split evenly over {num_processes} processes")
    rows = groups_per_update // num_processes * config.k
    if rows % rows_per_micro_batch:
        raise ValueError(f"rows_per_micro_batch={rows_per_micro_batch} must divide the {rows} episodes each "
                         "process plays an update")
    passes = rows // rows_per_micro_batch
    settings = dict(
        output_dir=str(output_dir), num_generations=config.k, per_device_train_batch_size=rows_per_micro_batch,
        gradient_accumulation_steps=passes, steps_per_generation=passes, num_iterations=1,
        max_steps=config.updates, learning_rate=config.lr, adam_beta1=config.beta1, adam_beta2=config.beta2,
        weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=config.max_grad_norm,
        epsilon=1 - config.clip_low, epsilon_high=config.clip_high - 1, beta=0.0, scale_rewards="none",
        loss_type="dapo", temperature=config.temperature, top_p=config.top_p,
        max_completion_length=config.max_trajectory_tokens, shuffle_dataset=False, disable_dropout=True,
        seed=config.seed, use_cpu=not on_gpu(config.device), bf16=config.bf16 and on_gpu(config.device),
        gradient_checkpointing=config.gradient_checkpointing,
        report_to="none", logging_steps=1,
        save_strategy="no", remove_unused_columns=False)
    settings.update(overrides)
    return GRPOConfig(**settings)


def make_trainer(config: TrainConfig, output_dir: str | Path, groups_per_update: int, num_processes: int = 1,
                 games: list | None = None, progress: bool = False, rows_per_micro_batch: int = 1, **overrides):
    """A ``GRPOTrainer`` on the course's games (``games``, else the run's training games in the course's order),
    model, adapter, rollout and reward. Returns (trainer, rollout)."""
    require_trl()
    from trl import GRPOTrainer

    from alfrl.training.train import load_for_training, training_games
    games = games if games is not None else training_games(config)
    if len(games) < groups_per_update:
        raise ValueError(f"an update of {groups_per_update} groups needs as many games; only {len(games)} were found")
    needed = groups_per_update * config.updates  # fewer games than that: TRL goes through them again, in order
    policy = load_for_training(replace(config, device="cpu"))  # the Trainer puts it on each process's device
    rollout = CourseRollout(games, config, progress=progress)
    rollout.thinking, rollout.actions = policy.thinking, policy.actions  # what the loaded adapter plays
    trainer = GRPOTrainer(model=policy.model, reward_funcs=episode_reward,
                          args=grpo_config(config, output_dir, groups_per_update, num_processes,
                                           rows_per_micro_batch, **overrides),
                          train_dataset=game_dataset(games[:needed]), processing_class=policy.tokenizer,
                          rollout_func=rollout)
    return trainer, rollout


def bridge_config(args: argparse.Namespace) -> TrainConfig:
    """The course's preset ``args.preset`` with the flags given on the command line (those left out keep the
    preset's values: ``--preset reference`` trains Qwen3-4B over 50 turns in bfloat16 unless told otherwise), and
    what the bridge does not carry over switched off (dynamic sampling, speculative decoding, sampling dtypes, the
    sampler/trainer importance-sampling cap: TRL's rollout here is the course's sampler on the trained weights)."""
    given = {name: getattr(args, name) for name in ("k", "max_steps", "model", "init_adapter", "device", "dtype",
                                                     "thinking", "gradient_checkpointing", "pool")
             if getattr(args, name) is not None}
    config = preset(args.preset, updates=args.updates, seed=args.seed, **given)
    return replace(config, dynamic_sampling=False, bf16=on_gpu(config.device), prefill_dtype=None, draft_tokens=0,
                   sample_dtype=None, tis_cap=0.0)  # one sampler and trainer, the same weights: no gap to correct


def main(argv: list[str] | None = None) -> None:
    """``python -m alfrl.training.trl_bridge``: train with TRL on one of the course's presets (the cpu preset by
    default; ``accelerate launch`` runs it on several processes); writes the adapter and the log to ``--output-dir``."""
    parser = argparse.ArgumentParser(prog="python -m alfrl.training.trl_bridge", description=main.__doc__)
    parser.add_argument("--preset", default="cpu", help="the course's preset the method comes from")
    parser.add_argument("--output-dir", default="runs/trl")
    parser.add_argument("--updates", type=int, default=2, help="optimizer steps (default 2: a look; the preset's "
                        "own count is one flag away)")
    parser.add_argument("--groups-per-update", type=int, help="groups an update; default: the preset's games an update")
    parser.add_argument("--k", type=int, help="episodes per group (num_generations); default: the preset's")
    parser.add_argument("--max-steps", type=int, help="turns per episode; default: the preset's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="a hub id, a local model folder, or bundled; default: the preset's")
    parser.add_argument("--init-adapter", help="the adapter to start from, or none; default: the preset's")
    parser.add_argument("--device", help="auto (each process's GPU when there are GPUs) or cpu; default: the preset's")
    parser.add_argument("--dtype", help="the base model's dtype as loaded; default: the preset's (auto: float32, "
                        "under TRL's bfloat16 autocast on a GPU)")
    parser.add_argument("--thinking", choices=("auto", "on", "off"),
                        help="a reasoning model's thinking switch (docs/gpu.md: what it costs); default: the preset's")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction,
                        help="recompute activations in the backward pass; default: the preset's")
    parser.add_argument("--rows-per-micro-batch", type=int, default=1, help="episodes a forward pass (raise on a GPU)")
    parser.add_argument("--pool", help="play only a practice pool's games (a pool file, e.g. "
                        "data/results/warmstart_epoch_pool.json); default: the preset's (the cpu preset's: the "
                        "training split)")
    args = parser.parse_args(argv)
    import os

    import torch
    threads = os.environ.get("ALFRL_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    config = bridge_config(args)
    trainer, rollout = make_trainer(config, args.output_dir, args.groups_per_update or config.games_per_update,
                                    num_processes=int(os.environ.get("WORLD_SIZE", "1")),
                                    rows_per_micro_batch=args.rows_per_micro_batch)
    tick = time.perf_counter()
    trainer.train()
    out = Path(args.output_dir)
    rank = trainer.accelerator.process_index
    (out / f"rank{rank}.json").write_text(json.dumps({"games": rollout.history, "rollout_seconds": rollout.seconds,
                                                      "train_seconds": time.perf_counter() - tick}) + "\n")
    if trainer.accelerator.is_main_process:
        model = trainer.accelerator.unwrap_model(trainer.model)
        save_adapter(Policy(model=model, tokenizer=trainer.processing_class, name=config.model,
                            actions=rollout.actions), out / "adapter")
        (out / "log.json").write_text(json.dumps([e for e in trainer.state.log_history if "grad_norm" in e],
                                                 indent=1) + "\n")
        print(f"adapter, log and each rank's games in {out}")


if __name__ == "__main__":
    main()
