"""The device check's checks at the reference run's scale, and the training loop end to end (see device_check.py).

- ``update_4b``: one PPO step of the reference preset's update (its PPOConfig: truncated importance sampling at
  cap 2, gradient checkpointing, 12,000-token micro-batches) on a random Qwen3-4B in bfloat16 with a rank-32
  LoRA adapter on all seven projections, over a 12,000- and a 6,000-token trajectory: seconds, peak memory,
  a finite loss, a gradient, LoRA weights that move. The reference run's main out-of-memory risk.
- ``rollout_4b``: 8 branches of that model decoded through the course's sampler over turns of uneven length
  (tool results of different sizes, branches that finish early), grown to about 11,500 cached columns, once
  with the PEFT adapter and once with the adapter merged (``alfrl.agent.models.sampling_copy``): seconds, sampled
  tokens/s, peak memory.
- ``train_resume``: ``alfrl.training.train`` for 2 updates with a tiny random Qwen3 saved as a model folder (with the
  bundled tokenizer, built offline), stopped after update 1 and resumed: the resumed run logs what an
  uninterrupted one logs.

A dry run (``--dry-run``, on a CPU in CI) runs the same code on a small Qwen3 shape and short trajectories.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import torch
from device_shapes import QWEN3_4B, SEVEN, TINY_QWEN3, lora_model, peak_gb, qwen3, reset_peak


@dataclass(frozen=True)
class Scale:
    """The sizes of the scale checks: the reference run's on a GPU, small ones in a dry run."""

    shape: dict
    update_lengths: tuple[int, ...]
    rollout_rows: int
    rollout_prompt: int
    rollout_columns: int
    reply_tokens: int
    update_ceiling: tuple[float, float] | None = None
    """(peak GiB, seconds) the update must stay under; None: not checked (a dry run on a CPU)."""
    rollout_ceiling: tuple[float, float] | None = None
    """(peak GiB, seconds) each rollout engine must stay under; None: not checked."""


def under(ceiling: tuple[float, float] | None, peak: float | None, seconds: float) -> dict:
    """The ceiling, the figures against it, and whether both are under it (always, without a ceiling)."""
    if ceiling is None:
        return {"ceiling": None, "under_ceiling": True}
    gib, limit = ceiling
    return {"ceiling": {"peak_gpu_gb": gib, "seconds": limit},
            "under_ceiling": peak is not None and peak <= gib and seconds <= limit}


def _trajectory(length: int, vocab: int, seed: int, advantage: float):
    """A trajectory of ``length`` tokens: a prompt (a tenth), then turns of a twelfth of it each, whose last 15%
    are the sampled reply (about 150 tokens a turn at 12,000)."""
    from alfrl.rl.trajectory import Trajectory

    tokens = torch.randint(1, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
    turn = length // 12
    mask = [1 if i >= length // 10 and i % turn >= turn * 85 // 100 else 0 for i in range(length)]
    return Trajectory(game_id="g", task_type="t", branch=seed, seed=seed, tokens=tokens, mask=mask,
                      logprobs=[0.0] * length, turns=[], won=advantage > 0, steps=1, invalid=0, end_reason="max_steps",
                      prompt_tokens=length // 10, prefilled=0, sampled=sum(mask), model_seconds=0.0,
                      env_seconds=0.0, advantage=advantage)


def check_update(device: torch.device, scale: Scale) -> dict:
    """One step of the reference preset's PPO update on the big model's long trajectories."""
    from alfrl.agent.models import Policy
    from alfrl.rl.logprobs import sequence_logprobs
    from alfrl.rl.ppo import make_optimizer, ppo_step
    from alfrl.training.train_config import preset

    tick = time.perf_counter()
    model = lora_model(scale.shape, device)
    built = time.perf_counter() - tick
    config = preset("reference").ppo()
    trajectories = [_trajectory(n, scale.shape["vocab_size"], i, adv)
                    for i, (n, adv) in enumerate(zip(scale.update_lengths, (1.0, -1.0)))]
    with torch.no_grad():  # the sampler's logprobs: the trainer's, nudged, so the TIS weights are not all 1
        for t in trajectories:
            logp = sequence_logprobs(model, [t.tokens], masks=[t.mask])[0].float().cpu()
            t.logprobs = [(float(x) - 0.05) * m for x, m in zip(logp, t.mask)]
    policy = Policy(model=model, tokenizer=None, name="random Qwen3")
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    reset_peak(device)
    tick = time.perf_counter()
    metrics = ppo_step(policy, make_optimizer(policy, config), trajectories, config, own_old=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - tick
    moved = max(float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters() if p.requires_grad)
    finite = bool(torch.isfinite(torch.tensor([metrics["loss"], metrics["grad_norm"]])).all())
    return {"parameters_b": sum(p.numel() for p in model.parameters()) / 1e9, "build_seconds": built,
            "lora_rank": 32, "lora_targets": SEVEN, "trajectory_tokens": list(scale.update_lengths),
            "tokens_trained": metrics["tokens_trained"], "seconds": seconds, "peak_gpu_gb": peak_gb(device),
            "loss": metrics["loss"], "grad_norm": metrics["grad_norm"], "lora_max_change": moved,
            "tis_cap": config.tis_cap, "tis_weight_mean": metrics.get("tis_weight_mean"),
            "gradient_checkpointing": config.gradient_checkpointing, **(limit := under(scale.update_ceiling,
                                                                                  peak_gb(device), seconds)),
            "ok": finite and metrics["grad_norm"] > 0 and moved > 0 and limit["under_ceiling"]}


def _grow(session, scale: Scale, vocab: int, device: torch.device) -> dict:
    """Decode the session's branches turn after turn, with uneven tool results, until the longest prompt reaches
    ``scale.rollout_columns``; one branch finishes after each turn from the third on."""
    from alfrl.agent.sampler import SampleConfig

    g = torch.Generator().manual_seed(6)
    prompts = {b: torch.randint(1, vocab, (scale.rollout_prompt,), generator=g).tolist()
               for b in range(scale.rollout_rows)}
    cfg = SampleConfig(temperature=1.0, max_new_tokens=scale.reply_tokens)
    sampled, turns = 0, 0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tick = time.perf_counter()
    while prompts and max(map(len, prompts.values())) < scale.rollout_columns:
        replies = session.sample(prompts, cfg)
        sampled += sum(len(s.tokens) for s in replies.values())
        turns += 1
        done = [max(prompts)] if turns >= 3 and len(prompts) > 2 else []
        session.drop(done)
        step = scale.rollout_columns // 12
        prompts = {b: prompts[b] + replies[b].tokens + torch.randint(
            1, vocab, (step // 2 + (b * step) // scale.rollout_rows,), generator=g).tolist()
            for b in prompts if b not in done}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - tick
    return {"turns": turns, "columns": max(map(len, prompts.values())) if prompts else 0, "sampled_tokens": sampled,
            "seconds": seconds, "sampled_tokens_per_s": sampled / seconds}


def check_rollout(device: torch.device, scale: Scale) -> dict:
    """8 branches grown to the reference budget's columns, with the adapter in PEFT form and merged."""
    from alfrl.agent.models import Policy, sampling_copy
    from alfrl.agent.sampler import GroupSession

    vocab = scale.shape["vocab_size"]
    policy = Policy(model=lora_model(scale.shape, device), tokenizer=None, name="random Qwen3")
    results = {}
    for name in ("peft", "merged"):
        model = policy.model if name == "peft" else sampling_copy(policy, "bfloat16").model
        session = GroupSession(model, stop_ids=set(), seeds=list(range(scale.rollout_rows)), pad_id=0)
        reset_peak(device)
        grown = _grow(session, scale, vocab, device)
        results[name] = {**grown, "peak_gpu_gb": peak_gb(device),
                         **under(scale.rollout_ceiling, peak_gb(device), grown["seconds"])}
        del session, model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ok = all(r["columns"] >= scale.rollout_columns and r["sampled_tokens"] > 0 and r["under_ceiling"]
             for r in results.values())
    return {"rows": scale.rollout_rows, "target_columns": scale.rollout_columns, **results, "ok": ok}


def tiny_model_folder(folder: str) -> str:
    """A tiny random Qwen3 with the bundled model's tokenizer (offline), saved as a model folder."""
    from transformers import AutoTokenizer

    from alfrl.agent.bundled import bundled_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir()))  # no weights needed
    model = qwen3({**TINY_QWEN3, "vocab_size": len(tokenizer)}, torch.device("cpu"), torch.float32)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


COMPARED = ("success", "trajectories", "trajectories_trained", "tokens_trained", "invalid_per_episode")


def check_train_resume(device: torch.device) -> dict:
    """alfrl.training.train for 2 updates straight, and stopped after 1 then resumed: the same log."""
    import alfrl.training.train
    from alfrl.base.checkpoint import latest_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_model_folder(f"{tmp}/model")
        settings = dict(model=folder, init_adapter="none", device=device.type,
                        dtype="bfloat16" if device.type == "cuda" else "float32", updates=2, games_per_update=1, k=4,
                        max_steps=3, max_new_tokens=12, max_trajectory_tokens=3000, dynamic_sampling=False,
                        eval_every=0, log="none", workers=0, lora_rank=4, lora_alpha=8, seed=0, threads=None,
                        temperature=1.0)
        tick = time.perf_counter()
        straight = alfrl.training.train.train(alfrl.training.train.preset("cpu", run_dir=f"{tmp}/straight", **settings), progress=False)
        alfrl.training.train.train(alfrl.training.train.preset("cpu", run_dir=f"{tmp}/stopped", **{**settings, "updates": 1}),
                          progress=False)
        resumed = alfrl.training.train.train(resume=f"{tmp}/stopped", updates=2, progress=False)
        seconds = time.perf_counter() - tick
        last = latest_checkpoint(f"{tmp}/stopped")
        same = [{k: m.get(k) for k in COMPARED} for m in straight] == [{k: m.get(k) for k in COMPARED} for m in resumed]
        losses = [(a.get("loss"), b.get("loss")) for a, b in zip(straight, resumed)]
        close = all((x is None) == (y is None) and (x is None or abs(x - y) <= 1e-2 * max(1.0, abs(x)))
                    for x, y in losses)
        trained = [m.get("tokens_trained") for m in resumed]
        return {"updates": [m["step"] for m in resumed], "checkpoint": last.name if last else None,
                "tokens_trained": trained, "losses": losses, "seconds": seconds,
                "note": None if any(trained) else "no update trained: a random policy's groups are degenerate (every "
                "reply invalid alike); the update on this device is ppo_gradients' and update_4b's",
                "same_log": same, "ok": bool([m["step"] for m in resumed] == [1, 2] and last is not None
                                             and last.name.endswith("2") and same and close)}


REFERENCE = Scale(shape=QWEN3_4B, update_lengths=(12000, 6000), rollout_rows=8, rollout_prompt=1500,
                  rollout_columns=11500, reply_tokens=256, update_ceiling=(40.0, 60.0), rollout_ceiling=(50.0, 240.0))
"""The reference run's sizes: Qwen3-4B, a 12K-token episode (its budget) and a half-length one. The ceilings, from
the sizes (not yet measured on a GPU): the update holds 8 GB of bfloat16 weights, checkpointed layer inputs (about
2.2 GB at 12K tokens) and one layer's recomputation, so about 15 GB; 40 GiB leaves a margin on a 78-GiB H100 and
fails a lost checkpointing or an unchunked head (12K x 152K float32 logits are 7 GB on their own). The rollout's 8
rows of 11,500 columns cache 147 KB a token (13.5 GB) beside 8 GB of weights and a merged 8-GB copy: about 30 GB,
under 50 GiB. Time: an update of 18,000 tokens is well under a minute on an H100; a rollout engine decodes about
2,600 steps of 8 rows, under 4 minutes at 90 ms a step."""
SMALL = Scale(shape=dict(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
                         tie_word_embeddings=True),
              update_lengths=(1200, 600), rollout_rows=8, rollout_prompt=100, rollout_columns=700, reply_tokens=16)
"""A dry run's: the same code on a small Qwen3 shape, a tenth of the update's lengths, a sixteenth of the rollout's."""
