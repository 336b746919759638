"""alfrl.world.env: GroupEnv's K copies start identical, evolve independently, and shut down cleanly.

Every observation is checked against ALFWorld's standard engine fed the same commands.
``workers=0`` keeps the copies in this process; ``workers=2`` spreads them over two processes.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
from contextlib import contextmanager

import pytest

from alfrl import TASK_TYPES
from alfrl.world.env import NOTHING_HAPPENS, GroupEnv, GroupReset, StepResult
from alfrl.world.games import read_game

SPLIT = "valid_seen"
HEAT = "pick_heat_then_place_in_recep"  # opens and closes things, takes, heats, moves
WORKERS = pytest.mark.parametrize("workers", [0, 2])


def game(tiny_games, task_type=HEAT):
    return next(g for g in tiny_games.games(SPLIT) if g.task_type == task_type)


_STANDARD: dict[tuple, tuple] = {}


def standard(engine, path, commands) -> tuple[tuple, list[tuple]]:
    """The standard engine: (intro, admissible) after reset, then (observation, admissible, won) per command.

    ``None`` is sent as "" (both mean: no command). Memoised: the standard engine is the slow side.
    """
    key = (str(path), tuple(c or "" for c in commands))
    if key not in _STANDARD:
        _STANDARD[key] = _standard(engine, *key)
    return _STANDARD[key]


def _standard(engine, path, commands):
    engine.load(str(path))
    state = engine.reset()
    start = (state["feedback"], list(state["admissible_commands"]))
    steps = []
    for command in commands:
        state, _, _ = engine.step(command)
        steps.append((state["feedback"], list(state["admissible_commands"]), bool(state["won"])))
    return start, steps


def taken_at(walkthrough) -> int:
    """The number of walkthrough steps up to and including the first ``take``."""
    return next(n for n, c in enumerate(walkthrough, 1) if c.startswith("take "))


def seen(result: StepResult) -> tuple:
    return result.observation, result.admissible_commands, result.won


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging (pytest-timeout is not installed)."""
    def expire(signum, frame):
        raise TimeoutError(f"no answer within {seconds}s: GroupEnv hangs")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def assert_stopped(procs) -> None:
    assert procs and not any(p.is_alive() for p in procs)
    assert multiprocessing.active_children() == []


# ---------------------------------------------------------------- reset

@WORKERS
def test_reset_gives_identical_copies(tiny_games, engine, workers):
    g = game(tiny_games)
    (intro, admissible), steps = standard(engine, g.path, g.walkthrough[:2])
    with GroupEnv(k=4, workers=workers) as env:
        start = env.reset(g)
        assert start == GroupReset(observation=intro, task=g.goal, admissible_commands=admissible)
        assert env.admissible == {i: admissible for i in range(4)}
        assert env.steps == {i: 0 for i in range(4)} and env.won == {i: False for i in range(4)}
        assert env.live() == [0, 1, 2, 3] and env.game == g.path
        for command, expected in zip(g.walkthrough[:2], steps):  # the same command: the same answer everywhere
            out = env.step({i: command for i in range(4)})
            assert {i: seen(r) for i, r in out.items()} == {i: expected for i in range(4)}


@WORKERS
def test_reset_each_plays_one_game_per_copy(tiny_games, engine, workers):
    """Evaluation loads a different game into each copy; each copy then plays its own game."""
    games = [game(tiny_games, HEAT), game(tiny_games, "pick_and_place_simple"), game(tiny_games, HEAT)]
    with GroupEnv(k=3, max_steps=30, workers=workers) as env:
        starts = env.reset_each(games)
        for g, start in zip(games, starts):
            (intro, admissible), _ = standard(engine, g.path, [])
            assert start == GroupReset(observation=intro, task=g.goal, admissible_commands=admissible)
        assert env.game == tuple(g.path for g in games)
        assert env.admissible == {i: s.admissible_commands for i, s in enumerate(starts)}
        walks = [list(g.walkthrough) for g in games]
        for n in range(max(len(w) for w in walks)):
            out = env.step({i: w[n] for i, w in enumerate(walks) if n < len(w)})
            for i, r in out.items():
                assert seen(r) == standard(engine, games[i].path, walks[i])[1][n]
        assert env.won == {0: True, 1: True, 2: True}
        with pytest.raises(ValueError, match="one game per copy"):
            env.reset_each(games[:2])


def test_task_is_the_games_goal_for_every_task_type(tiny_games):
    with GroupEnv(k=1, workers=0) as env:
        for task_type in TASK_TYPES:
            g = game(tiny_games, task_type)
            start = env.reset(g.path)  # a path works as well as a GameSpec
            assert start.task == g.goal == read_game(g.path).goal
            assert start.observation.endswith(f"Your task is to: {g.goal}.")
    assert game(tiny_games, HEAT).goal == "heat some bread and put it in fridge"


def test_task_of_a_real_game(real_data_dir):
    path = (real_data_dir / SPLIT / "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-26"
            / "trial_T20190907_233056_022802" / "game.tw-pddl")
    if not path.is_file():
        pytest.skip(f"{path} not here")
    with GroupEnv(k=1, workers=0) as env:
        assert env.reset(path).task == read_game(path).goal == "clean some mug and put it in coffeemachine"


# ---------------------------------------------------------------- won vs done

def test_out_of_steps_is_done_but_not_won(tiny_games):
    g = game(tiny_games)
    n = len(g.walkthrough)
    with GroupEnv(k=2, max_steps=n - 1, workers=0) as env:
        env.reset(g)
        for step, command in enumerate(g.walkthrough[:-1], 1):
            r = env.step({0: command})[0]
            assert r.admissible and r.steps == step and not r.won
            assert r.done == (step == n - 1)
        assert env.live() == [1]
        with pytest.raises(ValueError):
            env.step({0: g.walkthrough[-1]})  # a finished copy takes no more actions
        assert env.steps[0] == n - 1


def test_winning_on_the_last_step_is_won_and_done(tiny_games):
    g = game(tiny_games)
    n = len(g.walkthrough)
    with GroupEnv(k=2, max_steps=n, workers=0) as env:
        env.reset(g)
        for command in g.walkthrough[:-1]:
            assert not env.step({0: command})[0].done
        r = env.step({0: g.walkthrough[-1]})[0]
        assert (r.won, r.done, r.steps) == (True, True, n)
        assert env.live() == [1] and env.won == {0: True, 1: False}
        with pytest.raises(ValueError):
            env.step({0: "look"})


def test_winning_early_is_done(tiny_games):
    g = game(tiny_games)
    with GroupEnv(k=1, max_steps=50, workers=0) as env:
        env.reset(g)
        results = [env.step({0: c})[0] for c in g.walkthrough]
        assert [r.done for r in results] == [r.won for r in results] == [False] * (len(results) - 1) + [True]
        assert env.live() == []


# ---------------------------------------------------------------- inadmissible actions

@WORKERS
def test_inadmissible_and_empty_actions_change_nothing(tiny_games, engine, workers):
    g = game(tiny_games)
    take = g.walkthrough[taken_at(g.walkthrough) - 1]
    bad = ["go to nowhere 1", "", "   ", None, "LOOK", take]  # the last: a real command, but not from here
    (_, admissible), expected = standard(engine, g.path, g.walkthrough)
    with GroupEnv(k=2, max_steps=50, workers=workers) as env:
        env.reset(g)
        for n, action in enumerate(bad, 1):
            r = env.step({0: action})[0]
            assert (r.observation, r.admissible, r.won, r.done, r.steps) == (NOTHING_HAPPENS, False, False, False, n)
            assert r.admissible_commands == admissible == env.admissible[0]
        assert env.steps == {0: len(bad), 1: 0}
        # nothing moved: copy 0 now plays exactly like copy 1, which never got a bad action
        for command, want in zip(g.walkthrough, expected):
            out = env.step({0: command, 1: command})
            assert seen(out[0]) == seen(out[1]) == want
        assert out[0].won and out[0].steps == len(bad) + len(g.walkthrough) and out[1].steps == len(g.walkthrough)


def test_inadmissible_midgame_and_padded_commands(tiny_games, engine):
    g = game(tiny_games)
    (_, _), expected = standard(engine, g.path, g.walkthrough)
    with GroupEnv(k=1, max_steps=50, workers=0) as env:
        env.reset(g)
        take = taken_at(g.walkthrough) - 1
        for n, (command, want) in enumerate(zip(g.walkthrough, expected)):
            if n == take:  # at the object, before taking it: a bad action between two good ones
                r = env.step({0: "go to nowhere 1"})[0]
                assert (r.observation, r.admissible, r.admissible_commands) == (NOTHING_HAPPENS, False,
                                                                                expected[n - 1][1])
            r = env.step({0: f"  {command} "})[0]  # padding is stripped, as the engine strips it
            assert r.admissible and seen(r) == want


# ---------------------------------------------------------------- independence

@WORKERS
def test_copies_are_independent(tiny_games, engine, workers):
    g = game(tiny_games)
    _, expected = standard(engine, g.path, g.walkthrough)
    with GroupEnv(k=4, max_steps=50, workers=workers) as env:  # with 2 workers, copies 0 and 2 share one
        env.reset(g)
        n = taken_at(g.walkthrough)
        for command in g.walkthrough[:n]:  # copy 0 moves, opens and closes things, takes the object
            env.step({0: command})
        assert env.steps == {0: n, 1: 0, 2: 0, 3: 0}
        assert env.admissible[1] == env.admissible[2] == env.admissible[3] != env.admissible[0]
        for i in (1, 2):  # a copy in the other worker and one in copy 0's own
            for command, want in zip(g.walkthrough, expected):
                assert seen(env.step({i: command})[i]) == want
        assert seen(env.step({0: g.walkthrough[n]})[0]) == expected[n]  # copy 0 carries on where it was


@WORKERS
def test_different_actions_in_one_step(tiny_games, engine, workers):
    g = game(tiny_games)
    rng = random.Random(0)
    wt = list(g.walkthrough)
    plans: dict[int, list] = {0: wt, 1: ["inventory", *wt[:5], "go to nowhere 1", *wt[5:]], 2: [], 3: wt[:4] + ["look"]}
    limit = len(wt) + 10
    with GroupEnv(k=4, max_steps=limit, workers=workers) as env:
        env.reset(g)
        seen_by: dict[int, list] = {i: [] for i in range(4)}
        for n in range(limit):
            actions = {i: plan[n] for i, plan in plans.items() if i != 2 and n < len(plan) and i in env.live()}
            if 2 in env.live():  # copy 2 wanders: a seeded random admissible command, now and then a bad one
                actions[2] = rng.choice(env.admissible[2] + ["go to nowhere 1"])
                plans[2].append(actions[2])
            if not actions:
                break
            for i, r in env.step(actions).items():
                seen_by[i].append(seen(r))
    for i, plan in plans.items():
        _, expected = standard(engine, g.path, plan)
        assert seen_by[i] == expected[:len(seen_by[i])], f"copy {i}"
        assert len(seen_by[i]) == len(plan)
    assert seen_by[0][-1][2] and seen_by[1][-1][2] and not seen_by[3][-1][2]


def test_same_actions_same_observations(tiny_games):
    """Determinism: two groups (one in this process, one in workers) fed the same actions agree."""
    g = game(tiny_games, "pick_two_obj_and_place")
    rng = random.Random(1)
    with GroupEnv(k=2, max_steps=30, workers=0) as a, GroupEnv(k=2, max_steps=30, workers=2) as b:
        assert a.reset(g) == b.reset(g)
        while a.live():
            actions = {i: rng.choice(a.admissible[i]) for i in a.live()}
            ra, rb = a.step(actions), b.step(actions)
            assert ra == rb
        assert b.live() == []


# ---------------------------------------------------------------- errors

@WORKERS
def test_errors(tiny_games, tmp_path, workers):
    g = game(tiny_games)
    with GroupEnv(k=2, workers=workers) as env:
        with pytest.raises(RuntimeError, match="reset"):
            env.step({0: "look"})
        with pytest.raises(FileNotFoundError):
            env.reset(tmp_path / "missing" / "game.tw-pddl")
        env.reset(g)
        for bad in ({2: "look"}, {0: "look", 5: "look"}, {-1: "look"}):
            with pytest.raises(ValueError):
                env.step(bad)
        assert env.steps == {0: 0, 1: 0}  # a refused call steps no copy
        assert env.step({0: "look"})[0].admissible


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"k": -1}, {"max_steps": 0}])
def test_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        GroupEnv(workers=0, **kwargs)
    assert multiprocessing.active_children() == []


def test_a_missing_file_keeps_the_game(tiny_games, tmp_path):
    g = game(tiny_games)
    with GroupEnv(k=1, workers=0) as env:
        env.reset(g)
        env.step({0: "look"})
        with pytest.raises(FileNotFoundError):
            env.reset(tmp_path / "game.tw-pddl")
        assert env.game == g.path and env.steps == {0: 1}


# ---------------------------------------------------------------- shutdown

def test_close_stops_every_worker(tiny_games):
    env = GroupEnv(k=3, workers=2)
    procs = list(env._procs)
    assert len(procs) == 2 and all(p.is_alive() for p in procs)
    env.reset(game(tiny_games))
    env.close()
    assert_stopped(procs)
    env.close()  # twice is fine
    assert_stopped(procs)


def test_an_exception_in_the_with_block_stops_the_workers(tiny_games):
    with pytest.raises(KeyError):
        with GroupEnv(k=2, workers=2) as env:
            procs = list(env._procs)
            env.reset(game(tiny_games))
            raise KeyError("boom")
    assert_stopped(procs)


@pytest.mark.parametrize("order", [(0,), (1, 0), (0, 1)])
def test_a_killed_worker_is_an_error_not_a_hang(tiny_games, order):
    g = game(tiny_games)
    env = GroupEnv(k=2, workers=2)
    procs = list(env._procs)
    try:
        env.reset(g)
        os.kill(procs[0].pid, signal.SIGKILL)  # copy 0's worker
        procs[0].join(timeout=10)
        assert not procs[0].is_alive()
        with deadline(30):
            with pytest.raises(RuntimeError):
                env.step({i: "look" for i in order})
            with pytest.raises(RuntimeError):  # and it stays an error
                env.step({0: "look"})
    finally:
        env.close()
    assert_stopped(procs)
    env.close()


def test_a_killed_worker_on_reset(tiny_games):
    env = GroupEnv(k=2, workers=2)
    procs = list(env._procs)
    try:
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].join(timeout=10)
        with deadline(30):
            with pytest.raises(RuntimeError):
                env.reset(game(tiny_games))
    finally:
        env.close()
    assert_stopped(procs)


@WORKERS
def test_a_closed_env_refuses_to_step(tiny_games, workers):
    env = GroupEnv(k=2, workers=workers)
    env.reset(game(tiny_games))
    env.close()
    with deadline(30):
        with pytest.raises(RuntimeError):
            env.step({0: "look"})
        with pytest.raises(RuntimeError):
            env.reset(game(tiny_games))


@WORKERS
def test_a_corrupt_game_fails_and_the_next_reset_works(tiny_games, engine, tmp_path, workers):
    """Every worker's error answer is read: none is left behind to answer the next call."""
    g = game(tiny_games)
    corrupt = tmp_path / "game.tw-pddl"
    corrupt.write_text('{"pddl_domain": ')
    (intro, _), expected = standard(engine, g.path, g.walkthrough)
    with GroupEnv(k=2, workers=workers) as env:
        with deadline(30):
            with pytest.raises(RuntimeError if workers else ValueError):
                env.reset(corrupt)
            with pytest.raises(RuntimeError, match="reset"):
                env.step({0: "look"})
            assert env.reset(g).observation == intro
            for command, want in zip(g.walkthrough, expected):
                out = env.step({0: command, 1: command})
                assert seen(out[0]) == seen(out[1]) == want


def test_a_dead_worker_is_found_even_when_no_action_reaches_it(tiny_games):
    """Inadmissible actions are answered without a worker: the liveness check must not depend on them."""
    g = game(tiny_games)
    env = GroupEnv(k=2, workers=2)
    procs = list(env._procs)
    try:
        env.reset(g)
        os.kill(procs[1].pid, signal.SIGKILL)  # copy 1's worker
        procs[1].join(timeout=10)
        with deadline(30):
            with pytest.raises(RuntimeError) as error:
                env.step({0: None, 1: None})  # only invalid actions: nothing is sent to any worker
            message = str(error.value)
            assert f"worker 1 (pid {procs[1].pid}, copies [1]) exited with code -9 (SIGKILL)" in message
            assert "Close this GroupEnv (env.close()), make a new one" in message
            for call in (lambda: env.step({0: "go to nowhere 1"}), lambda: env.reset(g),
                         lambda: env.reset_each([g, g])):
                with pytest.raises(RuntimeError, match=r"unusable \(worker 1 .*close it and make a new one"):
                    call()
    finally:
        env.close()
    assert_stopped(procs)


# ---------------------------------------------------------------- workers die with their parent

ORPHAN_SCRIPT = r"""
import json, os, sys, time
import alfrl.world.engine  # imported once here, not in every worker
import alfrl.world.env
game, pdeathsig, bystander = sys.argv[1:]
if pdeathsig == "off":  # only the portable fallback (pipe EOF, parent pid), as on macOS
    alfrl.world.env._die_with_parent = lambda parent_pid: None
env = alfrl.world.env.GroupEnv(k=2, workers=2)
env.reset(game)
extra = []
if bystander == "on":  # another child of the parent, holding a copy of every pipe end: no EOF
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    extra.append(pid)
print(json.dumps({"workers": [p.pid for p in env._procs], "others": extra}), flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is no zombie (exited, not yet reaped by its new parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False  # gone meanwhile
    import subprocess
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


@pytest.mark.parametrize("sig, pdeathsig, bystander", [
    (signal.SIGKILL, "on", "off"),
    (signal.SIGTERM, "on", "off"),
    (signal.SIGKILL, "off", "on"),  # the portable fallback alone, with the pipes held open by another child
])
def test_workers_die_with_their_parent(tiny_games, sig, pdeathsig, bystander):
    import json
    import subprocess
    import sys
    import time
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT, str(game(tiny_games).path), pdeathsig, bystander],
                              stdout=subprocess.PIPE, text=True)
    pids = {"workers": [], "others": []}
    try:
        with deadline(60):
            line = parent.stdout.readline()
        assert line, f"the parent script failed (exit code {parent.wait()})"
        pids = json.loads(line)
        assert len(pids["workers"]) == 2 and all(running(p) for p in pids["workers"])
        os.kill(parent.pid, sig)
        parent.wait(timeout=10)
        end = time.monotonic() + 10
        while any(running(p) for p in pids["workers"]) and time.monotonic() < end:
            time.sleep(0.1)
        left = [p for p in pids["workers"] if running(p)]
        assert not left, f"workers {left} outlived their parent (killed with {sig.name})"
    finally:
        for pid in [parent.pid, *pids["workers"], *pids["others"]]:  # only processes this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.wait()
        parent.stdout.close()
