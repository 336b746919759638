"""``GroupEnv``: K independent copies of one ALFWorld game, stepped together.

GRPO-style training plays K copies of the same game as a group. The copies must
start identical (same room, same task) and then evolve independently: an action
in one copy never touches another. Each copy is ALFWorld's real engine
(TextWorld's PDDL environment + ``AlfredDemangler`` + ``AlfredInfos``), in the
fast form of :mod:`alfrl.engine`; copies are spread over worker processes so a
2-core laptop steps two at a time.

Rules the rest of the course relies on:

* success is ``won``, never ``done`` (``done`` also fires at the step limit);
* an inadmissible or empty action does not change the state: the copy answers
  ``Nothing happens.``, keeps its admissible list and uses up one step;
* ``reset`` checks that all K copies see the same first observation;
* a worker that dies (or an exchange cut short, say by Ctrl-C) makes every later call
  raise ``RuntimeError`` instead of hanging or reading stale answers; ``close`` still
  stops every worker.
"""

from __future__ import annotations

import re
import signal
import traceback
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Mapping

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


@dataclass
class GroupReset:
    """The shared start of a group: identical in every copy."""

    observation: str
    task: str
    admissible_commands: list[str]


class _Copies:
    """Copies of the engine living in one process (the worker's side of the pipe)."""

    def __init__(self, ids: list[int]):
        from alfrl.engine import make_fast_engine
        self.engines = {i: make_fast_engine() for i in ids}

    def reset(self, path: str | dict[int, str]) -> dict[int, tuple[str, list[str]]]:
        """Load one game into every copy, or ``{copy: game}`` into the copies named."""
        paths = path if isinstance(path, dict) else {i: path for i in self.engines}
        out = {}
        for i, engine in self.engines.items():
            if i not in paths:
                continue
            engine.load(paths[i])
            state = engine.reset()
            out[i] = (state["feedback"], list(state["admissible_commands"]))
        return out

    def step(self, actions: dict[int, str]) -> dict[int, tuple[str, list[str], bool]]:
        out = {}
        for i, action in actions.items():
            state, _, _ = self.engines[i].step(action)
            out[i] = (state["feedback"], list(state["admissible_commands"]), bool(state["won"]))
        return out

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


def _serve(conn, ids: list[int]) -> None:
    """A worker process: owns some copies and answers the parent's requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    copies = None
    try:
        copies = _Copies(ids)
        conn.send(("ok", None))
        while True:
            command, arg = conn.recv()
            if command == "close":
                break
            try:
                conn.send(("ok", getattr(copies, command)(arg)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        pass
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
        ctx = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
        for w in range(self.workers):
            ids = list(range(w, self.k, self.workers))
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, ids), daemon=True, name=f"alfrl-env-{w}")
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
        if self._broken:
            raise RuntimeError(f"this GroupEnv is unusable ({self._broken}); close it and make a new one")
        targets = per_worker if isinstance(per_worker, dict) else {w: per_worker for w in range(len(self._conns))}
        out, errors = {}, []
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
            dead = [f"worker {w} (pid {p.pid}, exit code {p.exitcode})"
                    for w, p in enumerate(self._procs) if not p.is_alive()]
            self._broken = f"{', '.join(dead)} died" if dead else f"a call was cut short by {type(e).__name__}"
            if isinstance(e, (OSError, EOFError)):
                raise RuntimeError(f"a GroupEnv worker died: {self._broken}") from None
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
        if self._closed:
            raise RuntimeError("this GroupEnv is closed; make a new one")

    def reset(self, game) -> GroupReset:
        """Load ``game`` (a GameSpec or a game file) into every copy; check they start identical."""
        self._check_open()
        path = _game_path(game)
        self.game = None  # until every copy has started
        starts = self._call("reset", str(path))
        observations = {obs for obs, _ in starts.values()}
        lists = {tuple(adm) for _, adm in starts.values()}
        if len(observations) != 1 or len(lists) != 1:
            raise RuntimeError(f"the {self.k} copies of {path} did not start identical: "
                               f"{len(observations)} observations, {len(lists)} admissible lists")
        self.game = path
        self._started(starts)
        return _start(*starts[0])

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
        return [_start(*starts[i]) for i in range(self.k)]

    def _started(self, starts: dict[int, tuple[str, list[str]]]) -> None:
        self.admissible = {i: list(starts[i][1]) for i in range(self.k)}
        self.steps = {i: 0 for i in range(self.k)}
        self.won = {i: False for i in range(self.k)}

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
            for i, (obs, admissible, won) in moved.items():
                self.admissible[i], self.won[i] = admissible, won
                results[i] = obs
        out = {}
        for i in actions:
            self.steps[i] += 1
            out[i] = StepResult(observation=results.get(i, NOTHING_HAPPENS),
                                admissible_commands=list(self.admissible[i]), won=self.won[i],
                                done=self._done(i), admissible=i in valid, steps=self.steps[i])
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
