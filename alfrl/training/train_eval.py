"""Evaluation during training (``--eval-every N``): the same held-out games, played near-greedily
before the first update and after every N-th, so a run draws its own learning curve (verl's
``val_freq``, TRL's ``eval_steps``).

Each evaluation is a normal :func:`alfrl.eval.evaluate.evaluate` into ``RUN_DIR/eval/step_NNNNN/``
(``records.jsonl`` and ``summary.json``, as ``python -m alfrl eval`` writes them), and one line of
``RUN_DIR/eval.jsonl`` (the curve ``plots.png`` draws). An interrupted evaluation resumes with the
run: its finished games are kept, and ``--resume`` plays the rest before the next update.

Taught in notebook 05 (the training loop); notebook 06 explains the evaluation protocol.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from alfrl.agent.models import sampling_copy
from alfrl.base.checkpoint import append_jsonl, read_jsonl, truncate_jsonl
from alfrl.eval.evaluate import EvalConfig, evaluate, selected_games
from alfrl.training.train_config import TrainConfig

EVAL_LOG = "eval.jsonl"
"""One line per evaluation of a run: its step and the summary's headline numbers."""


def eval_due(config: TrainConfig, step: int) -> bool:
    """Whether update ``step`` is followed by an evaluation: step 0 (the policy before training), every
    ``eval_every``-th, and the last."""
    return config.eval_every > 0 and (step % config.eval_every == 0 or step == config.updates)


def check_eval_games(config: TrainConfig, run_dir: Path) -> None:
    """With ``eval_every``: a clear error now, before the run folder exists, if the evaluation games
    cannot be found (a data folder without the split, filters that keep no game)."""
    if config.eval_every:
        selected_games(eval_settings(config, run_dir, 0))


def drop_later_evals(run_dir: Path, done: int) -> None:
    """Forget the evaluations after the checkpointed update ``done`` (a resumed run redoes those
    updates, so their weights are gone): their eval.jsonl lines and their folders."""
    truncate_jsonl(run_dir / EVAL_LOG, done)
    for folder in (run_dir / "eval").glob("step_*"):
        if folder.name.removeprefix("step_").isdigit() and int(folder.name.removeprefix("step_")) > done:
            shutil.rmtree(folder)


def eval_settings(config: TrainConfig, run_dir: Path, step: int) -> EvalConfig:
    """The evaluation after update ``step``: the run's rooms, steps and reply length, ``eval_games``
    games of ``eval_split`` (the same seeded sample every time), temperature 0.01."""
    out = run_dir / "eval" / f"step_{step:05d}"
    return EvalConfig(out=str(out), resume=(out / "records.jsonl").is_file(), model=config.model,
                      dtype=config.dtype, device=config.device, data_dir=config.eval_data_dir or config.data_dir,
                      split=config.eval_split, limit=config.eval_games, max_expert_steps=config.max_expert_steps,
                      max_receptacles=config.max_receptacles, max_steps=config.max_steps,
                      max_new_tokens=config.max_new_tokens, max_trajectory_tokens=config.max_trajectory_tokens,
                      draft_tokens=config.draft_tokens, plan_every=config.plan_every, threads=config.threads)


def evaluated_steps(run_dir: Path) -> set[int]:
    return {row["step"] for row in read_jsonl(run_dir / EVAL_LOG)}


def evaluate_step(policy, config: TrainConfig, run_dir: Path, step: int, progress: bool = True) -> dict:
    """Evaluate ``policy`` (the weights after update ``step``; rollouts' merged copy when the run samples
    from one) and log the result; returns the ``eval.jsonl`` line."""
    model = sampling_copy(policy, config.sample_dtype) if config.sample_dtype else policy
    was_training = policy.model.training
    try:
        summary = evaluate(eval_settings(config, run_dir, step), policy=model, progress=progress)
    finally:
        policy.model.train(was_training)  # evaluate() puts the model it plays in eval mode
    everything = summary["all"]
    row = {"step": step, "eval_success": everything["success"], "eval_won": everything["won"],
           "eval_games": everything["games"], "eval_invalid_per_episode": everything["invalid_per_episode"],
           "eval_split": config.eval_split}
    append_jsonl(run_dir / EVAL_LOG, [row])
    return row
