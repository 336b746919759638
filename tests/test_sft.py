"""alfrl.imitation.sft: expert trajectories are token-identical to what the chat template renders for the same
conversation, their masks cover exactly the replies, and a fine-tuning step lowers the loss."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from alfrl.agent.protocol import COMPLETED, EXECUTED, ChatFormat, tool_result_message
from alfrl.imitation.sft import SFTConfig, expert_trajectories, nll_loss
from alfrl.rl.scripted import expert_replies
from alfrl.world.env import GroupEnv

SPLIT = "train"


@pytest.fixture(scope="module")
def games(tiny_games):
    return sorted(tiny_games.games(SPLIT), key=lambda g: len(g.walkthrough))[:2]


@pytest.fixture(scope="module")
def trajectories(policy, games):
    return expert_trajectories(policy, games, SFTConfig(), progress=False)


def conversation(fmt: ChatFormat, game) -> list[dict]:
    """The expert's game as chat messages, built independently of the rollout code."""
    with GroupEnv(k=1, workers=0) as env:
        start = env.reset(game)
        messages = fmt.messages(start.task, start.observation, start.admissible_commands)
        for reply, action in zip(expert_replies(game), game.walkthrough):
            result = env.step({0: action})[0]
            messages.append({"role": "assistant", "content": reply})
            if result.won:
                break
            messages.append({"role": fmt.tool_role, "content": tool_result_message(
                COMPLETED if result.won else EXECUTED, result.observation, result.admissible_commands)})
    return messages


def test_expert_trajectories_are_what_the_template_renders(policy, games, trajectories):
    fmt = ChatFormat(policy.tokenizer)
    for game, t in zip(games, trajectories):
        assert t.won and t.invalid == 0 and t.steps == len(game.walkthrough)
        rendered = fmt.encode(fmt.render(conversation(fmt, game), False))
        assert t.tokens == rendered[:len(t.tokens)]
        assert policy.tokenizer.decode(rendered[len(t.tokens):]).strip() == ""  # only the closing newline
        # mask 1 exactly on each reply and its end-of-turn token
        runs, start = [], None
        for i, m in enumerate(t.mask + [0]):
            if m and start is None:
                start = i
            elif not m and start is not None:
                runs.append(t.tokens[start:i])
                start = None
        assert [policy.tokenizer.decode(r, skip_special_tokens=True) for r in runs] == expert_replies(game)
        assert all(r[-1] == policy.tokenizer.eos_token_id for r in runs)


def test_a_fine_tuning_step_lowers_the_loss(policy, games):
    p = copy.deepcopy(policy)
    trajectories = expert_trajectories(p, games[:1], SFTConfig(max_steps=2), progress=False)  # short: 2 turns
    assert trajectories[0].end_reason == "max_steps"
    optimizer = torch.optim.Adam([q for q in p.model.parameters() if q.requires_grad], lr=1e-3)
    before, tokens = nll_loss(p.model, trajectories)
    optimizer.step()
    optimizer.zero_grad()
    after, _ = nll_loss(p.model, trajectories, backward=False)
    assert tokens == sum(sum(t.mask) for t in trajectories)
    assert after < before


def _check_shipped(name: str, folder) -> None:
    """A shipped adapter: found by name, a few MB, and refused for another model with a clear error. One whose
    weights the repository keeps out of git (tests/test_tree_size.py) is skipped until they are rebuilt."""
    from alfrl.agent.models import check_adapter, resolve_adapter
    if not (folder / "adapter_model.safetensors").is_file():
        pytest.skip(f"{folder.name}'s weights are out of git; rebuild them as its README.md says to test them")
    assert resolve_adapter(name) == check_adapter(name) == folder
    assert (folder / "adapter_model.safetensors").stat().st_size < 6_000_000
    with pytest.raises(ValueError, match="bundled model"):
        resolve_adapter(name, "Qwen/Qwen3-4B")


@pytest.mark.parametrize("name", ["warmstart", "warmstart_expert", "warmstart_epoch"])
def test_the_shipped_warm_starts_play_valid_admissible_calls(tiny_games, name):
    """data/warmstart (``--init-adapter warmstart``), data/warmstart_expert and data/warmstart_epoch (the
    default): on a game they never saw, their greedy first replies are valid tool calls of admissible actions
    (the bare model makes none), the first of them the walkthroughs' ``look``."""
    from alfrl.agent.models import load_policy
    from alfrl.base.paths import EPOCH_WARM_START_DIR, EXPERT_WARM_START_DIR, WARM_START_DIR
    from alfrl.rl.rollout import RolloutConfig, rollout_group

    _check_shipped(name, {"warmstart": WARM_START_DIR, "warmstart_expert": EXPERT_WARM_START_DIR,
                          "warmstart_epoch": EPOCH_WARM_START_DIR}[name])
    policy = load_policy(lora=name)
    game = next(g for g in tiny_games.games("valid_unseen") if g.task_type == "pick_and_place_simple")
    (t,) = rollout_group(policy, game, RolloutConfig(k=1, max_steps=3, max_new_tokens=48, temperature=0.0,
                                                     workers=0))
    assert [turn.valid_format and turn.admissible for turn in t.turns] == [True] * len(t.turns)
    assert t.turns[0].action == "look"  # the expert's walkthroughs start by looking around


def test_the_default_warm_start_continues_the_first():
    """data/warmstart_epoch is the default of train and dagger: the first warm start's LoRA shape, every
    lora_B moved by 320 more walkthroughs (data/warmstart_expert, step 80) and again by the epoch's other 560."""
    from safetensors.torch import load_file

    from alfrl.agent.models import DEFAULT_WARM_START, resolve_adapter
    from alfrl.base.paths import EPOCH_WARM_START_DIR, EXPERT_WARM_START_DIR, WARM_START_DIR
    from alfrl.imitation.dagger import DaggerConfig
    from alfrl.training.train_config import TrainConfig

    assert DEFAULT_WARM_START == TrainConfig().init_adapter == DaggerConfig().init_adapter == "warmstart_epoch"
    assert resolve_adapter(DEFAULT_WARM_START) == EPOCH_WARM_START_DIR
    if not all((d / "adapter_model.safetensors").is_file() for d in (WARM_START_DIR, EXPERT_WARM_START_DIR)):
        pytest.skip("the first two warm starts' weights are out of git; rebuild them (data/warmstart/README.md, "
                    "data/warmstart_expert/README.md) to compare the three")
    first, step80, epoch = (load_file(d / "adapter_model.safetensors")
                            for d in (WARM_START_DIR, EXPERT_WARM_START_DIR, EPOCH_WARM_START_DIR))
    assert first.keys() == step80.keys() == epoch.keys()
    assert all(first[k].shape == step80[k].shape == epoch[k].shape for k in first)
    assert all(not torch.equal(first[k], step80[k]) and not torch.equal(step80[k], epoch[k])
               for k in first if "lora_B" in k)


@pytest.mark.parametrize("name", ["grpo", "grpo_scale"])
def test_the_shipped_grpo_adapters_are_their_warm_start_moved_by_rl(tiny_games, name):
    """data/grpo (``--adapter grpo``, from the first warm start) and the scale run's update 80
    (``--adapter grpo_scale``, from the default one): their warm start's LoRA shape, every layer moved but not
    far, and still valid, admissible tool calls on a game they never saw."""
    from safetensors.torch import load_file

    from alfrl.agent.models import load_policy
    from alfrl.base.paths import EPOCH_WARM_START_DIR, GRPO_DIR, SCALE_GRPO_DIR, WARM_START_DIR
    from alfrl.rl.rollout import RolloutConfig, rollout_group

    folder, start = {"grpo": (GRPO_DIR, WARM_START_DIR), "grpo_scale": (SCALE_GRPO_DIR, EPOCH_WARM_START_DIR)}[name]
    _check_shipped(name, folder)
    if not (start / "adapter_model.safetensors").is_file():
        pytest.skip(f"{start.name}'s weights are out of git; rebuild them as its README.md says to compare")
    warm, rl = (load_file(d / "adapter_model.safetensors") for d in (start, folder))
    assert warm.keys() == rl.keys() and all(warm[k].shape == rl[k].shape for k in warm)
    moved = [float((rl[k].float() - warm[k].float()).norm() / warm[k].float().norm()) for k in warm if "lora_B" in k]
    assert min(moved) > 0 and max(moved) < 1  # RL moved every layer, and not far
    policy = load_policy(lora=name)
    game = next(g for g in tiny_games.games("valid_unseen") if g.task_type == "pick_and_place_simple")
    (t,) = rollout_group(policy, game, RolloutConfig(k=1, max_steps=1, max_new_tokens=48, temperature=0.0,
                                                     workers=0, draft_tokens=8))
    assert len(t.turns) == 1 and t.turns[0].valid_format and t.turns[0].admissible


def test_sft_run_writes_its_adapter_metrics_and_tensorboard_log(tiny_games, tmp_path):
    """python -m alfrl sft end to end on one tiny game: the adapter, one metrics line per step, and the same
    numbers in TensorBoard (--log tensorboard, the default)."""
    from alfrl.agent.models import adapter_actions
    from alfrl.base.checkpoint import read_jsonl
    from alfrl.base.tracking import read_tensorboard
    from alfrl.imitation.sft import train_sft
    out = tmp_path / "sft"
    adapter = train_sft(SFTConfig(out=str(out), data_dir=str(tiny_games.root), split=SPLIT, games=2, epochs=1,
                                  batch_size=1, lora_rank=4, lora_alpha=8, milestones="1", actions="first"),
                        progress=False)
    assert (adapter / "adapter_config.json").is_file()
    # trained in the "first" protocol, the adapter says so; the milestone copy after 1 walkthrough stays
    assert adapter_actions(adapter) == "first"
    assert adapter_actions(out / "milestones/walkthroughs_00001") == "first"
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    logged = read_tensorboard(out)
    assert logged["loss"] == [(m["step"], pytest.approx(m["loss"], rel=1e-6)) for m in metrics]
    assert {"tokens", "grad_norm", "epoch"} <= set(logged)


def test_an_interrupted_fine_tune_resumes_to_the_same_adapter_and_metrics(policy, tmp_path, monkeypatch):
    """fit with checkpoints every 2 steps, killed in step 4 of 4, then resumed from step 2's checkpoint
    (its adapter loaded into a fresh copy, as ``--resume`` does): the same LoRA weights and the same
    metric lines, one per step, as the run that was never interrupted. The interrupted run renders its
    examples batch by batch (``render``, as ``python -m alfrl sft`` renders its walkthroughs), in the same order
    as the whole run's ready-made ones, and the resumed run renders only the steps it has left."""
    from types import SimpleNamespace

    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    import alfrl.imitation.sft as sft
    from alfrl.base.checkpoint import latest_checkpoint, read_jsonl

    g = torch.Generator().manual_seed(1)
    examples = [SimpleNamespace(tokens=torch.randint(100, 5000, (24,), generator=g).tolist(), mask=[0] * 16 + [1] * 8)
                for _ in range(4)]
    config = SFTConfig(epochs=2, batch_size=2, lr=1e-3, seed=3)  # 2 steps an epoch, another order each epoch

    rendered = []

    def render(batch):  # indices -> examples, when their step comes
        rendered.append(list(batch))
        return [examples[i] for i in batch]

    def run(model, folder, fail_at=None, lazy=False):
        calls = []
        real = sft.nll_loss

        def failing(*args, **kwargs):
            calls.append(1)
            if len(calls) == fail_at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(sft, "nll_loss", failing)
        return sft.fit(model, list(range(len(examples))) if lazy else examples, config, folder / "metrics.jsonl",
                       progress=False, checkpoint_dir=folder, checkpoint_every=2, render=render if lazy else None)

    whole, cut = copy.deepcopy(policy), copy.deepcopy(policy)
    (tmp_path / "whole").mkdir(), (tmp_path / "cut").mkdir()
    assert run(whole, tmp_path / "whole") == 4
    with pytest.raises(KeyboardInterrupt):
        run(cut, tmp_path / "cut", fail_at=4, lazy=True)
    assert len(rendered) == 4 and sorted(rendered[0] + rendered[1]) == sorted(rendered[2] + rendered[3]) == [0, 1, 2, 3]
    last = latest_checkpoint(tmp_path / "cut")
    assert last.name == "step_00002" and len(read_jsonl(tmp_path / "cut" / "metrics.jsonl")) == 3
    resumed = copy.deepcopy(policy)
    set_peft_model_state_dict(resumed.model, load_file(last / "adapter" / "adapter_model.safetensors"))
    del rendered[:]
    assert run(resumed, tmp_path / "cut", lazy=True) == 4
    assert len(rendered) == 2  # steps 3 and 4 only: the checkpoint's steps are skipped without rendering them
    a, b = read_jsonl(tmp_path / "whole" / "metrics.jsonl"), read_jsonl(tmp_path / "cut" / "metrics.jsonl")
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    assert [m["loss"] for m in b] == pytest.approx([m["loss"] for m in a], rel=1e-6)
    trained = {n: p for n, p in whole.model.named_parameters() if p.requires_grad}
    for name, p in resumed.model.named_parameters():
        if p.requires_grad:
            assert torch.allclose(p, trained[name], atol=1e-7), name


def test_sequences_alone_give_the_padded_micro_batchs_loss_and_gradient(policy):
    """--micro-batch-tokens 1 (each sequence in its own pass, faster on a CPU: benchmarks/sft_padding.py)
    against 4096 (the two sequences padded into one pass): the same loss and LoRA gradient in float32,
    within rel 1e-5 for the loss and 1e-4 for the gradient (the same products; only the padded pass's masked
    attention and, with more than one torch thread, the split of the reductions sum them otherwise: 2e-5 on
    2 threads)."""
    from types import SimpleNamespace

    from alfrl.rl.ppo import micro_batches

    g = torch.Generator().manual_seed(2)
    examples = [SimpleNamespace(tokens=torch.randint(100, 5000, (n,), generator=g).tolist(), mask=[0] * (n - 9) + [1] * 9)
                for n in (40, 27)]
    assert [len(b) for b in micro_batches(examples, 4096)] == [2] and len(micro_batches(examples, 1)) == 2
    model = copy.deepcopy(policy).model
    grads, losses = [], []
    for size in (4096, 1):
        model.zero_grad(set_to_none=True)
        loss, tokens = nll_loss(model, examples, size)
        assert tokens == 18
        losses.append(loss)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert float((grads[1] - grads[0]).norm() / grads[0].norm()) < 1e-4


def test_milestones_are_the_steps_that_reach_each_count():
    from alfrl.imitation.sft import milestone_steps
    assert milestone_steps("1000,2000, 3000", 4, 3000) == {250: 1000, 500: 2000, 750: 3000}
    assert milestone_steps("5", 4, 10) == {2: 5}  # step 2 is the first after which 5 were trained on
    assert milestone_steps("", 4, 10) == {}
    with pytest.raises(ValueError, match="past the 10 walkthroughs"):
        milestone_steps("20", 4, 10)
    with pytest.raises(ValueError, match="fall in the same step"):
        milestone_steps("1,2", 4, 10)


def test_sft_games_join_a_second_folder_in_one_seeded_order(tiny_games, tmp_path):
    import shutil

    from alfrl.imitation.sft import sft_games
    from alfrl.world.games import load_games
    root = tiny_games.root
    one = SFTConfig(data_dir=str(root), split=SPLIT, games=3, seed=5)
    assert [g.game_id for g in sft_games(one)] == [g.game_id for g in load_games(SPLIT, root, seed=5, limit=3)]
    with pytest.raises(ValueError, match="are in --data-dir too"):
        sft_games(SFTConfig(data_dir=str(root), more_data_dir=str(root), split=SPLIT))
    # half the games in each of two folders: the same games, the same order, as all in one
    games = load_games(SPLIT, root)
    for i, g in enumerate(games):
        dst = tmp_path / ("a" if i % 2 else "b") / SPLIT / g.game_id
        shutil.copytree(Path(g.path).parent, dst)
    both = SFTConfig(data_dir=str(tmp_path / "a"), more_data_dir=str(tmp_path / "b"), split=SPLIT, games=99, seed=5)
    assert [g.game_id for g in sft_games(both)] == [g.game_id for g in load_games(SPLIT, root, seed=5)]
