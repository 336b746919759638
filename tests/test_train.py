"""alfrl.training.train: run directories, presets and flags, checkpoints, exact resume, and a real smoke run."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from alfrl.agent.protocol import ChatFormat
from alfrl.base.checkpoint import RunDirError, checkpoints, prepare_run_dir, read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.base.tracking import read_tensorboard, scalars
from alfrl.rl.scripted import ScriptedSession, expert_replies
from alfrl.training.train import (PRESETS, TrainConfig, check_config, games_at, games_for_update, play_update, preset,
                                  train, training_games)

SPLIT = "valid_seen"


def tiny(tmp_path, tiny_games, **overrides) -> TrainConfig:
    return TrainConfig(**{**dict(run_dir=str(tmp_path / "run"), data_dir=str(tiny_games.root), split=SPLIT,
                                 updates=2, games_per_update=1, k=2, max_steps=2, max_new_tokens=48,
                                 max_trajectory_tokens=3000, lr=1e-3, lora_rank=4, lora_alpha=8, workers=0,
                                 init_adapter=None, max_expert_steps=None, max_receptacles=None),
                              **overrides})


def test_refuses_to_overwrite_a_run(tmp_path):
    run = prepare_run_dir(tmp_path / "run", kind="train", flag="--run-dir")
    (run / "config.json").write_text(json.dumps({"run_dir": str(run)}))  # what marks a training run
    (run / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(RunDirError, match="--resume"):
        prepare_run_dir(run, kind="train", flag="--run-dir")
    assert not any(prepare_run_dir(run, overwrite=True, kind="train").iterdir())
    (run / "metrics.jsonl").write_text("{}\n")  # no config.json: not a run, never deleted (tests/test_rundir.py)
    with pytest.raises(RunDirError, match="not a folder any alfrl command wrote"):
        prepare_run_dir(run, overwrite=True, kind="train")


def test_presets_and_flags():
    ref = preset("reference")
    assert (ref.games_per_update, ref.k, ref.max_steps, ref.max_trajectory_tokens, ref.temperature, ref.lora_rank,
            ref.lr, ref.clip_low, ref.clip_high, ref.kl_coef) == (8, 8, 50, 12000, 1.0, 32, 1e-6, 0.8, 1.2, 0.0)
    assert preset("reference", k=4).k == 4 and preset("cpu").model == "bundled"
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")
    assert set(PRESETS) == {"cpu", "practice", "scale", "reference"}
    assert ref.checkpoint_every <= 5  # a fault loses at most 4 updates of a long GPU run


@pytest.mark.filterwarnings("ignore:.*asks? for bfloat16 autocast")  # the note on CPUs without native bf16
def test_cpu_preset_is_built_for_a_learning_signal():
    """The classroom preset: groups of 8 sampled at 0.6 from the warm start, dynamic sampling that keeps only
    groups with a win and a loss, the trainer's own old logprobs (bf16 where the CPU has it natively:
    test_precision); it passes its checks."""
    from alfrl.training.train import check_config
    cpu = preset("cpu", bf16=True, prefill_dtype="bfloat16")  # as on a CPU with native bfloat16
    assert (cpu.init_adapter, cpu.k, cpu.games_per_update, cpu.temperature, cpu.dynamic_sampling, cpu.keep_groups,
            cpu.max_groups_per_update) == ("warmstart_epoch", 8, 2, 0.6, True, "win", 4)
    assert TrainConfig().init_adapter == "warmstart_epoch"  # the default warm start
    assert preset("practice").init_adapter == "warmstart_epoch"  # one warm start across the course, practice too
    assert cpu.bf16 and cpu.old_logprobs == "trainer" and not cpu.gradient_checkpointing
    assert cpu.ppo().bf16 and cpu.ppo().old_logprobs == "trainer" and cpu.ppo().temperature == 0.6
    check_config(cpu)
    check_config(preset("reference", device="cpu", dtype="float32", model="bundled"))
    with pytest.raises(ValueError, match="keep-groups"):
        check_config(preset("cpu", keep_groups="wins"))
    with pytest.raises(ValueError, match="max-groups-per-update"):
        check_config(preset("cpu", max_groups_per_update=1))
    with pytest.raises(ValueError, match="old-logprobs trainer"):
        check_config(preset("cpu", sample_dtype="bfloat16", old_logprobs="sampler"))
    # rollouts: the adapter merged into a float32 copy, prompts and tool results read in bfloat16
    assert (cpu.sample_dtype, cpu.prefill_dtype, cpu.rollout(1).prefill_dtype) == ("float32", "bfloat16", "bfloat16")
    with pytest.raises(ValueError, match="prefill-dtype bfloat16 .*old-logprobs trainer"):
        check_config(preset("cpu", prefill_dtype="bfloat16", old_logprobs="sampler"))
    with pytest.raises(ValueError, match="prefill_dtype must be"):
        check_config(preset("cpu", prefill_dtype="int8"))
    # speculative decoding by prompt lookup in rollouts (the replies keep their distribution)
    assert cpu.draft_tokens == cpu.rollout(1).draft_tokens == 8
    # the games played in the trainer's process: no worker forked from a trainer of many GB
    assert cpu.workers == cpu.rollout(1).workers == 0
    with pytest.raises(ValueError, match="draft-tokens"):
        check_config(preset("cpu", draft_tokens=-1))


def test_games_cycle_through_the_shuffled_list():
    games = list("abcde")
    assert [games_for_update(games, s, 2) for s in (1, 2, 3)] == [["a", "b"], ["c", "d"], ["e", "a"]]


def test_more_data_dir_follows_data_dir_in_its_own_order(tiny_games):
    """A run that outgrows its rooms plays a second folder's after them: the first folder's keep their places."""
    from alfrl.world.games import load_games

    rooms = REPO_ROOT / "data/rl_rooms"
    config = replace(preset("cpu"), data_dir=str(tiny_games.root), more_data_dir=str(rooms), max_expert_steps=None,
                     max_receptacles=None, seed=3)
    alone = [g.game_id for g in training_games(replace(config, more_data_dir=None))]
    more = [g.game_id for g in load_games("train", rooms, seed=3)]
    assert [g.game_id for g in training_games(config)] == alone + more
    assert len(alone) == 6 and len(more) > 6
    with pytest.raises(ValueError, match="games of --more-data-dir .* are in --data-dir too"):
        training_games(replace(config, data_dir=str(rooms)))
    with pytest.raises(ValueError, match="--pool trains on its practised games alone"):
        training_games(replace(config, pool="data/practice/pool.json"))


def test_cli_help_lists_every_field():
    out = subprocess.run([sys.executable, "-m", "alfrl", "train", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--preset", "--resume", "--run-dir", "--k", "--max-trajectory-tokens", "--clip-low", "--lr",
                 "--checkpoint-every", "--init-adapter"):
        assert flag in out


@pytest.fixture
def expert_vs_junk(monkeypatch):
    """Branch 0 plays the expert's walkthrough, branch 1 junk: rewards differ, so every group trains.
    Logprobs are the policy's own (teacher forcing), so PPO ratios are real."""
    import alfrl.rl.rollout as rollout
    original = rollout._play

    def play(policy, games, config, env, fmt, session, on_turn=None):
        scripts = {}
        for b, game in enumerate(games):  # branch 0 of each game plays the expert, the others junk
            first = games.index(game) == b
            scripts[b] = expert_replies(game) if first else ["no"] * config.max_steps
        scripted = ScriptedSession(fmt, scripts, model=policy.model, temperature=config.temperature)
        return original(policy, games, config, env, fmt, scripted, on_turn=on_turn)
    monkeypatch.setattr(rollout, "_play", play)


def test_interrupted_run_resumes_to_the_same_metrics(tmp_path, tiny_games, expert_vs_junk, monkeypatch, capsys):
    """The scale preset's shape in tiny: step-level credit (GiGPO) and dynamic sampling over fresh games.
    Stopped by an out-of-memory error in update 2's forward pass (before its optimizer step), between checkpoints,
    the run writes update 1's checkpoint first and says how to continue; a kill after update 2's metrics were
    logged but before its checkpoint leaves a line the resume drops. Resumed, it logs what a straight run logs
    (the cursor, the RNG, Adam's state and the adapter come back)."""
    over = dict(credit="gigpo", dynamic_sampling=True, keep_groups="spread", max_groups_per_update=2)
    straight = train(tiny(tmp_path / "a", tiny_games, **over), progress=False)
    assert [m["step"] for m in straight] == [1, 2]
    assert all(m["optimizer_steps"] == 1 and m["degenerate_groups"] == 0 for m in straight)
    assert straight[1]["sampler_ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # sampler and trainer agree
    assert straight[1]["ratio_mean"] is None  # one step per update: the clip cannot act (REINFORCE)
    games = [g for m in straight for g in m["games"]]
    assert len(games) == 2 and len(set(games)) == 2  # a fresh game every update
    assert all(0 < m["step_credit_rate"] <= m["anchored_turn_rate"] for m in straight)
    records = read_jsonl(tmp_path / "a" / "run" / "trajectories.jsonl")
    assert all(len(r["turn_advantages"]) == len(r["turns"]) for r in records)  # per-turn advantages trained

    import alfrl.training.train as training
    threads, during, original = torch.get_num_threads(), [], training.learn

    def learn(policy, optimizer, config, ppo, kept, step, run_dir):
        if step == 2:  # out of memory in the update's forward pass: the weights are still update 1's
            raise torch.OutOfMemoryError("CUDA out of memory (raised by the test, mid-forward)")
        return original(policy, optimizer, config, ppo, kept, step, run_dir)
    monkeypatch.setattr(training, "learn", learn)
    # --threads for this run only; checkpoints every 2 updates, so the fault itself must write update 1's
    config = tiny(tmp_path / "b", tiny_games, **over, threads=threads + 1, checkpoint_every=2)
    with pytest.raises(torch.OutOfMemoryError, match="mid-forward"):
        train(config, progress=False, on_update=lambda history: during.append(torch.get_num_threads()))
    assert during == [threads + 1] and torch.get_num_threads() == threads  # put back, even on an error
    run = tmp_path / "b" / "run"
    assert [c.name for c in checkpoints(run)] == ["step_00001"]
    said = capsys.readouterr().err
    assert f"stopped by OutOfMemoryError; the last checkpoint is step_00001. Continue with: python -m alfrl train " \
           f"--resume {run}" in said
    monkeypatch.setattr(training, "learn", original)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "reward": 123.0}) + "\n")
    resumed = train(resume=run, progress=False)
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]
    drop = {"rollout_seconds", "update_seconds", "model_seconds", "env_seconds", "peak_rss_gb", "peak_gpu_gb",
            "forward_seconds", "backward_seconds", "episodes_per_minute"}
    same = [{k: v for k, v in m.items() if k not in drop} for m in resumed]
    want = [{k: v for k, v in m.items() if k not in drop} for m in straight]
    _close(same, want)
    assert len(read_jsonl(run / "trajectories.jsonl")) == 2 * 2


def test_sigterm_inside_an_update_saves_the_last_finished_one(tmp_path, tiny_games, expert_vs_junk, monkeypatch,
                                                              capsys):
    """Checkpoints every 3 updates, so update 1 is only in memory when update 2 stops. SIGTERM in update 2's
    forward pass saves update 1 (as the out-of-memory error of the test above does) and exits with status 143;
    a fault after the optimizer step saves nothing: the weights are half an update's."""
    import os
    import signal
    import threading

    import alfrl.training.train as training
    original, fault = training.learn, []

    def learn(policy, optimizer, config, ppo, kept, step, run_dir):
        if step == 2 and fault == ["sigterm"]:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, in the main thread
        out = original(policy, optimizer, config, ppo, kept, step, run_dir)
        if step == 2 and fault == ["after the step"]:
            raise torch.OutOfMemoryError("raised by the test, after the step")
        return out
    monkeypatch.setattr(training, "learn", learn)
    assert threading.current_thread() is threading.main_thread()  # else SIGTERM would end the test process
    before = signal.getsignal(signal.SIGTERM)
    fault.append("sigterm")
    with pytest.raises(SystemExit) as stopped:
        train(tiny(tmp_path / "term", tiny_games, checkpoint_every=3), progress=False)
    run = tmp_path / "term" / "run"
    assert stopped.value.code == 143 and signal.getsignal(signal.SIGTERM) is before  # the handler put back
    assert f"stopped by SIGTERM; the last checkpoint is step_00001. Continue with: python -m alfrl train --resume " \
           f"{run}" in capsys.readouterr().err
    assert [c.name for c in checkpoints(run)] == ["step_00001"]
    fault[:] = ["after the step"]
    with pytest.raises(torch.OutOfMemoryError, match="after the step"):
        train(tiny(tmp_path / "late", tiny_games, checkpoint_every=3), progress=False)
    assert checkpoints(tmp_path / "late" / "run") == []  # never half an update's weights
    assert "the last checkpoint is none" in capsys.readouterr().err


def test_signals_wait_for_a_change_that_must_happen_whole():
    """Inside signals_held (a weight swap, a rescue checkpoint) SIGINT and SIGTERM wait; after it they reach the
    handlers that were there, and those handlers are back."""
    import os
    import signal
    import time

    from alfrl.base.checkpoint import signals_held
    got, before = [], {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a plain process (a test worker may differ)
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            assert got == []
        assert got == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                got.append("finished")
        assert got[-1] == "finished" and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_scale_preset_is_the_reference_runs_size():
    """Up to 8 trained groups of 8 for 80 updates (at most 5,120 episodes), fresh generated train rooms, spread
    groups only."""
    config = preset("scale")
    assert (config.games_per_update, config.k, config.updates) == (8, 8, 80)
    assert config.games_per_update * config.k * config.updates == 5120
    assert config.dynamic_sampling and config.keep_groups == "spread" and config.max_groups_per_update == 16
    assert config.data_dir == "data/rl_rooms" and config.split == "train" and config.credit == "grpo"
    assert config.more_data_dir == "data/rl_rooms_more"  # after the 909 rooms (PREREGISTRATION.md, amendment 3)
    assert config.init_adapter == TrainConfig().init_adapter  # the default warm start
    assert preset("scale", credit="gigpo").advantage().credit == "gigpo"
    with pytest.raises(ValueError, match="--credit must be one of"):
        check_config(replace(config, credit="steps"))
    with pytest.raises(ValueError, match="--algo grpo"):
        check_config(replace(config, credit="gigpo", algo="rft"))


def _close(a: list[dict], b: list[dict]) -> None:
    """Equal metrics, floats within 1e-5; the sampler/trainer gap, itself float rounding (about 1e-7 here),
    within 1e-6: run "b" and its resume ran on another thread count than run "a", which sums in another
    order."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], float):
                close = 1e-6 if key.startswith("sampler_") else 1e-7
                assert x[key] == pytest.approx(y[key], rel=1e-5, abs=close), key
            else:
                assert x[key] == y[key], key


def test_resume_needs_a_run_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        train(resume=tmp_path)


def test_cli_smoke_run_with_the_real_model(tmp_path, tiny_games):
    """One update of the real thing, headless: rollouts by the small model, a run directory on disk, and
    held-out evaluations before and after the update (--eval-every 1), one of which an interruption
    cut short: --resume finishes it, playing only the game it lacked."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "alfrl", "train", "--run-dir", str(run), "--data-dir", str(tiny_games.root),
           "--split", SPLIT, "--updates", "1", "--games-per-update", "1", "--k", "2", "--max-steps", "2",
           "--max-new-tokens", "8", "--lora-rank", "4", "--eval-every", "1", "--eval-games", "2",
           "--max-expert-steps", "100", "--max-receptacles", "100"]  # every tiny game
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 updates in" in done.stdout and "held-out success by update (valid_unseen): 0: " in done.stdout
    assert {p.name for p in run.iterdir()} >= {"config.json", "metrics.jsonl", "trajectories.jsonl", "plots.png",
                                               "checkpoints", "eval", "eval.jsonl"}
    assert (run / "checkpoints" / "step_00001" / "adapter" / "adapter_model.safetensors").is_file()
    evals = read_jsonl(run / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 1] and all(e["eval_games"] == 2 for e in evals)
    for e in evals:  # each line is the summary of its folder's records, as python -m alfrl eval writes them
        folder = run / "eval" / f"step_{e['step']:05d}"
        records = read_jsonl(folder / "records.jsonl")
        assert len(records) == 2 and {r["split"] for r in records} == {"valid_unseen"}
        assert e["eval_won"] == sum(r["won"] for r in records)
        assert json.loads((folder / "summary.json").read_text())["all"]["games"] == 2
    # --log tensorboard (the default): every number of metrics.jsonl, and the held-out curve, by step
    logged = read_tensorboard(run)
    (metrics,) = read_jsonl(run / "metrics.jsonl")
    numbers = {k: v for k, v in scalars(metrics).items() if k != "step"}
    assert numbers and set(numbers) <= set(logged)
    for name, value in numbers.items():
        assert logged[name] == [(1, pytest.approx(value, rel=1e-6))], name
    assert [(s, v) for s, v in logged["eval_success"]] == [(e["step"], pytest.approx(e["eval_success"]))
                                                           for e in evals]
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr
    # killed during the evaluation after update 1: one game recorded, no eval.jsonl line yet
    (run / "eval.jsonl").write_text(json.dumps(evals[0]) + "\n")
    folder = run / "eval" / "step_00001"
    kept = (folder / "records.jsonl").read_text().splitlines()[0]
    (folder / "records.jsonl").write_text(kept + "\n")
    (folder / "summary.json").unlink()
    resumed = subprocess.run([sys.executable, "-m", "alfrl", "train", "--resume", str(run)], capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [e["step"] for e in read_jsonl(run / "eval.jsonl")] == [0, 1]
    records = read_jsonl(folder / "records.jsonl")
    assert len(records) == 2 and json.dumps(records[0]) == kept  # the recorded game was not played again
    assert len(read_jsonl(run / "metrics.jsonl")) == 1  # and no update was repeated
    logged = read_tensorboard(run)  # the cut-short evaluation's step purged and logged again: each step once
    assert logged["eval_success"] == [(e["step"], pytest.approx(e["eval_success"]))
                                      for e in read_jsonl(run / "eval.jsonl")]
    assert logged["reward"] == [(1, pytest.approx(metrics["reward"]))]


def _fake_groups(spread_games: set[str]):
    """A stand-in for rollout_batch (a unit test of the sampling logic): a group of game g has a win and a
    loss when g is in ``spread_games``, two equal losses otherwise."""
    from alfrl.rl.rollout import Trajectory

    def play(policy, games, config, progress=True):
        def traj(game, won):
            return Trajectory(game_id=game, task_type="t", branch=0, seed=config.seed, tokens=[1, 2], mask=[0, 1],
                              logprobs=[0.0, -1.0], turns=[], won=won, steps=1, invalid=0, end_reason="won" if won
                              else "max_steps", prompt_tokens=1, prefilled=1, sampled=1, model_seconds=0.0,
                              env_seconds=0.0)
        return [[traj(g, g in spread_games), traj(g, False)] for g in games]
    return play


def test_dynamic_sampling_replaces_groups_without_spread_and_the_cap_holds(monkeypatch):
    import alfrl.training.train as train_module
    games = list("abcdefgh")
    monkeypatch.setattr(train_module, "rollout_batch", _fake_groups({"b", "e", "f"}))
    config = TrainConfig(games_per_update=2, groups_per_batch=2, k=2, dynamic_sampling=True, max_groups_per_update=8)
    kept, played = play_update(None, config, games, step=1, cursor=0)
    assert [g[0].game_id for g in played] == list("abcdef")  # a,b: one spread; c,d: none; e,f: two
    assert [g[0].game_id for g in kept] == ["b", "e", "f"]
    # the cap: at most 3 groups played, so only one group with a spread
    capped = TrainConfig(games_per_update=2, groups_per_batch=2, k=2, dynamic_sampling=True, max_groups_per_update=3)
    kept, played = play_update(None, capped, games, step=1, cursor=0)
    assert [g[0].game_id for g in played] == list("abc") and [g[0].game_id for g in kept] == ["b"]
    # the cursor: the next update starts after the games played (wrapping)
    kept, played = play_update(None, replace(config, max_groups_per_update=4), games, step=2, cursor=6)
    assert [g[0].game_id for g in played] == list("ghab") and [g[0].game_id for g in kept] == ["b"]
    # off: the groups are played and kept as they come
    plain = TrainConfig(games_per_update=2, k=2)
    kept, played = play_update(None, plain, games, step=1, cursor=2)
    assert kept == played and [g[0].game_id for g in played] == ["c", "d"]
    assert games_at(games, 7, 3) == ["h", "a", "b"]


def test_dynamic_sampling_counts_dropped_groups_in_the_metrics(monkeypatch, tmp_path):
    import alfrl.training.train as train_module
    monkeypatch.setattr(train_module, "rollout_batch", _fake_groups({"b"}))
    monkeypatch.setattr(train_module, "ppo_update", lambda policy, optimizer, trajectories, config: [])
    config = TrainConfig(games_per_update=1, groups_per_batch=1, k=2, dynamic_sampling=True, max_groups_per_update=4)
    (tmp_path / "run").mkdir()
    metrics = train_module._one_update(None, None, config, config.ppo(), list("abc"), 1, 0, tmp_path / "run", False)
    assert metrics["groups"] == 2 and metrics["groups_dropped"] == 1 and metrics["games"] == ["a", "b"]
    assert metrics["win_group_rate"] == 0.5 and metrics["spread_group_rate"] == 0.5 and metrics["success"] == 0.25
    assert len(read_jsonl(tmp_path / "run" / "trajectories.jsonl")) == 4  # every trajectory played is kept


def test_dynamic_sampling_can_keep_only_groups_with_a_win_and_a_loss(monkeypatch):
    import alfrl.training.train as train_module
    from alfrl.training.train import teaches
    monkeypatch.setattr(train_module, "rollout_batch", _fake_groups({"c"}))
    config = TrainConfig(games_per_update=1, groups_per_batch=1, k=2, dynamic_sampling=True, max_groups_per_update=4,
                         keep_groups="win")
    kept, played = play_update(None, config, list("abcd"), step=1, cursor=0)
    assert [g[0].game_id for g in kept] == ["c"] and len(played) == 3
    invalid_only = _fake_groups(set())(None, ["x"], config.rollout(1))[0]
    invalid_only[1].invalid = 2  # rewards 0 and -0.2: a spread, but no win
    assert teaches(invalid_only, replace(config, keep_groups="spread")) and not teaches(invalid_only, config)


def test_a_run_on_a_pool_replays_its_practised_game_and_never_a_control(tmp_path, tiny_games, expert_vs_junk):
    from alfrl.eval.practice import visit_curves
    games = [g.game_id for g in tiny_games.games(SPLIT)]
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"practice": games[:1], "control": games[1:3]}))
    history = train(tiny(tmp_path, tiny_games, pool=str(pool), max_new_tokens=8), progress=False)
    assert [m["games"] for m in history] == [games[:1], games[:1]]  # the practised game at every update
    wins: dict[int, int] = {}
    for t in read_jsonl(tmp_path / "run" / "trajectories.jsonl"):
        wins[t["step"]] = wins.get(t["step"], 0) + t["won"]
    assert visit_curves(history) == {games[0]: [(1, wins[1], 2), (2, wins[2], 2)]}  # the episodes' own wins
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"practice": ["no-such-game/trial_1"], "control": []}))
    with pytest.raises(ValueError, match="not in the valid_seen split"):
        train(tiny(tmp_path / "b", tiny_games, pool=str(bad)), progress=False)
