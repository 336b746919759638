"""The rooms of the scale run and of its held-out panel, made once and committed before the run.

    python -m alfrl generate --out /tmp/gen/panel3 --splits valid_unseen --n 700 --seed 3 \\
        --size-max-receptacles 16 --pack-dir /tmp/gen/panel3_pack
    python -m alfrl generate --out /tmp/gen/train4 --splits train --n 2400 --seed 4 \\
        --size-max-receptacles 16 --pack-dir /tmp/gen/train4_pack
    python scripts/make_scale_data.py --train data/expert/train.jsonl.xz /tmp/gen/train4_pack/train.jsonl.xz \\
        --panel data/heldout/valid_unseen.jsonl.xz /tmp/gen/panel3_pack/valid_unseen.jsonl.xz

and, for the continued arm's updates past the 909 training rooms (PREREGISTRATION.md, amendment 3)::

    python -m alfrl generate --out /tmp/gen/train5 --splits train --n 1500 --seed 5 \\
        --size-max-receptacles 16 --pack-dir /tmp/gen/train5_pack
    python scripts/make_scale_data.py --more-train /tmp/gen/train5_pack/train.jsonl.xz

Every pack was generated with the same settings (``--size-max-receptacles 16``; train from ALFWorld's training
floor plans, valid_unseen from its held-out ones), and both sides keep only the small rooms the cpu presets play
(the expert wins in at most 8 steps, at most 20 receptacles). Writes ``data/rl_rooms/train.jsonl.xz`` (the
training rooms), ``data/rl_rooms_more/train.jsonl.xz`` (the rooms played after those, ``more_data_dir``),
``data/panel/valid_unseen.jsonl.xz`` (the held-out panel), and in ``data/scale/`` the panel's
game list and its fixed 100-room subset for the sampled evaluation; it refuses if any game id, task id or floor
plan is on both sides, or if a game of the later training rooms is among the first.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections import Counter
from pathlib import Path

from alfrl.base.paths import REPO_ROOT
from alfrl.world.gamefile import game_id
from alfrl.world.games import load_games
from alfrl.world.pack import expand, read_pack, write_pack

FILTERS = {"max_expert_steps": 8, "max_receptacles": 20}
"""The rooms the scale preset trains on and the panel plays: those of the cpu presets."""
SAMPLED_ROOMS = 100
SAMPLED_SEED = 45
"""The panel's rooms played 4 times each at temperature 0.6: a seeded sample of 100, fixed here."""


def small_records(packs: list[Path], split: str) -> list[dict]:
    """The records of ``packs`` whose rooms pass :data:`FILTERS` (read by the loader every command uses)."""
    records = [r for pack in packs for r in read_pack(pack)]
    ids = [game_id(r) for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the {split} packs share game ids; generate them with different seeds")
    with tempfile.TemporaryDirectory() as tmp:
        for i, pack in enumerate(packs):
            expand(pack, Path(tmp) / str(i))
        keep = {g.game_id for i in range(len(packs))
                for g in load_games(split, Path(tmp) / str(i), **FILTERS)}
    return [r for r in records if game_id(r) in keep]


TRAIN_PACK = REPO_ROOT / "data/rl_rooms/train.jsonl.xz"
MORE_PACK = REPO_ROOT / "data/rl_rooms_more/train.jsonl.xz"
PANEL_PACK = REPO_ROOT / "data/panel/valid_unseen.jsonl.xz"


def check_apart(train: list[dict], panel: list[dict]) -> None:
    """Refuse if a game id, task id or floor plan is both in training and in the panel."""
    for what in ("task_id", "scene"):
        shared = {r[what] for r in train} & {r[what] for r in panel}
        if shared:
            raise SystemExit(f"{len(shared)} {what}s are both in training and in the panel (first: {sorted(shared)[0]})")
    if {game_id(r) for r in train} & {game_id(r) for r in panel}:
        raise SystemExit("a game is both in training and in the panel")


def write_renumbered(records: list[dict], path: Path) -> None:
    """Write the merged records, numbered afresh (a pack is sorted by index, unique within it)."""
    records.sort(key=game_id)
    for i, r in enumerate(records):
        r["index"] = i
    write_pack(records, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", nargs="+", type=Path, help="packs of generated train games")
    parser.add_argument("--panel", nargs="+", type=Path, help="packs of generated valid_unseen games")
    parser.add_argument("--more-train", nargs="+", type=Path, help="packs of train games played after --train's")
    args = parser.parse_args()
    if args.panel:
        panel = small_records(args.panel, "valid_unseen")
        write_renumbered(panel, PANEL_PACK)
        scale = REPO_ROOT / "data/scale"
        scale.mkdir(parents=True, exist_ok=True)
        ids = sorted(game_id(r) for r in panel)
        (scale / "panel_games.txt").write_text("".join(f"{g}\n" for g in ids))
        sampled = sorted(random.Random(SAMPLED_SEED).sample(ids, SAMPLED_ROOMS))
        (scale / "panel_sampled100.txt").write_text("".join(f"{g}\n" for g in sampled))
    if args.train:
        write_renumbered(small_records(args.train, "train"), TRAIN_PACK)
    if args.more_train:
        write_renumbered(small_records(args.more_train, "train"), MORE_PACK)
    train, more, panel = (read_pack(p) if p.is_file() else [] for p in (TRAIN_PACK, MORE_PACK, PANEL_PACK))
    if {game_id(r) for r in train} & {game_id(r) for r in more}:
        raise SystemExit(f"{MORE_PACK} repeats games of {TRAIN_PACK}; generate its games with another --seed")
    check_apart(train + more, panel)
    for name, records in (("training rooms", train), ("later training rooms", more), ("panel rooms", panel)):
        types = Counter(r["task_type"] for r in records)
        print(f"{name}: {len(records)} in {len({r['scene'] for r in records})} floor plans; "
              + ", ".join(f"{t} {n}" for t, n in sorted(types.items())))


if __name__ == "__main__":
    main()
