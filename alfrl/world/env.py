"""``GroupEnv``: K independent copies of one ALFWorld game, stepped together.

GRPO-style training plays K copies of the same game as a group. The copies must
start identical (same room, same task) and then evolve independently: an action
in one copy never touches another. Each copy is ALFWorld's real engine
(TextWorld's PDDL environment + ``AlfredDemangler`` + ``AlfredInfos``), in the
fast form of :mod:`alfrl.world.engine`; copies are spread over worker processes so a
2-core laptop steps two at a time.

Rules the rest of the course relies on:

* success is ``won``, never ``done`` (``done`` also fires at the step limit);
* an inadmissible or empty action does not change the state: the copy answers
  ``Nothing happens.``, keeps its admissible list and uses up one step;
* ``reset`` checks that all K copies see the same first observation;
* a worker that dies (or an exchange cut short, say by Ctrl-C) makes every later call
  raise ``RuntimeError`` instead of hanging or reading stale answers; every ``reset``,
  ``reset_each`` and ``step`` checks that each worker is alive, even a step whose actions
  are all inadmissible (it sends nothing); ``close`` still stops every worker;
* workers never outlive their parent: killed with SIGKILL or SIGTERM, it takes them with it
  (a parent-death signal on Linux; elsewhere, and as a fallback, each worker watches its
  pipe and its parent's pid);
* each copy counts the subgoals of its game reached so far (:mod:`alfrl.world.subgoals`, read on the
  engine's facts): ``StepResult.subgoals`` of ``subgoals_total[i]``, for a subgoal-shaped reward.

Taught in notebook 01 (a group of game copies); used from 02 on.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Mapping

from alfrl.world.subgoals import Progress, game_progress

WORKER_DIED_FIX = ("the games of its copies are lost. Close this GroupEnv (env.close()), make a new one and "
                   "reset it. If workers keep dying, run with workers=0 to see the error in this process; "
                   "exit code -9 (SIGKILL) is often the out-of-memory killer: use fewer workers or copies.")
NOTHING_HAPPENS = "Nothing happens."
"""What ALFWorld answers to a command it cannot carry out."""
TASK_RE = re.compile(r"Your task is to: (.*?)\s*$", re.S)


@dataclass
class StepResult:
    """What one copy returns for one action."""

    observation: str
    admissible_commands: list[str]
    """The commands the game accepts next turn."""
    won: bool
    done: bool
    """Won, or out of steps. Not the same as won."""
    admissible: bool
    """Whether the action was one of the admissible commands (if not, nothing changed)."""
    steps: int
    """Actions taken by this copy so far, admissible or not."""
    subgoals: int = 0
    """Subgoals of the game this copy has reached so far (once reached, counted; alfrl.world.subgoals)."""


@dataclass
class GroupReset:
    """The shared start of a group: identical in every copy."""

    observation: str
    task: str
    admissible_commands: list[str]


class _Copies:
    """Copies of the engine living in one process (the worker's side of the pipe), each with the
    subgoals of its game reached so far."""

    def __init__(self, ids: list[int]):
        from alfrl.world.engine import make_fast_engine
        self.engines = {i: make_fast_engine(facts=True) for i in ids}
        self.progress: dict[int, Progress] = {}

    def reset(self, path: str | dict[int, str]) -> dict[int, tuple[str, list[str], int, int]]:
        """Load one game into every copy, or ``{copy: game}`` into the copies named; each answers
        (observation, admissible commands, subgoals reached, subgoals in all)."""
        paths = path if isinstance(path, dict) else {i: path for i in self.engines}
        out = {}
        for i, engine in self.engines.items():
            if i not in paths:
                continue
            engine.load(paths[i])
            state = engine.reset()
            self.progress[i] = game_progress(paths[i])
            out[i] = (state["feedback"], list(state["admissible_commands"]), self.progress[i].update(state["facts"]),
                      len(self.progress[i].goals))
        return out

    def step(self, actions: dict[int, str]) -> dict[int, tuple[str, list[str], bool, int]]:
        out = {}
        for i, action in actions.items():
            state, _, _ = self.engines[i].step(action)
            out[i] = (state["feedback"], list(state["admissible_commands"]), bool(state["won"]),
                      self.progress[i].update(state["facts"]))
        return out

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


PARENT_POLL_S = 1.0
"""How often an idle worker checks that its parent is still alive (the portable fallback)."""


def _die_with_parent(parent_pid: int) -> None:
    """Linux: ask the kernel to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``).

    The kernel sends it when the parent *thread* that forked us exits, so the GroupEnv only asks
    for it when made in the main thread. Elsewhere (macOS) this does nothing and ``_serve``'s
    pid polling is the only guard.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG; libc is loaded
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(0)


def _parent_alive(conn, parent_pid: int) -> bool:
    """Wait for the parent's next request; False once the parent is gone (its pid is no longer ours)."""
    while not conn.poll(PARENT_POLL_S):
        if os.getppid() != parent_pid:
            return False
    return True


def _serve(conn, ids: list[int], parent_pid: int, pdeathsig: bool, inherited: list) -> None:
    """A worker process: owns some copies and answers the parent's requests.

    ``inherited``: the parent's ends of the pipes, which a forked worker holds copies of. They
    are closed first: open here, they would keep the pipes alive after the parent died, and the
    worker would never see EOF.
    """
    for other in inherited:
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler inherited from the parent: terminate() stops us
    if pdeathsig:
        _die_with_parent(parent_pid)
    copies = None
    try:
        copies = _Copies(ids)
        conn.send(("ok", None))
        while _parent_alive(conn, parent_pid):
            command, arg = conn.recv()
            if command == "close":
                break
            try:
                conn.send(("ok", getattr(copies, command)(arg)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # the parent is gone
    except Exception:
        conn.send(("error", traceback.format_exc()))
    finally:
        if copies is not None:
            copies.close()
        conn.close()


def _game_path(game) -> Path:
    path = Path(getattr(game, "path", game))
    if not path.is_file():
        raise FileNotFoundError(f"game file {path} not found")
    return path


def _start(observation: str, admissible: list[str]) -> GroupReset:
    match = TASK_RE.search(observation)
    return GroupReset(observation=observation, task=match.group(1).rstrip(".") if match else "",
                      admissible_commands=list(admissible))


class GroupEnv:
    """K copies of one game in ALFWorld's engine. Use as a context manager, or call ``close``.

    ``workers=0`` keeps every copy in this process (simplest to debug); ``workers=n``
    spreads them round-robin over n processes.
    """

    def __init__(self, k: int = 8, max_steps: int = 50, workers: int = 2):
        if k < 1 or max_steps < 1:
            raise ValueError(f"need k >= 1 and max_steps >= 1 (got k={k}, max_steps={max_steps})")
        self.k, self.max_steps = k, max_steps
        self.workers = min(workers, k)
        self._procs, self._conns, self._local = [], [], None
        self._owner: dict[int, int] = {}
        self._closed = False
        self._broken = ""
        """Why the workers can no longer be trusted (one died, or an exchange was cut short)."""
        self.game: Path | tuple[Path, ...] | None = None
        """The game every copy plays, or each copy's game after ``reset_each``."""
        self.admissible: dict[int, list[str]] = {}
        self.steps: dict[int, int] = {}
        self.won: dict[int, bool] = {}
        self.subgoals: dict[int, int] = {}
        """Each copy's subgoals reached so far."""
        self.subgoals_total: dict[int, int] = {}
        """Each copy's game's subgoals in all (0 when its goal is not an ALFWorld task's)."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        if self.workers <= 0:
            self._local = _Copies(list(range(self.k)))
            return
        # fork: workers start in milliseconds and need no __main__ guard in scripts.
        fork = "fork" in get_all_start_methods()
        ctx = get_context("fork" if fork else "spawn")
        # PR_SET_PDEATHSIG fires when the forking *thread* exits: only ask for it from the main thread
        pdeathsig = threading.current_thread() is threading.main_thread()
        for w in range(self.workers):
            ids = list(range(w, self.k, self.workers))
            parent, child = ctx.Pipe()
            inherited = [parent, *self._conns] if fork else []  # a forked worker holds copies of these
            proc = ctx.Process(target=_serve, args=(child, ids, os.getpid(), pdeathsig, inherited),
                               daemon=True, name=f"alfrl-env-{w}")
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
            self._owner.update({i: w for i in ids})
        for conn in self._conns:
            self._receive(conn)

    def _receive(self, conn):
        try:
            status, payload = conn.recv()
        except EOFError:
            raise RuntimeError("a GroupEnv worker died; see its error above") from None
        if status == "error":
            raise RuntimeError(f"GroupEnv worker failed:\n{payload}")
        return payload

    def _call(self, command: str, per_worker: dict[int, object] | object) -> dict:
        if self._local is not None:
            arg = per_worker[0] if isinstance(per_worker, dict) else per_worker
            return getattr(self._local, command)(arg)
        targets = per_worker if isinstance(per_worker, dict) else {w: per_worker for w in range(len(self._conns))}
        out, errors = {}, []
        w = None
        try:
            for w, arg in targets.items():
                self._conns[w].send((command, arg))
            for w in targets:  # every answer is read, even after an error: none is left in a pipe
                status, payload = self._conns[w].recv()
                if status == "error":
                    errors.append(payload)
                else:
                    out.update(payload)
        except BaseException as e:
            # A worker died (the pipe broke) or we were interrupted (Ctrl-C) mid-exchange: answers
            # may be missing or left in the pipes, so no later call could trust what it reads.
            if isinstance(e, (OSError, EOFError)) and w is not None:
                self._procs[w].join(timeout=2)  # its pipe can close a moment before it has exited
            dead = self._dead()
            self._broken = "; ".join(dead) if dead else f"a call was cut short by {type(e).__name__}"
            if isinstance(e, (OSError, EOFError)):
                raise RuntimeError(f"GroupEnv {self._broken}: {WORKER_DIED_FIX}") from None
            raise
        if errors:
            raise RuntimeError(f"GroupEnv worker failed:\n{errors[0]}")
        return out

    def _call_copies(self, command: str, per_copy: dict[int, str]) -> dict:
        """Run ``command`` with one argument per copy, each sent to the worker that owns the copy."""
        if self._local is not None:
            return self._call(command, {0: per_copy})
        by_worker: dict[int, dict[int, str]] = {}
        for i, arg in per_copy.items():
            by_worker.setdefault(self._owner[i], {})[i] = arg
        return self._call(command, by_worker)

    def _check_open(self) -> None:
        """Refuse a closed GroupEnv, or one with a dead worker (checked on every reset and step)."""
        if self._closed:
            raise RuntimeError("this GroupEnv is closed; make a new one")
        if self._broken:
            raise RuntimeError(f"this GroupEnv is unusable ({self._broken}); close it and make a new one")
        dead = self._dead()
        if dead:
            # A step whose actions are all inadmissible sends nothing to any worker: without this
            # check a dead worker would go unnoticed as long as its copies got only bad actions.
            self._broken = "; ".join(dead)
            self.game = None
            raise RuntimeError(f"GroupEnv {self._broken}: {WORKER_DIED_FIX}")

    def _dead(self) -> list[str]:
        """Each worker that has exited: which one, its pid, its copies and its exit code."""
        dead = []
        for w, proc in enumerate(self._procs):
            code = proc.exitcode  # polls the process: None while it runs
            if code is None:
                continue
            why = ""
            if code < 0:
                try:
                    why = f" ({signal.Signals(-code).name})"
                except ValueError:
                    pass
            copies = sorted(i for i, owner in self._owner.items() if owner == w)
            dead.append(f"worker {w} (pid {proc.pid}, copies {copies}) exited with code {code}{why}")
        return dead

    def reset(self, game) -> GroupReset:
        """Load ``game`` (a GameSpec or a game file) into every copy; check they start identical."""
        self._check_open()
        path = _game_path(game)
        self.game = None  # until every copy has started
        starts = self._call("reset", str(path))
        observations = {start[0] for start in starts.values()}
        lists = {tuple(start[1]) for start in starts.values()}
        if len(observations) != 1 or len(lists) != 1:
            raise RuntimeError(f"the {self.k} copies of {path} did not start identical: "
                               f"{len(observations)} observations, {len(lists)} admissible lists")
        self.game = path
        self._started(starts)
        return _start(*starts[0][:2])

    def reset_each(self, games: list) -> list[GroupReset]:
        """Load ``games[i]`` into copy i (one game per copy, e.g. to evaluate K games at once)."""
        self._check_open()
        if len(games) != self.k:
            raise ValueError(f"reset_each needs one game per copy: {self.k} copies, {len(games)} games")
        paths = {i: str(_game_path(g)) for i, g in enumerate(games)}
        self.game = None
        starts = self._call_copies("reset", paths)
        self.game = tuple(Path(p) for p in paths.values())
        self._started(starts)
        return [_start(*starts[i][:2]) for i in range(self.k)]

    def _started(self, starts: dict[int, tuple[str, list[str], int, int]]) -> None:
        self.admissible = {i: list(starts[i][1]) for i in range(self.k)}
        self.steps = {i: 0 for i in range(self.k)}
        self.won = {i: False for i in range(self.k)}
        self.subgoals = {i: starts[i][2] for i in range(self.k)}
        self.subgoals_total = {i: starts[i][3] for i in range(self.k)}

    def live(self) -> list[int]:
        """Copies that are neither won nor out of steps."""
        return [i for i in range(self.k) if not self._done(i)]

    def _done(self, i: int) -> bool:
        return self.won[i] or self.steps[i] >= self.max_steps

    def step(self, actions: Mapping[int, str | None]) -> dict[int, StepResult]:
        """Apply one action per listed copy (copy index -> command); return each copy's result."""
        self._check_open()
        if self.game is None:
            raise RuntimeError("call reset(game) before step()")
        finished = [i for i in actions if i not in self.won or self._done(i)]
        if finished:
            raise ValueError(f"copies {finished} are finished or do not exist; step only live() copies")
        valid = {i: a.strip() for i, a in actions.items()
                 if a is not None and a.strip() in self.admissible[i]}
        results = {}
        if valid:
            try:
                moved = self._call_copies("step", valid)
            except BaseException:
                self.game = None  # some copies may have moved, unrecorded: reset before stepping again
                raise
            for i, (obs, admissible, won, reached) in moved.items():
                self.admissible[i], self.won[i], self.subgoals[i] = admissible, won, reached
                results[i] = obs
        out = {}
        for i in actions:
            self.steps[i] += 1
            out[i] = StepResult(observation=results.get(i, NOTHING_HAPPENS),
                                admissible_commands=list(self.admissible[i]), won=self.won[i],
                                done=self._done(i), admissible=i in valid, steps=self.steps[i],
                                subgoals=self.subgoals[i])
        return out

    def close(self) -> None:
        """Stop the workers (idempotent); no process outlives the GroupEnv."""
        self._closed = True
        self.game = None
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (OSError, BrokenPipeError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        if self._local is not None:
            self._local.close()
            self._local = None

    def __enter__(self) -> "GroupEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
