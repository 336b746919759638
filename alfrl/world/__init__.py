"""The world the agent acts in: ALFWorld's games, the offline generator, and the engine that plays them.

Taught in notebooks 00 (games, the expert, the generator, packs) and 01 (the engine and a group of game copies).
Imports only from :mod:`alfrl.base`.

Modules, in the order the course teaches them:

- :mod:`alfrl.world.games`    find, filter and split ALFWorld game files
- :mod:`alfrl.world.gamefile` a game on disk: folder name, traj_data.json, game.tw-pddl
- :mod:`alfrl.world.expert`   ALFWorld's handcoded expert, with the 0.4 "move" fix
- :mod:`alfrl.world.generate` the offline game generator
- :mod:`alfrl.world.rooms`    the generator's rooms: floor plans, receptacles, objects
- :mod:`alfrl.world.pddl`     ALFRED-style PDDL problems for generated rooms
- :mod:`alfrl.world.pack`     compact game packs in git, expanded on first use
- :mod:`alfrl.world.engine`   ALFWorld's text engine without the repeated work
- :mod:`alfrl.world.env`      GroupEnv: K copies of one game stepped together
- :mod:`alfrl.world.subgoals` a goal's subgoals, read from its PDDL and checked on the engine's facts (notebook 07)
"""
