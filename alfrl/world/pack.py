"""Game packs: generated games stored compactly in git, expanded to game files on first use.

A game file is 60-90 KB, mostly the PDDL domain and text grammar, which are the
same in every game and ship with the installed ``alfworld``. A pack keeps only
what differs: one JSON record per game (PDDL problem, task, goal text, expert
walkthrough), xz-compressed. :func:`expand` rebuilds the exact files
``python -m alfrl generate`` writes, and checks each one against the SHA-256 the
generator recorded, so a different alfworld version is caught, not silently used.

Taught in notebook 00 (where the games come from).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.base.paths import PACK_DIR, games_dir
from alfrl.world.gamefile import game_id, game_json, write_game

PACK_FIELDS = ("split", "index", "task_id", "task_type", "scene", "pddl_params", "goal", "goals",
               "pddl_problem", "walkthrough")


def game_sha256(record: dict) -> str:
    text = game_json(record["pddl_problem"], record["goal"], record["walkthrough"])
    return hashlib.sha256(text.encode()).hexdigest()


def write_pack(records: list[dict], path: Path) -> Path:
    """Write records (in index order) to an xz-compressed JSONL pack."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for record in sorted(records, key=lambda r: r["index"]):
        slim = {k: record[k] for k in PACK_FIELDS}
        slim["sha256"] = game_sha256(record)
        lines.append(json.dumps(slim, sort_keys=True))
    with lzma.open(path, "wt", preset=9 | lzma.PRESET_EXTREME) as f:
        f.write("\n".join(lines) + "\n")
    return path


def _existing(path: Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"game pack {path} is missing: restore it with `git checkout -- {path}` "
                                "or make games with `python -m alfrl generate`")
    return path


def read_pack(path: Path) -> list[dict]:
    """The records of a pack; a clear error if the file is missing or damaged."""
    path = _existing(path)
    try:
        with lzma.open(path, "rt") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (lzma.LZMAError, EOFError, json.JSONDecodeError) as e:
        raise ValueError(f"game pack {path} is damaged ({e}); restore it with `git checkout -- {path}`") from e


def expand(pack: Path, root: Path, force: bool = False) -> int:
    """Write the games of ``pack`` under ``root/<split>/``; return how many were written.

    ``root/<split>/.pack`` stamps the pack expanded there (its SHA-256, then one game id a line).
    When it names this very pack, only games whose files are missing (deleted, say, because they
    were damaged) are written again: a stat per game, so a split never silently shrinks. A split
    expanded from another pack is removed first, so no stale game lingers.
    """
    pack = _existing(pack)
    digest = hashlib.sha256(pack.read_bytes()).hexdigest()
    split = pack.name.split(".")[0]
    split_dir = Path(root) / split
    stamp = split_dir / ".pack"
    stamped = stamp.read_text().split() if stamp.exists() else []
    if not force and stamped[:1] == [digest]:
        if len(stamped) > 1 and all(_expanded(split_dir / g) for g in stamped[1:]):
            return 0
        records = read_pack(pack)  # a game is missing, or an older stamp without the game list
        missing = [r for r in records if not _expanded(split_dir / game_id(r))]
        _write_games(missing, split_dir)
        _write_stamp(stamp, digest, records)
        return len(missing)
    records = read_pack(pack)
    if stamp.exists():  # games expanded from an older pack would linger beside the new ones
        shutil.rmtree(split_dir)
    _write_games(records, split_dir)
    _write_stamp(stamp, digest, records)
    return len(records)


def _expanded(folder: Path) -> bool:
    """Whether a game's two files are there."""
    return (folder / "game.tw-pddl").is_file() and (folder / "traj_data.json").is_file()


def _write_games(records: list[dict], split_dir: Path) -> None:
    """Write the records' game files, each checked against the generator's SHA-256."""
    mismatched = []
    for record in tqdm(records, desc=f"expand {split_dir.name}", unit="game", leave=False, disable=not records):
        game = write_game(record, split_dir)
        if hashlib.sha256(game.read_bytes()).hexdigest() != record["sha256"]:
            mismatched.append(game)
    if mismatched:
        raise RuntimeError(f"{len(mismatched)} expanded games differ from the generator's (first: "
                           f"{mismatched[0]}); the installed alfworld is not the pinned one: "
                           "reinstall with `pip install -e .`")


def _write_stamp(stamp: Path, digest: str, records: list[dict]) -> None:
    stamp.write_text("".join(line + "\n" for line in [digest, *(game_id(r) for r in records)]))


def expand_folder(folder: Path) -> Path:
    """Expand every ``<split>.jsonl.xz`` in ``folder`` (a set of games beside the default ones, such as
    ``data/heldout``) into ``<games dir>-<folder name>`` (``data/games-heldout``); returns that folder."""
    folder = Path(folder)
    root = games_dir().with_name(f"{games_dir().name}-{folder.name}")
    for pack in sorted(folder.glob("*.jsonl.xz")):
        expand(pack, root)
    return root


def default_packs() -> list[Path]:
    return sorted(PACK_DIR.glob("*.jsonl.xz"))


def ensure_games(root: Path | None = None, force: bool = False) -> Path:
    """Expand the committed packs into ``root`` (default ``data/games``) if not done yet."""
    root = Path(root) if root else games_dir()
    packs = default_packs()
    if not packs:
        raise FileNotFoundError(f"no game packs in {PACK_DIR}; make games with `python -m alfrl generate`")
    for pack in packs:
        expand(pack, root, force=force)
    return root
