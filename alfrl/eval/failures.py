"""How a lost episode fails: it took the wrong object, it looped, it ran out of steps.

A success rate says how often the agent wins; these say why it does not, in the terms a fix is made
in. Each is read from the episode's own turns (an evaluation record carries its trajectory):

- **wrong object**: the first thing it picked up (``take <object> <n> from ...``) is not of the task's
  object type (the type is in the game's id: ``pick_and_place_simple-Mug-None-Desk-301/...``);
- **took nothing**: it never picked anything up (every ALFWorld task starts by taking an object);
- **loop**: its last :data:`LOOP_WINDOW` actions are at most two distinct ones (back and forth, or
  the same command again);
- **out of steps**: it was still playing when the turn limit ended it (``end_reason`` "max_steps").

:func:`first_stop` says where an episode carried the object it took (the goal, or a sinkbasin a clean task
would visit next). An episode can fail in several ways at once; :func:`failure_shares` gives each one's share of the
lost episodes.

Taught in notebook 06 (the failed episodes).
"""

from __future__ import annotations

LOOP_WINDOW = 6
"""Turns at the end of an episode that a loop is looked for in."""
MODES = ("wrong object", "took nothing", "loop", "out of steps")


def _id_parts(game_id: str) -> list[str]:
    parts = game_id.split("/")[0].split("-")
    if len(parts) < 5:
        raise ValueError(f"{game_id!r} is not an ALFWorld game id (<task>-<Object>-<Movable>-<Receptacle>-<scene>)")
    return parts


def task_object(game_id: str) -> str:
    """The task's object type, lower case as actions spell it: "mug" for
    ``pick_and_place_simple-Mug-None-Desk-301/trial_...``."""
    return _id_parts(game_id)[1].lower()


def goal_receptacle(game_id: str) -> str:
    """The kind of receptacle the task's object goes to, lower case as actions spell it: "desk" for
    ``pick_and_place_simple-Mug-None-Desk-301/trial_...``."""
    return _id_parts(game_id)[3].lower()


def first_taken(actions: list[str | None]) -> str | None:
    """The object type of the first ``take`` among ``actions`` (None if nothing was taken)."""
    for action in actions:
        words = (action or "").split()
        if len(words) >= 2 and words[0] == "take":
            return words[1]
    return None


def first_stop(actions: list[str | None], goal: str) -> str:
    """Where an episode went first once it held an object: "goal" (a receptacle of the ``goal`` kind),
    "sinkbasin" (a clean task's next stop), "elsewhere", "stayed" (it took something and went nowhere after)
    or "never took". Pass the turns that moved the game (None for the others; they are skipped)."""
    holding = False
    for action in actions:
        words = (action or "").split()
        if words[:1] == ["take"]:
            holding = True
        elif holding and words[:2] == ["go", "to"]:
            place = " ".join(words[2:-1])  # "go to sinkbasin 1" -> "sinkbasin"
            return "goal" if place == goal else "sinkbasin" if place == "sinkbasin" else "elsewhere"
    return "stayed" if holding else "never took"


def failure_modes(game_id: str, actions: list[str | None], end_reason: str) -> dict[str, bool]:
    """Which of :data:`MODES` a lost episode shows, from its actions (None: a turn with no valid call;
    only the turns that moved the game should be passed) and why it ended."""
    taken = first_taken(actions)
    tail = actions[-LOOP_WINDOW:]
    return {"wrong object": taken is not None and taken != task_object(game_id),
            "took nothing": taken is None,
            "loop": len(tail) == LOOP_WINDOW and len(set(tail)) <= 2,
            "out of steps": end_reason == "max_steps"}


def record_modes(record: dict) -> dict[str, bool]:
    """:func:`failure_modes` of an evaluation record (``alfrl.eval.evaluate``), from the admissible actions
    of its stored trajectory."""
    turns = record["trajectory"]["turns"]
    return failure_modes(record["game_id"], [t["action"] for t in turns if t["admissible"]], record["end_reason"])


def failure_shares(records: list[dict]) -> dict[str, float | int]:
    """The share of the lost episodes among ``records`` that show each mode, and how many were lost."""
    lost = [record_modes(r) for r in records if not r["won"]]
    return {"lost": len(lost), **{m: sum(x[m] for x in lost) / len(lost) if lost else 0.0 for m in MODES}}
