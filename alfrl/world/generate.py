"""``python -m alfrl generate``: make train / valid_seen / valid_unseen splits of new games.

Each game ``i`` of a split is drawn from its own ``random.Random((seed, split, i,
attempt))`` and kept only when ALFWorld's handcoded expert wins it, so games do
not depend on each other: workers can run them in any order and the output is
byte-identical for the same seed. Finished games are appended to a journal
(``<out>/<split>/.journal.jsonl``) as they come in, so an interrupted run resumes
where it stopped.

Taught in notebook 00 and docs/games.md (the offline generator).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

from tqdm.auto import tqdm

from alfrl import TASK_TYPES
from alfrl.world import expert, pddl
from alfrl.world.gamefile import game_id, traj_data, write_game  # noqa: F401 (game_id, traj_data re-exported)
from alfrl.world.rooms import SizeConfig, draw_scene, make_room

SPLIT_TASK_COUNTS = {
    # ALFWorld's own eval splits, per task type (valid_seen 140, valid_unseen 134 games).
    "valid_seen": {"pick_and_place_simple": 35, "look_at_obj_in_light": 13,
                   "pick_clean_then_place_in_recep": 27, "pick_heat_then_place_in_recep": 16,
                   "pick_cool_then_place_in_recep": 25, "pick_two_obj_and_place": 24},
    "valid_unseen": {"pick_and_place_simple": 24, "look_at_obj_in_light": 18,
                     "pick_clean_then_place_in_recep": 31, "pick_heat_then_place_in_recep": 23,
                     "pick_cool_then_place_in_recep": 21, "pick_two_obj_and_place": 17},
}
TRAIN_MIX = {"pick_and_place_simple": 790, "look_at_obj_in_light": 308,
             "pick_clean_then_place_in_recep": 650, "pick_heat_then_place_in_recep": 459,
             "pick_cool_then_place_in_recep": 533, "pick_two_obj_and_place": 813}
"""ALFWorld's train split (3,553 games) per task type: the mix of a generated train split."""
DEFAULT_COUNTS = {"train": 1000, "valid_seen": 140, "valid_unseen": 134}


@dataclass
class GenerateConfig:
    """Settings of ``python -m alfrl generate`` (each field is a flag)."""

    out: str = "data/games"
    """Folder to write ``<split>/<task>-<Obj>-None-<Parent>-<scene>/<trial>/`` games into."""
    splits: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
    """Which splits to make."""
    n: int | None = None
    """Games per split; None: ALFWorld's sizes (valid 140/134) and 1,000 for train."""
    seed: int = 0
    """Master seed: the same seed gives byte-identical games."""
    workers: int = max(1, min(2, os.cpu_count() or 1))
    """Parallel worker processes."""
    max_attempts: int = 30
    """Rooms to try for one game before giving up (the expert must win one)."""
    size: SizeConfig = field(default_factory=SizeConfig)
    """Room size knob (receptacles, distractor object types)."""


def task_plan(split: str, n: int, seed: int) -> list[str]:
    """The task type of each game of a split: ALFWorld's per-type counts, scaled to ``n``."""
    mix = SPLIT_TASK_COUNTS.get(split, TRAIN_MIX)
    total = sum(mix.values())
    exact = {t: mix[t] * n / total for t in TASK_TYPES}
    counts = {t: int(exact[t]) for t in TASK_TYPES}
    by_remainder = sorted(TASK_TYPES, key=lambda t: (counts[t] - exact[t], TASK_TYPES.index(t)))
    for t in by_remainder[:n - sum(counts.values())]:
        counts[t] += 1
    plan = [t for t in TASK_TYPES for _ in range(counts[t])]
    random.Random(f"{seed}/{split}/plan").shuffle(plan)
    return plan


_ENGINE = None


def make_game(job: tuple) -> tuple[int, dict | None]:
    """Generate game ``index`` of ``split`` (a worker's job); the record is None if no room was solved."""
    global _ENGINE
    split, index, task_type, seed, size, max_attempts = job
    _ENGINE = _ENGINE or expert.make_engine(facts=True)
    for attempt in range(max_attempts):
        rng = random.Random(f"{seed}/{split}/{index}/{attempt}")
        scene = draw_scene(task_type, split, rng)
        if scene is None:  # a floor plan this split excludes: the next attempt draws again
            continue
        built = make_room(task_type, scene, size, rng)
        if built is None:
            continue
        room, task = built
        templates = [pddl.goal_text(task, k) for k in range(2)]
        record = {"split": split, "index": index, "task_id": f"trial_alfrl_s{seed}_{split}_{index:05d}",
                  "task_type": task_type, "scene": scene, "pddl_params": task.pddl_params(),
                  "goal": templates[rng.randrange(2)], "goals": templates,
                  "pddl_problem": pddl.problem(room, task, f"alfrl_{split}_{index}"),
                  "walkthrough": None, "attempt": attempt}
        with tempfile.TemporaryDirectory(prefix="alfrl-gen-") as tmp:
            game = write_game(record, Path(tmp))
            walkthrough = expert.solve(game, seed=rng.randrange(2**31), engine=_ENGINE)
        if walkthrough is not None:
            record["walkthrough"] = walkthrough
            return index, record
    return index, None


def _journal(out: Path, split: str) -> Path:
    return out / split / ".journal.jsonl"


def read_journal(out: Path, split: str) -> dict[int, dict]:
    """Games already made for ``split`` (by index); a torn last line is ignored."""
    records: dict[int, dict] = {}
    path = _journal(out, split)
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written when the run was interrupted
            records[record["index"]] = record
    return records


def generate_split(cfg: GenerateConfig, split: str, n: int) -> list[dict]:
    """Make ``n`` games of ``split`` under ``cfg.out``; return the records in index order."""
    out = Path(cfg.out)
    (out / split).mkdir(parents=True, exist_ok=True)
    done = read_journal(out, split)
    key = settings_key(cfg)
    stale = sorted(i for i, r in done.items() if r.get("config") != key)
    if stale:
        raise RuntimeError(f"{out / split} holds games made with other settings (e.g. game {stale[0]}); "
                           "generate into a new --out folder, or delete that one first")
    plan = task_plan(split, n, cfg.seed)
    # The plan depends on n: journaled games made for another n that no longer fit it
    # (other task type, or index >= n) are made again, and their folders removed.
    unfit = sorted(i for i, r in done.items() if i >= n or r["task_type"] != plan[i])
    for i in unfit:
        folder = out / split / game_id(done.pop(i))
        shutil.rmtree(folder, ignore_errors=True)
        if folder.parent.is_dir() and not any(folder.parent.iterdir()):
            folder.parent.rmdir()
    jobs = [(split, i, plan[i], cfg.seed, cfg.size, cfg.max_attempts) for i in range(n) if i not in done]
    bar = tqdm(total=n, initial=n - len(jobs), desc=f"generate {split}", unit="game")
    with open(_journal(out, split), "a") as journal:
        pool = get_context("fork").Pool(cfg.workers) if cfg.workers > 1 and len(jobs) > 1 else None
        try:
            results = pool.imap_unordered(make_game, jobs) if pool else map(make_game, jobs)
            for index, record in results:
                if record is not None:
                    record["config"] = key
                    journal.write(json.dumps(record, sort_keys=True) + "\n")
                    journal.flush()
                    done[index] = record
                bar.update(1)
        finally:
            if pool:
                pool.terminate()
            bar.close()
    missing = [i for i in range(n) if i not in done]
    if missing:
        raise RuntimeError(f"{split}: no solvable room for games {missing[:10]} after "
                           f"{cfg.max_attempts} attempts; raise --max-attempts or enlarge rooms")
    records = [done[i] for i in range(n)]
    for record in records:
        write_game(record, out / split)
    return records


def continue_from_pack(cfg: GenerateConfig, split: str, pack: Path) -> int:
    """Seed ``split``'s journal under ``cfg.out`` with the games of ``pack`` (a pack an earlier run of these same
    settings wrote, perhaps cut short: its ``<split>.settings.json`` must match), so that only the missing games
    are made. A fresh clone continues a long generation this way. Returns the games taken over."""
    from alfrl.world.pack import read_pack
    settings = pack.with_name(f"{split}.settings.json")
    if not pack.is_file() or not settings.is_file():  # nothing to continue (a pack from before: made again)
        return 0
    if json.loads(settings.read_text()) != json.loads(settings_key(cfg)):
        raise RuntimeError(f"{pack} was made with other settings than these ({settings.name}: "
                           f"{settings.read_text().strip()}); pass the same --seed and size flags, or another "
                           "--pack-dir")
    done = read_journal(Path(cfg.out), split)
    taken = [r for r in read_pack(pack) if r["index"] not in done]
    (Path(cfg.out) / split).mkdir(parents=True, exist_ok=True)
    with open(_journal(Path(cfg.out), split), "a") as journal:
        for record in taken:
            journal.write(json.dumps({**{k: v for k, v in record.items() if k != "sha256"},
                                      "config": settings_key(cfg)}, sort_keys=True) + "\n")
    return len(taken)


def pack_journal(cfg: GenerateConfig, split: str, pack: Path) -> int:
    """Write the games ``split``'s journal holds so far (all of them, or a run cut short) as ``pack``, with the
    settings that made them beside it (:func:`continue_from_pack` reads both). Returns the games packed."""
    from alfrl.world.pack import write_pack
    records = [r for i, r in read_journal(Path(cfg.out), split).items() if r.get("config") == settings_key(cfg)]
    if not records:
        raise RuntimeError(f"{Path(cfg.out) / split} holds no {split} games made with these settings: nothing to "
                           f"pack (pass the --splits, --seed and size flags of the generation), {pack} left as it was")
    write_pack(records, pack)
    pack.with_name(f"{split}.settings.json").write_text(settings_key(cfg) + "\n")
    return len(records)


def settings_key(cfg: GenerateConfig) -> str:
    return json.dumps({"seed": cfg.seed, "size": asdict(cfg.size), "max_attempts": cfg.max_attempts},
                      sort_keys=True)


def generate(cfg: GenerateConfig) -> dict[str, list[dict]]:
    """Make every split of ``cfg``; return the records per split."""
    result = {}
    for split in cfg.splits:
        if split not in DEFAULT_COUNTS:
            raise ValueError(f"unknown split {split!r}; choose from {sorted(DEFAULT_COUNTS)}")
        result[split] = generate_split(cfg, split, cfg.n if cfg.n is not None else DEFAULT_COUNTS[split])
    return result
