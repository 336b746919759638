"""The agent: the language model, the one tool it calls, and how it samples its replies.

Taught in notebooks 02 (loading a policy, the tool protocol, KV-cached sampling) and 03 (a group's branches
decoded together). Imports from :mod:`alfrl.base` only (the model knows nothing of games or training).

Modules, in the order the course teaches them:

- :mod:`alfrl.agent.bundled`     the bundled small model, from the package registry (no model hub)
- :mod:`alfrl.agent.models`      the policy (hub id, local dir, bundled small model), LoRA adapters, its context window
- :mod:`alfrl.agent.protocol`    the alfworld_step tool, prompts, parsing, token-exact prompt growth
- :mod:`alfrl.agent.sampler`     KV-cached, batched, seeded sampling with logprobs; speculative decoding by prompt lookup
- :mod:`alfrl.agent.kvcache`     a batched KV cache for a group's branches (bfloat16 prefill optional)
- :mod:`alfrl.agent.attention`   grouped-query attention that reads each cached key/value head once
- :mod:`alfrl.agent.precision`   whether bfloat16 is native on this CPU (the cpu preset's precision; notebook 05)
- :mod:`alfrl.agent.vllm_engine` vLLM as an optional sampler: a server in its own venv, behind the sampler's seam
  (docs/gpu.md)
"""
