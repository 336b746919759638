"""alfrl: agentic reinforcement learning for LLMs on ALFWorld, a hands-on course.

The package has one subpackage for each part of the course, and they form floors: each imports only from the
floors below it (``tests/test_layers.py`` checks this, and that no imports run in a circle)::

    alfrl/__main__.py   python -m alfrl: every command
    training/           the training run: settings, the loop, its curves          notebook 05 (07)
    imitation/  eval/   learning from examples | measuring a policy (side by side)  02, 07 | 06
    rl/                 rollouts, credit, the clipped update                         03, 04, 05, 08
    agent/              the model, the tool protocol, sampling                       02, 03
    world/              games, the generator, the engine                             00, 01
    base/               paths, settings checks, run folders, checkpoints             (every part)

- :mod:`alfrl.base`      paths, checks, cli, rundir, checkpoint, tracking
- :mod:`alfrl.world`     games, gamefile, expert, generate, rooms, pddl, pack, engine, env, subgoals
- :mod:`alfrl.agent`     bundled, models, protocol, sampler, kvcache, attention, precision, vllm_engine
- :mod:`alfrl.rl`        trajectory, rollout, scripted, viewer, advantage, gigpo, logprobs, prefix, ppo, context
- :mod:`alfrl.eval`      evaluate, eval_stats, eval_report, failures, practice, scale
- :mod:`alfrl.imitation` sft, label_kinds, dagger, rft, dpo
- :mod:`alfrl.training`  train_config, train, train_eval, plots, trl_bridge

Each subpackage's own docstring lists its modules in teaching order, one line each; ``docs/modules.md`` is the
same map with a line for every module.
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
