"""One update with the course's trainer and one with TRL's GRPOTrainer (alfrl.training.trl_bridge), on the same games and
seeds: wall time, tokens, peak memory, and where the sampled tokens' logprobs agree.

    python benchmarks/trl_side_by_side.py                      # writes data/results/trl_side_by_side.json
    python benchmarks/trl_side_by_side.py --part course        # one side only (each part is its own process,
    python benchmarks/trl_side_by_side.py --part trl           # so that each peak memory is its own)

The games: the default warm start's two practice games (data/results/warmstart_epoch_pool.json), a group of 4
each, 10 turns, temperature 0.6, deterministic settings (no bfloat16 reads, no draft tokens), the same update
number and seed on both sides. Both sides play with the course's rollout, so the episodes should be the same,
token for token; the script checks that and reports it. Then:

- course: ``alfrl.training.train`` for one update (rollout, advantages, ``ppo_step`` on every group: no dynamic sampling);
- trl: ``GRPOTrainer`` with the bridge's ``rollout_func`` for one step, then a no-grad pass of TRL's own
  logprob code on its batch at the weights that sampled.

Logprob agreement, on the sampled tokens only: the sampler's (each episode's record) against TRL's recomputation
and against the course trainer's (:func:`alfrl.rl.ppo.sequence_logprobs`), max and mean absolute difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POOL = "data/results/warmstart_epoch_pool.json"
OUT = ROOT / "data/results/trl_side_by_side.json"


def config():
    from alfrl.training.train_config import preset
    return preset("cpu", k=4, updates=1, games_per_update=2, max_steps=10, pool=POOL, device="cpu",
                  dynamic_sampling=False, bf16=False, prefill_dtype=None, draft_tokens=0, sample_dtype=None,
                  threads=int(os.environ.get("ALFRL_THREADS", "2")))


def episodes(trajectories) -> list[dict]:
    return [{"game": t.game_id, "branch": t.branch, "tokens": t.tokens, "mask": t.mask, "logprobs": t.logprobs,
             "prompt_tokens": t.prompt_tokens, "won": t.won, "invalid": t.invalid} for t in trajectories]


def gaps(reference: list[list[float]], other: list[list[float]], masks: list[list[int]]) -> dict:
    diffs = [abs(a - b) for r, o, m in zip(reference, other, masks) for a, b, keep in zip(r, o, m) if keep]
    return {"max_abs": max(diffs), "mean_abs": sum(diffs) / len(diffs), "tokens": len(diffs)}


def course_part(folder: Path) -> dict:
    import torch

    from alfrl.rl.logprobs import sequence_logprobs
    from alfrl.rl.trajectory import load_trajectories
    from alfrl.training.train import load_for_training, peak_rss_gb, train
    cfg = config()
    torch.set_num_threads(cfg.threads)
    tick = time.perf_counter()
    history = train(replace(cfg, run_dir=str(folder / "course"), overwrite=True), progress=False)
    seconds = time.perf_counter() - tick
    played = load_trajectories(folder / "course" / "trajectories.jsonl")
    policy = load_for_training(cfg)  # the weights that sampled: the warm start
    with torch.no_grad():
        trainer = sequence_logprobs(policy.model, [t.tokens for t in played], temperature=cfg.temperature,
                                    masks=[t.mask for t in played])
    trainer_rows = [trainer[i, :len(t.tokens)].tolist() for i, t in enumerate(played)]
    step = history[-1]
    return {"seconds": seconds, "rollout_seconds": step["rollout_seconds"], "update_seconds": step["update_seconds"],
            "loss": step["loss"], "grad_norm": step["grad_norm"], "tokens_trained": step["tokens_trained"],
            "tokens_run": step["tokens_run"], "peak_gb": peak_rss_gb(), "episodes": episodes(played),
            "trainer_logprobs": trainer_rows}


def trl_part(folder: Path, rows: int = 1) -> dict:
    import torch

    from alfrl.training.train import peak_rss_gb, training_games
    from alfrl.training.trl_bridge import make_trainer
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg = config()
    torch.set_num_threads(cfg.threads)
    games = training_games(cfg)
    tick = time.perf_counter()
    trainer, rollout = make_trainer(cfg, folder / "trl", groups_per_update=2, games=games, rows_per_micro_batch=rows,
                                    gradient_checkpointing=True)  # TRL's default when this was measured
    setup = time.perf_counter() - tick
    seen = {}
    score = trainer._generate_and_score_completions

    def recorded(inputs):
        seen["batch"] = batch = score(inputs)
        seen["played"] = [t for g in rollout.played for t in g]
        tick = time.perf_counter()
        with torch.no_grad():  # TRL's own logprobs at the weights that sampled, before the step (not timed)
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            seen["logps"] = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask,
                                                                      batch["completion_ids"].size(1), batch_size=1)[0]
        seen["extra_seconds"] = time.perf_counter() - tick
        return batch

    trainer._generate_and_score_completions = recorded
    tick = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - tick - seen["extra_seconds"]
    log = next(e for e in trainer.state.log_history if "grad_norm" in e)
    played = seen["played"]
    logprob_rows = []
    for i, t in enumerate(played):  # TRL's logprobs laid out like the episode's tokens (0 on the prompt)
        n = len(t.tokens) - t.prompt_tokens
        logprob_rows.append([0.0] * t.prompt_tokens + seen["logps"][i, :n].tolist())
    return {"seconds": seconds, "setup_seconds": setup, "rollout_seconds": rollout.seconds,
            "update_seconds": seconds - rollout.seconds, "loss": log["loss"], "grad_norm": log["grad_norm"],
            "tokens_trained": int(seen["batch"]["num_items_in_batch"]),
            "tokens_run": int(seen["batch"]["prompt_mask"].numel() + seen["batch"]["completion_mask"].numel()),
            "peak_gb": peak_rss_gb(), "rows_per_micro_batch": rows, "episodes": episodes(played),
            "trainer_logprobs": logprob_rows}


def compare(course: dict, trl: dict) -> dict:
    same = [a["tokens"] == b["tokens"] for a, b in zip(course["episodes"], trl["episodes"])]
    masks = [e["mask"] for e in course["episodes"]]
    sampler = [e["logprobs"] for e in course["episodes"]]
    result = {"episodes": len(same), "identical_episodes": sum(same)}
    if all(same):
        result["sampler_vs_course_trainer"] = gaps(sampler, course["trainer_logprobs"], masks)
        result["sampler_vs_trl"] = gaps(sampler, trl["trainer_logprobs"], masks)
        result["course_trainer_vs_trl"] = gaps(course["trainer_logprobs"], trl["trainer_logprobs"], masks)
    for side, data in (("course", course), ("trl", trl)):
        result[side] = {k: v for k, v in data.items() if k not in ("episodes", "trainer_logprobs")}
    result["wins"] = sum(e["won"] for e in course["episodes"])
    return result


def report(result: dict) -> str:
    """The result as a short markdown page."""
    c, t = result["course"], result["trl"]
    lines = [
        "# One update, the course's trainer beside TRL's GRPOTrainer",
        "",
        f"Made by `{result['command']}` (data in `trl_side_by_side.json`), {result['threads']} torch threads on this "
        "2-core CPU, float32. The same update: the default warm start's two practice games "
        "(`data/results/warmstart_epoch_pool.json`), a group of 4 each, 10 turns, temperature 0.6, the same seeds; "
        "no dynamic sampling on either side.",
        "",
        f"- Episodes: {result['identical_episodes']} of {result['episodes']} identical token for token "
        f"({result['wins']} won); both sides play with the course's rollout.",
        "",
        "| | course (`alfrl.training.train`) | TRL (`GRPOTrainer` + `alfrl.training.trl_bridge`) |",
        "|---|---|---|",
        f"| rollout, s | {c['rollout_seconds']:.0f} | {t['rollout_seconds']:.0f} |",
        f"| update (forward, backward, step), s | {c['update_seconds']:.0f} | {t['update_seconds']:.0f} |",
        f"| loss | {c['loss']:.6f} | {t['loss']:.6f} |",
        f"| gradient norm | {c['grad_norm']:.6f} | {t['grad_norm']:.6f} |",
        f"| sampled tokens trained | {c['tokens_trained']} | {t['tokens_trained']} |",
        f"| tokens run through the model | {c['tokens_run']} | {t['tokens_run']} (padded) |",
        f"| peak memory, GB | {c['peak_gb']:.1f} | {t['peak_gb']:.1f} |",
        f"| episodes a forward pass | by tokens (up to {4096} padded) | {t['rows_per_micro_batch']} |",
        "",
    ]
    if "sampler_vs_trl" in result:
        lines += ["Logprobs of the sampled tokens (nats), absolute differences:", "",
                  "| pair | max | mean | tokens |", "|---|---|---|---|"]
        for key, name in (("sampler_vs_course_trainer", "sampler vs the course's trainer"),
                          ("sampler_vs_trl", "sampler vs TRL's trainer"),
                          ("course_trainer_vs_trl", "the course's trainer vs TRL's")):
            g = result[key]
            lines.append(f"| {name} | {g['max_abs']:.2e} | {g['mean_abs']:.2e} | {g['tokens']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("both", "course", "trl"), default="both")
    parser.add_argument("--folder", default=None, help="where each part writes (default: a temporary folder)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--rows", type=int, default=1, help="TRL's episodes per forward pass (rows_per_micro_batch)")
    parser.add_argument("--report-only", action="store_true", help="compare the parts already in --folder")
    args = parser.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="trl_side_by_side_"))
    if args.part != "both":
        data = course_part(folder) if args.part == "course" else trl_part(folder, args.rows)
        (folder / f"{args.part}.json").write_text(json.dumps(data))
        return
    for part in () if args.report_only else ("course", "trl"):  # each in its own process: its own peak memory
        print(f"[side_by_side] {part}: python {Path(__file__).name} --part {part} --folder {folder}", flush=True)
        subprocess.run([sys.executable, __file__, "--part", part, "--folder", str(folder), "--rows", str(args.rows)],
                       check=True)
    result = compare(*(json.loads((folder / f"{p}.json").read_text()) for p in ("course", "trl")))
    result["command"] = "python benchmarks/trl_side_by_side.py" + (f" --rows {args.rows}" if args.rows != 1 else "")
    result["threads"] = config().threads
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
