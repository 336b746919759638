"""alfrl.world.pack: packs rebuild generate's exact files; damaged or foreign packs fail loudly."""

from __future__ import annotations

import hashlib
import json
import lzma

import pytest

from alfrl.world.gamefile import game_id
from alfrl.world.pack import PACK_FIELDS, expand, game_sha256, read_pack, write_pack

from conftest import game_files

SPLIT = "valid_seen"


@pytest.fixture
def pack(tiny_games, tmp_path):
    return write_pack(tiny_games.records[SPLIT], tmp_path / "packs" / f"{SPLIT}.jsonl.xz")


def test_round_trip_is_byte_identical_to_generate(tiny_games, pack, tmp_path):
    assert expand(pack, tmp_path / "games") == 6
    expanded = game_files(tmp_path / "games")
    generated = {k: v for k, v in game_files(tiny_games.root).items() if k.startswith(f"{SPLIT}/")}
    assert len(generated) == 12
    assert expanded == generated
    stamp = tmp_path / "games" / SPLIT / ".pack"  # the pack's hash, then its games
    assert stamp.read_text().splitlines() == [hashlib.sha256(pack.read_bytes()).hexdigest(),
                                              *(game_id(r) for r in read_pack(pack))]


def test_pack_holds_the_slim_records_in_index_order(tiny_games, pack, tmp_path):
    records = read_pack(pack)
    assert [r["index"] for r in records] == list(range(6))
    assert all(set(r) == set(PACK_FIELDS) | {"sha256"} for r in records)
    for r, full in zip(records, tiny_games.records[SPLIT]):
        assert {k: r[k] for k in PACK_FIELDS} == {k: full[k] for k in PACK_FIELDS}
        assert r["sha256"] == game_sha256(full)
    # the order of the records given does not matter
    again = write_pack(list(reversed(tiny_games.records[SPLIT])), tmp_path / "again.jsonl.xz")
    assert lzma.decompress(again.read_bytes()) == lzma.decompress(pack.read_bytes())


def test_game_sha256_is_the_files_hash(tiny_games):
    for r in tiny_games.records[SPLIT]:
        data = (tiny_games.root / SPLIT / game_id(r) / "game.tw-pddl").read_bytes()
        assert game_sha256(r) == hashlib.sha256(data).hexdigest()


def test_second_expand_is_skipped_and_force_rewrites(pack, tmp_path):
    root = tmp_path / "games"
    assert expand(pack, root) == 6
    assert expand(pack, root) == 0  # the stamp says this pack is expanded here, and every game is
    assert expand(pack, root, force=True) == 6


def test_expand_restores_a_deleted_game(pack, tmp_path):
    """What a corrupt game's error says to do (delete it, run setup) gives the whole split back."""
    root = tmp_path / "games"
    expand(pack, root)
    before = game_files(root)
    victim = sorted((root / SPLIT).glob("*/*/game.tw-pddl"))[0]
    victim.unlink()
    (sorted((root / SPLIT).glob("*/*/traj_data.json"))[1]).unlink()
    assert expand(pack, root) == 2
    assert game_files(root) == before
    assert expand(pack, root) == 0


def test_stamp_without_a_game_list_is_upgraded_in_place(pack, tmp_path):
    """A split expanded by an older alfrl (stamp: the pack's hash only) is kept, and its stamp gains the list."""
    root = tmp_path / "games"
    expand(pack, root)
    stamp = root / SPLIT / ".pack"
    stamp.write_text(stamp.read_text().splitlines()[0] + "\n")
    assert expand(pack, root) == 0
    assert len(stamp.read_text().splitlines()) == 1 + 6


def test_another_pack_is_expanded_over_a_stamp(tiny_games, pack, tmp_path):
    root = tmp_path / "games"
    expand(pack, root)
    smaller = write_pack(tiny_games.records[SPLIT][:2], tmp_path / "other" / f"{SPLIT}.jsonl.xz")
    assert expand(smaller, root) == 2
    assert len(list((root / SPLIT).glob("*/*/game.tw-pddl"))) == 2  # the old pack's other games are gone
    assert (root / SPLIT / ".pack").read_text().split()[0] == hashlib.sha256(smaller.read_bytes()).hexdigest()


def test_damaged_pack(pack, tmp_path):
    data = pack.read_bytes()
    pack.write_bytes(data[:len(data) // 2])
    for call in (lambda: read_pack(pack), lambda: expand(pack, tmp_path / "games")):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value).startswith(f"game pack {pack} is damaged (")
        assert f"git checkout -- {pack}" in str(e.value)
    assert not (tmp_path / "games" / SPLIT / ".pack").exists()


def test_missing_pack(tmp_path):
    missing = tmp_path / "packs" / "valid_seen.jsonl.xz"
    for call in (lambda: read_pack(missing), lambda: expand(missing, tmp_path / "games")):
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert str(e.value) == (f"game pack {missing} is missing: restore it with `git checkout -- {missing}` "
                                "or make games with `python -m alfrl generate`")


def test_hash_mismatch_is_refused(pack, tmp_path):
    lines = lzma.decompress(pack.read_bytes()).decode().splitlines()
    record = json.loads(lines[3])
    record["sha256"] = "0" * 64  # what a different alfworld (domain or grammar) would give
    lines[3] = json.dumps(record, sort_keys=True)
    pack.write_bytes(lzma.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(RuntimeError) as e:
        expand(pack, tmp_path / "games")
    assert str(e.value).startswith(
        f"1 expanded games differ from the generator's (first: {tmp_path / 'games' / SPLIT / game_id(record)}"
        "/game.tw-pddl)")
    assert "pip install -e ." in str(e.value)
    assert not (tmp_path / "games" / SPLIT / ".pack").exists()


def test_a_folder_of_packs_is_a_data_dir(pack, tmp_path, monkeypatch):
    """--data-dir data/heldout (a folder of packs beside the default ones): its games are expanded once into
    <games dir>-<folder name> and load like any others."""
    from alfrl.world.games import load_games, resolve_data_dir
    monkeypatch.setenv("ALFRL_DATA_DIR", str(tmp_path / "games"))
    root = resolve_data_dir(pack.parent)
    assert root == tmp_path / "games-packs"
    assert sorted(g.game_id for g in load_games(SPLIT, pack.parent)) == sorted(game_id(r) for r in read_pack(pack))
    assert resolve_data_dir(pack.parent) == root  # the second time: already expanded, nothing written
