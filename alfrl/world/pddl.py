"""Write a generated room and task as an ALFWorld game: PDDL problem, traj_data, game file.

The problem follows the layout of ALFWorld's ``initial_state.pddl`` files: every
object and receptacle type declared, mangled instance names
(``Mug|+00.32|...`` -> ``Mug_bar__plus_00_dot_32_bar_...``), locations
``loc|x|z|rot|hor`` with x, z in quarter metres, ``canContain`` facts for the
receptacle types present, and the goal from ALFWorld's own goal library.
The game file itself (JSON with the domain, grammar, problem and walkthrough) is
:mod:`alfrl.world.gamefile`'s; its helpers are re-exported here.

Taught in notebook 00 and docs/games.md (what a generated game holds).
"""

from __future__ import annotations

from alfrl.world.gamefile import domain_text, game_json, grammar_text, grammar_with_goal  # noqa: F401 (re-exported)
from alfrl.world.rooms import Room, Task, _constants, object_type, receptacle_type


def mangle(name: str) -> str:
    """ALFRED's PDDL-safe names (``PlannedGameState.fix_pddl_str_chars``)."""
    for old, new in (("-", "_minus_"), ("#", "-"), ("|", "_bar_"), ("+", "_plus_"),
                     (".", "_dot_"), (",", "_comma_")):
        name = name.replace(old, new)
    return name


def location(pose: tuple) -> str:
    """``loc|x|z|rot|hor`` for a pose in metres/degrees, mangled."""
    x, z, rot, hor = pose
    return mangle(f"loc|{int(round(x / 0.25))}|{int(round(z / 0.25))}|{int(rot) // 90}|{int(hor)}")


def goal_text(task: Task, template_index: int) -> str:
    """One of ALFWorld's templated task texts, e.g. ``put a clean mug in coffeemachine``."""
    import alfworld.gen.goal_library as glib

    template = glib.gdict[task.task_type]["templates"][template_index]
    return template.format(obj=task.object_target.lower(), recep=task.parent_target.lower(),
                           toggle=task.toggle_target.lower(), mrecep=task.mrecep_target.lower())


def problem(room: Room, task: Task, name: str) -> str:
    """The PDDL problem text of ``room`` with ``task`` as its goal."""
    import alfworld.gen.goal_library as glib

    c = _constants()
    rtypes_all = sorted(set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES))
    otypes_all = sorted(set(c.OBJECTS_SET) - set(rtypes_all))
    objs = sorted(room.objects)
    receps = sorted(room.receptacles)
    locs = sorted({location(p) for p in room.receptacles.values()} | {location(room.agent_pose)})
    present_otypes = {object_type(o) for o in objs}
    present_rtypes = sorted({receptacle_type(r) for r in receps})

    decl = ["agent1 - agent"]
    decl += [f"{t} - object" for t in otypes_all]
    decl += [f"{t}Type - otype" for t in otypes_all]
    decl += [f"{t}Type - rtype" for t in rtypes_all]
    decl += [f"{mangle(o)} - object" for o in objs]
    decl += [f"{mangle(r)} - receptacle" for r in receps]
    decl += [f"{loc} - location" for loc in locs]

    init = [f"(atLocation agent1 {location(room.agent_pose)})"]
    for rtype in present_rtypes:
        init += [f"(canContain {rtype}Type {o}Type)"
                 for o in sorted(c.VAL_RECEPTACLE_OBJECTS.get(rtype, ())) if o in present_otypes]
    for r in receps:
        rtype = receptacle_type(r)
        init.append(f"(receptacleType {mangle(r)} {rtype}Type)")
        if rtype in c.OPENABLE_CLASS_SET:
            init.append(f"(openable {mangle(r)})")
        init.append(f"(receptacleAtLocation {mangle(r)} {location(room.receptacles[r])})")
    actions = c.VAL_ACTION_OBJECTS
    for o in objs:
        otype, m = object_type(o), mangle(o)
        init.append(f"(objectType {m} {otype}Type)")
        if otype in c.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {m})")
        for flag, key in (("pickupable", None), ("cleanable", "Cleanable"), ("heatable", "Heatable"),
                          ("coolable", "Coolable"), ("sliceable", "Sliceable"),
                          ("toggleable", "Toggleable")):
            if (key is None and otype != "DeskLamp") or (key and otype in actions[key]):
                init.append(f"({flag} {m})")
        init.append(f"(inReceptacle {m} {mangle(room.objects[o])})")
        init.append(f"(objectAtLocation {m} {location(room.receptacles[room.objects[o]])})")

    goal = glib.gdict[task.task_type]["pddl"].format(
        obj=task.object_target, recep=task.parent_target, toggle=task.toggle_target,
        mrecep=task.mrecep_target).replace("#", "-")
    indent = "\n        "
    return (f"\n(define (problem {name})\n(:domain alfred)\n(:objects{indent}"
            + indent.join(decl) + "\n        )\n\n(:init" + indent + indent.join(init)
            + "\n        )\n" + goal)
