"""Find, filter and split ALFWorld games, generated or downloaded, in ALFWorld's own layout.

Layout (what ``alfworld-download`` gives, and what ``python -m alfrl generate`` writes)::

    <root>/<split>/<task>-<Obj>-<Mrecep>-<Parent>-<scene>/<trial>/game.tw-pddl
                                                           /<trial>/traj_data.json

The filter is ALFWorld's own (``AlfredTWEnv.collect_game_files``): the six task
types, ``solvable: true``, and no path containing ``movable`` or ``Sliced``.

Taught in notebook 00 (ALFWorld's filter and splits); every later notebook loads games with it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from alfrl import TASK_TYPES
from alfrl.base.paths import games_dir

SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
GOAL_RE = re.compile(r'"rhs": "Your task is to: (.*?)\."')


class GameDataError(Exception):
    """Game data is missing or broken; the message says which file and what to do."""


HOW_TO_GET_GAMES = (
    "Get games in one of two ways:\n"
    "  * the course's generated games: `python -m alfrl setup` (expands data/packs into data/games),\n"
    "    or make new ones with `python -m alfrl generate --out DIR`;\n"
    "  * ALFWorld's official games: `alfworld-download` puts them in $ALFWORLD_DATA/json_2.1.1\n"
    "    (default ~/.cache/alfworld/json_2.1.1); pass that folder as the data dir.")


REPAIR = ("Delete that game's folder, then `python -m alfrl setup` writes it again (the course's generated "
          "games; setup restores every game missing from its pack), or download or generate the games again.")


@dataclass(frozen=True)
class GameSpec:
    """One playable game: where it is and what it asks for."""

    path: Path
    """The ``game.tw-pddl`` file."""
    split: str
    task_type: str
    goal: str
    """The task text the player reads, e.g. ``put a clean mug in coffeemachine``."""
    walkthrough: tuple[str, ...]
    """The handcoded expert's winning command list (starts with ``look``)."""
    scene: int
    object_target: str
    parent_target: str
    toggle_target: str
    receptacles: int = 0
    """How many receptacles the room has (about one "go to" action each): ~5-20 in bathrooms and bedrooms,
    up to 60 in big kitchens. Every tool result lists an action per receptacle, so small rooms
    mean short prompts."""

    @property
    def game_id(self) -> str:
        """``<task>-<Obj>-<Mrecep>-<Parent>-<scene>/<trial>``: unique within a split."""
        return f"{self.path.parent.parent.name}/{self.path.parent.name}"


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GameDataError(f"{path}: {what} is missing.\n{HOW_TO_GET_GAMES}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GameDataError(f"{path}: corrupt or truncated {what} ({e}). {REPAIR}\n{HOW_TO_GET_GAMES}") from None
    if not isinstance(data, dict):
        raise GameDataError(f"{path}: {what} is not a JSON object; the file is corrupt.\n{HOW_TO_GET_GAMES}")
    return data


def read_game(path: Path, split: str = "") -> GameSpec | None:
    """Read one game; None when ALFWorld's filter drops it (unsolvable, other task type).

    Raises :class:`GameDataError` naming the file if it is corrupt or incomplete.
    """
    path = Path(path)
    traj = _read_json(path.parent / "traj_data.json", "traj_data.json")
    task_type = traj.get("task_type")
    if task_type not in TASK_TYPES:
        return None
    game = _read_json(path, "game file")
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem", "solvable") if k not in game]
    params = traj.get("pddl_params")
    if missing or not isinstance(params, dict):
        what = f"keys {missing}" if missing else "traj_data 'pddl_params'"
        raise GameDataError(f"{path}: not a complete ALFWorld game (no {what}). Rebuild it.\n{HOW_TO_GET_GAMES}")
    damage = _problem_damage(game["pddl_problem"])
    if damage:
        raise GameDataError(f"{path}: the game's PDDL problem is damaged ({damage}). {REPAIR}\n{HOW_TO_GET_GAMES}")
    if not game["solvable"]:
        return None
    goal = GOAL_RE.search(game["grammar"])
    if not goal:
        raise GameDataError(f"{path}: the grammar has no task text; the file is corrupt or was made "
                            f"without `add_task_to_grammar`.\n{HOW_TO_GET_GAMES}")
    return GameSpec(path=path, split=split or path.parent.parent.parent.name, task_type=task_type,
                    goal=goal.group(1), walkthrough=tuple(game.get("walkthrough") or ()),
                    scene=int(traj.get("scene", {}).get("scene_num", -1)),
                    object_target=params.get("object_target") or "",
                    parent_target=params.get("parent_target") or "",
                    toggle_target=params.get("toggle_target") or "",
                    receptacles=game["pddl_problem"].count("(receptacleType "))


def _problem_damage(problem) -> str | None:
    """What is wrong with a PDDL problem at a glance (a few string scans, so every game read is
    checked: a truncated or garbled problem), or None. :func:`check_games` parses it for real."""
    if not isinstance(problem, str):
        return f"pddl_problem is a JSON {type(problem).__name__}, not text"
    text = re.sub(r";[^\n]*", "", problem).lower()  # PDDL comments may hold brackets
    opened, closed = text.count("("), text.count(")")
    if opened != closed:
        return f"{opened} '(' but {closed} ')': cut short or garbled"
    missing = [s for s in ("(define", "(:objects", "(:init", "(:goal") if s not in text]
    return f"no {', '.join(missing)}" if missing else None


_PARSED_DOMAINS: dict[str, list] = {}
"""Parsed PDDL domains by their text's SHA-256: every game of a data dir shares one, parsed once."""


def check_games(games: list[GameSpec]) -> None:
    """Parse each game's PDDL domain and problem as the engine will (fast_downward's parser, about 5 ms a
    game, without the engine's translation) and check that every object the initial state names is
    declared; a :class:`GameDataError` naming the first damaged file and what to do. Run it on the games
    about to be played, before a run or evaluation folder is made."""
    import contextlib
    import hashlib
    import io
    import sys
    argv = sys.argv
    sys.argv = ["translate.py", "domain", "task"]  # fast_downward's options read sys.argv when imported
    try:
        from fast_downward.translate import pddl as downward_pddl
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
    finally:
        sys.argv = argv
    for spec in games:
        game = _read_json(spec.path, "game file")
        try:
            key = hashlib.sha256(game["pddl_domain"].encode()).hexdigest()
            if key not in _PARSED_DOMAINS:
                _PARSED_DOMAINS[key] = lisp_parser.parse_nested_list(game["pddl_domain"].split("\n"))
            problem = lisp_parser.parse_nested_list(game["pddl_problem"].split("\n"))
            with contextlib.redirect_stdout(io.StringIO()):
                task = parsing_functions.parse_task(_PARSED_DOMAINS[key], problem)
            declared = {o.name for o in task.objects}
            for atom in task.init:
                args = atom.args if isinstance(atom, downward_pddl.Atom) else getattr(
                    getattr(atom, "fluent", None), "args", ())
                undeclared = [a for a in args if a not in declared]
                if undeclared:
                    raise ValueError(f"the initial state names undeclared objects {undeclared}")
        except Exception as e:  # the parser's ParseError, AssertionError, KeyError, ... all mean damage
            raise GameDataError(f"{spec.path}: the game's PDDL cannot be parsed ({type(e).__name__}: {e}). "
                                f"{REPAIR}\n{HOW_TO_GET_GAMES}") from None


def find_game_files(split_dir: Path) -> list[Path]:
    """``game.tw-pddl`` files under a split folder, sorted, without movable/Sliced trials."""
    files = sorted(Path(split_dir).glob("*/*/game.tw-pddl"))
    # Only the game's own folders count: a data dir under, say, ~/Sliced/ must not lose every game.
    trials = [(f, str(f.parent.relative_to(split_dir))) for f in files]
    return [f for f, t in trials if "movable" not in t and "Sliced" not in t]


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder holding split folders. Accepts ``$ALFWORLD_DATA`` (with ``json_2.1.1`` inside), and a
    folder of game packs such as ``data/heldout`` (expanded once, see :func:`alfrl.world.pack.expand_folder`).

    With no argument: ``$ALFRL_DATA_DIR`` or ``data/games``, expanded from the committed
    packs on first use.
    """
    if data_dir is None:
        from alfrl.world.pack import default_packs, ensure_games
        root = games_dir()
        if default_packs():
            ensure_games(root)
    else:
        root = Path(data_dir).expanduser()
        if root.is_dir() and any(root.glob("*.jsonl.xz")) and not any((root / s).is_dir() for s in SPLITS):
            from alfrl.world.pack import expand_folder
            root = expand_folder(root)  # a folder of game packs (data/heldout): their games, expanded once
    if not root.is_dir():
        raise GameDataError(f"data dir {root} does not exist.\n{HOW_TO_GET_GAMES}")
    if (root / "json_2.1.1").is_dir() and not any((root / s).is_dir() for s in SPLITS):
        root = root / "json_2.1.1"
    return root


def available_splits(data_dir: str | Path | None = None) -> list[str]:
    """The split folders of the data dir that hold game files; an error if there are none."""
    root = resolve_data_dir(data_dir)
    splits = sorted(p.name for p in root.iterdir() if p.is_dir() and find_game_files(p))
    if not splits:
        raise GameDataError(f"{root} holds no games (expected <split>/<task>-.../<trial>/game.tw-pddl)."
                            f"\n{HOW_TO_GET_GAMES}")
    return splits


def load_games(split: str, data_dir: str | Path | None = None, task_types: tuple[str, ...] | None = None,
               limit: int | None = None, seed: int | None = None, max_expert_steps: int | None = None,
               max_receptacles: int | None = None) -> list[GameSpec]:
    """The playable games of ``split``: sorted by game id, or shuffled by ``seed``.

    ``task_types`` keeps only those types; ``max_expert_steps`` only games the expert solves in at
    most that many steps; ``max_receptacles`` only rooms that small; ``limit`` takes the first
    games after filtering and ordering.
    """
    root = resolve_data_dir(data_dir)
    split_dir = root / split
    if not split_dir.is_dir():
        have = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise GameDataError(f"no split {split!r} in {root} (found: {have or 'nothing'}).\n{HOW_TO_GET_GAMES}")
    unknown = set(task_types or ()) - set(TASK_TYPES)
    if unknown:
        raise ValueError(f"unknown task types {sorted(unknown)}; choose from {list(TASK_TYPES)}")
    games = [g for f in find_game_files(split_dir) if (g := read_game(f, split)) is not None
             and (task_types is None or g.task_type in task_types)]
    if not games:
        raise GameDataError(f"{split_dir} holds no playable games.\n{HOW_TO_GET_GAMES}")
    small = [g for g in games if (not max_expert_steps or len(g.walkthrough) <= max_expert_steps)
             and (not max_receptacles or g.receptacles <= max_receptacles)]
    if not small:
        raise ValueError(f"none of the {len(games)} {split} games has at most {max_expert_steps} expert steps "
                         f"and {max_receptacles} receptacles; raise --max-expert-steps / --max-receptacles")
    games = small
    games.sort(key=lambda g: g.game_id)
    if seed is not None:
        games = shuffled(games, seed)
    return games[:limit] if limit is not None else games


def shuffled(games: list[GameSpec], seed: int) -> list[GameSpec]:
    """A copy of ``games`` in a seeded order (the same seed always gives the same order)."""
    order = sorted(games, key=lambda g: g.game_id)
    random.Random(seed).shuffle(order)
    return order


def by_task(games: list[GameSpec]) -> dict[str, list[GameSpec]]:
    """Games grouped by task type, in ALFWorld's task order."""
    return {t: [g for g in games if g.task_type == t] for t in TASK_TYPES if any(g.task_type == t for g in games)}
