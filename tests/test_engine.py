"""alfrl.world.engine: FastPddlEnv says exactly what ALFWorld's standard engine says, step by step.

Both engines are wrapped alike (``AlfredDemangler`` + ``AlfredInfos``); every observation,
admissible-command list, ``won`` and ``done`` must be identical, from the intro on.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context

import pytest

from alfrl import TASK_TYPES
from alfrl.world import engine as fast_engine_module
from alfrl.world.engine import make_fast_engine
from alfrl.world.expert import make_engine
from alfrl.world.games import find_game_files, load_games, read_game

SPLIT = "valid_seen"
EXTRA = ("go to nowhere 1", "", "look", "inventory", "help", "  look  ")
"""Commands beside the walkthrough: inadmissible, empty, padded, and the always-there ones."""


def script(walkthrough, light: bool = False) -> list[str]:
    """The walkthrough with the extra commands before it, in its middle and after the win.

    ``light`` (for real games, whose standard engine is slow): in the middle only.
    """
    wt = list(walkthrough)
    mid = len(wt) // 2
    if light:
        return [*wt[:mid], *EXTRA, *wt[mid:]]
    return [*EXTRA, *wt[:mid], *EXTRA, *wt[mid:], *EXTRA]


def snap(state) -> tuple:
    return state["feedback"], list(state["admissible_commands"]), bool(state["won"])


def play(env, path, commands) -> list[tuple]:
    """Load + reset + step: the intro's snapshot, then (snapshot, score, done) per command."""
    env.load(str(path))
    state = env.reset()
    trace = [snap(state) + (state["extra.gamefile"],)]
    for command in commands:
        state, score, done = env.step(command)
        trace.append(snap(state) + (score, done))
    return trace


_STD: dict[tuple, list[tuple]] = {}


def standard_trace(path, commands) -> list[tuple]:
    """What ALFWorld's standard engine says (memoised: it is the slow side)."""
    key = (str(path), tuple(commands))
    if key not in _STD:
        _STD[key] = play(_standard(), path, commands)
    return _STD[key]


@lru_cache(maxsize=None)
def _standard():
    return make_engine()


def _standard_job(key) -> list[tuple]:
    return play(make_engine(), key[0], key[1])


def precompute(games, light: bool = False) -> None:
    """The standard engine's traces of ``games``' scripts, two processes at a time."""
    todo = [k for k in ((str(g.path), tuple(script(g.walkthrough, light))) for g in games) if k not in _STD]
    todo.sort(key=lambda k: -len(k[1]))  # longest first
    with ProcessPoolExecutor(2, mp_context=get_context("fork")) as pool:
        _STD.update(zip(todo, pool.map(_standard_job, todo)))


def standard_script_trace(g) -> list[tuple]:
    return standard_trace(g.path, script(g.walkthrough))


def assert_same(fast, standard, commands, where) -> None:
    """Step by step, so a failure names the first step that differs."""
    assert len(fast) == len(standard) == len(commands) + 1
    assert fast[0] == standard[0], f"{where}: the intro differs"
    for n, command in enumerate(commands, 1):
        assert fast[n] == standard[n], f"{where}: step {n} ({command!r}) differs"


def check_equivalent(path, walkthrough, fast=None, light: bool = False) -> list[tuple]:
    commands = script(walkthrough, light)
    fast_trace = play(fast or make_fast_engine(), path, commands)
    assert_same(fast_trace, standard_trace(path, commands), commands, path)
    won_at = len(commands) - (0 if light else len(EXTRA))  # the last walkthrough command
    assert fast_trace[won_at][2] is True and not any(t[2] for t in fast_trace[:won_at]), path
    assert all(t[2] for t in fast_trace[won_at:])  # still won after the extra commands
    return fast_trace


@pytest.fixture(scope="module")
def tiny_std(tiny_games) -> None:
    precompute(tiny_games.games(SPLIT))


@pytest.fixture(scope="module")
def real_std(real_data_dir) -> None:
    precompute(first_real_games(real_data_dir).values(), light=True)


@pytest.fixture(scope="module")
def fast():
    """One fast engine reused across games (as a GroupEnv copy is)."""
    return make_fast_engine()


def tiny_game(tiny_games, task_type, split=SPLIT):
    return next(g for g in tiny_games.games(split) if g.task_type == task_type)


@lru_cache(maxsize=None)
def first_real_games(root) -> dict:
    """The first valid_seen game of each task type, by sorted path."""
    first = {}
    for f in find_game_files(root / SPLIT):  # sorted paths
        g = read_game(f, SPLIT)
        if g is not None and g.task_type not in first:
            first[g.task_type] = g
    return first


# ---------------------------------------------------------------- equivalence

@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_tiny_game_is_equivalent(tiny_games, tiny_std, fast, task_type):
    g = tiny_game(tiny_games, task_type)
    check_equivalent(g.path, g.walkthrough, fast)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_real_game_is_equivalent(real_data_dir, real_std, fast, task_type):
    g = first_real_games(real_data_dir)[task_type]
    check_equivalent(g.path, g.walkthrough, fast, light=True)


def test_inadmissible_commands_change_nothing(tiny_games, tiny_std, fast):
    g = tiny_game(tiny_games, "pick_heat_then_place_in_recep")
    trace = check_equivalent(g.path, g.walkthrough, fast)
    intro_admissible = trace[0][1]
    for step in trace[1:3]:  # "go to nowhere 1", "": nothing happens, same choices
        assert step[:3] == ("Nothing happens.", intro_admissible, False)


def test_facts_are_equivalent(tiny_games):
    """``facts=True`` (what the handcoded expert reads) gives the same facts too."""
    g = tiny_game(tiny_games, "pick_cool_then_place_in_recep")
    envs = make_engine(facts=True), make_fast_engine(facts=True)
    states = []
    for env in envs:
        env.load(str(g.path))
        states.append([env.reset()] + [env.step(c)[0] for c in g.walkthrough])
    for n, (a, b) in enumerate(zip(*states)):
        assert sorted(map(str, b["facts"])) == sorted(map(str, a["facts"])), f"step {n}"
        assert snap(b) == snap(a)


# ---------------------------------------------------------------- the compiled-game cache

def test_second_load_is_a_cache_hit(tiny_games, tiny_std):
    g = tiny_game(tiny_games, "look_at_obj_in_light")
    env = make_fast_engine()
    first = play(env, g.path, [])
    compiled = fast_engine_module.compiled(str(g.path))
    again = play(env, g.path, [])  # same engine
    other = play(make_fast_engine(), g.path, [])  # another engine in this process
    assert fast_engine_module.compiled(str(g.path)) is compiled
    assert first == again == other == standard_script_trace(g)[:1]


def test_interleaved_games_stay_equivalent(tiny_games, tiny_std):
    """Two games played turn about in one process: the cache holds both, neither leaks into the other."""
    games = [tiny_game(tiny_games, t) for t in ("pick_clean_then_place_in_recep", "pick_two_obj_and_place")]
    engines = [make_fast_engine() for _ in games]
    scripts = [script(g.walkthrough) for g in games]
    traces = []
    for env, g in zip(engines, games):
        env.load(str(g.path))
        state = env.reset()
        traces.append([snap(state) + (state["extra.gamefile"],)])
    for env, g in zip(engines, games):  # both compiled games are in the cache, shared
        assert env.unwrapped._game is fast_engine_module.compiled(str(g.path))
    for n in range(max(map(len, scripts))):
        for env, commands, trace in zip(engines, scripts, traces):
            if n < len(commands):
                state, score, done = env.step(commands[n])
                trace.append(snap(state) + (score, done))
    for g, commands, trace in zip(games, scripts, traces):
        assert_same(trace, standard_trace(g.path, commands), commands, g.path)


def test_games_evicted_from_the_cache_play_on(tiny_games, tiny_std):
    """More games than the cache holds, interleaved: evicted games keep their compiled copy."""
    games = tiny_games.games(SPLIT)
    assert len(games) > fast_engine_module.COMPILED_CACHE_SIZE
    engines = [make_fast_engine() for _ in games]
    traces = []
    for env, g in zip(engines, games):
        env.load(str(g.path))
        traces.append([snap(env.reset())])
    assert len(fast_engine_module._COMPILED) == fast_engine_module.COMPILED_CACHE_SIZE
    assert all(c is not engines[0].unwrapped._game for c in fast_engine_module._COMPILED.values())
    scripts = [script(g.walkthrough) for g in games]
    for n in range(max(map(len, scripts))):
        for env, commands, trace in zip(engines, scripts, traces):
            if n < len(commands):
                trace.append(snap(env.step(commands[n])[0]))
    for g, trace in zip(games, traces):
        assert trace == [s[:3] for s in standard_script_trace(g)], g.path
        assert trace[-1][2] is True
    # the first game was evicted; loading it again compiles it anew and starts the same
    again = make_fast_engine()
    assert play(again, games[0].path, []) == standard_script_trace(games[0])[:1]
    assert again.unwrapped._game is not engines[0].unwrapped._game


def test_a_changed_file_is_compiled_again(tiny_games, tiny_std, tmp_path):
    """Regenerating games into the same folder (as a notebook may) must not replay the old game."""
    a, b = (tiny_game(tiny_games, t) for t in ("pick_and_place_simple", "look_at_obj_in_light"))
    path = tmp_path / "game.tw-pddl"
    shutil.copyfile(a.path, path)
    env = make_fast_engine()
    assert play(env, path, [])[0][0] == standard_script_trace(a)[0][0]
    shutil.copyfile(b.path, path)
    assert play(env, path, [])[0][0] == standard_script_trace(b)[0][0]


# ---------------------------------------------------------------- reset

def test_reset_returns_to_the_initial_state(tiny_games, tiny_std):
    g = tiny_game(tiny_games, "pick_heat_then_place_in_recep")
    env = make_fast_engine()
    env.load(str(g.path))
    first = snap(env.reset())
    taken = next(n for n, c in enumerate(g.walkthrough, 1) if c.startswith("take "))
    for command in g.walkthrough[:taken + 1]:  # far enough to carry something
        env.step(command)
    assert snap(env.reset()) == first
    assert snap(env.reset()) == first  # twice in a row, without a step in between
    for command in g.walkthrough:
        state, _, _ = env.step(command)
    assert state["won"]
    assert snap(env.reset()) == first  # after a win too
    # and the game plays on exactly like a freshly loaded standard engine
    commands = script(g.walkthrough)
    trace = [first + (str(g.path),)]
    for command in commands:
        state, score, done = env.step(command)
        trace.append(snap(state) + (score, done))
    assert_same(trace, standard_script_trace(g), commands, g.path)


# ---------------------------------------------------------------- everything (slow)

@pytest.mark.slow
def test_every_tiny_game_is_equivalent(tiny_games, fast):
    games = [g for split in ("valid_seen", "valid_unseen", "train") for g in tiny_games.games(split)]
    precompute(games)
    for g in games:
        check_equivalent(g.path, g.walkthrough, fast)


@pytest.mark.slow
def test_thirty_real_games_are_equivalent(real_data_dir, fast):
    games = load_games("valid_seen", real_data_dir, seed=0)[:15] + load_games("valid_train", real_data_dir, seed=0)[:15]
    precompute(games, light=True)
    for g in games:
        check_equivalent(g.path, g.walkthrough, fast, light=True)
