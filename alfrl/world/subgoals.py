"""Subgoals of an ALFWorld task, read from its PDDL goal and checked on the engine's state.

A game's goal is a PDDL formula over typed variables, e.g. pick_clean_then_place_in_recep's::

    (exists (?r - receptacle) (exists (?o - object)
        (and (cleanable ?o) (objectType ?o SpoonType) (receptacleType ?r CounterTopType)
             (isClean ?o) (inReceptacle ?o ?r))))

Each object variable's literals say what must happen to it, in the order a player does it:

- **hold**: a variable that must end in a receptacle (not a lamp) or in the agent's hands is first
  found and picked up (``holds``);
- **clean / heat / cool**: ``isClean``, ``isHot``, ``isCool`` on it;
- **toggle**: ``isToggled`` (look_at_obj_in_light's lamp: "use desklamp 1");
- **place**: ``inReceptacle`` in a receptacle of the goal's type, with the states above; a second
  variable of the same type and receptacle (pick_two_obj_and_place) needs a second such object.

No table per task type or per game: :func:`subgoals` derives them from the goal text, and
:func:`reached` checks them on the facts of the engine's state (``textworld.EnvInfos(facts=True)``,
as :func:`alfrl.world.engine.make_fast_engine` asks for with ``facts=True``). Subgoals count as reached
once, even if undone later (an object picked up, then put down): :class:`Progress` keeps that.
Every :class:`alfrl.world.env.GroupEnv` copy keeps its game's :class:`Progress`, so each trajectory records
the subgoals it reached, and ``--subgoal-reward alpha`` trains on ``won + alpha x subgoals reached
- 0.1 x invalid`` (:func:`alfrl.rl.advantage.episode_reward`).

Taught in notebook 07 (subgoals read from the engine, and the subgoal-shaped reward).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

STATES = {"isclean": "clean", "ishot": "heat", "iscool": "cool"}
"""Goal predicates that change an object, and the subgoal each makes."""


@dataclass(frozen=True)
class Subgoal:
    """One step toward the goal, checkable on the engine's facts."""

    kind: str
    """"hold", "clean", "heat", "cool", "toggle" or "place"."""
    object_type: str
    """The object's ALFWorld type, lower case without "type": "spoon", "desklamp"."""
    receptacle_type: str = ""
    """For "place": the receptacle's type ("countertop")."""
    states: tuple[str, ...] = ()
    """For "place": what the placed object must be (("isclean",)): the goal wants a clean spoon there."""
    count: int = 1
    """For "place": how many distinct such objects must be there (2 for pick_two's second)."""

    def text(self) -> str:
        """A short description: "clean a spoon", "put a second clean spoon in countertop"."""
        if self.kind == "place":
            adjectives = " ".join({"isclean": "clean", "ishot": "hot", "iscool": "cool"}[s] for s in self.states)
            what = " ".join(w for w in (adjectives, self.object_type) if w)
            return f"put {'a second' if self.count == 2 else _article(what)} {what} in {self.receptacle_type}"
        verb = {"hold": "take", "toggle": "turn on"}.get(self.kind, self.kind)
        return f"{verb} {_article(self.object_type)} {self.object_type}"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _sexpr(text: str) -> list:
    """A PDDL text as nested lists of lower-case atoms."""
    tokens = re.findall(r"\(|\)|[^\s()]+", text.lower())
    stack: list[list] = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    return stack[0]


def _literals(goal: list) -> list[tuple[str, ...]]:
    """The positive atoms of a goal formula (inside and/exists; negations and equalities skipped)."""
    head = goal[0] if goal and isinstance(goal[0], str) else None
    if head in ("not", "="):
        return []
    if head == "exists":
        return _literals(goal[2])
    if head in ("and", "or"):
        return [lit for part in goal[1:] for lit in _literals(part)]
    if head is not None:
        return [tuple(goal)]
    return [lit for part in goal for lit in _literals(part)]


def _type_name(pddl_type: str) -> str:
    return pddl_type.strip().removesuffix("type")


def goal_formula(pddl_problem: str) -> list:
    """The ``(:goal ...)`` formula of a PDDL problem, as nested lists."""
    for part in _sexpr(pddl_problem)[0]:
        if isinstance(part, list) and part and part[0] == ":goal":
            return part[1]
    raise ValueError("the PDDL problem has no (:goal ...): is this a game.tw-pddl's pddl_problem?")


def subgoals(pddl_problem: str) -> list[Subgoal]:
    """The goal's subgoals in the order a player reaches them: for each object the goal names, take it,
    change it (clean, heat, cool), then place it; a lamp is turned on."""
    literals = _literals(goal_formula(pddl_problem))
    types = {lit[1]: _type_name(lit[2]) for lit in literals if lit[0] in ("objecttype", "receptacletype")}
    objects = list(dict.fromkeys(lit[1] for lit in literals if lit[0] == "objecttype"))
    if not objects:
        raise ValueError("the goal names no object (objectType): not an ALFWorld task goal")
    found: list[Subgoal] = []
    placed: dict[tuple, int] = {}
    for var in objects:
        facts = {lit[0]: lit for lit in literals if var in lit[1:]}
        kind = types[var]
        if "istoggled" in facts:
            found.append(Subgoal("toggle", kind))
            continue
        states = tuple(p for p in STATES if p in facts)
        if "holds" in facts or "inreceptacle" in facts:
            found.append(Subgoal("hold", kind))
        found += [Subgoal(STATES[p], kind) for p in states]
        if "inreceptacle" in facts:
            where = types[facts["inreceptacle"][2]]
            placed[(kind, where, states)] = count = placed.get((kind, where, states), 0) + 1
            found.append(Subgoal("place", kind, where, states, count))
    toggles = [g for g in found if g.kind == "toggle"]  # the lamp is turned on with the object in hand
    return list(dict.fromkeys([g for g in found if g.kind != "toggle"] + toggles))


@lru_cache(maxsize=64)
def game_subgoals(pddl_problem: str) -> tuple[Subgoal, ...]:
    """:func:`subgoals`, cached per problem text, and empty (no subgoals to count) for a problem
    whose goal is not an ALFWorld task's: the env plays such games too, without a shaped reward."""
    try:
        return tuple(subgoals(pddl_problem))
    except (ValueError, KeyError, IndexError):
        return ()


@dataclass
class State:
    """The facts a subgoal reads, indexed: every object's type, what is held, in which receptacle, and
    which objects are clean, hot, cool or toggled."""

    types: dict[str, str]
    held: set[str]
    inside: set[tuple[str, str]]
    states: dict[str, set[str]]

    @classmethod
    def of(cls, facts) -> State:
        """From TextWorld propositions (``state["facts"]``) or ``(name, arg, ...)`` tuples."""
        rows = [(f.name, *(a.name for a in f.arguments)) if hasattr(f, "arguments") else tuple(f) for f in facts]
        types = {r[1]: _type_name(r[2]) for r in rows if r[0] in ("objecttype", "receptacletype")}
        return cls(types=types, held={r[2] for r in rows if r[0] == "holds"},
                   inside={(r[1], r[2]) for r in rows if r[0] == "inreceptacle"},
                   states={p: {r[1] for r in rows if r[0] == p} for p in (*STATES, "istoggled")})


def reached(goal: Subgoal, state: State) -> bool:
    """Whether ``goal`` holds in ``state`` now."""
    of_type = {o for o, t in state.types.items() if t == goal.object_type}
    if goal.kind == "hold":
        return bool(of_type & state.held)
    if goal.kind == "toggle":
        return bool(of_type & state.states["istoggled"])
    if goal.kind == "place":
        there = {o for o, r in state.inside if o in of_type and state.types.get(r) == goal.receptacle_type
                 and all(o in state.states[s] for s in goal.states)}
        return len(there) >= goal.count
    predicate = next(p for p, kind in STATES.items() if kind == goal.kind)
    return bool(of_type & state.states[predicate])


class Progress:
    """The subgoals of one episode reached so far: once reached, a subgoal stays counted."""

    def __init__(self, pddl_problem: str | None = None, goals: list[Subgoal] | tuple[Subgoal, ...] | None = None):
        """The subgoals of ``pddl_problem``, or ``goals`` already derived."""
        if (pddl_problem is None) == (goals is None):
            raise ValueError("give Progress one of: a pddl_problem, or its goals")
        self.goals = list(goals) if goals is not None else subgoals(pddl_problem)
        self.reached = [False] * len(self.goals)

    def update(self, facts) -> int:
        """Mark the subgoals that hold in ``facts``; return how many have been reached in all."""
        if not self.goals:
            return 0
        state = State.of(facts)
        self.reached = [done or reached(goal, state) for goal, done in zip(self.goals, self.reached)]
        return sum(self.reached)


def game_progress(game_file) -> Progress:
    """A fresh :class:`Progress` for the game in ``game_file`` (its PDDL goal read from the engine's cache of
    compiled games, so loading the game into an engine and here reads the file once)."""
    from alfrl.world.engine import compiled
    return Progress(goals=game_subgoals(compiled(str(game_file)).data.get("pddl_problem", "")))


def replay_progress(engine, game_file, actions: list[str | None]) -> tuple[int, int]:
    """(subgoals reached, subgoals in all) when ``actions`` are replayed in ``engine`` (one made with
    ``make_fast_engine(facts=True)``): how far a trajectory recorded before subgoals were counted got.
    A reply without a tool call (None) does not step the game, as in a rollout."""
    engine.load(str(game_file))
    progress = game_progress(game_file)
    state = engine.reset()
    count = progress.update(state["facts"])
    for action in actions:
        if action is None:
            continue
        state, _, _ = engine.step(action)
        count = progress.update(state["facts"])
        if state["won"]:
            break
    return count, len(progress.goals)
