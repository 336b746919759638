"""The settings of a training run: :class:`TrainConfig` (each field a ``--flag`` of ``python -m alfrl
train`` and a papermill parameter of notebook 05), the presets, and the checks that run before
anything is written or loaded. The loop that uses them is :mod:`alfrl.training.train`.
"""

from __future__ import annotations

from dataclasses import dataclass

from alfrl.agent.bundled import BUNDLED
from alfrl.agent.models import DEFAULT_WARM_START, check_sampling_dtypes
from alfrl.agent.precision import native_bf16_cpu, warn_if_slow_bf16
from alfrl.agent.protocol import check_action_list
from alfrl.base.checks import Range, check_fields
from alfrl.base.tracking import check_log
from alfrl.rl.advantage import CREDITS, AdvantageConfig
from alfrl.rl.ppo import PPOConfig
from alfrl.rl.rollout import RolloutConfig


@dataclass
class TrainConfig:
    """Everything a training run needs; each field is a ``--flag`` of ``python -m alfrl train``."""

    run_dir: str = "runs/cpu"
    """Where the run writes config, metrics, trajectories, plots and checkpoints."""
    overwrite: bool = False
    """Replace an existing run directory instead of refusing."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled" (SmolLM2-135M-Instruct, offline)."""
    dtype: str = "auto"
    """Model dtype: "auto" (bfloat16 on a CUDA GPU, float32 elsewhere), or "float32", "bfloat16", "float16"."""
    device: str = "auto"
    """"auto" (a CUDA GPU if there is one, else Apple's mps, else the CPU), or "cpu", "cuda", "cuda:1", "mps"."""
    thinking: str = "auto"
    """A reasoning model's thinking switch (``enable_thinking`` in Qwen3's template): "off" opens every reply
    with an empty thought, so the model answers at once (short replies, 50 turns fit the token budget); "on"
    lets it think first; "auto" keeps the template's default (Qwen3: on). A template without the switch
    refuses on/off."""
    init_adapter: str | None = DEFAULT_WARM_START
    """Start from a saved LoRA adapter instead of a fresh one: a folder, or one shipped for the bundled
    model: "warmstart_epoch" (the default warm start, expert SFT on 1,030 walkthroughs), "warmstart_expert" (its
    step 80, 470 walkthroughs; the RL runs on top of a warm start that searches, in docs/results.md, started from
    it), "warmstart" (the first one, 150 short walkthroughs; the other RL runs of docs/results.md started from it),
    "grpo" or "grpo_scale" (the GRPO adapters, to train them further); or "none" for a fresh adapter. Git holds the
    weights of warmstart_epoch and grpo_scale; the others' READMEs rebuild theirs."""
    lora_rank: int = 8
    """Rank of a fresh LoRA adapter."""
    lora_alpha: int = 16
    """Alpha of a fresh LoRA adapter."""
    data_dir: str | None = None
    """Games folder (default: the committed generated games)."""
    more_data_dir: str | None = None
    """A second games folder, played in its own seeded order after every game of data_dir: a long run that
    outgrows its rooms gets new ones, and the rooms it has played keep their places. None: data_dir only."""
    split: str = "train"
    """Split the training games come from."""
    pool: str | None = None
    """Train only on a practice pool's games: a pool file made by ``python -m alfrl pool`` (e.g.
    data/practice/pool.json; its "practice" games, never its controls), visited in turn. None: every game
    of the split after the filters."""
    max_expert_steps: int | None = 8
    """Only games the expert solves in at most this many steps (short tasks)."""
    max_receptacles: int | None = 20
    """Only rooms with at most this many receptacles (short prompts: every tool result lists them)."""
    updates: int = 4
    """PPO updates in the run."""
    games_per_update: int = 2
    """Groups (games) played per update."""
    k: int = 4
    """Trajectories per game."""
    max_steps: int = 10
    """Turns per trajectory."""
    max_trajectory_tokens: int = 4000
    """Token budget of one trajectory."""
    max_new_tokens: int = 48
    """Tokens the model may sample per reply."""
    actions: str = "auto"
    """Which tool results list the available actions: "every", "first" (the first message, and after an
    invalid reply) or "local" (also the actions other than go to); "auto": the protocol the adapter was
    trained in ("every" for one that records none: the shipped ones, a fresh one; alfrl.agent.protocol.ACTION_LISTS)."""
    temperature: float = 1.0
    """Sampling temperature (the update recomputes logprobs at the same one)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    draft_tokens: int = 0
    """Speculative decoding in rollouts: tokens drafted from each branch's own history by prompt lookup and
    checked in one forward pass (alfrl.agent.sampler); the replies keep plain sampling's distribution. 0: off."""
    groups_per_batch: int = 2
    """Groups decoded together (k x this many rows per forward pass; see RolloutConfig)."""
    plan_every: int = 0
    """Hierarchical play: planner turns, whose reply begins with one line "Subgoal: ..." (trained like the rest),
    first, every this many steps, and right after a subgoal is reached (notebook 07). 0: off."""
    invalid_penalty: float = 0.1
    """Reward lost per invalid action."""
    subgoal_reward: float = 0.0
    """Reward per subgoal of the game reached (alpha in won + alpha x subgoals - 0.1 x invalid; alfrl.world.subgoals).
    0: the reference reward."""
    normalize_std: bool = False
    """Divide advantages by the group's std."""
    credit: str = "grpo"
    """How the episode's advantage reaches its tokens: "grpo" (every sampled token of the episode the same) or
    "gigpo" (plus step-level credit: each turn's step return against the group's turns in the same state;
    alfrl.rl.gigpo, notebook 04)."""
    gigpo_omega: float = 1.0
    """With --credit gigpo: the weight of the step advantage (token advantage = episode + omega x step)."""
    gigpo_gamma: float = 0.95
    """With --credit gigpo: the discount of the step returns."""
    algo: str = "grpo"
    """The update: "grpo" (PPO on group-relative advantages), "rft" (fine-tune on the winning trajectories)
    or "dpo" (DPO on each group's preference pairs against the starting adapter); notebook 07."""
    dpo_beta: float = 0.1
    """With --algo dpo: beta, how far the policy may move from the reference per unit of preference."""
    pair_margin: float = 0.5
    """With --algo dpo: the least reward difference that makes a preference pair (0.5: a win against a loss with at
    most five more invalid actions, or two episodes five or more invalid actions apart)."""
    clip_low: float = 0.8
    """PPO ratio clip, lower bound."""
    clip_high: float = 1.2
    """PPO ratio clip, upper bound."""
    lr: float = 2e-4
    """Adam learning rate."""
    beta1: float = 0.9
    """Adam beta1."""
    beta2: float = 0.95
    """Adam beta2."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    kl_coef: float = 0.0
    """KL-to-reference penalty weight (0 = off)."""
    epochs: int = 1
    """Passes over each batch."""
    minibatches: int = 1
    """Optimizer steps per pass. With epochs = minibatches = 1 the ratio is 1 whenever a gradient is taken,
    so the clip never acts: the update is group-baseline REINFORCE. From 2 on, later steps are clipped."""
    old_logprobs: str = "trainer"
    """The ratio's denominator: "trainer" (recomputed by the update at the sampling weights: exact in any
    precision) or "sampler" (the sampler's own logprobs, exact only in float32)."""
    tis_cap: float = 0.0
    """Truncated importance sampling: each sampled token's loss weighted by min(exp(trainer - sampler), cap),
    correcting for a sampler that is not quite the trainer (bf16 sampling, vLLM); 0: off (alfrl.rl.ppo)."""
    bf16: bool = False
    """bfloat16 autocast in the update (about 1.7x on a CPU with avx512_bf16 or AMX; emulated and far slower on
    other CPUs, see alfrl.agent.precision); LoRA and Adam stay float32."""
    sample_dtype: str | None = None
    """Roll out with a copy of the policy whose adapter is merged and cast to this dtype ("bfloat16":
    half the bytes per decode step, KV cache included); None: sample with the trained model itself."""
    sampler: str = "builtin"
    """The rollout engine: "builtin" (alfrl.agent.sampler, in this process) or "vllm" (a vllm serve of the model from
    .venv-vllm, made by scripts/setup_vllm.sh, given the adapter after every update; alfrl.agent.vllm_engine)."""
    vllm_gpu_memory: float = 0.5
    """With --sampler vllm on a GPU: the share of each of its GPUs' memory the server may take (the rest is the
    trainer's when both share a GPU; 0.9 when the server has GPUs of its own, --vllm-gpus)."""
    vllm_tensor_parallel: int = 1
    """With --sampler vllm: GPUs one server's model is split across (vLLM's --tensor-parallel-size)."""
    vllm_gpus: str | None = None
    """With --sampler vllm: the GPUs the server runs on (CUDA_VISIBLE_DEVICES for it alone, e.g. "1", or "2,3" with
    --vllm-tensor-parallel 2), so the trainer can keep its own (--device cuda:0). None: the trainer's."""
    vllm_max_seqs: int = 0
    """With --sampler vllm: sequences the server decodes together. 0: the rows one rollout plays at once
    (k x groups_per_batch, at least 8)."""
    vllm_url: str | None = None
    """With --sampler vllm: an external server already serving the model at this URL (started by hand, elsewhere,
    with the flags docs/gpu.md lists) instead of one the trainer starts; it gets the adapter after every update."""
    vllm_lockstep: bool = False
    """With --sampler vllm: sample every live branch's turn together, each turn waiting for its slowest reply (as
    the built-in sampler must). Off: each branch sends its next request as soon as its own game step returns;
    the replies are the same (each branch's seeds), the wait is not."""
    prefill_dtype: str | None = None
    """Read prompts and tool results in rollouts under this autocast ("bfloat16": ~1.7x faster reads on a
    CPU with AMX/avx512_bf16, far slower on other CPUs; decode steps stay in the sampling model's precision).
    None (or "none"): off."""
    dynamic_sampling: bool = False
    """DAPO-style: drop groups whose rewards are all equal and play more games (groups_per_batch at a
    time) until games_per_update groups have a reward spread, or max_groups_per_update were played."""
    max_groups_per_update: int = 8
    """With dynamic_sampling: the most groups played for one update (the cap on extra rollouts)."""
    keep_groups: str = "spread"
    """With dynamic_sampling, which groups count: "spread" (rewards differ at all, DAPO's rule), "win"
    (some branch won and some lost: only the success signal, not invalid actions alone) or "progress"
    (branches differ in wins or subgoals reached: the signal of --subgoal-reward). GRPO only: --algo rft keeps groups
    with a win, --algo dpo groups that make a preference pair."""
    micro_batch_tokens: int = 4096
    """Padded tokens per forward/backward pass (lower it if memory runs out)."""
    gradient_checkpointing: bool = True
    """Trade compute for memory in the update (recompute activations in the backward pass): without
    it a 4K-token micro-batch of the small model stores about 1 MB of activations per token."""
    share_prefix: bool = True
    """Run the tokens a group's branches share once in the update, not once per branch: the same loss
    and gradient for about a third fewer tokens in the cpu preset (off with gradient checkpointing)."""
    eval_every: int = 0
    """Evaluate on held-out games before the first update and after every N-th (0: never), into
    RUN_DIR/eval/step_N/ (records and summary, as python -m alfrl eval) and RUN_DIR/eval.jsonl; the
    held-out success curve goes into plots.png. 6-9 s a game on 2 cores in the cpu preset."""
    eval_games: int = 20
    """Games per evaluation with --eval-every: the same seeded sample of eval_split every time."""
    eval_split: str = "valid_unseen"
    """The held-out split --eval-every plays: valid_unseen (rooms training never saw), valid_seen, or all."""
    eval_data_dir: str | None = None
    """The games --eval-every plays (default: data_dir), e.g. data/heldout or $ALFWORLD_DATA/json_2.1.1."""
    log: str = "tensorboard"
    """Experiment trackers that get every update's metrics beside metrics.jsonl: none, or one or more of
    tensorboard (RUN_DIR/tensorboard/), wandb, swanlab, separated by commas (alfrl.base.tracking)."""
    checkpoint_every: int = 1
    """Updates between checkpoints (1 = an interrupted run loses at most the update in flight)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept (0 = all)."""
    seed: int = 0
    """Seeds the game order, the adapter's init and every branch's sampler."""
    workers: int = 2
    """Processes stepping the game copies (0: in the trainer's own process). They are forked from the
    trainer at every rollout, and every page of its heap that the trainer rewrites while they live is
    copied: with a trainer of many GB in CPU memory (a cpu preset run reached 15-17.5 GB) that can add
    up to its size again, and got a cpu run killed for memory on a 23 GB machine. The cpu preset
    therefore plays in-process: its games cost about 2 s of a 2-minute rollout."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""

    def __post_init__(self) -> None:
        for name in ("sample_dtype", "prefill_dtype"):  # --prefill-dtype none on the command line: off
            if isinstance(getattr(self, name), str) and getattr(self, name).lower() == "none":
                setattr(self, name, None)

    def rollout(self, step: int) -> RolloutConfig:
        return RolloutConfig(k=self.k, max_steps=self.max_steps, max_trajectory_tokens=self.max_trajectory_tokens,
                             max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                             groups_per_batch=self.groups_per_batch, prefill_dtype=self.prefill_dtype,
                             draft_tokens=self.draft_tokens, plan_every=self.plan_every, actions=self.actions,
                             seed=self.seed * 1_000_003 + step, workers=self.workers, lockstep=self.vllm_lockstep)

    def ppo(self) -> PPOConfig:
        return PPOConfig(clip_low=self.clip_low, clip_high=self.clip_high, lr=self.lr, beta1=self.beta1,
                         beta2=self.beta2, max_grad_norm=self.max_grad_norm, kl_coef=self.kl_coef,
                         temperature=self.temperature, micro_batch_tokens=self.micro_batch_tokens,
                         gradient_checkpointing=self.gradient_checkpointing, epochs=self.epochs,
                         minibatches=self.minibatches, top_p=self.top_p, old_logprobs=self.old_logprobs,
                         bf16=self.bf16, share_prefix=self.share_prefix, tis_cap=self.tis_cap)

    def advantage(self) -> AdvantageConfig:
        return AdvantageConfig(invalid_penalty=self.invalid_penalty, normalize_std=self.normalize_std,
                               subgoal_reward=self.subgoal_reward, credit=self.credit, omega=self.gigpo_omega,
                               gamma=self.gigpo_gamma)


def cpu_preset(native_bf16: bool) -> dict:
    """The cpu preset's settings on a CPU with (or without) native bfloat16 (:mod:`alfrl.agent.precision`): the
    update's autocast and the rollouts' prompt reads in bfloat16 only where that is fast."""
    return dict(k=8, temperature=0.6, bf16=native_bf16, gradient_checkpointing=False, sample_dtype="float32",
                prefill_dtype="bfloat16" if native_bf16 else None, draft_tokens=8, dynamic_sampling=True,
                keep_groups="win", max_groups_per_update=4, lr=1e-4, updates=10, workers=0)


def practice_preset(native_bf16: bool) -> dict:
    """The practice preset: the cpu preset's method and rollouts, from the default warm start, on the fixed
    pool of data/practice/pool.json (8 practised games and 8 matched controls, chosen from the first warm
    start's difficulty profile), 2 games an update, so every game comes back every 4 updates, 5 visits in 20
    updates. Every group is trained (no dynamic sampling: the pool is fixed, and a group all won or all lost
    has zero advantage and adds no gradient anyway). Seed 0 trained for 24 minutes on 2 cores of an AMD EPYC
    with AVX512_BF16 (data/results/practice_epoch/seconds_practice_epoch.json)."""
    return {**cpu_preset(native_bf16), "run_dir": "runs/practice", "pool": "data/practice/pool.json",
            "dynamic_sampling": False, "games_per_update": 2, "updates": 20}


def scale_preset(native_bf16: bool) -> dict:
    """The scale preset: the cpu preset's rollouts at the reference run's size, up to 8 trained groups of 8 an
    update for 80 updates (at most 5,120 trained episodes), from the default warm start. Every update plays
    fresh rooms: the next ones of data/rl_rooms, then of data/rl_rooms_more (small generated train rooms, never a
    held-out one), 8 at first and more, 2 at a time, until 8 groups have a reward spread (DAPO's dynamic
    sampling) or 16 were played. One checkpoint is kept and no tracker writes (a long run's disk stays small);
    scripts/scale_run.py drives its two arms (--credit grpo and gigpo) and docs/results.md says what they did."""
    return {**cpu_preset(native_bf16), "run_dir": "runs/scale", "data_dir": "data/rl_rooms",
            "more_data_dir": "data/rl_rooms_more", "games_per_update": 8,
            "max_groups_per_update": 16, "keep_groups": "spread", "updates": 80, "keep_checkpoints": 1,
            "log": "none"}


_NATIVE_BF16 = native_bf16_cpu()  # read /proc/cpuinfo once, for both CPU presets

PRESETS: dict[str, dict] = {
    "cpu": cpu_preset(_NATIVE_BF16),
    "practice": practice_preset(_NATIVE_BF16),
    "scale": scale_preset(_NATIVE_BF16),
    "reference": dict(run_dir="runs/reference", model="Qwen/Qwen3-4B", dtype="bfloat16", device="cuda",
                      init_adapter=None, max_expert_steps=None, max_receptacles=None,
                      lora_rank=32, lora_alpha=64, updates=80, games_per_update=8, k=8, max_steps=50,
                      max_trajectory_tokens=12000, max_new_tokens=2048, temperature=1.0, lr=1e-6,
                      checkpoint_every=5, keep_checkpoints=0, micro_batch_tokens=12000, groups_per_batch=1,
                      tis_cap=2.0),
}
"""cpu: the bundled small model from the default warm start (data/warmstart_epoch; the cpu runs of
docs/results.md name theirs: most are from the first one, ``--init-adapter warmstart``), small rooms and short
episodes, 10 updates of 2 groups of 8 at temperature 0.6, only groups with a win and a loss trained (dynamic
sampling, at most 4 groups played per update), rollouts with the adapter merged into a float32 copy, replies
decoded speculatively (8 drafted tokens), and on a CPU with native bfloat16 (AVX512_BF16 or AMX) prompts
read in bfloat16 and a bf16 update (float32 elsewhere: emulated bfloat16 is 6-26x slower); on 2 cores of such a
CPU about 4.5 minutes an update from the first warm start (45 in all) and 3.7 from the default one (see
docs/results.md for what this does and does not achieve).
practice: the same method on a fixed pool of 8 training games, each revisited 5 times in 20 updates
(:func:`practice_preset`; scripts/practice_result.py measures what it gains on them and on matched
controls). scale: the cpu preset's method for the reference run's 80 updates (at most 5,120 episodes), fresh
rooms every update (:func:`scale_preset`). reference: the reference run's settings (8 games x 8, 50 steps, 12K
tokens, temperature 1, LoRA rank 32, lr 1e-6) for a GPU, with truncated importance sampling (cap 2) for its bf16
sampler, checkpoints every 5 updates, and one group a rollout for the built-in sampler (its cache of 64 rows of 12K
tokens would be 105 GiB; with ``--sampler vllm`` pass ``--groups-per-batch 8``: docs/gpu.md)."""


def preset(name: str, **overrides) -> TrainConfig:
    """A config from a preset, with ``overrides`` on top."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return TrainConfig(**{**PRESETS[name], **overrides})


TRAIN_RANGES: dict[str, Range] = {
    **{name: Range(at_least=1) for name in (
        "updates", "games_per_update", "max_groups_per_update", "k", "max_steps", "max_trajectory_tokens",
        "max_new_tokens", "groups_per_batch", "epochs", "minibatches", "micro_batch_tokens", "checkpoint_every",
        "threads", "lora_rank", "lora_alpha", "max_expert_steps", "max_receptacles")},
    **{name: Range(at_least=0) for name in ("keep_checkpoints", "workers", "kl_coef", "draft_tokens",
                                             "eval_every", "subgoal_reward", "plan_every")},
    "dpo_beta": Range(above=0),
    "pair_margin": Range(above=0, why=": a pair of equal rewards prefers nothing"),
    "eval_games": Range(at_least=1),
    "gigpo_omega": Range(at_least=0),
    "vllm_gpu_memory": Range(above=0, at_most=1),
    "vllm_tensor_parallel": Range(at_least=1),
    "vllm_max_seqs": Range(at_least=0),
    "gigpo_gamma": Range(at_least=0, at_most=1),
    "temperature": Range(above=0, why=": the update divides the logits by it; sample near-greedily with a small "
                                      "value such as 0.1 (python -m alfrl eval --temperature 0 evaluates greedily)"),
    "top_p": Range(above=0, at_most=1),
    "lr": Range(above=0),
    "max_grad_norm": Range(above=0),
    "clip_low": Range(above=0, at_most=1),
    "clip_high": Range(at_least=1),
    "beta1": Range(at_least=0, below=1),
    "beta2": Range(at_least=0, below=1),
}
"""The range of every numeric training setting."""


def check_config(config: TrainConfig) -> None:
    """A clear error for any setting that cannot work: types, ranges, device and dtype, a local model
    folder, the initial adapter. :func:`alfrl.training.train.train` calls it before it makes a run directory or
    loads a model, so a failed start leaves nothing behind."""
    from alfrl.agent.models import check_adapter, resolve_device, resolve_dtype, resolve_model, thinking_switch

    check_fields(config, TRAIN_RANGES)
    thinking_switch(config.thinking)
    check_action_list(config.actions, auto_ok=True)
    if config.eval_split not in ("valid_seen", "valid_unseen", "all"):
        raise ValueError(f"--eval-split must be valid_seen, valid_unseen or all (got {config.eval_split!r}): "
                         "evaluation plays held-out games")
    check_log(config.log)
    if config.algo not in ("grpo", "rft", "dpo"):
        raise ValueError(f"--algo must be grpo, rft or dpo (got {config.algo!r})")
    if config.algo == "rft" and config.subgoal_reward:
        raise ValueError("--algo rft trains on the winners alone, whatever their reward: --subgoal-reward would "
                         "change nothing; drop it, or use --algo grpo or dpo")
    if config.algo == "dpo" and (config.epochs > 1 or config.minibatches > 1 or config.kl_coef):
        raise ValueError("--algo dpo takes one step an update against its reference adapter: --epochs, "
                         "--minibatches and --kl-coef are PPO's; leave them at 1, 1 and 0")
    if config.credit not in CREDITS:
        raise ValueError(f"--credit must be one of {', '.join(CREDITS)} (got {config.credit!r}): grpo credits every "
                         "token of an episode alike, gigpo adds step-level credit per turn")
    if config.credit != "grpo" and config.algo != "grpo":
        raise ValueError(f"--credit {config.credit} sets the advantages of --algo grpo; --algo {config.algo} "
                         "uses none: leave --credit grpo")
    if config.keep_groups not in ("spread", "win", "progress"):
        raise ValueError(f"--keep-groups must be 'spread', 'win' or 'progress' (got {config.keep_groups!r})")
    if config.keep_groups == "progress" and not config.subgoal_reward:
        raise ValueError("--keep-groups progress keeps groups for their subgoal spread, which only "
                         "--subgoal-reward (e.g. 0.1) turns into advantages; set it, or keep groups by 'win'")
    if config.dynamic_sampling and config.max_groups_per_update < config.games_per_update:
        raise ValueError(f"--max-groups-per-update ({config.max_groups_per_update}) must be at least "
                         f"--games-per-update ({config.games_per_update}) with --dynamic-sampling")
    config.ppo(), config.rollout(1), config.advantage()  # their own checks (old_logprobs, top_p, ...)
    device = resolve_device(config.device)
    resolve_dtype(config.dtype, device)
    warn_if_slow_bf16(device.type, ["--bf16"] * config.bf16 + ["--prefill-dtype bfloat16"] * (
        config.prefill_dtype == "bfloat16"))
    check_sampling_dtypes(config.sample_dtype)
    if config.sample_dtype not in (None, "float32") and config.old_logprobs != "trainer":
        raise ValueError(f"--sample-dtype {config.sample_dtype} samples in another precision than the trainer's: "
                         "use --old-logprobs trainer, or the PPO ratio starts away from 1")
    if config.sampler not in ("builtin", "vllm"):
        raise ValueError(f"--sampler must be builtin or vllm (got {config.sampler!r})")
    if config.sampler == "vllm":
        from alfrl.agent.vllm_engine import missing_reason
        if config.old_logprobs != "trainer":
            raise ValueError("--sampler vllm computes logprobs with other kernels than the trainer's: use "
                             "--old-logprobs trainer (and --tis-cap 2 to correct for the gap)")
        if config.draft_tokens or config.sample_dtype not in (None, "float32") or config.prefill_dtype:
            raise ValueError("--draft-tokens, --sample-dtype and --prefill-dtype set the built-in sampler; with "
                             "--sampler vllm leave them at their defaults (vLLM runs in --dtype)")
        if not config.vllm_url and (reason := missing_reason()):
            raise FileNotFoundError(f"--sampler vllm: {reason}")
    elif config.vllm_url or config.vllm_gpus is not None or config.vllm_tensor_parallel > 1 or config.vllm_lockstep:
        raise ValueError("--vllm-url, --vllm-gpus, --vllm-tensor-parallel and --vllm-lockstep are for the vLLM "
                         "server: add --sampler vllm, or leave them out")
    if config.prefill_dtype is not None and config.old_logprobs != "trainer":
        raise ValueError(f"--prefill-dtype {config.prefill_dtype} reads prompts in another precision than the "
                         "trainer's: use --old-logprobs trainer, or the PPO ratio starts away from 1")
    if config.model != BUNDLED:
        resolve_model(config.model)  # a local folder must hold a model; a hub id is checked when loaded
    if config.init_adapter not in (None, "", "none"):
        check_adapter(config.init_adapter, config.model)
    if config.pool is not None:
        from alfrl.eval.practice import read_pool, resolve_pool
        read_pool(resolve_pool(config.pool))
