"""alfrl.imitation.dpo and alfrl.imitation.rft: preference pairs by hand, the DPO update's gradient against autograd of the
DPO loss on the real model, RFT's step against the NLL by hand, and both algorithms in real training runs."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from alfrl.imitation.dpo import FrozenAdapter, Pair, dpo_loss, dpo_update, dpo_weights, preference_pairs
from alfrl.imitation.rft import rft_step, winners
from alfrl.rl.logprobs import sequence_logprobs
from alfrl.rl.ppo import PPOConfig
from alfrl.rl.trajectory import Trajectory
from alfrl.training.train import REFERENCE_FILE, TrainConfig, check_config, learn, train

from script_loader import load_script
from test_advantage import traj
from test_train import expert_vs_junk, tiny  # noqa: F401 (a fixture)


def test_pairs_best_with_worst_while_the_margin_holds():
    group = [replace(traj(False, 0), branch=b) for b in range(5)]
    pairs = preference_pairs(group, [0.0, 1.0, -0.1, 0.9, 0.6], margin=0.5)
    assert [(p.chosen.branch, p.rejected.branch) for p in pairs] == [(1, 2), (3, 0)]  # 0.6 - 0.6 has no room
    assert preference_pairs(group[:4], [1.0, 0.8, 0.7, 0.6], margin=0.5) == []
    assert len(preference_pairs(group[:4], [1.0, 0.8, 0.7, 0.6], margin=0.1)) == 2
    with pytest.raises(ValueError, match="one game"):
        preference_pairs([traj(True, 0), traj(False, 0, game="other")], [1.0, 0.0])


def test_dpo_weights_are_the_gradient_of_the_dpo_loss():
    chosen, rejected, other = traj(True, 0), traj(False, 1), traj(False, 2)
    pairs = [Pair(chosen, rejected), Pair(other, rejected)]
    policy = {id(chosen): -3.0, id(rejected): -5.0, id(other): -4.0}
    reference = {id(chosen): -3.5, id(rejected): -4.0, id(other): -4.2}
    loss, grads, accuracy = dpo_weights(pairs, policy, reference, beta=0.5)
    s = torch.tensor([-3.0, -5.0, -4.0], requires_grad=True)  # chosen, rejected, other
    ref = torch.tensor([-3.5, -4.0, -4.2])
    want = dpo_loss(s[[0, 2]], s[[1, 1]], ref[[0, 2]], ref[[1, 1]], beta=0.5)
    want.backward()
    assert loss == pytest.approx(want.item())
    assert [grads[id(t)] for t in (chosen, rejected, other)] == pytest.approx(s.grad.tolist())
    # by hand: z1 = 0.5 * (0.5 - (-1)) = 0.75, z2 = 0.5 * (0.2 + 1) = 0.6; both ranked right
    assert loss == pytest.approx((math.log1p(math.exp(-0.75)) + math.log1p(math.exp(-0.6))) / 2)
    assert accuracy == 1.0
    assert dpo_weights([Pair(chosen, rejected)], {id(chosen): 0.0, id(rejected): 0.0},
                       {id(chosen): 0.0, id(rejected): 0.0}, 0.1)[0] == pytest.approx(math.log(2))


def _token_trajectory(tokens: list[int], mask: list[int], branch: int) -> Trajectory:
    t = traj(False, 0, mask=tuple(mask))
    return replace(t, tokens=tokens, branch=branch)


def _perturb(model, seed: int, scale: float = 0.02) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * scale)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_dpo_update_takes_the_dpo_gradient_on_the_real_model(policy, share_prefix):
    """dpo_update's step (PPO at ratio 1 with DPO's weights as advantages) has the gradient of the DPO loss
    computed directly by autograd through the model, against a reference adapter swapped in and out."""
    model = copy.deepcopy(policy.model)
    _perturb(model, 1)
    reference = FrozenAdapter(model)  # the perturbed weights: the run's start
    _perturb(model, 2)  # the policy has moved since
    trained = {n: p.detach().clone() for n, p in reference.trainable().items()}
    prompt = list(range(100, 140))  # 40 tokens every branch shares (enough for the shared prefix)
    rows = [([7, 8, 9, 10, 11], [1, 1, 1, 0, 1]), ([12, 13, 14], [1, 1, 1]), ([7, 8, 20, 21], [1, 1, 0, 1]),
            ([30, 31, 32, 33, 34, 35], [1, 0, 1, 1, 1, 1])]
    group = [_token_trajectory(prompt + r, [0] * len(prompt) + m, b) for b, (r, m) in enumerate(rows)]
    pairs = preference_pairs(group, [1.0, -0.2, 0.9, 0.0])  # (0, 1) and (2, 3)
    config = PPOConfig(temperature=0.7, share_prefix=share_prefix, max_grad_norm=0.0)

    def summed(trajectories):
        logp = sequence_logprobs(model, [t.tokens for t in trajectories], 0.7, masks=[t.mask for t in trajectories])
        return logp.sum(1)  # 0 off the mask: the sum over each trajectory's sampled tokens

    with torch.no_grad(), reference.active():  # (before the graph: the swap writes the weights in place)
        ref = summed([p.chosen for p in pairs] + [p.rejected for p in pairs])
    model.zero_grad()
    s = summed([p.chosen for p in pairs] + [p.rejected for p in pairs])
    assert {n: p for n, p in reference.trainable().items()}.keys() == trained.keys()
    assert all(torch.equal(p, trained[n]) for n, p in reference.trainable().items())  # swapped back
    want = dpo_loss(s[:2], s[2:], ref[:2], ref[2:], beta=0.3)
    want.backward()
    expected = {n: p.grad.clone() for n, p in reference.trainable().items()}
    assert any(float(g.abs().sum()) > 0 for g in expected.values())

    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    holder = replace(policy, model=model)
    metrics = dpo_update(holder, optimizer, pairs, reference, config, beta=0.3)
    assert metrics["dpo_loss"] == pytest.approx(want.item(), rel=1e-5)
    assert metrics["pairs"] == 2 and metrics["trajectories_trained"] == 4
    scale = max(float(g.abs().max()) for g in expected.values())
    for name, p in reference.trainable().items():  # equal up to float32 summation order (other batching)
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-4 * scale)


def test_rft_keeps_the_winners_and_takes_the_nll_step(policy):
    group = [traj(True, 0), traj(False, 1), replace(traj(True, 1), branch=2)]
    assert winners([group, [traj(False, 0)]]) == [group[0], group[2]]
    model = copy.deepcopy(policy.model)
    _perturb(model, 3)
    chosen = [_token_trajectory(list(range(50, 60)), [0] * 6 + [1, 1, 0, 1], 0),
              _token_trajectory(list(range(70, 76)), [0, 0, 1, 1, 1, 1], 1)]
    logp = sequence_logprobs(model, [t.tokens for t in chosen], masks=[t.mask for t in chosen])
    want = -logp.sum() / 7  # the token mean over the 7 sampled tokens (logp is 0 off the mask)
    model.zero_grad()
    want.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    holder = replace(policy, model=model)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    metrics = rft_step(holder, optimizer, chosen, max_grad_norm=0.0)
    assert metrics["loss"] == pytest.approx(want.item(), rel=1e-5) and metrics["tokens_trained"] == 7
    scale = max(float(g.abs().max()) for g in expected.values())
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-4 * scale)
    with pytest.raises(ValueError, match="winning"):
        rft_step(holder, optimizer, [])


def test_algo_flags_are_checked():
    with pytest.raises(ValueError, match="--algo must be grpo, rft or dpo"):
        check_config(TrainConfig(algo="ppo"))
    with pytest.raises(ValueError, match="--dpo-beta must be above 0"):
        check_config(TrainConfig(algo="dpo", dpo_beta=0.0))
    with pytest.raises(ValueError, match="--keep-groups progress .* --subgoal-reward"):
        check_config(TrainConfig(keep_groups="progress"))


def test_dpo_trains_and_resumes_from_its_reference(tmp_path, tiny_games, expert_vs_junk):
    """A real run (the expert plays branch 0 of each group, junk the other: rewards 0 and -0.1 in two
    steps, a pair with margin 0.05), interrupted after update 1: DPO starts at loss log 2 (policy =
    reference) and saves the starting adapter; the resumed update 2 reads that reference back (not the
    checkpoint it resumes from), so its loss is no longer log 2 and its reference is the run's start."""
    from alfrl.training.train import load_for_training

    config = tiny(tmp_path, tiny_games, algo="dpo", pair_margin=0.05)

    def stop_after_first(history):
        if len(history) == 1:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train(config, progress=False, on_update=stop_after_first)
    run = tmp_path / "run"
    resumed = train(resume=run, progress=False)
    assert [m["pairs"] for m in resumed] == [1, 1] and [m["optimizer_steps"] for m in resumed] == [1, 1]
    first, second = resumed
    assert first["dpo_loss"] == pytest.approx(math.log(2), abs=1e-6) and first["loss"] == first["dpo_loss"]
    assert second["dpo_loss"] != pytest.approx(math.log(2), abs=1e-6)  # the policy moved from the reference
    saved = torch.load(run / REFERENCE_FILE)
    start = {n: p for n, p in load_for_training(config).model.named_parameters() if p.requires_grad}
    assert saved.keys() == start.keys() and all(torch.equal(saved[n], start[n]) for n in saved)


def test_learn_dispatches_on_the_algorithm(policy, tmp_path):
    """train.learn: RFT steps on the winners only; DPO on the pairs; GRPO on the spread groups; a batch with
    nothing to learn from takes no step."""
    model = copy.deepcopy(policy.model)
    holder = replace(policy, model=model)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    rows = [_token_trajectory(list(range(50, 60)), [0] * 6 + [1, 1, 0, 1], b) for b in range(3)]
    group = [replace(rows[0], won=True), replace(rows[1], invalid=2), rows[2]]
    for algo, trained in (("rft", 1), ("dpo", 2), ("grpo", 3)):
        config = TrainConfig(algo=algo, k=3)
        metrics, steps = learn(holder, optimizer, config, config.ppo(), [copy.deepcopy(group)], 1, tmp_path)
        assert steps == 1 and metrics["trajectories_trained"] == trained, algo
        metrics, steps = learn(holder, optimizer, config, config.ppo(), [[rows[2], rows[2]]], 1, tmp_path)
        assert steps == 0 and metrics["loss"] is None, algo


def test_notebook_07_by_hand_equals_the_package():
    """Notebook 07's pairs and DPO loss, written out for the learner, are alfrl.imitation.dpo's."""
    from test_notebooks import notebook_definitions

    pairs_by_hand = notebook_definitions("07_beyond_grpo.ipynb", "pairs_by_hand")["pairs_by_hand"]
    dpo_loss_by_hand = notebook_definitions("07_beyond_grpo.ipynb", "dpo_loss_by_hand")["dpo_loss_by_hand"]
    group = [replace(traj(False, 0), branch=b) for b in range(6)]
    for rewards in ([0.0, 1.0, -0.1, 0.9, 0.6, 1.0], [1.0, 0.8, 0.7, 0.6, 0.9, 0.2], [0.0] * 6):
        for margin in (0.05, 0.5):
            package = [(p.chosen.branch, p.rejected.branch) for p in preference_pairs(group, rewards, margin)]
            assert pairs_by_hand(rewards, margin) == package, (rewards, margin)
    for values in ((-3.0, -5.0, -3.5, -4.0), (-40.0, -10.0, -20.0, -30.0), (0.0, 0.0, 0.0, 0.0)):
        want = dpo_loss(*(torch.tensor([v]) for v in values), beta=0.1).item()
        assert dpo_loss_by_hand(*values, beta=0.1) == pytest.approx(want, rel=1e-6)


def replay_script():
    """scripts/replay_training.py as a module."""
    return load_script("replay_training")


def test_replay_counts_the_subgoals_of_episodes_recorded_without_them():
    """scripts/replay_training.py with --set subgoal_reward=...: episodes from before subgoals were counted get
    them by replaying their actions on the config's games; a win reached every subgoal; counted ones stay."""
    from alfrl.base.paths import REPO_ROOT
    from alfrl.training.train import preset, training_games

    script = replay_script()
    updates = script.updates_of(REPO_ROOT / "data/results/cpu_12updates_seed0_trajectories.jsonl.xz", 8)
    episodes = [t for group in updates[1] for t in group]
    assert all(t.subgoals_total == 0 for t in episodes) and any(t.won for t in episodes)
    games = {g.game_id: g.path for g in training_games(preset("cpu"))}
    episodes[0].subgoals, episodes[0].subgoals_total = 9, 9  # already counted: left alone
    assert script.count_subgoals(episodes, games) == len(episodes) - 1
    assert (episodes[0].subgoals, episodes[0].subgoals_total) == (9, 9)
    rest = episodes[1:]
    assert all(t.subgoals_total >= 2 for t in rest)  # every task has a take and a place (or lamp) at least
    assert all(t.subgoals == t.subgoals_total for t in rest if t.won)
    assert any(t.subgoals < t.subgoals_total for t in rest if not t.won)
    with pytest.raises(KeyError, match="not among the config's training games"):
        script.count_subgoals([replace(rest[0], subgoals_total=0)], {})


def test_a_replay_takes_the_cpu_presets_settings_or_a_runs_own(tmp_path):
    """Without --from-run a replay starts from the first warm start with the cpu preset's settings, as the
    committed cpu runs did; with it, from the run's own config.json (the scale run: the default warm start, its
    rooms). --set and the replay's own algo, folder and K go on top either way."""
    from alfrl.agent.models import WARM_START
    from alfrl.base.paths import REPO_ROOT
    from alfrl.training.train import preset, saved_config

    script = replay_script()
    out = tmp_path / "replay"
    cpu = script.replay_config("dpo", out, 8, None, ["dpo_beta=0.2"])
    assert cpu == replace(preset("cpu"), init_adapter=WARM_START, algo="dpo", run_dir=str(out), dpo_beta=0.2)
    run = REPO_ROOT / "data/scale/grpo"
    scale = script.replay_config("rft", out, 8, str(run), ["lr=3e-5", "algo=dpo"])
    assert scale == replace(saved_config(run), algo="rft", run_dir=str(out), lr=3e-5)
    assert (scale.init_adapter, scale.data_dir, scale.max_steps) == ("warmstart_epoch", "data/rl_rooms", 10)


def test_the_scale_runs_first_ten_updates_are_kept_whole_for_replay():
    """data/scale/grpo/trajectories_u01-10.jsonl.xz, the input of the replays at equal episodes, holds every
    group the GRPO arm played in updates 1-10, in the order it played them, and the groups that teach under the
    run's own settings are exactly the episodes it trained on."""
    import json

    from alfrl.base.paths import REPO_ROOT
    from alfrl.training.train import saved_config, teaches

    run = REPO_ROOT / "data/scale/grpo"
    updates = replay_script().updates_of(run / "trajectories_u01-10.jsonl.xz", 8)
    metrics = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    config = saved_config(run)
    assert sorted(updates) == list(range(1, 11))
    for step, groups in updates.items():
        assert [g[0].game_id for g in groups] == metrics[step]["games"]
        assert all({t.game_id for t in g} == {g[0].game_id} and [t.branch for t in g] == list(range(8)) for g in groups)
        assert sum(len(g) for g in groups if teaches(g, config)) == metrics[step]["trajectories_trained"]


def test_a_stopped_replay_resumes_to_the_same_adapter_and_metrics(tmp_path, monkeypatch):
    """scripts/replay_training.py checkpoints after every update: stopped before its second update and run again
    with --resume, a replay (RFT on two real groups of the committed cpu run, one winner each) ends with the same
    adapter, bit for bit, and the same metrics as one that ran unbroken. --resume refuses other settings, and a
    new replay refuses a folder that exists."""
    import json
    import lzma
    import sys

    from safetensors.torch import load_file

    from alfrl.base.paths import REPO_ROOT

    rows = {}
    with lzma.open(REPO_ROOT / "data/results/cpu_12updates_seed0_trajectories.jsonl.xz", "rt") as f:
        for line in f:
            rows.setdefault(json.loads(line)["step"], []).append(line)
    episodes = tmp_path / "two_groups.jsonl"  # each update's third group: one winner, the shortest to train on
    episodes.write_text("".join(rows[1][16:24] + rows[2][16:24]))
    script = replay_script()
    # the committed run started from the first warm start, whose weights are out of git: any start resumes the same
    monkeypatch.setattr(script, "WARM_START", "warmstart_epoch")

    def replay(out, *extra):
        monkeypatch.setattr(sys, "argv", ["replay_training.py", str(episodes), "--algo", "rft", "--out", str(out),
                                          *extra])
        script.main()

    def metrics(out):
        return [{k: v for k, v in m.items() if not k.endswith("_seconds")}
                for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]

    replay(tmp_path / "unbroken")
    learn, calls = script.learn, []

    def stop_at_the_second_update(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return learn(*args, **kwargs)

    monkeypatch.setattr(script, "learn", stop_at_the_second_update)
    with pytest.raises(KeyboardInterrupt):
        replay(tmp_path / "stopped")
    monkeypatch.setattr(script, "learn", learn)
    stopped = tmp_path / "stopped"
    assert not (stopped / "adapter").exists() and len(metrics(stopped)) == 1
    with pytest.raises(SystemExit, match="already exists: add --resume"):
        replay(stopped)
    with pytest.raises(SystemExit, match="other settings \\(lr\\)"):
        replay(stopped, "--resume", "--set", "lr=1e-3")
    replay(stopped, "--resume")
    assert metrics(stopped) == metrics(tmp_path / "unbroken") and [m["step"] for m in metrics(stopped)] == [1, 2]
    assert all(m["optimizer_steps"] == 1 for m in metrics(stopped))
    ours, theirs = (load_file(out / "adapter/adapter_model.safetensors") for out in (stopped, tmp_path / "unbroken"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    replay(stopped, "--resume")  # a finished replay: nothing trained again, nothing changed
    assert metrics(stopped) == metrics(tmp_path / "unbroken")
