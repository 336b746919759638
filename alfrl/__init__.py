"""alfrl: agentic reinforcement learning for LLMs on ALFWorld, a hands-on course.

Modules follow the order the course teaches them:

- :mod:`alfrl.games`    find, filter and split ALFWorld game files
- :mod:`alfrl.expert`   ALFWorld's handcoded expert, with the 0.4 "move" fix
- :mod:`alfrl.generate` the offline game generator (ALFRED-style PDDL problems)
- :mod:`alfrl.pack`     compact game packs in git, expanded on first use
"""

__version__ = "0.1.0"

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""The six ALFWorld task types, in ALFWorld's own order (its ``TASK_TYPES`` 1-6)."""
