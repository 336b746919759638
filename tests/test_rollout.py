"""alfrl.rl.rollout: groups played through the real game, with a scripted sampler (logic) and the real
small model (masks, logprobs, prompts, determinism)."""

from __future__ import annotations

import json

import pytest
import torch

from alfrl.agent.protocol import COMPLETED, EXECUTED, ChatFormat
from alfrl.rl.rollout import (RolloutConfig, load_trajectories, rollout_batch, rollout_games, rollout_group,
                              save_trajectories)
from alfrl.rl.scripted import ScriptedSession, expert_replies, tool_call as call
from alfrl.world.env import NOTHING_HAPPENS

SPLIT = "valid_seen"
PICK = "pick_and_place_simple"


@pytest.fixture(scope="module")
def game(tiny_games):
    return next(g for g in tiny_games.games(SPLIT) if g.task_type == PICK)


def scripted(monkeypatch, policy, scripts) -> list[ScriptedSession]:
    """Make every group play ``scripts`` (a logic test; the real model is tested below); returns the
    sessions made, one per group."""
    sessions = []

    def make(*args, **kwargs):
        sessions.append(ScriptedSession(ChatFormat(policy.tokenizer), scripts))
        return sessions[-1]
    monkeypatch.setattr("alfrl.rl.rollout.new_group_session", make)
    return sessions


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_scripted_group_wins_counts_invalid_and_never_moves_on_invalid(monkeypatch, policy, game):
    walk = [a for a in game.walkthrough]
    scripts = {
        0: expert_replies(game),                                        # the expert: wins
        1: ["I will look around.", call("fly to the moon"), call("Look  ")] + [call(a) for a in walk[1:]],
        2: [call("look"), "<tool_call>{bad json</tool_call>"] * 10,     # never wins
    }
    sessions = scripted(monkeypatch, policy, scripts)
    config = RolloutConfig(k=3, max_steps=len(walk) + 2, workers=0)
    t0, t1, t2 = rollout_group(policy, game, config)
    fmt = ChatFormat(policy.tokenizer)
    tok = policy.tokenizer

    assert (t0.won, t0.end_reason, t0.steps, t0.invalid) == (True, "won", len(walk), 0)
    assert t0.turns[-1].observation and all(turn.admissible for turn in t0.turns)
    # branch 1: no call, then an action not in the list, then "Look  " (canonical: look), then the walkthrough
    assert [turn.valid_format for turn in t1.turns[:3]] == [False, True, True]
    assert [turn.admissible for turn in t1.turns[:3]] == [False, False, True]
    assert t1.turns[0].reason.startswith("Invalid tool-call format: no tool call")
    assert t1.turns[1].reason == "Action not admissible: 'fly to the moon' is not in the list of available actions."
    assert t1.turns[0].observation == t1.turns[1].observation == NOTHING_HAPPENS
    assert t1.turns[2].observation == t0.turns[0].observation  # the invalid replies did not move the game
    assert (t1.won, t1.invalid, t1.steps) == (True, 2, len(walk) + 2)
    assert (t2.won, t2.end_reason, t2.steps, t2.invalid) == (False, "max_steps", config.max_steps,
                                                             config.max_steps // 2)
    assert sessions[0].calls[0] == [0, 1, 2] and sessions[0].calls[len(walk)] == [1, 2]  # branch 0 left after winning

    for t in (t0, t1, t2):
        assert len(t.tokens) == len(t.mask) == len(t.logprobs)
        assert t.tokens[:t.prompt_tokens] == fmt.initial_prompt(game.goal, *first_observation(game))
        runs = mask_runs(t.mask)
        assert [b - a for a, b in runs] == [turn.sampled for turn in t.turns] and sum(t.mask) == t.sampled
        for (a, b), turn in zip(runs, t.turns):
            assert tok.decode(t.tokens[a:b], skip_special_tokens=True) == turn.reply
            assert t.logprobs[a:b] == [0.0] * (b - a)
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.mask) if not m)
        assert t.tokens[-1] == tok.eos_token_id  # every trajectory ends on its last reply
    text = tok.decode(t1.tokens)
    assert "Action not admissible: 'fly to the moon'" in text and EXECUTED in text
    assert COMPLETED not in tok.decode(t0.tokens)  # the result of the winning action is never shown


def first_observation(game):
    from alfrl.world.env import GroupEnv
    with GroupEnv(k=1, workers=0) as env:
        start = env.reset(game)
    return start.observation, start.admissible_commands


def test_token_budget_ends_cleanly_on_a_reply(monkeypatch, policy, game):
    long = "Let me think about it. " * 30 + call("look")
    scripted(monkeypatch, policy, {0: [call("look"), long, call("look")]})
    fmt = ChatFormat(policy.tokenizer)
    first = len(fmt.initial_prompt(game.goal, *first_observation(game)))
    budget = first + 150  # room for the first reply and its tool result, not for the long second reply
    (t,) = rollout_group(policy, game, RolloutConfig(k=1, workers=0, max_trajectory_tokens=budget))
    assert t.end_reason == "max_tokens" and len(t.tokens) <= budget
    assert t.steps == 2 and t.turns[1].stopped_on == "budget" and t.turns[1].action is None
    assert len(t.tokens) == len(t.mask) == len(t.logprobs) and t.mask[-1] == 1


def test_trajectories_round_trip_through_jsonl(monkeypatch, policy, game, tmp_path):
    scripted(monkeypatch, policy, {0: [call(a) for a in game.walkthrough], 1: ["no"] * 3})
    trajectories = rollout_group(policy, game, RolloutConfig(k=2, max_steps=3, workers=0))
    trajectories[0].reward, trajectories[0].advantage = 1.0, 0.65
    path = save_trajectories(trajectories, tmp_path / "t.jsonl")
    assert load_trajectories(path) == trajectories
    assert json.loads(path.read_text().splitlines()[1])["turns"][0]["reply"] == "no"


def test_real_model_group_masks_logprobs_and_determinism(policy, game):
    """The real small model on a real game: the mask covers exactly the sampled tokens, the old
    logprobs are what a fresh forward pass gives, and the same seed gives the same group."""
    config = RolloutConfig(k=3, max_steps=2, max_new_tokens=24, temperature=1.0, seed=3, workers=2)
    group = rollout_group(policy, game, config)
    fmt = ChatFormat(policy.tokenizer)
    assert len({tuple(t.tokens) for t in group}) > 1  # the branches diverge
    for t in group:
        assert t.steps == 2 and t.end_reason in ("won", "max_steps")
        runs = mask_runs(t.mask)
        assert [b - a for a, b in runs] == [turn.sampled for turn in t.turns] and sum(t.mask) == t.sampled
        assert t.tokens[:t.prompt_tokens] == fmt.initial_prompt(game.goal, *first_observation(game))
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([t.tokens])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        for i, m in enumerate(t.mask):
            if m:
                assert abs(float(logp[i - 1, t.tokens[i]]) - t.logprobs[i]) < 1e-4
    again = rollout_group(policy, game, config)
    assert [t.tokens for t in again] == [t.tokens for t in group]
    other = rollout_group(policy, game, RolloutConfig(**{**config.__dict__, "seed": 4}))
    assert [t.tokens for t in other] != [t.tokens for t in group]


def test_rollout_batch_plays_one_group_per_game(monkeypatch, policy, tiny_games):
    games = tiny_games.games(SPLIT)[:2]
    scripted(monkeypatch, policy, {b: ["no"] * 10 for b in range(2)})
    groups = rollout_batch(policy, games, RolloutConfig(k=2, max_steps=2, workers=0), progress=False)
    assert [[t.game_id for t in g] for g in groups] == [[g.game_id] * 2 for g in games]


def test_rollout_games_plays_each_game_as_a_one_branch_group(monkeypatch, policy, tiny_games):
    """One trajectory per game, batched: the same records as playing each game alone with k=1."""
    games = [g for g in tiny_games.games(SPLIT) if g.task_type == PICK][:1] + \
        [g for g in tiny_games.games(SPLIT) if g.task_type != PICK][:1]
    config = RolloutConfig(k=1, max_steps=30, workers=0)
    scripted(monkeypatch, policy, {b: expert_replies(g) for b, g in enumerate(games)})
    together = rollout_games(policy, games, config)
    alone = []
    for g in games:
        scripted(monkeypatch, policy, {0: expert_replies(g)})
        alone += rollout_group(policy, g, config)
    assert [t.game_id for t in together] == [g.game_id for g in games]
    assert all(t.won and t.branch == 0 for t in together)
    assert [t.tokens for t in together] == [t.tokens for t in alone]
    assert [t.mask for t in together] == [t.mask for t in alone]
    assert [t.seed for t in together] == [t.seed for t in alone]


def test_rollout_games_with_the_real_model_matches_one_at_a_time(policy, tiny_games):
    games = tiny_games.games(SPLIT)[:3]
    config = RolloutConfig(k=1, max_steps=2, max_new_tokens=10, temperature=0.0, workers=0)
    together = rollout_games(policy, games, config)
    alone = [rollout_group(policy, g, config)[0] for g in games]
    assert [t.tokens for t in together] == [t.tokens for t in alone]
    for a, b in zip(together, alone):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_groups_played_together_equal_groups_played_alone(policy, tiny_games):
    """Two groups of two in one batch: each distinct first prompt is read once, and the groups are
    the ones rollout_group plays alone."""
    games = tiny_games.games(SPLIT)[:2]
    config = RolloutConfig(k=2, max_steps=2, max_new_tokens=8, temperature=1.0, seed=5, workers=0,
                           groups_per_batch=2)
    together = rollout_batch(policy, games, config, progress=False)
    alone = [rollout_group(policy, g, config) for g in games]
    assert [[t.tokens for t in g] for g in together] == [[t.tokens for t in g] for g in alone]
    assert [[t.game_id for t in g] for g in together] == [[g.game_id] * 2 for g in games]


def test_config_errors(policy, game):
    with pytest.raises(ValueError, match="k, max_steps"):
        RolloutConfig(k=0)
    with pytest.raises(ValueError, match="max_trajectory_tokens"):
        rollout_group(policy, game, RolloutConfig(k=1, workers=0, max_trajectory_tokens=50))



def test_committed_probe_trajectories_load_as_they_are():
    """load_trajectories reads a training run's trajectories (which add a "step" key) straight from the
    committed .jsonl.xz probes: every trajectory's mask marks exactly its sampled tokens."""
    from alfrl.base.paths import REPO_ROOT
    from alfrl.rl.rollout import load_trajectories

    trajectories = load_trajectories(REPO_ROOT / "data" / "results" / "cpu_T0.6_keepwin_trajectories.jsonl.xz")
    assert len(trajectories) == 64
    assert all(sum(t.mask) == t.sampled == sum(turn.sampled for turn in t.turns) for t in trajectories)
    assert sum(t.won for t in trajectories) == 5  # the README's "5 wins in 64 episodes" at T=0.6
