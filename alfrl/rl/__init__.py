"""The pieces of agentic RL: a group of episodes played turn by turn, their credit, and the clipped update.

Taught in notebooks 03 (group rollouts), 04 (advantages and the mask), 05 (the PPO update) and 08 (what a
50-step game's context holds). Imports from :mod:`alfrl.base`, :mod:`alfrl.world` and :mod:`alfrl.agent`.

Modules, in the order the course teaches them:

- :mod:`alfrl.rl.trajectory` a played trajectory: turns, tokens, sampled-token mask, JSONL
- :mod:`alfrl.rl.rollout`    group rollouts, one turn at a time: sample, parse, step, extend the prompt
- :mod:`alfrl.rl.scripted`   scripted replies (the expert) through the real rollout
- :mod:`alfrl.rl.viewer`     a trajectory's tokens by role or advantage
- :mod:`alfrl.rl.advantage`  rewards, group-relative advantages, batch statistics
- :mod:`alfrl.rl.gigpo`      step-level credit: turns in the same state compared by their discounted returns
- :mod:`alfrl.rl.logprobs`   token logprobs of the sampled tokens, at the sampling temperature and nucleus
- :mod:`alfrl.rl.prefix`     a group's shared prefix, run once in the update
- :mod:`alfrl.rl.ppo`        the clipped PPO update on the LoRA adapter
- :mod:`alfrl.rl.context`    the context budget: a recorded game rendered under each action-list protocol
"""
