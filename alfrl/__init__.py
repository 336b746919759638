"""alfrl: agentic reinforcement learning for LLMs on ALFWorld, a hands-on course.

Modules follow the order the course teaches them:

- :mod:`alfrl.paths`    where the data lives: data/packs (in git), data/games (expanded)
- :mod:`alfrl.games`    find, filter and split ALFWorld game files
- :mod:`alfrl.gamefile` a game on disk: folder name, traj_data.json, game.tw-pddl
- :mod:`alfrl.expert`   ALFWorld's handcoded expert, with the 0.4 "move" fix
- :mod:`alfrl.generate` the offline game generator
- :mod:`alfrl.rooms`    the generator's rooms: floor plans, receptacles, objects
- :mod:`alfrl.pddl`     ALFRED-style PDDL problems for generated rooms
- :mod:`alfrl.pack`     compact game packs in git, expanded on first use
- :mod:`alfrl.engine`   ALFWorld's text engine without the repeated work
- :mod:`alfrl.env`      GroupEnv: K copies of one game stepped together
- :mod:`alfrl.subgoals` a goal's subgoals, read from its PDDL and checked on the engine's facts
- :mod:`alfrl.bundled`  the bundled small model, from the package registry (no model hub)
- :mod:`alfrl.models`   the policy (hub id, local dir, bundled small model) and LoRA adapters
- :mod:`alfrl.protocol` the alfworld_step tool, prompts, parsing, token-exact prompt growth
- :mod:`alfrl.kvcache`  a batched KV cache for a group's branches (bfloat16 prefill optional)
- :mod:`alfrl.attention`  grouped-query attention that reads each cached key/value head once
- :mod:`alfrl.sampler`  KV-cached, batched, seeded sampling with logprobs; speculative decoding by prompt lookup
- :mod:`alfrl.trajectory` a played trajectory: turns, tokens, sampled-token mask, JSONL
- :mod:`alfrl.rollout`  group rollouts, one turn at a time: sample, parse, step, extend the prompt
- :mod:`alfrl.context`  the context budget: a recorded game rendered under each action-list protocol
- :mod:`alfrl.scripted` scripted replies (the expert) through the real rollout
- :mod:`alfrl.vllm_engine` vLLM as an optional rollout engine: a server in its own venv, behind the sampler's seam
- :mod:`alfrl.advantage` rewards, group-relative advantages, batch statistics
- :mod:`alfrl.gigpo`    step-level credit: turns in the same state compared by their discounted returns
- :mod:`alfrl.viewer`   a trajectory's tokens by role or advantage
- :mod:`alfrl.logprobs` token logprobs of the sampled tokens, at the sampling temperature and nucleus
- :mod:`alfrl.prefix`   a group's shared prefix, run once in the update
- :mod:`alfrl.precision` whether bfloat16 is native on this CPU (the cpu preset's precision)
- :mod:`alfrl.ppo`      the clipped PPO update on the LoRA adapter
- :mod:`alfrl.checks`   one checker for every config's field types and ranges
- :mod:`alfrl.train_config` the training settings, presets and their checks
- :mod:`alfrl.train`    the training loop, dynamic sampling, checkpoints and resume
- :mod:`alfrl.checkpoint` checkpoints (adapter, Adam, RNG states) and JSONL records that survive a kill
- :mod:`alfrl.plots`    a run's training curves (plots.png)
- :mod:`alfrl.train_eval` evaluation on held-out games during training (``--eval-every``)
- :mod:`alfrl.tracking` experiment tracking (``--log``): TensorBoard, W&B, SwanLab beside metrics.jsonl
- :mod:`alfrl.rundir`   one policy for output folders (train, eval, dagger, sft): overwrite, resume, refuse
- :mod:`alfrl.evaluate` success per split and task type
- :mod:`alfrl.eval_stats` summaries, the Wilson interval and the paired sign test
- :mod:`alfrl.eval_report` comparison tables and figures of evaluated checkpoints
- :mod:`alfrl.failures`   how a lost episode fails: wrong object, loop, out of steps
- :mod:`alfrl.practice` difficulty profiles, a practice pool with matched controls, wins at each visit
- :mod:`alfrl.scale`    the scale run read back: its pre-registered panel, paired tests, learning curve, costs
- :mod:`alfrl.sft`      the expert warm start
- :mod:`alfrl.dagger`   DAgger: the expert labels the states the policy reaches; fine-tune on them, round after round
- :mod:`alfrl.label_kinds` action kinds; DAgger labels weighted so each kind counts as in the walkthroughs
- :mod:`alfrl.rft`      rejection-sampling fine-tuning: the winners of each group, with the warm start's loss
- :mod:`alfrl.dpo`      preference pairs from a group, and DPO against the starting adapter
- :mod:`alfrl.trl_bridge` the same method in TRL's GRPOTrainer, past one GPU (optional extra ``trl``)
- :mod:`alfrl.cli`      dataclass configs as ``python -m alfrl`` flags
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
