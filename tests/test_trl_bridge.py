"""The bridge to TRL's GRPOTrainer (alfrl.training.trl_bridge): its pieces on hand-built data, then real trainer steps
on the real engine and the bundled model (slow), on one process and on two (accelerate, gloo)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from alfrl.rl.advantage import AdvantageConfig, assign_advantages, group_advantages
from alfrl.rl.advantage import episode_reward as course_episode_reward
from alfrl.rl.trajectory import Trajectory, Turn
from alfrl.training.train_config import preset
from alfrl.world.games import load_games

trl = pytest.importorskip("trl", reason="the TRL bridge needs the optional extra: pip install -e '.[trl]' "
                                        "(scripts/test.sh installs it)")
from alfrl.training import trl_bridge  # noqa: E402 (after the skip)

REPO_ROOT = Path(__file__).resolve().parent.parent
POOL = json.loads((REPO_ROOT / "data/results/warmstart_epoch_pool.json").read_text())["practice"]
"""Two training games the default warm start wins 5 times of 8 at 10 turns: groups with a spread."""


def trajectory(game: str, branch: int, prompt: int, replies: list[tuple[int, int]], won: bool, invalid: int
               ) -> Trajectory:
    """A hand-built trajectory: ``prompt`` prompt tokens, then per turn (reply tokens, tool-result tokens)."""
    tokens, mask = list(range(prompt)), [0] * prompt
    for sampled, tool in replies:
        tokens += [100 + i for i in range(sampled)] + [200 + i for i in range(tool)]
        mask += [1] * sampled + [0] * tool
    logprobs = [-0.5 if m else 0.0 for m in mask]
    turns = [Turn(reply="r", action="look", valid_format=True, admissible=True, reason="", observation="o",
                  sampled=s, stopped_on="eos") for s, _ in replies]
    return Trajectory(game_id=game, task_type="pick_and_place_simple", branch=branch, seed=0, tokens=tokens,
                      mask=mask, logprobs=logprobs, turns=turns, won=won, steps=len(replies), invalid=invalid,
                      end_reason="won" if won else "max_steps", prompt_tokens=prompt, prefilled=len(tokens),
                      sampled=sum(mask), model_seconds=0.0, env_seconds=0.0)


def test_episodes_as_rows_split_prompt_from_completion_and_mask_tool_tokens():
    t = trajectory("g/1", 0, prompt=5, replies=[(3, 2), (2, 4)], won=True, invalid=1)
    rows = trl_bridge.episodes_as_rows([t], AdvantageConfig())
    assert rows["prompt_ids"] == [[0, 1, 2, 3, 4]]
    assert rows["completion_ids"] == [[100, 101, 102, 200, 201, 100, 101, 200, 201, 202, 203]]
    assert rows["env_mask"] == [[1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0]]
    assert rows["logprobs"] == [[-0.5, -0.5, -0.5, 0.0, 0.0, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0]]
    assert rows["course_reward"] == [pytest.approx(0.9)]  # won - 0.1 x 1 invalid
    assert trl_bridge.episode_reward(["g/1"], ["..."], course_reward=rows["course_reward"]) == [pytest.approx(0.9)]


def test_rollout_refuses_rows_that_are_not_whole_groups_of_known_games():
    rollout = trl_bridge.CourseRollout([], preset("cpu"))
    with pytest.raises(ValueError, match="not a multiple of num_generations=4"):
        rollout.groups(["a"] * 6, 4)
    with pytest.raises(ValueError, match="not one group of one game"):
        rollout.groups(["a", "a", "b", "b"], 4)
    with pytest.raises(KeyError, match="unknown game 'a'"):
        rollout.groups(["a"] * 4, 4)


def test_config_mirrors_the_course_method(tmp_path):
    config = preset("cpu", k=4, updates=3, device="cpu")
    args = trl_bridge.grpo_config(config, tmp_path, groups_per_update=6, num_processes=2, rows_per_micro_batch=2)
    assert (args.num_generations, args.per_device_train_batch_size) == (4, 2)
    assert (args.gradient_accumulation_steps, args.steps_per_generation, args.num_iterations) == (6, 6, 1)
    assert args.generation_batch_size == 4 * 3 * args.world_size  # 3 groups of 4 on each process (2 under accelerate)
    assert args.max_steps == 3
    assert (args.epsilon, args.epsilon_high) == (pytest.approx(0.2), pytest.approx(0.2))  # clip 0.8 / 1.2
    assert (args.beta, args.scale_rewards, args.loss_type) == (0.0, "none", "dapo")
    assert (args.learning_rate, args.adam_beta1, args.adam_beta2) == (config.lr, 0.9, 0.95)
    assert (args.max_grad_norm, args.weight_decay, args.lr_scheduler_type) == (1.0, 0.0, "constant")
    assert args.temperature == config.temperature and args.shuffle_dataset is False
    assert args.gradient_checkpointing is config.gradient_checkpointing is False  # the cpu preset's
    with pytest.raises(ValueError, match="split evenly over 4 processes"):
        trl_bridge.grpo_config(config, tmp_path, groups_per_update=6, num_processes=4)
    with pytest.raises(ValueError, match="must divide the 12 episodes"):
        trl_bridge.grpo_config(config, tmp_path, groups_per_update=6, num_processes=2, rows_per_micro_batch=5)


def test_the_command_line_keeps_the_presets_settings_unless_told(monkeypatch):
    """Flags left out keep the preset's values (--preset reference: Qwen3-4B, 50 turns, bfloat16, gradient
    checkpointing, 8 groups an update; --preset practice: its pool); a flag given wins; what the bridge cannot
    carry (dynamic sampling, speculative decoding, the TIS cap) is off."""
    def stop(config, output_dir, groups_per_update, **kwargs):  # what main() would train, and no training
        raise SystemExit((config, groups_per_update))
    monkeypatch.setattr(trl_bridge, "make_trainer", stop)

    def parsed(*flags):
        with pytest.raises(SystemExit) as stopped:
            trl_bridge.main(list(flags))
        return stopped.value.code
    fields = ("model", "k", "max_steps", "dtype", "device", "thinking", "gradient_checkpointing", "init_adapter",
              "pool", "temperature", "lr")
    for name in ("cpu", "reference", "practice"):
        config, groups = parsed("--preset", name)
        want = preset(name)
        assert {f: getattr(config, f) for f in fields} == {f: getattr(want, f) for f in fields}, name
        assert groups == want.games_per_update and config.updates == 2 and config.seed == 0
        assert not config.dynamic_sampling and config.draft_tokens == 0 and config.tis_cap == 0.0
    assert (config.pool, groups) == ("data/practice/pool.json", 2)  # practice: its pool, 2 games an update
    config, groups = parsed("--preset", "reference")
    assert (config.model, config.max_steps, config.dtype, config.gradient_checkpointing, groups) == (
        "Qwen/Qwen3-4B", 50, "bfloat16", True, 8)
    config, groups = parsed("--preset", "reference", "--model", "bundled", "--max-steps", "10", "--dtype", "float32",
                            "--thinking", "off", "--no-gradient-checkpointing", "--k", "4", "--groups-per-update",
                            "1", "--pool", "data/results/warmstart_epoch_pool.json")
    assert (config.model, config.max_steps, config.dtype, config.thinking, config.gradient_checkpointing, config.k,
            groups, config.pool) == ("bundled", 10, "float32", "off", False, 4, 1,
                                     "data/results/warmstart_epoch_pool.json")


@pytest.mark.parametrize("change, words", [(dict(credit="gigpo"), "one number per episode"),
                                           (dict(algo="rft"), "GRPO only"), (dict(kl_coef=0.1), "set it to 0"),
                                           (dict(epochs=2), "one optimizer step"),
                                           (dict(normalize_std=True), "no std scaling")])
def test_config_the_bridge_cannot_carry_is_refused(tmp_path, change, words):
    with pytest.raises(ValueError, match=words):
        trl_bridge.grpo_config(preset("cpu", **change), tmp_path, groups_per_update=1)


def test_another_trl_release_is_named_with_the_install(monkeypatch):
    monkeypatch.setattr(trl, "__version__", "0.0.1")
    with pytest.raises(ImportError, match=r"has 0.0.1. Install the pinned one: pip install -e \"\.\[trl\]\""):
        trl_bridge.require_trl()


def test_an_update_needs_as_many_games_as_groups(tmp_path):
    with pytest.raises(ValueError, match="an update of 3 groups needs as many games; only 2 were found"):
        trl_bridge.make_trainer(preset("cpu"), tmp_path, groups_per_update=3, games=load_games("train")[:2])


def test_dataset_has_one_row_per_game_in_order():
    games = load_games("train")[:3]
    assert trl_bridge.game_dataset(games)["prompt"] == [g.game_id for g in games]


# --- real steps: the real engine, the bundled model with the default warm start, TRL's GRPOTrainer ---

def bridge_config(updates: int):
    """The cpu preset at a size a test can afford, deterministic on any CPU (no bf16 reads, no drafts)."""
    return preset("cpu", k=4, updates=updates, max_steps=10, device="cpu", dynamic_sampling=False, bf16=False,
                  prefill_dtype=None, draft_tokens=0, sample_dtype=None)


def pool_games():
    games = {g.game_id: g for g in load_games("train", max_expert_steps=None, max_receptacles=None)}
    return [games[i] for i in POOL]


def lora_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """Two real GRPOTrainer steps, one group of 4 an update (the two pool games in turn): every batch TRL
    scored, the course's records of each update's group, and the LoRA weights before and after each step."""
    from transformers import TrainerCallback
    config = bridge_config(updates=2)
    trainer, rollout = trl_bridge.make_trainer(config, tmp_path_factory.mktemp("trl"), groups_per_update=1,
                                               games=pool_games())
    seen = {"batches": [], "played": [], "weights": [lora_weights(trainer.model)]}
    score = trainer._generate_and_score_completions

    def recorded(inputs):
        batch = score(inputs)
        seen["batches"].append(batch)
        seen["played"].append(rollout.played)
        return batch

    class Weights(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen["weights"].append(lora_weights(trainer.model))

    trainer._generate_and_score_completions = recorded
    trainer.add_callback(Weights())
    trainer.train()
    seen["log"] = [e for e in trainer.state.log_history if "grad_norm" in e]
    seen["config"] = config
    return seen


@pytest.mark.slow
def test_each_group_resets_alike_and_the_mask_is_the_course_mask(two_steps):
    for batch, played in zip(two_steps["batches"], two_steps["played"]):
        (group,) = played
        assert len({t.game_id for t in group}) == 1
        assert len({tuple(t.tokens[:t.prompt_tokens]) for t in group}) == 1  # identical resets, token for token
        prompts = batch["prompt_ids"][batch["prompt_mask"].bool()].view(4, -1)
        assert prompts.tolist() == [t.tokens[:t.prompt_tokens] for t in group]
        for row, t in enumerate(group):
            p, n = t.prompt_tokens, len(t.tokens) - t.prompt_tokens
            assert batch["completion_ids"][row, :n].tolist() == t.tokens[p:]
            loss_mask = (batch["completion_mask"] * batch["tool_mask"])[row]
            assert loss_mask[:n].tolist() == t.mask[p:]  # exactly the sampled tokens train
            assert loss_mask[n:].sum() == 0 and 0 in t.mask[p:]  # padding and tool results do not


@pytest.mark.slow
def test_advantages_are_the_course_rewards_minus_the_group_mean(two_steps):
    spreads = 0
    for batch, played in zip(two_steps["batches"], two_steps["played"]):
        (group,) = played
        rewards = [course_episode_reward(t) for t in group]
        assert batch["advantages"].tolist() == pytest.approx(group_advantages(rewards), abs=1e-6)
        spreads += len(set(rewards)) > 1
    assert spreads >= 1, "no group had a reward spread, so no step could move the weights"


@pytest.mark.slow
def test_a_step_moves_the_lora_weights_exactly_when_its_group_has_a_spread(two_steps):
    weights = two_steps["weights"]
    assert len(weights) == 3
    for step, played in enumerate(two_steps["played"]):
        rewards = [course_episode_reward(t) for t in played[0]]
        moved = max((weights[step + 1][n] - weights[step][n]).abs().max().item() for n in weights[step])
        assert (moved > 0) == (len(set(rewards)) > 1), f"step {step + 1}: rewards {rewards}, moved {moved}"


@pytest.mark.slow
def test_trl_step_equals_the_course_step_on_the_same_episodes(two_steps):
    """The course's ppo_step on the episodes TRL trained on, from the same weights: the same loss gradient."""
    from alfrl.rl.ppo import make_optimizer, ppo_step
    from alfrl.training.train import load_for_training
    config = two_steps["config"]
    step = next(i for i, p in enumerate(two_steps["played"]) if len({course_episode_reward(t) for t in p[0]}) > 1)
    policy = load_for_training(config)
    start = two_steps["weights"][step]
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if p.requires_grad:
                p.copy_(start[n])
    optimizer = make_optimizer(policy, config.ppo())
    group = [replace(t) for t in two_steps["played"][step][0]]
    assign_advantages([group], config.advantage())
    metrics = ppo_step(policy, optimizer, group, replace(config.ppo(), share_prefix=False), own_old=True)
    assert two_steps["log"][step]["loss"] == pytest.approx(metrics["loss"], rel=1e-4)
    assert two_steps["log"][step]["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4)
    after = lora_weights(policy.model)
    trl_delta = torch.cat([(two_steps["weights"][step + 1][n] - start[n]).flatten() for n in start])
    course_delta = torch.cat([(after[n] - start[n]).flatten() for n in start])
    # Adam's first step moves each weight by about lr x sign(gradient); where a gradient is near Adam's eps
    # (1e-8), float rounding can flip it, so the steps agree closely but not to the last weight
    assert torch.nn.functional.cosine_similarity(trl_delta, course_delta, dim=0) > 0.99


@pytest.mark.slow
def test_two_processes_split_the_groups_and_take_the_one_process_step(tmp_path):
    """``accelerate launch --multi_gpu --num_processes 2`` on this CPU (gloo): each rank plays its own group; the
    update equals one process's update on the same two groups."""
    if shutil.which("accelerate", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("accelerate's launcher is not in this venv")
    common = ["--updates", "1", "--groups-per-update", "2", "--k", "4", "--max-steps", "10", "--pool",
              "data/results/warmstart_epoch_pool.json"]
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1", "ALFRL_THREADS": "1"}
    launcher = str(Path(sys.executable).parent / "accelerate")
    two, one = tmp_path / "two", tmp_path / "one"
    # --multi_gpu is accelerate's name for its torchrun launcher; with no GPU, each process runs on the CPU (gloo).
    # (--cpu with several processes needs MPI, and without it launches one process.)
    subprocess.run([launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision",
                    "no", "--dynamo_backend", "no", "-m", "alfrl.training.trl_bridge", "--output-dir", str(two), *common],
                   check=True, env=env, cwd=REPO_ROOT)
    subprocess.run([sys.executable, "-m", "alfrl.training.trl_bridge", "--output-dir", str(one), *common], check=True,
                   env=env, cwd=REPO_ROOT)
    ranks = [json.loads((two / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["games"][0] != ranks[1]["games"][0]  # each rank played its own group
    alone = json.loads((one / "rank0.json").read_text())
    assert alone["games"][0] == ranks[0]["games"][0] + ranks[1]["games"][0]
    logs = [json.loads((d / "log.json").read_text())[0] for d in (two, one)]
    assert logs[0]["grad_norm"] > 0, "neither group had a reward spread, so the step moved nothing"
    assert logs[0]["loss"] == pytest.approx(logs[1]["loss"], rel=1e-4)
    assert logs[0]["grad_norm"] == pytest.approx(logs[1]["grad_norm"], rel=1e-4)
    from safetensors.torch import load_file
    a, b = (load_file(d / "adapter" / "adapter_model.safetensors") for d in (two, one))
    assert a.keys() == b.keys()
    start = load_file(REPO_ROOT / "data/warmstart_epoch/adapter_model.safetensors")
    da = torch.cat([(a[n].float() - start[n].float()).flatten() for n in sorted(a)])
    db = torch.cat([(b[n].float() - start[n].float()).flatten() for n in sorted(a)])
    assert torch.nn.functional.cosine_similarity(da, db, dim=0) > 0.99  # Adam's first step, as above
