"""Expert warm start: supervised fine-tuning of the LoRA adapter on the expert's walkthroughs.

RL can only sharpen what the policy already does sometimes: a 135M model that never makes a
valid tool call gives every group the same reward, so every group is degenerate and nothing
is trained. A short supervised phase fixes that. Each train game's walkthrough is played
through the real rollout (:func:`alfrl.rl.rollout.rollout_group` with an
:class:`alfrl.rl.scripted.ScriptedSession`), so the expert trajectories have exactly the
prompts, tool calls and tool results, token for token, that the policy's own rollouts will
have; the loss is the token-mean negative log-likelihood of the reply tokens (mask 1) only.

``python -m alfrl sft --games 64 --epochs 2 --out runs/sft`` saves ``runs/sft/adapter``,
which ``python -m alfrl train --init-adapter runs/sft/adapter`` starts from.

Taught in notebooks 02 and 03 (why and how the warm start is made).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from alfrl.agent.models import BUNDLED, LoraSpec, load_policy, resolve_device, save_adapter, torch_threads
from alfrl.agent.precision import warn_if_slow_bf16
from alfrl.agent.protocol import check_action_list, policy_format, resolve_actions
from alfrl.base.checkpoint import append_jsonl, latest_checkpoint, load_state, save_checkpoint, truncate_jsonl
from alfrl.base.rundir import RUN, check_resumed_config, prepare_output_dir
from alfrl.base.tracking import Trackers, check_log
from alfrl.rl.logprobs import chunk_logprobs, model_parts, sequence_logprobs
from alfrl.rl.ppo import micro_batches
from alfrl.rl.prefix import can_share, run_prefix
from alfrl.rl.rollout import RolloutConfig, Trajectory, rollout_group
from alfrl.rl.scripted import ScriptedSession, expert_replies, planned_expert_replies
from alfrl.world.env import GroupEnv
from alfrl.world.games import load_games, shuffled


@dataclass
class SFTConfig:
    """The warm start's settings; each field is a ``--flag`` of ``python -m alfrl sft``."""

    out: str = "runs/sft"
    """Run folder: adapter/, metrics.jsonl, config.json, checkpoints/."""
    overwrite: bool = False
    """Replace an existing run folder instead of refusing."""
    resume: bool = False
    """Continue the run in --out from its last checkpoint (the same settings; the steps after it are redone)."""
    checkpoint_every: int = 25
    """Save the adapter, Adam's state and the RNG every this many steps (0: only the final adapter)."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled"."""
    device: str = "auto"
    """"auto" (a CUDA GPU if there is one, else Apple's mps, else the CPU), or "cpu", "cuda", "cuda:1", "mps"."""
    dtype: str = "auto"
    """Model dtype: "auto" (bfloat16 on a CUDA GPU, float32 elsewhere), or "float32", "bfloat16", "float16"."""
    init_adapter: str | None = None
    """Continue training a saved adapter (a folder, or a shipped one: "warmstart_epoch", "grpo_scale"; the
    earlier "warmstart", "warmstart_expert", "grpo" once rebuilt) instead of a fresh one."""
    lora_rank: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha."""
    data_dir: str | None = None
    """Games folder (default: the committed generated games)."""
    more_data_dir: str | None = None
    """A second games folder whose games (same split and filters) join data_dir's before the seeded sample of
    ``games``: e.g. data/packs beside data/long. None: data_dir only."""
    split: str = "train"
    """Split the expert games come from (never an evaluation split)."""
    games: int = 64
    """Expert trajectories to learn from (a seeded sample of the split)."""
    max_expert_steps: int | None = None
    """Only games the expert solves in at most this many steps."""
    max_receptacles: int | None = None
    """Only rooms with at most this many receptacles."""
    epochs: int = 2
    """Passes over the expert trajectories."""
    lr: float = 1e-4
    """Adam learning rate."""
    batch_size: int = 4
    """Trajectories per optimizer step."""
    micro_batch_tokens: int = 1
    """Padded tokens per forward/backward pass; 1: each sequence alone. On a CPU alone is faster: a padded
    pair took 1.8x the time of the two alone, as the masked attention a padded batch needs is slow there
    (data/results/sft_padding_amx.md). On a GPU, try 4096 or more."""
    max_steps: int = 50
    """Turn limit used to render the trajectories (as in rollouts)."""
    max_trajectory_tokens: int = 12000
    """Token budget used to render the trajectories (longer ones are cut like rollouts)."""
    actions: str = "auto"
    """Which tool results list the available actions: "every", "first" (the first message, and after an
    invalid reply) or "local" (also the actions other than go to); "auto": the protocol the adapter was
    trained in ("every" for one that records none: the shipped ones, a fresh one; alfrl.agent.protocol.ACTION_LISTS)."""
    plan_every: int = 0
    """Hierarchical expert: planner turns as in ``--plan-every`` rollouts, where the expert's reply begins with
    "Subgoal: <the next subgoal>" (alfrl.rl.scripted.planned_expert_replies). 0: plain tool calls."""
    bf16: bool = False
    """Run the forward and backward passes under bfloat16 autocast (the adapter stays float32).
    On a CPU with native bf16 (avx512_bf16 / AMX) it is ~1.7x faster; on others it is emulated and far
    slower (26x measured on an AVX2 CPU; alfrl.agent.precision), and a note says so.
    Only the warm start uses it: RL keeps float32 so that training and sampling logprobs agree."""
    save_dtype: str | None = None
    """Store the adapter as "float16" or "bfloat16" (half the size; the shipped warm starts use float16)."""
    milestones: str = ""
    """Walkthroughs trained on (e.g. "1000,2000,3000") after which a copy of the adapter is kept in
    OUT/milestones/walkthroughs_NNNNN (never pruned, unlike checkpoints): a learning curve by data from one
    run. Empty: none."""
    seed: int = 0
    """Seeds the game sample, the order and the adapter's init."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""
    log: str = "tensorboard"
    """Experiment trackers that get every step's loss beside metrics.jsonl: none, or one or more of
    tensorboard (OUT/tensorboard/), wandb, swanlab, separated by commas (alfrl.base.tracking)."""


RESUMABLE = ("out", "resume", "overwrite", "threads", "device", "checkpoint_every", "log", "micro_batch_tokens",
             "milestones")
"""Fields a resumed run may change: they change how fast it runs (and float rounding), not what it learns."""


def expert_trajectories(policy, games: list, config: SFTConfig, progress: bool = True) -> list[Trajectory]:
    """Each game's walkthrough played through the real env and rollout code, as trajectories."""
    fmt = policy_format(policy, config.actions)
    rollout = RolloutConfig(k=1, max_steps=config.max_steps, max_trajectory_tokens=config.max_trajectory_tokens,
                            max_new_tokens=10_000, workers=0, plan_every=config.plan_every, actions=config.actions)
    out = []
    with GroupEnv(k=1, max_steps=config.max_steps, workers=0) as env:
        for game in tqdm(games, desc="render expert trajectories", unit="game", disable=not progress):
            replies = planned_expert_replies(game, config.plan_every) if config.plan_every else expert_replies(game)
            session = ScriptedSession(fmt, {0: replies})
            (trajectory,) = rollout_group(policy, game, rollout, env=env, fmt=fmt, session=session)
            out.append(trajectory)
    return out


def target_tokens(example) -> int:
    """The tokens an example (a trajectory, or a DAgger tree with branches) is trained on."""
    return getattr(example, "target_tokens", None) or sum(example.mask)


def target_weight(example) -> float:
    """What an example's loss is averaged over: its target tokens, each counted by its weight (a DAgger
    label weighted by its action kind; every other target counts 1)."""
    weight = getattr(example, "target_weight", None)
    return sum(example.mask) if weight is None else weight


def tokens_run(example, share_prefix: bool = True) -> int:
    """The tokens the model reads for an example: its whole sequence; for a DAgger tree with a shared
    prefix its trunk once plus each branch's reply, without it every branch with its whole history."""
    branches = getattr(example, "branches", None) or []
    if share_prefix:
        return len(example.tokens) + sum(len(b.target) for b in branches)
    return sum(len(s.tokens) for s in example.sequences())


def nll_loss(model, examples: list, micro_batch_tokens: int = 4096, backward: bool = True, bf16: bool = False,
             share_prefix: bool = True) -> tuple[float, int]:
    """Token-mean negative log-likelihood of the target tokens (mask 1, and a DAgger example's branches),
    gradients accumulated when ``backward``; returns (loss, tokens). Plain sequences run in padded
    micro-batches; a DAgger tree runs as :func:`tree_nll` (or, without ``share_prefix``, as its
    :meth:`~alfrl.imitation.dagger.Example.sequences`, each with its whole history). Weighted targets (DAgger
    labels weighted by kind) make it a weighted mean: each token's loss times its weight, over the
    summed weights (:func:`target_weight`)."""
    device_type = next(model.parameters()).device.type
    tokens = sum(target_tokens(e) for e in examples)
    total = sum(target_weight(e) for e in examples)
    if total <= 0:  # every target weighted 0 (labels of a kind no walkthrough has): nothing to learn here
        return 0.0, tokens
    trees = [e for e in examples if getattr(e, "branches", None)]
    plain = [e for e in examples if not getattr(e, "branches", None)]
    if trees and not (share_prefix and can_share(model)):
        plain += [s for e in trees for s in e.sequences()]
        trees = []
    loss_sum = 0.0
    for batch in micro_batches(plain, micro_batch_tokens):
        with torch.set_grad_enabled(backward), torch.autocast(device_type, torch.bfloat16, enabled=bf16):
            logp = sequence_logprobs(model, [t.tokens for t in batch], masks=[t.mask for t in batch])
        mask = torch.zeros_like(logp)
        for i, t in enumerate(batch):
            weight = getattr(t, "weight", 1.0)  # a weighted DAgger label; 1 for every other target
            mask[i, :len(t.mask)] = torch.tensor(t.mask, dtype=logp.dtype, device=logp.device) * weight
        loss = -(logp * mask).sum()
        if backward:
            (loss / total).backward()
        loss_sum += float(loss.detach())
    for tree in trees:
        loss_sum += tree_nll(model, tree, total, backward, bf16)
    return loss_sum / total, tokens


def tree_nll(model, example, scale: float = 1.0, backward: bool = True, bf16: bool = False) -> float:
    """The summed negative log-likelihood of a DAgger example's targets, each times its weight (gradients
    of it / ``scale`` accumulated when ``backward``), its trunk run once.

    The trunk (the policy's episode) runs through the model with its keys and values kept
    (:func:`alfrl.rl.prefix.run_prefix`); the loss on its own spans is read from its hidden states, and
    each branch, the expert's reply at a turn, runs alone on top of the trunk's keys and values up to
    that turn. The branches' gradients add up on the trunk's outputs and go back through the trunk
    once. The same loss and gradient as every branch run with its whole history, up to float
    rounding (``tests/test_dagger.py``), for the trunk's tokens plus about 30 a branch instead of a
    history per branch."""
    decoder, head, cap = model_parts(model)
    device = next(model.parameters()).device
    with torch.set_grad_enabled(backward), torch.autocast(device.type, torch.bfloat16, enabled=bf16):
        trunk = run_prefix(decoder, model.config, example.tokens)
        loss_sum = 0.0
        targets = [i for i, m in enumerate(example.mask) if m and i > 0]
        if targets:
            hidden = trunk.hidden_for(1, trunk.dtypes[0])[0]  # in the dtype the trunk made it
            ids = torch.tensor(targets, device=device)
            logp = chunk_logprobs(head, cap, hidden[ids - 1], torch.tensor(example.tokens, device=device)[ids], 1.0)
            loss = -logp.sum() * example.weight
            if backward:
                (loss / scale).backward()
            loss_sum += float(loss.detach())
        for branch in example.branches:
            sequence = example.tokens[:branch.at] + branch.target
            logp = sequence_logprobs(model, [sequence], masks=[[0] * branch.at + [1] * len(branch.target)],
                                     prefix=trunk.head(branch.at))
            loss = -logp.sum() * branch.weight
            if backward:
                (loss / scale).backward()
            loss_sum += float(loss.detach())
        if backward:
            trunk.backward()
    return loss_sum


def milestone_steps(milestones: str, batch_size: int, examples: int) -> dict[int, int]:
    """{step: walkthroughs} for each milestone (walkthroughs trained on) of ``milestones`` ("1000,2000"): the
    first step after which at least that many have been trained on; a clear error for one past the data."""
    wanted = sorted({int(m) for m in milestones.replace(" ", "").split(",") if m})
    if any(m < 1 for m in wanted):
        raise ValueError(f"--milestones must be positive walkthrough counts (got {milestones!r})")
    late = [m for m in wanted if m > examples]
    if late:
        raise ValueError(f"--milestones {late} are past the {examples} walkthroughs of one epoch; lower them or "
                         "add games")
    steps = {-(-m // batch_size): m for m in wanted}
    if len(steps) < len(wanted):
        raise ValueError(f"--milestones {milestones!r}: two of them fall in the same step of {batch_size} "
                         "walkthroughs; space them at least --batch-size apart")
    return steps


def fit(policy, examples: list, config: SFTConfig, metrics_file: Path, trackers=None, progress: bool = True,
        desc: str = "sft", share_prefix: bool = True, checkpoint_dir: Path | None = None,
        checkpoint_every: int = 0, render: Callable[[list], list] | None = None) -> int:
    """``config.epochs`` passes of Adam over ``examples`` (anything with ``tokens`` and ``mask``: the
    loss is on mask-1 tokens; DAgger trees also on their branches, :func:`nll_loss`),
    ``config.batch_size`` at a time in a seeded order; every step's metrics are appended to
    ``metrics_file``. Returns the steps taken.

    With ``checkpoint_dir``, Adam's state and the RNG are saved there every ``checkpoint_every`` steps
    beside the adapter (:func:`alfrl.base.checkpoint.save_checkpoint`); a checkpoint found there is resumed
    from: its steps are skipped in the same seeded order (the policy must already hold its adapter,
    :func:`_train_sft` loads it), and metric lines after it are dropped, so no step is logged twice.

    ``render``: turns a step's batch of ``examples`` into what the loss reads, when that step comes (the SFT's
    expert games, rendered as trajectories batch by batch: a resumed run renders only the steps it has left).
    The seeded order depends only on how many examples there are, so it is the same either way."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.lr)
    order = random.Random(config.seed)
    steps_per_epoch = -(-len(examples) // config.batch_size)
    done = 0
    if checkpoint_dir is not None and (last := latest_checkpoint(checkpoint_dir)) is not None:
        done = load_state(last, optimizer)["step"]
        truncate_jsonl(metrics_file, done)
    bar = tqdm(total=config.epochs * steps_per_epoch, initial=done, desc=desc, unit="step", disable=not progress)
    policy.model.train()
    sharing = share_prefix and can_share(policy.model)
    keep = milestone_steps(getattr(config, "milestones", ""), config.batch_size, len(examples)) \
        if checkpoint_dir is not None else {}
    step = 0
    for epoch in range(config.epochs):
        shuffled = list(examples)
        order.shuffle(shuffled)
        for start in range(0, len(shuffled), config.batch_size):
            if step < done:  # finished before the checkpoint this run resumed from
                step += 1
                continue
            tick = time.perf_counter()
            batch = shuffled[start:start + config.batch_size]
            if render is not None:
                batch = render(batch)
            optimizer.zero_grad(set_to_none=True)
            loss, tokens = nll_loss(policy.model, batch, config.micro_batch_tokens, bf16=config.bf16,
                                    share_prefix=share_prefix)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            optimizer.step()
            step += 1
            metrics = {"step": step, "epoch": epoch, "loss": loss, "tokens": tokens,
                       "tokens_run": sum(tokens_run(e, sharing) for e in batch), "grad_norm": grad_norm,
                       "seconds": time.perf_counter() - tick}
            append_jsonl(metrics_file, [metrics])
            if trackers is not None:
                trackers.log(metrics, step)
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}")
            if step in keep:
                save_adapter(policy, checkpoint_dir / "milestones" / f"walkthroughs_{keep[step]:05d}",
                             dtype=config.save_dtype)
            if checkpoint_dir is not None and checkpoint_every and step % checkpoint_every == 0:
                save_checkpoint(checkpoint_dir, step, lambda folder: save_adapter(policy, folder), optimizer,
                                {"epoch": epoch})
    bar.close()
    return step


def train_sft(config: SFTConfig | None = None, progress: bool = True) -> Path:
    """Render the expert trajectories, fine-tune the adapter on them, save it; returns the adapter dir."""
    config = config or SFTConfig()
    check_action_list(config.actions, auto_ok=True)  # before the run folder is made
    trackers_wanted = check_log(config.log)  # a missing tracker package is named before anything is written
    games = sft_games(config)
    milestone_steps(config.milestones, config.batch_size, len(games))  # too few games fails before a folder is made
    out = prepare_output_dir(config.out, RUN, overwrite=config.overwrite, resume=config.resume).path
    if config.resume:
        check_resumed_config(out, config, RESUMABLE)  # the same settings, or a clear error; writes config.json
    else:
        (out / "config.json").write_text(json.dumps(asdict(config), indent=2))
    with torch_threads(config.threads):
        return _train_sft(config, out, trackers_wanted, progress, games)


def sft_games(config: SFTConfig) -> list:
    """The expert games a fine-tune learns from: data_dir's (and more_data_dir's) games of the split after the
    filters, in one seeded order, the first ``games`` of them."""
    def split_of(folder):
        return load_games(config.split, folder, max_expert_steps=config.max_expert_steps,
                          max_receptacles=config.max_receptacles)
    games = split_of(config.data_dir)
    if config.more_data_dir:
        more = split_of(config.more_data_dir)
        shared = sorted({g.game_id for g in games} & {g.game_id for g in more})
        if shared:
            raise ValueError(f"{len(shared)} games of --more-data-dir {config.more_data_dir} are in --data-dir too "
                             f"(e.g. {shared[0]}); give two folders of different games")
        games += more
    return shuffled(games, config.seed)[:config.games]


def _train_sft(config: SFTConfig, out: Path, trackers_wanted, progress: bool, games: list) -> Path:
    torch.manual_seed(config.seed)
    warn_if_slow_bf16(resolve_device(config.device).type, ["--bf16"] * config.bf16)
    last = latest_checkpoint(out)
    start = str(last / "adapter") if last else config.init_adapter or LoraSpec(rank=config.lora_rank,
                                                                                alpha=config.lora_alpha)
    if last:
        print(f"resuming {out} from {last.name}")
    policy = load_policy(config.model, lora=start, dtype=config.dtype, device=config.device)
    policy.actions = resolve_actions(config.actions, policy)  # rendered in it, and saved with the adapter
    cut = []

    def render(batch: list) -> list[Trajectory]:  # each step's games, when their step comes
        trajectories = expert_trajectories(policy, batch, config, progress=False)
        cut.append(sum(not t.won for t in trajectories))
        return trajectories

    with Trackers(trackers_wanted, out, asdict(config)) as trackers:
        fit(policy, games, config, out / "metrics.jsonl", trackers, progress, checkpoint_dir=out,
            checkpoint_every=config.checkpoint_every, render=render)
    if sum(cut):
        print(f"note: {sum(cut)} expert trajectories were cut by the step or token limit")
    return save_adapter(policy, out / "adapter", dtype=config.save_dtype)
