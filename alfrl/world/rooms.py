"""Rooms and tasks for the offline generator, built from the floor plans alfworld ships.

Official ALFWorld games come from a download that classrooms and CI often cannot
reach. The ``alfworld`` package itself ships what a generator needs: the PDDL domain
and text grammar, the inventories of 120 AI2-THOR floor plans
(``alfworld/gen/layouts/FloorPlan*-objects.json`` and ``*-openable.json`` with one
pose per receptacle) and the object/receptacle tables in ``alfworld.gen.constants``.

For one game we:

1. pick a floor plan of the split (train/valid_seen: ALFRED's training scenes,
   valid_unseen: its held-out scenes) and a task type valid for that room type;
2. build the room (:func:`build_room`): the floor plan's receptacles at their real
   poses, plus the ones its ``openable.json`` leaves out (garbage cans, stove
   burners, toasters, ...), and 1-3 instances of each object type the scene has,
   each in a receptacle that can hold it (``VAL_RECEPTACLE_OBJECTS``);
3. choose targets so that the goal does not already hold (:func:`choose_task`);
4. render the problem in the format of ALFWorld's ``initial_state.pddl``
   (:mod:`alfrl.world.pddl`) and keep the game only if ALFWorld's handcoded expert solves it
   in the real engine (:func:`alfrl.world.expert.solve`), storing its walkthrough.

Everything is drawn from ``random.Random`` seeded by (seed, split, index, attempt),
so the same seed gives byte-identical games, whatever the number of workers.

Taught in docs/games.md (how the generator builds rooms).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from alfrl import TASK_TYPES

ALFRED_TRAIN_SCENES: tuple[int, ...] = tuple(list(range(7, 31)) + list(range(207, 231))
                                             + list(range(307, 331)) + list(range(407, 431)))
"""ALFRED's training floor plans (``constants.TRAIN_SCENE_NUMBERS``)."""
ALFWORLD_UNSEEN_SCENES: tuple[int, ...] = (10, 219, 308, 424)
"""The floor plans of ALFWorld's official valid_unseen games. They are in ALFRED's list above, but ALFRED
keeps them out of its train split, so a course that trains on them cannot call those games unseen."""
TRAIN_SCENES: tuple[int, ...] = tuple(s for s in ALFRED_TRAIN_SCENES if s not in ALFWORLD_UNSEEN_SCENES)
"""The floor plans the generated train split (everything that trains) draws from: ALFRED's training
floor plans without ALFWorld's four valid_unseen ones."""
UNSEEN_SCENES: tuple[int, ...] = tuple(list(range(1, 7)) + list(range(201, 207))
                                       + list(range(301, 307)) + list(range(401, 407)))
"""Floor plans never used for train (``constants.TEST_SCENE_NUMBERS``): the generated valid_unseen split."""

SPLIT_SCENES = {"train": TRAIN_SCENES, "valid_seen": ALFRED_TRAIN_SCENES, "valid_unseen": UNSEEN_SCENES}
"""The floor plans each generated split may use. Generated valid_seen keeps all of ALFRED's training
floor plans, as its committed games were made (5 of its 140 lie on the four above; nothing trains on it)."""
_DRAW_SCENES = {"train": ALFRED_TRAIN_SCENES, "valid_seen": ALFRED_TRAIN_SCENES, "valid_unseen": UNSEEN_SCENES}

ROOM_TYPES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231),
              "Bedroom": range(301, 331), "Bathroom": range(401, 431)}
TASK_ROOMS = {  # constants.GOALS_VALID
    "pick_and_place_simple": {"Kitchen", "LivingRoom", "Bathroom", "Bedroom"},
    "pick_two_obj_and_place": {"Kitchen", "LivingRoom", "Bathroom", "Bedroom"},
    "look_at_obj_in_light": {"LivingRoom", "Bedroom"},
    "pick_clean_then_place_in_recep": {"Kitchen", "Bathroom"},
    "pick_heat_then_place_in_recep": {"Kitchen"},
    "pick_cool_then_place_in_recep": {"Kitchen"},
}

# Receptacles the floor plans' openable.json often lacks: how many to add when absent.
# Counts are the means over the real valid_seen/valid_train games (see the issue note).
ADD_WHEN_ABSENT = {"StoveBurner": 4, "HandTowelHolder": 1, "TowelHolder": 1}
# Real games hold more cabinets/drawers/shelves than openable.json lists (9.9 vs 8.2 ...).
TOP_UP = {"Cabinet": 1.2, "Drawer": 1.18, "Shelf": 1.13}
STATION = {"pick_heat_then_place_in_recep": "Microwave",
           "pick_cool_then_place_in_recep": "Fridge",
           "pick_clean_then_place_in_recep": "SinkBasin"}
"""The receptacle a state-change task needs (a BathtubBasin also cleans)."""
LAMP_HOSTS = ("Desk", "SideTable", "Dresser", "Shelf", "Cabinet", "CoffeeTable", "TVStand")
"""Where a DeskLamp stands in a generated room."""


@dataclass
class SizeConfig:
    """How big a generated room is: the size knob for small CPU rooms.

    The defaults make rooms like the real ones; ``max_receptacles=6,
    max_object_types=6`` makes small rooms with short walkthroughs.
    """

    max_receptacles: int | None = None
    """Keep at most this many receptacles (the task's own are always kept). None: all."""
    max_object_types: int | None = None
    """Keep at most this many distractor object types besides the targets. None: all."""
    instances: tuple[float, float, float] = (0.45, 0.35, 0.2)
    """Probabilities of 1, 2 or 3 instances of each distractor object type."""


@dataclass
class Room:
    """A generated room: receptacles with locations and objects in receptacles."""

    scene: int
    receptacles: dict[str, tuple] = field(default_factory=dict)  # id -> pose (x, z, rot, hor)
    objects: dict[str, str] = field(default_factory=dict)  # object id -> receptacle id
    agent_pose: tuple = (0.0, 0.0, 0, 30)

    def receptacles_of(self, rtype: str) -> list[str]:
        return sorted(r for r in self.receptacles if receptacle_type(r) == rtype)

    def rtypes(self) -> set[str]:
        return {receptacle_type(r) for r in self.receptacles}


def receptacle_type(rid: str) -> str:
    """``Sink|-01.11|+00.93|+00.34|SinkBasin`` -> ``SinkBasin``; ``Cabinet|...`` -> ``Cabinet``."""
    parts = rid.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


def object_type(oid: str) -> str:
    return oid.split("|")[0]


@lru_cache(maxsize=None)
def _constants():
    import alfworld.gen.constants as constants
    return constants


@lru_cache(maxsize=None)
def floor_plan(scene: int) -> tuple[dict[str, list[float]], tuple[str, ...]]:
    """The ``openable.json`` receptacle poses and the ``objects.json`` type list of a scene."""
    layouts = resources.files("alfworld.gen") / "layouts"
    poses = json.loads((layouts / f"FloorPlan{scene}-openable.json").read_text())
    types = tuple(json.loads((layouts / f"FloorPlan{scene}-objects.json").read_text()))
    return poses, types


def room_type(scene: int) -> str:
    return next(name for name, scenes in ROOM_TYPES.items() if scene in scenes)


@lru_cache(maxsize=None)
def pickupable_types() -> frozenset[str]:
    """Object types that some receptacle can hold: the ones an agent can pick up."""
    c = _constants()
    held = {o for objs in c.VAL_RECEPTACLE_OBJECTS.values() for o in objs}
    return frozenset(o for o in held if o in c.OBJECTS and "Sliced" not in o)


def _coord(value: float) -> str:
    return f"{value:+06.2f}"


def _new_id(kind: str, rng: random.Random, taken: set[str], near: tuple | None = None,
            suffix: str = "") -> str:
    """A fresh ALFRED-style id ``Kind|x|y|z`` (plus ``|SinkBasin``-like suffix)."""
    while True:
        x0, z0 = (near[0], near[1]) if near else (0.0, 0.0)
        x = round(x0 + rng.uniform(-0.6, 0.6), 2)
        y = round(rng.uniform(0.0, 2.0), 2)
        z = round(z0 + rng.uniform(-0.6, 0.6), 2)
        rid = f"{kind}|{_coord(x)}|{_coord(y)}|{_coord(z)}" + (f"|{suffix}" if suffix else "")
        if rid not in taken:
            taken.add(rid)
            return rid


def _pose_near(rng: random.Random, poses: list[tuple]) -> tuple:
    x, z, _, _ = rng.choice(poses)
    return (round((x + rng.choice([-0.5, -0.25, 0.25, 0.5])) * 4) / 4,
            round((z + rng.choice([-0.5, -0.25, 0.25, 0.5])) * 4) / 4,
            rng.choice([0, 90, 180, 270]), 30)


def build_receptacles(scene: int, rng: random.Random) -> dict[str, tuple]:
    """Receptacles of a floor plan: the real poses, plus the ones openable.json lacks."""
    c = _constants()
    poses, types = floor_plan(scene)
    receptacles = {rid: tuple(p) for rid, p in sorted(poses.items())
                   if receptacle_type(rid) in c.VAL_RECEPTACLE_OBJECTS
                   and receptacle_type(rid) not in c.MOVABLE_RECEPTACLES_SET}
    if not receptacles:
        raise ValueError(f"FloorPlan{scene} has no receptacle poses")
    taken = set(receptacles)
    known = list(receptacles.values())
    present = {receptacle_type(r) for r in receptacles}
    scene_types = set(types) | ({"SinkBasin"} if "Sink" in types else set()) \
        | ({"BathtubBasin"} if "Bathtub" in types else set())
    wanted = sorted(t for t in scene_types if t in c.VAL_RECEPTACLE_OBJECTS
                    and t not in c.MOVABLE_RECEPTACLES_SET)
    for rtype in wanted:
        have = sum(receptacle_type(r) == rtype for r in receptacles)
        if have == 0:
            add = ADD_WHEN_ABSENT.get(rtype, 1)
        else:
            share = have * TOP_UP.get(rtype, 1.0) - have
            add = int(share) + (rng.random() < share - int(share))
        for _ in range(add):
            pose = _pose_near(rng, known)
            if rtype in ("SinkBasin", "BathtubBasin"):
                kind = "Sink" if rtype == "SinkBasin" else "Bathtub"
                rid = _new_id(kind, rng, taken, pose, suffix=rtype)
            else:
                rid = _new_id(rtype, rng, taken, pose)
            receptacles[rid] = pose
    return receptacles


def holders(room: Room, otype: str) -> list[str]:
    """Receptacles of ``room`` that can hold an object of type ``otype``."""
    table = _constants().VAL_RECEPTACLE_OBJECTS
    return sorted(r for r in room.receptacles if otype in table.get(receptacle_type(r), ()))


@dataclass
class Task:
    """A task of one of the six types, in ALFRED's ``pddl_params`` vocabulary."""

    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""
    mrecep_target: str = ""

    def pddl_params(self) -> dict:
        return {"mrecep_target": self.mrecep_target, "object_sliced": False,
                "object_target": self.object_target, "parent_target": self.parent_target,
                "toggle_target": self.toggle_target}


def choose_task(task_type: str, scene: int, room: Room, rng: random.Random) -> Task | None:
    """Pick object and receptacle targets for ``task_type`` that this room supports."""
    c = _constants()
    _, types = floor_plan(scene)
    rtypes = room.rtypes()
    candidates = sorted(set(types) & pickupable_types())
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in types or not any(holders(room, t) for t in candidates):
            return None
        lamp_hosts = [r for r in room.receptacles if receptacle_type(r) in LAMP_HOSTS]
        if not lamp_hosts:
            return None
        objs = [t for t in candidates if holders(room, t)]
        return Task(task_type, rng.choice(objs), toggle_target="DeskLamp")
    action = {"pick_heat_then_place_in_recep": "Heatable",
              "pick_cool_then_place_in_recep": "Coolable",
              "pick_clean_then_place_in_recep": "Cleanable"}.get(task_type)
    if action:
        candidates = [t for t in candidates if t in c.VAL_ACTION_OBJECTS[action]]
        station = STATION[task_type]
        if station not in rtypes and not (station == "SinkBasin" and "BathtubBasin" in rtypes):
            return None
    options = []
    for otype in candidates:
        for parent in sorted(rtypes):
            if otype not in c.VAL_RECEPTACLE_OBJECTS.get(parent, ()):
                continue
            if action and parent in (STATION[task_type], "BathtubBasin"):
                continue  # "heat X and put it in the microwave" is not an ALFRED task
            if len([r for r in holders(room, otype) if receptacle_type(r) != parent]) == 0:
                continue  # nowhere to start the object except its goal
            options.append((otype, parent))
    if not options:
        return None
    otype, parent = rng.choice(options)
    return Task(task_type, otype, parent_target=parent)


def populate(room: Room, task: Task, types: tuple[str, ...], size: SizeConfig,
             rng: random.Random) -> None:
    """Place the task's objects and distractors in the room, so the goal does not hold yet."""
    taken = set(room.receptacles)
    goal_parent = task.parent_target

    def place(otype: str, n: int, avoid_parent: bool) -> int:
        spots = [r for r in holders(room, otype)
                 if not (avoid_parent and receptacle_type(r) == goal_parent)]
        for _ in range(n if spots else 0):
            rid = rng.choice(spots)
            oid = _new_id(otype, rng, taken, room.receptacles[rid])
            room.objects[oid] = rid
        return len(spots)

    n_target = rng.randint(2, 4) if task.task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
    place(task.object_target, n_target, avoid_parent=True)
    if task.toggle_target:
        host = rng.choice(sorted(r for r in room.receptacles if receptacle_type(r) in LAMP_HOSTS))
        room.objects[_new_id("DeskLamp", rng, taken, room.receptacles[host])] = host
    distractors = sorted(set(types) & pickupable_types() - {task.object_target})
    rng.shuffle(distractors)
    if size.max_object_types is not None:
        distractors = distractors[:size.max_object_types]
    for otype in sorted(distractors):
        n = rng.choices((1, 2, 3), weights=size.instances)[0]
        # Distractors of the target's type would be targets; others may sit anywhere.
        place(otype, n, avoid_parent=False)


def shrink(room: Room, task: Task, size: SizeConfig, rng: random.Random) -> None:
    """Drop receptacles beyond ``size.max_receptacles``, keeping those the task needs.

    The task needs one receptacle of its goal type, one of its station (microwave,
    fridge, sink or bathtub basin), the lamp's host and where its targets lie (two
    targets for pick-two, else one): at most 6, so the cap holds for any cap >= 6.
    """
    if size.max_receptacles is None or len(room.receptacles) <= size.max_receptacles:
        return
    types = [task.parent_target, STATION.get(task.task_type, "")]
    if task.task_type == "pick_clean_then_place_in_recep":
        types.append("BathtubBasin")
    needed = {rng.choice(room.receptacles_of(t)) for t in types if room.receptacles_of(t)}
    targets = sorted(o for o in room.objects if object_type(o) == task.object_target)
    k = 2 if task.task_type == "pick_two_obj_and_place" else 1
    needed |= {room.objects[o] for o in rng.sample(targets, min(k, len(targets)))}
    needed |= {r for o, r in room.objects.items() if object_type(o) == task.toggle_target}
    others = sorted(set(room.receptacles) - needed)
    rng.shuffle(others)
    keep = needed | set(others[:max(0, size.max_receptacles - len(needed))])
    room.receptacles = {r: p for r, p in room.receptacles.items() if r in keep}
    room.objects = {o: r for o, r in room.objects.items() if r in keep}


def agent_start(room: Room, rng: random.Random) -> tuple:
    """A pose near the room's centre that no receptacle stands at."""
    poses = list(room.receptacles.values())
    used = {(p[0], p[1], p[2], p[3]) for p in poses}
    cx = round(sum(p[0] for p in poses) / len(poses) * 4) / 4
    cz = round(sum(p[1] for p in poses) / len(poses) * 4) / 4
    for step in range(100):
        pose = (cx + 0.25 * (step % 3), cz + 0.25 * (step // 3), rng.choice([0, 90, 180, 270]), 30)
        if pose not in used:
            return pose
    raise RuntimeError("no free start location")


def make_room(task_type: str, scene: int, size: SizeConfig, rng: random.Random) -> tuple[Room, Task] | None:
    """Build a room for ``task_type`` in ``scene``; None if the scene cannot host the task."""
    room = Room(scene=scene, receptacles=build_receptacles(scene, rng))
    task = choose_task(task_type, scene, room, rng)
    if task is None:
        return None
    populate(room, task, floor_plan(scene)[1], size, rng)
    shrink(room, task, size, rng)
    targets = [o for o in room.objects if object_type(o) == task.object_target]
    if len(targets) < (2 if task_type == "pick_two_obj_and_place" else 1):
        return None
    room.agent_pose = agent_start(room, rng)
    return room, task


def scenes_for(task_type: str, split: str) -> list[int]:
    """The floor plans of ``split`` whose room type can host ``task_type``."""
    return [s for s in SPLIT_SCENES[split] if room_type(s) in TASK_ROOMS[task_type]]


def draw_scene(task_type: str, split: str, rng: random.Random) -> int | None:
    """A floor plan for one attempt at a game of ``split``; None when the draw lands on one the split
    excludes (ALFWorld's valid_unseen floor plans, for train), and the caller tries its next attempt.

    The draw is over ALFRED's whole list for the split, as before the exclusion, so every game of a seed
    that was not on an excluded floor plan comes out byte-identical to the one made then.
    """
    pool = [s for s in _DRAW_SCENES[split] if room_type(s) in TASK_ROOMS[task_type]]
    scene = rng.choice(pool)
    return scene if scene in SPLIT_SCENES[split] else None

