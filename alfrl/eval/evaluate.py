"""Evaluation: one near-greedy trajectory per game on valid_seen / valid_unseen, per-split and
per-task success, invalid actions, and a comparison of checkpoints.

``python -m alfrl eval --adapter runs/cpu/checkpoints/step_00003/adapter --out runs/eval/step3``

Results go to ``OUT/records.jsonl`` (one line per game, written as each game ends, so an
interrupted evaluation continues with ``--resume``) and ``OUT/summary.json``. The statistics are
:mod:`alfrl.eval.eval_stats`'s, the tables and figures :mod:`alfrl.eval.eval_report`'s (both re-exported here).

Taught in notebook 06 (evaluating checkpoints, reading what failed).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.agent.models import (BUNDLED, check_adapter, check_sampling_dtypes, load_policy, resolve_device,
                                resolve_dtype, sampling_copy, thinking_switch, torch_threads)
from alfrl.agent.protocol import check_action_list, policy_format
from alfrl.base.checkpoint import read_jsonl
from alfrl.base.checks import Range, check_fields
from alfrl.base.rundir import CONFIG, EVAL, Prepared, changed_settings, check_output_dir, prepare_output_dir, read_config
from alfrl.eval.eval_report import SHORT_TASK_NAMES, comparison_figure, comparison_table  # noqa: F401 (re-exported)
from alfrl.eval.eval_stats import paired_outcomes, read_records, summarize, wilson_interval  # noqa: F401 (re-exported)
from alfrl.rl.rollout import RolloutConfig, rollout_games
from alfrl.world.env import GroupEnv
from alfrl.world.games import GameSpec, check_games, load_games

EVAL_SPLITS = ("valid_seen", "valid_unseen")


EVAL_RANGES = {**{name: Range(at_least=1) for name in ("max_steps", "max_trajectory_tokens", "max_new_tokens",
                                                     "batch", "limit", "max_expert_steps", "max_receptacles",
                                                     "threads")},
               "temperature": Range(at_least=0), "draft_tokens": Range(at_least=0), "plan_every": Range(at_least=0)}
"""The range of every numeric evaluation setting (:mod:`alfrl.base.checks`)."""


@dataclass
class EvalConfig:
    """What to evaluate and how; each field is a ``--flag`` of ``python -m alfrl eval``."""

    out: str = "runs/eval/base"
    """Folder for records.jsonl and summary.json."""
    overwrite: bool = False
    """Replace existing results instead of refusing."""
    resume: bool = False
    """Continue an interrupted evaluation in ``out`` (games already recorded are skipped)."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled"."""
    adapter: str | None = None
    """A saved LoRA adapter to evaluate (e.g. runs/cpu/checkpoints/step_00003/adapter), or a shipped one:
    "warmstart_epoch" (data/warmstart_epoch, the default warm start) or "grpo_scale" (the default warm start after
    the scale run's 80 GRPO updates); "warmstart", "warmstart_expert" and "grpo", the earlier ones, once their
    weights are rebuilt (their READMEs)."""
    dtype: str = "auto"
    """Model dtype: "auto" (bfloat16 on a CUDA GPU, float32 elsewhere), or "float32", "bfloat16", "float16"."""
    device: str = "auto"
    """"auto" (a CUDA GPU if there is one, else Apple's mps, else the CPU), or "cpu", "cuda", "cuda:1", "mps"."""
    thinking: str = "auto"
    """A reasoning model's thinking switch (``enable_thinking`` in Qwen3's template): "off" opens every reply
    with an empty thought, so the model answers at once (short replies, 50 turns fit the token budget); "on"
    lets it think first; "auto" keeps the template's default (Qwen3: on). A template without the switch
    refuses on/off."""
    data_dir: str | None = None
    """Games folder: the generated games by default, or ALFWorld's json_2.1.1."""
    split: str = "all"
    """valid_seen, valid_unseen, or all (both)."""
    limit: int | None = None
    """At most this many games per split: a fixed sample (shuffled with seed 0), so every task type shows up."""
    max_expert_steps: int | None = None
    """Only games the expert solves in at most this many steps (as a training preset's games)."""
    max_receptacles: int | None = None
    """Only rooms with at most this many receptacles."""
    temperature: float = 0.01
    """Sampling temperature (0.01 as in the reference; 0 = greedy)."""
    max_steps: int = 50
    """Turns per game."""
    max_trajectory_tokens: int = 12000
    """Token budget per game."""
    max_new_tokens: int = 256
    """Tokens per reply."""
    actions: str = "auto"
    """Which tool results list the available actions: "every", "first" (the first message, and after an
    invalid reply) or "local" (also the actions other than go to); "auto": the protocol the adapter was
    trained in ("every" for one that records none: the shipped ones, a fresh one; alfrl.agent.protocol.ACTION_LISTS)."""
    seed: int = 42
    """Sampling seed."""
    draft_tokens: int = 8
    """Speculative decoding by prompt lookup (alfrl.agent.sampler): the same replies' distribution in fewer
    forward passes; 0 = off."""
    plan_every: int = 0
    """Hierarchical play, as the checkpoint was trained: planner turns first, every this many steps and after a
    subgoal is reached (0: off)."""
    sample_dtype: str | None = None
    """Play with the adapter merged into a copy of the model in this dtype ("float32", "bfloat16";
    alfrl.agent.models.sampling_copy): the same policy up to rounding, without the adapter's extra products at every
    step. None: the model as loaded."""
    prefill_dtype: str | None = None
    """Read prompts and tool results under this autocast dtype ("bfloat16": faster on a CPU with AMX or
    avx512_bf16, as the cpu preset's rollouts); replies are still decoded in the model's dtype. None: off."""
    batch: int = 8
    """Games played at once, decoded in one batch: on a CPU, 8 rows cost about twice one row per
    token, so 8 games take about a quarter of the time. Results do not depend on it (up to float
    rounding)."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""

    def splits(self) -> tuple[str, ...]:
        if self.split == "all":
            return EVAL_SPLITS
        return (self.split,)

    def check(self) -> None:
        """A clear error for any setting that cannot work (before anything is loaded or written)."""
        check_fields(self, EVAL_RANGES, check_types=False)
        resolve_dtype(self.dtype, resolve_device(self.device))
        thinking_switch(self.thinking)
        check_action_list(self.actions, auto_ok=True)
        check_sampling_dtypes(self.sample_dtype, self.prefill_dtype)


def game_record(split: str, trajectory) -> dict:
    """One evaluation line: the outcome, the rates, and the whole trajectory."""
    turns = trajectory.turns
    return {"split": split, "game_id": trajectory.game_id, "task_type": trajectory.task_type,
            "won": trajectory.won, "steps": trajectory.steps, "invalid": trajectory.invalid,
            "end_reason": trajectory.end_reason,
            "valid_calls": sum(t.valid_format for t in turns), "admissible": sum(t.admissible for t in turns),
            "turns": len(turns), "trajectory": trajectory.record()}


RESUMABLE = ("out", "overwrite", "resume", "batch", "threads", "limit")
"""EvalConfig fields a resumed evaluation may change: they do not change any game's result (a larger
``limit`` adds games: the sample is a prefix of one seeded order)."""


def _prepare(config: EvalConfig, games: list) -> tuple[Prepared, set[tuple[str, str]]]:
    """The output folder by :mod:`alfrl.base.rundir`'s policy (an evaluation folder, never a training run),
    and the games it already holds. Everything is checked before the folder is touched."""
    out = Path(config.out)
    records = out / "records.jsonl"
    done: set[tuple[str, str]] = set()
    check_output_dir(out, EVAL, overwrite=config.overwrite, resume=config.resume, flag="--out")
    if config.resume and records.exists():
        saved = read_config(out) or {}
        changed = changed_settings(saved, asdict(config), RESUMABLE, added_ok=True)
        if changed:
            raise ValueError(f"{out} holds results made with other settings ({', '.join(f'{k}={saved[k]!r}' for k in changed)}); "
                             "resume with the same settings, or pass --overwrite, or choose another --out")
        # repair: a torn last line (a kill in the middle of a write) goes before new lines are appended
        done = {(r["split"], r["game_id"]) for r in read_jsonl(records, repair=True)}
    check_games([g for s, g in games if (s, g.game_id) not in done])  # damaged PDDL, before anything is made
    prepared = prepare_output_dir(out, EVAL, overwrite=config.overwrite, resume=config.resume, flag="--out")
    (out / CONFIG).write_text(json.dumps(asdict(config), indent=2))
    return prepared, done


def selected_games(config: EvalConfig) -> list[tuple[str, GameSpec]]:
    """The (split, GameSpec) pairs an evaluation with ``config`` plays: each split's games after the
    filters, the first ``limit`` of one seeded order (so a smaller limit selects a prefix)."""
    return [(split, g) for split in config.splits()
            for g in load_games(split, config.data_dir, limit=config.limit, seed=0 if config.limit else None,
                                max_expert_steps=config.max_expert_steps, max_receptacles=config.max_receptacles)]


def _of_selected(records: list[dict], selected: set[tuple[str, str]]) -> list[dict]:
    return [r for r in records if (r["split"], r["game_id"]) in selected]


def selected_records(config: EvalConfig) -> list[dict]:
    """The records in ``config.out`` of exactly the games ``config`` selects (in the order they were
    written): what :func:`evaluate` summarises into ``summary.json``. A folder evaluated with a larger
    ``limit`` holds more records than the selection; read it with this, not :func:`read_records`.
    Raises ValueError, saying how many, if a selected game has no record yet (run ``evaluate`` with
    ``resume=True`` to play it)."""
    selected = {(s, g.game_id) for s, g in selected_games(config)}
    records = _of_selected(read_records(config.out), selected)
    missing = selected - {(r["split"], r["game_id"]) for r in records}
    if missing:
        raise ValueError(f"{config.out} has no record of {len(missing)} of the {len(selected)} selected games "
                         f"(e.g. {sorted(missing)[0][1]}); evaluate them first (evaluate with resume=True)")
    return records


def evaluate(config: EvalConfig | None = None, policy=None, progress: bool = True) -> dict:
    """Play every selected game once; write records and a summary; return the summary.

    The settings, the adapter, the games and the output folder are checked before anything is written,
    and an evaluation that fails before its first record leaves nothing behind: a folder it made is
    removed, and an existing one keeps only what it held before."""
    config = config or EvalConfig()
    config.check()
    if policy is None and config.adapter:
        check_adapter(config.adapter, config.model)
    games = selected_games(config)
    out = Path(config.out)
    had_config = (out / CONFIG).is_file() and not config.overwrite
    prepared, done = _prepare(config, games)
    try:
        with torch_threads(config.threads):
            return _play(config, policy, games, done, out, progress)
    except BaseException:
        records = out / "records.jsonl"
        if not (records.is_file() and records.stat().st_size):  # nothing recorded: leave the folder as it was
            _remove_leftovers(prepared, had_config)
        raise


def _remove_leftovers(prepared: Prepared, had_config: bool) -> None:
    """Undo what a failed evaluation wrote before its first record (never a folder that existed before)."""
    if prepared.created:
        shutil.rmtree(prepared.path, ignore_errors=True)
        return
    (prepared.path / "records.jsonl").unlink(missing_ok=True)  # empty: no records
    if not had_config:
        (prepared.path / CONFIG).unlink(missing_ok=True)


def _play(config: EvalConfig, policy, games: list, done: set[tuple[str, str]], out: Path, progress: bool) -> dict:
    todo = [(s, g) for s, g in games if (s, g.game_id) not in done]
    selected = {(s, g.game_id) for s, g in games}
    if not todo:  # a finished evaluation: no model to load
        return _summarize(out, selected)
    if policy is None:
        policy = load_policy(config.model, lora=config.adapter, dtype=config.dtype, device=config.device,
                             thinking=config.thinking)
    if config.sample_dtype:
        policy = sampling_copy(policy, config.sample_dtype)
    policy.model.eval()
    fmt = policy_format(policy, config.actions)
    rollout = RolloutConfig(k=1, max_steps=config.max_steps, max_trajectory_tokens=config.max_trajectory_tokens,
                            max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                            seed=config.seed, workers=0, draft_tokens=config.draft_tokens,
                            plan_every=config.plan_every, actions=config.actions, prefill_dtype=config.prefill_dtype)
    bar = tqdm(total=len(todo), desc=f"eval {config.split}", unit="game", disable=not progress)
    won = played = turn = 0

    def on_turn() -> None:  # the games of a batch end together: show the turn the batch is at
        nonlocal turn
        turn += 1
        bar.set_postfix_str(f"turn {turn}/{config.max_steps} of games {played + 1}-{played + len(chunk)}"
                            + (f", success {won / played:.2f}" if played else ""))

    env = None
    try:
        with (out / "records.jsonl").open("a") as f:
            for start in range(0, len(todo), config.batch):
                chunk = todo[start:start + config.batch]
                if env is None or env.k != len(chunk):
                    if env is not None:
                        env.close()
                    env = GroupEnv(k=len(chunk), max_steps=config.max_steps, workers=0)
                turn = 0
                trajectories = rollout_games(policy, [g for _, g in chunk], rollout, env=_TurnTicker(env, on_turn),
                                             fmt=fmt)
                for (split, _), trajectory in zip(chunk, trajectories):
                    f.write(json.dumps(game_record(split, trajectory)) + "\n")
                f.flush()
                won += sum(t.won for t in trajectories)
                played += len(chunk)
                bar.update(len(chunk))
                bar.set_postfix(success=f"{won / played:.2f}")
    finally:
        bar.close()
        if env is not None:
            env.close()
    return _summarize(out, selected)


class _TurnTicker:
    """``env`` (a GroupEnv) calling ``on_turn()`` after each step, that is one turn of every live game,
    so that a progress bar moves while a batch of games is decoded together. Everything else is the env's."""

    def __init__(self, env: GroupEnv, on_turn):
        self._env, self._on_turn = env, on_turn

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, actions):
        results = self._env.step(actions)
        self._on_turn()
        return results


def _summarize(out: Path, selected: set[tuple[str, str]]) -> dict:
    """The summary of the selected games' records (a folder resumed with a smaller limit keeps more)."""
    summary = summarize(_of_selected(read_records(out), selected))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


