"""alfrl.rl.context and the action-list protocols: a 50-step game of the largest official room fits the default
context; a recorded episode renders exactly as the real engine plays it; budgets never pass the model's window;
an adapter carries the protocol it was trained in."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from alfrl.agent import models
from alfrl.agent.models import fit_context
from alfrl.agent.protocol import DEFAULT_ACTIONS, ChatFormat
from alfrl.rl.context import load_episodes, record_episode, render, turn_ends
from alfrl.rl.rollout import RolloutConfig, rollout_group
from alfrl.rl.scripted import ScriptedSession, tool_call
from alfrl.world.env import GroupEnv

FIXTURE = Path(__file__).parent / "fixtures/largest_official_50steps.jsonl.xz"
WINDOW = 8192  # SmolLM2-135M's max_position_embeddings


@pytest.fixture(scope="module")
def tokenizer():
    from alfrl.agent.models import load_tokenizer
    return load_tokenizer()


@pytest.fixture(scope="module")
def largest():
    """ALFWorld's official valid_seen game with the most receptacles, its expert walkthrough padded to 50
    steps with search moves, as played in the real engine (``benchmarks/context_budget.py --fixture``)."""
    (episode,) = load_episodes(FIXTURE)
    return episode


def test_the_fixture_is_a_whole_50_step_game_of_a_large_room(largest):
    # its expert searches 54 receptacles drawer by drawer: 50 steps are all walkthrough, not yet the win
    assert len(largest.steps) == 50 and not largest.won
    assert largest.receptacles == 54
    assert all(s.admissible for s in largest.steps)
    assert max(len(s.admissible_commands) for s in largest.steps) >= 45


def test_a_50_step_game_of_the_largest_official_room_fits_the_first_protocol(tokenizer, largest):
    t = render(tokenizer, largest, "first")
    assert t.steps == 50 and t.end_reason == "max_steps"
    assert len(t.tokens) <= WINDOW - 1000  # with room to spare for longer replies than the expert's
    every = render(tokenizer, largest, "every")
    assert len(every.tokens) > WINDOW  # the list in every result does not fit: why long games play "first"
    assert turn_ends(every)[-1] == len(every.tokens)


def test_the_default_budget_cuts_the_old_protocol_where_the_window_ends(tokenizer, largest):
    cut = render(tokenizer, largest, "every", max_tokens=WINDOW)
    assert cut.end_reason == "max_tokens" and len(cut.tokens) <= WINDOW and cut.steps < 50


def test_a_recorded_episode_renders_as_the_real_engine_plays_it(tiny_games, tokenizer):
    game = min(tiny_games.games("valid_seen"), key=lambda g: len(g.walkthrough))
    steps = len(game.walkthrough) + 4  # four search moves, then the walkthrough
    episode = record_episode(game, steps=steps)
    assert episode.won and len(episode.steps) == steps
    assert [s.action for s in episode.steps[4:]] == list(game.walkthrough)
    assert episode.steps[0].action.startswith("go to ")
    for actions in ("every", "first"):
        recorded = render(tokenizer, episode, actions)
        fmt = ChatFormat(tokenizer, actions=actions)
        config = RolloutConfig(k=1, max_steps=steps, max_trajectory_tokens=10**6, max_new_tokens=10_000,
                               workers=0, actions=actions)
        session = ScriptedSession(fmt, {0: [tool_call(s.action) for s in episode.steps]})
        with GroupEnv(k=1, max_steps=steps, workers=0) as env:
            (real,) = rollout_group(SimpleNamespace(tokenizer=tokenizer), game, config, env=env, fmt=fmt,
                                    session=session)
        assert recorded.tokens == real.tokens and recorded.mask == real.mask


def test_the_trajectory_budget_never_passes_the_models_window(capsys, monkeypatch):
    monkeypatch.setattr(models, "_SAID", set())  # the note is said once a process: say it here
    policy = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=WINDOW)))
    config = RolloutConfig(max_trajectory_tokens=12000)
    fitted = fit_context(config, policy)
    assert fitted.max_trajectory_tokens == WINDOW and config.max_trajectory_tokens == 12000
    assert "more than this model's context window (8192 positions)" in capsys.readouterr().err
    assert fit_context(replace(config, max_trajectory_tokens=4000), policy).max_trajectory_tokens == 4000
    assert fit_context(config, SimpleNamespace()).max_trajectory_tokens == 12000  # unknown window: as asked


def test_an_adapter_carries_its_protocol(tmp_path, policy):
    from alfrl.agent.models import LoraSpec, adapter_actions, load_policy, save_adapter
    from alfrl.base.paths import REPO_ROOT
    assert adapter_actions(REPO_ROOT / "data/warmstart_epoch") == "every"  # saved before adapters recorded it
    fresh = load_policy(lora=LoraSpec(rank=2, alpha=4))
    assert fresh.actions == DEFAULT_ACTIONS == "every"  # until trained in another protocol
    save_adapter(fresh, tmp_path / "every")
    assert adapter_actions(tmp_path / "every") == "every"
    fresh.actions = "first"  # what sft --actions first sets before it trains
    save_adapter(fresh, tmp_path / "a")
    assert json.loads((tmp_path / "a/alfrl_protocol.json").read_text()) == {"actions": "first"}
    assert load_policy(lora=str(tmp_path / "a")).actions == "first"
    (tmp_path / "a/alfrl_protocol.json").write_text('{"actions": "most"}')
    with pytest.raises(ValueError, match="alfrl_protocol.json is damaged"):
        adapter_actions(tmp_path / "a")


def test_an_unknown_protocol_fails_before_anything_is_written(tmp_path):
    from alfrl.eval.evaluate import EvalConfig
    from alfrl.imitation.sft import SFTConfig, train_sft
    from alfrl.training.train_config import TrainConfig, check_config
    with pytest.raises(ValueError, match="--actions must be one of every, first, local, auto"):
        EvalConfig(actions="most", out=str(tmp_path / "eval")).check()
    with pytest.raises(ValueError, match="--actions must be one of"):
        check_config(TrainConfig(actions="most"))
    with pytest.raises(ValueError, match="--actions must be one of"):
        train_sft(SFTConfig(actions="most", out=str(tmp_path / "sft")), progress=False)
    assert not any(tmp_path.iterdir())
