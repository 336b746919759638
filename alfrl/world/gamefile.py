"""An ALFWorld game on disk: the folder name, ``traj_data.json`` and the ``game.tw-pddl`` file.

The small layer that both the generator (:mod:`alfrl.world.generate`, which makes new games) and the
packs (:mod:`alfrl.world.pack`, which expand committed games into files) write through, so that finding
and loading games never imports the generator, the expert or TextWorld. The game file is what
``alfworld-generate`` writes: JSON with ``pddl_domain``, ``grammar`` (the task text added),
``pddl_problem``, ``solvable``, ``walkthrough``; the domain and grammar ship with ``alfworld``.
Taught in notebook 00 (what a game is made of).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path


@lru_cache(maxsize=None)
def domain_text() -> str:
    """ALFWorld's PDDL domain (the same in every game)."""
    return (resources.files("alfworld") / "data" / "alfred.pddl").read_text()


@lru_cache(maxsize=None)
def grammar_text() -> str:
    """ALFWorld's text grammar, before the task text is filled in."""
    return (resources.files("alfworld") / "data" / "alfred.twl2").read_text()


def grammar_with_goal(goal: str) -> str:
    """The grammar with the task text filled in, as ``add_task_to_grammar`` does."""
    return grammar_text().replace("UNKNOWN GOAL", goal)


def game_json(pddl_problem: str, goal: str, walkthrough: list[str] | None) -> str:
    """The ``game.tw-pddl`` text, byte for byte as :func:`alfrl.world.pack.expand` rebuilds it."""
    return json.dumps({"pddl_domain": domain_text(), "grammar": grammar_with_goal(goal),
                       "pddl_problem": pddl_problem, "solvable": walkthrough is not None,
                       "walkthrough": walkthrough})


def game_id(record: dict) -> str:
    """ALFWorld's folder name: ``<task>-<Obj>-<Mrecep>-<Parent>-<scene>/<trial>``."""
    p = record["pddl_params"]
    parent = p["toggle_target"] or p["parent_target"]
    return (f"{record['task_type']}-{p['object_target']}-{p['mrecep_target'] or 'None'}-"
            f"{parent}-{record['scene']}/{record['task_id']}")


def traj_data(record: dict) -> dict:
    """The ``traj_data.json`` of a game: what ALFWorld's loader and filter read (task type, goal texts)."""
    return {"task_id": record["task_id"], "task_type": record["task_type"],
            "pddl_params": record["pddl_params"],
            "scene": {"floor_plan": f"FloorPlan{record['scene']}", "scene_num": record["scene"]},
            "turk_annotations": {"anns": [{"task_desc": g} for g in record["goals"]]}}


def write_game(record: dict, root: Path) -> Path:
    """Write ``game.tw-pddl`` + ``traj_data.json`` of a record under ``root``; return the game file."""
    folder = Path(root) / game_id(record)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traj_data.json").write_text(json.dumps(traj_data(record), indent=2))
    game = folder / "game.tw-pddl"
    game.write_text(game_json(record["pddl_problem"], record["goal"], record["walkthrough"]))
    return game
