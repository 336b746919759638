"""alfrl.eval.evaluate: summary statistics by hand, refusal to overwrite, resume, and real evaluations on
generated games and (when present) ALFWorld's official valid_seen games."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.eval.eval_report import markdown_table, p_text, write_comparison
from alfrl.eval.eval_stats import games_needed, outcomes, sign_test_power
from alfrl.eval.evaluate import (EvalConfig, comparison_table, evaluate, paired_outcomes, read_records, selected_games,
                                 selected_records, summarize, wilson_interval)


def record(split: str, task: str, won: bool, invalid: int, steps: int, valid_calls: int, admissible: int,
           end: str) -> dict:
    return {"split": split, "game_id": f"{task}/{split}/{steps}", "task_type": task, "won": won, "steps": steps,
            "invalid": invalid, "end_reason": end, "valid_calls": valid_calls, "admissible": admissible,
            "turns": steps}


RECORDS = [
    record("valid_seen", "pick_and_place_simple", True, 2, 10, 9, 8, "won"),
    record("valid_seen", "pick_and_place_simple", False, 4, 50, 40, 46, "max_steps"),
    record("valid_seen", "pick_heat_then_place_in_recep", True, 0, 20, 20, 20, "won"),
    record("valid_unseen", "pick_heat_then_place_in_recep", False, 6, 30, 30, 24, "max_tokens"),
]


def test_summary_by_hand():
    s = summarize(RECORDS)
    seen, unseen, everything = s["splits"]["valid_seen"], s["splits"]["valid_unseen"], s["all"]
    assert (seen["games"], seen["won"], unseen["games"], unseen["won"]) == (3, 2, 1, 0)
    assert seen["success"] == pytest.approx(2 / 3) and everything["success"] == 0.5
    assert seen["invalid_per_episode"] == 2.0 and everything["invalid_per_episode"] == 3.0
    assert everything["mean_steps"] == 27.5
    assert everything["valid_call_rate"] == pytest.approx(99 / 110)
    assert everything["admissible_rate"] == pytest.approx(98 / 110)
    assert everything["end_reasons"] == {"won": 2, "max_steps": 1, "max_tokens": 1}
    tasks = s["tasks"]["valid_seen"]
    assert tasks["pick_and_place_simple"]["success"] == 0.5 and tasks["pick_heat_then_place_in_recep"]["won"] == 1
    assert set(s["tasks"]["valid_unseen"]) == {"pick_heat_then_place_in_recep"}
    with pytest.raises(ValueError, match="no records"):
        summarize([])


def tiny_eval(out, data_dir, **overrides) -> EvalConfig:
    return EvalConfig(**{**dict(out=str(out), data_dir=str(data_dir), split="valid_seen", limit=2, max_steps=2,
                                max_new_tokens=8), **overrides})


def test_evaluate_refuses_to_overwrite_and_resumes(tmp_path, tiny_games, monkeypatch):
    out = tmp_path / "eval"
    first = evaluate(tiny_eval(out, tiny_games.root, limit=1), progress=False)
    assert first["all"]["games"] == 1
    with pytest.raises(FileExistsError, match="--resume"):
        evaluate(tiny_eval(out, tiny_games.root), progress=False)
    resumed = evaluate(tiny_eval(out, tiny_games.root, resume=True), progress=False)
    records = read_records(out)
    assert resumed["all"]["games"] == 2 and len({r["game_id"] for r in records}) == 2
    assert all(r["steps"] == 2 and r["trajectory"]["turns"] for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary == resumed
    table = comparison_table({"base": out})
    assert table.loc["base", "games"] == 2
    with pytest.raises(ValueError, match="other settings.*max_steps"):
        evaluate(tiny_eval(out, tiny_games.root, resume=True, max_steps=3), progress=False)
    with pytest.raises(ValueError, match="not both"):
        evaluate(tiny_eval(out, tiny_games.root, resume=True, overwrite=True), progress=False)
    monkeypatch.setattr("alfrl.eval.evaluate.load_policy", lambda *a, **k: pytest.fail("a finished evaluation loads no model"))
    smaller = evaluate(tiny_eval(out, tiny_games.root, resume=True, limit=1), progress=False)
    assert smaller["all"]["games"] == 1  # only the selected game is summarised
    monkeypatch.undo()
    again = evaluate(tiny_eval(out, tiny_games.root, overwrite=True, limit=1), progress=False)
    assert again["all"]["games"] == 1


def test_selected_records_are_what_the_summary_counts(tmp_path, tiny_games, monkeypatch):
    """A folder evaluated with a larger limit, read for a smaller one: exactly the selected games'
    records, the ones summary.json summarises (notebook 06 re-run with a smaller limit)."""
    out = tmp_path / "eval"
    larger = tiny_eval(out, tiny_games.root, limit=3)
    evaluate(larger, progress=False)
    assert len(read_records(out)) == 3 and len(selected_records(larger)) == 3
    smaller = tiny_eval(out, tiny_games.root, limit=2, resume=True)
    chosen = [(s, g.game_id) for s, g in selected_games(smaller)]
    assert chosen == [(s, g.game_id) for s, g in selected_games(larger)][:2]  # a prefix of one seeded order
    monkeypatch.setattr("alfrl.eval.evaluate.load_policy", lambda *a, **k: pytest.fail("a finished evaluation loads no model"))
    summary = evaluate(smaller, progress=False)
    records = selected_records(smaller)
    assert sorted((r["split"], r["game_id"]) for r in records) == sorted(chosen)
    assert summarize(records) == summary == json.loads((out / "summary.json").read_text())
    assert summarize(read_records(out)) != summary  # all three stored records: not the selection
    with pytest.raises(ValueError, match="no record of 1 of the 4 selected games.*resume=True"):
        selected_records(tiny_eval(out, tiny_games.root, limit=4))


def write_results(folder, wins: list[bool]) -> None:
    """An evaluation folder by hand: game i won or lost as ``wins[i]`` says."""
    folder.mkdir()
    records = [{**record("valid_unseen", "pick_and_place_simple", won, 0, 10, 10, 10, "won" if won else "max_steps"),
                "game_id": f"game{i}"} for i, won in enumerate(wins)]
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps(summarize(records)))


def test_paired_outcomes_by_hand(tmp_path):
    # 10 games: before wins 0-2, after wins 1-7 (game 0 lost, games 3-7 gained): 5 gained, 1 lost.
    write_results(tmp_path / "before", [i < 3 for i in range(10)])
    write_results(tmp_path / "after", [1 <= i < 8 for i in range(10)])
    paired = paired_outcomes(tmp_path / "before", tmp_path / "after")
    # exact sign test on 6 discordant games: 2 * (C(6,0) + C(6,1)) / 2^6 = 14 / 64
    assert paired == {"games": 10, "gained": 5, "lost": 1, "p_value": 14 / 64}
    assert paired_outcomes(tmp_path / "before", tmp_path / "before")["p_value"] == 1.0
    table = comparison_table({"before": tmp_path / "before", "after": tmp_path / "after"})
    assert table.loc["after", "vs first: gained/lost (p)"] == "+5/-1 (p=0.22)"
    assert table.loc["before", "vs first: gained/lost (p)"] == "-"
    assert table.loc["after", "solved"] == "7/10" and table.loc["before", "solved"] == "3/10"
    lines = markdown_table(table).splitlines()  # what scripts/compare_evals.py commits
    assert lines[0].startswith("| checkpoint | valid_unseen % | all % | solved |") and lines[1].startswith("|---|")
    assert lines[3].startswith("| after | 70 | 70 | 7/10 |") and lines[3].endswith("| +5/-1 (p=0.22) |")
    write_results(tmp_path / "elsewhere", [True])
    (tmp_path / "elsewhere" / "records.jsonl").write_text(json.dumps({"split": "valid_seen", "game_id": "x",
                                                                       "won": True}) + "\n")
    with pytest.raises(ValueError, match="share no games"):
        paired_outcomes(tmp_path / "before", tmp_path / "elsewhere")
    table = comparison_table({"before": tmp_path / "before", "elsewhere": tmp_path / "elsewhere"})
    assert table.loc["elsewhere", "vs first: gained/lost (p)"] == "no shared games"


def test_outcomes_file_pairs_like_the_folder(tmp_path):
    """A committed outcomes file (no trajectories) gives the same paired test as the evaluation folder."""
    write_results(tmp_path / "before", [i < 3 for i in range(10)])
    write_results(tmp_path / "after", [1 <= i < 8 for i in range(10)])
    kept = outcomes(read_records(tmp_path / "before"), "warm start")
    assert kept[0] == {"checkpoint": "warm start", "split": "valid_unseen", "game_id": "game0",
                       "task_type": "pick_and_place_simple", "won": True, "steps": 10, "invalid": 0,
                       "end_reason": "won"}
    (tmp_path / "outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    expected = {"games": 10, "gained": 5, "lost": 1, "p_value": 14 / 64}
    assert paired_outcomes(tmp_path / "outcomes.jsonl", tmp_path / "after") == expected
    assert paired_outcomes(kept, read_records(tmp_path / "after")) == expected
    # the files scripts/compare_evals.py and cpu_learning_result.py commit
    results = {"warm start": tmp_path / "before", "after": tmp_path / "after"}
    files = [tmp_path / name for name in ("t.md", "f.png", "s.json", "o.jsonl")]
    table = write_comparison(results, *files, note="made by hand")
    text = files[0].read_text()
    assert text.startswith("made by hand\n\n" + table + "\n") and "+5/-1 (p=0.22)" in table
    assert "| warm start | 3/10 |" in text and "| after | 7/10 |" in text  # solved per task type: one type here
    assert "How the lost episodes failed" not in text  # these records keep no trajectories
    assert files[1].stat().st_size > 0 and set(json.loads(files[2].read_text())) == {"warm start", "after"}
    assert paired_outcomes([r for r in read_jsonl(files[3]) if r["checkpoint"] == "warm start"],
                           [r for r in read_jsonl(files[3]) if r["checkpoint"] == "after"]) == expected
    # committed outcomes stand in for the folder: the same row, without the turns they do not keep
    again = write_comparison({"warm start": kept, "after": tmp_path / "after"}, *files)
    row = again.splitlines()[2].split(" | ")
    assert row[3:7] == ["3/10", "11-60", "10", "0"] and row[7] == "-"  # solved, interval, games, invalid; calls
    assert again.splitlines()[3] == table.splitlines()[3]  # the "after" row, paired the same way


def test_compare_evals_takes_committed_outcomes(tmp_path):
    """scripts/compare_evals.py: "NAME=FILE@CHECKPOINT" is that checkpoint's outcomes on the folders' games."""
    write_results(tmp_path / "before", [i < 3 for i in range(10)])
    write_results(tmp_path / "after", [1 <= i < 8 for i in range(6)])  # 6 of the 10 games
    rows = outcomes(read_records(tmp_path / "before"), "warm start") + outcomes(read_records(tmp_path / "after"), "x")
    (tmp_path / "o.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, "scripts/compare_evals.py", f"warm start={tmp_path / 'o.jsonl'}@warm start",
                           f"after={tmp_path / 'after'}", "--out", str(tmp_path / "cmp")], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "cmp.md").read_text()
    assert "| warm start |" in table and "3/6" in table and "+3/-1 (p=0.62)" in table
    bad = subprocess.run([sys.executable, "scripts/compare_evals.py", f"w={tmp_path / 'o.jsonl'}@nobody",
                          f"after={tmp_path / 'after'}", "--out", str(tmp_path / "x")], cwd=REPO_ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no outcomes of checkpoint 'nobody'" in bad.stderr


def test_wilson_interval():
    low, high = wilson_interval(5, 20)  # p = 0.25, z = 1.96: centre 0.2904, half-width 0.1784
    assert abs(low - 0.1119) < 1e-3 and abs(high - 0.4687) < 1e-3
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0


def test_sign_test_power_by_enumeration():
    """The power of the paired test, against every way 6 games can go (gained, lost or unchanged), each
    judged by paired_outcomes itself."""
    import itertools
    from math import comb

    gain, changed, games = 0.2, 0.5, 6
    chance = {"gained": (changed + gain) / 2, "lost": (changed - gain) / 2, "same": 1 - changed}
    by_hand = 0.0
    for pattern in itertools.product(chance, repeat=games):
        before = [{"split": "s", "game_id": i, "won": way == "lost"} for i, way in enumerate(pattern)]
        after = [{"split": "s", "game_id": i, "won": way == "gained"} for i, way in enumerate(pattern)]
        paired = paired_outcomes(before, after)
        if paired["p_value"] < 0.05 and paired["gained"] > paired["lost"]:
            by_hand += math.prod(chance[way] for way in pattern)
    assert by_hand > 0 and abs(sign_test_power(games, gain, changed) - by_hand) < 1e-12
    # no game lost: significant once 6 are gained (p = 2/64); P(Binomial(60, 0.1) >= 6)
    at_least_6 = 1 - sum(comb(60, k) * 0.1 ** k * 0.9 ** (60 - k) for k in range(6))
    assert abs(sign_test_power(60, 0.1, 0.1) - at_least_6) < 1e-12
    assert sign_test_power(200, 0.0, 0.2) < 0.05  # no gain: significant no more often than alpha allows
    fewest = next(n for n in range(1, 200) if 1 - sum(comb(n, k) * 0.1 ** k * 0.9 ** (n - k) for k in range(6)) >= 0.5)
    assert games_needed(0.1, 0.1, power=0.5) == fewest
    assert games_needed(0.01, 0.5, most=100) is None
    with pytest.raises(ValueError, match="at least that share"):
        sign_test_power(100, 0.3, 0.2)


def test_evaluate_on_official_valid_seen_games(tmp_path, real_data_dir):
    """The same command on ALFWorld's official games (skipped where they are absent)."""
    s = evaluate(tiny_eval(tmp_path / "real", real_data_dir), progress=False)
    assert s["all"]["games"] == 2
    records = read_records(tmp_path / "real")
    assert all(r["split"] == "valid_seen" and r["trajectory"]["prompt_tokens"] > 100 for r in records)
    assert {r["task_type"] for r in records} <= set(s["tasks"]["valid_seen"])


def test_failure_table_reads_the_lost_episodes_by_hand():
    """Two lost episodes kept with their turns: one took an apple first in a mug game and ran out of steps,
    one went back and forth for its last six moves without taking anything; a won one is not counted."""
    from alfrl.eval.eval_report import failure_table

    def kept(won: bool, actions: list[str], end: str) -> dict:
        return {"game_id": "pick_and_place_simple-Mug-None-Desk-301/trial_1", "task_type": "pick_and_place_simple",
                "won": won, "end_reason": end,
                "trajectory": {"turns": [{"action": a, "admissible": True} for a in actions]}}

    records = [kept(False, ["go to desk 1", "take apple 1 from desk 1"], "max_steps"),
               kept(False, ["go to desk 1", "go to shelf 1"] * 3, "max_tokens"),
               kept(True, ["take mug 1 from desk 1"], "won")]
    table = failure_table({"kept": records, "outcomes only": [{k: v for k, v in r.items() if k != "trajectory"}
                                                              for r in records]})
    assert list(table.index) == ["kept"]
    assert table.loc["kept"].to_dict() == {"lost": 2, "wrong object %": 50.0, "took nothing %": 50.0, "loop %": 50.0,
                                           "out of steps %": 50.0}
    assert failure_table({"outcomes only": [{"won": False}]}) is None


def test_a_tiny_p_value_keeps_its_size_in_a_table():
    assert [p_text(p) for p in (14 / 64, 0.0156, 0.00978, 5.7e-14, 1.0)] == ["0.22", "0.02", "1e-02", "6e-14", "1.00"]


def test_a_merged_copy_plays_the_same_greedy_game_and_bad_dtypes_are_named(tmp_path, tiny_games):
    """--sample-dtype float32 merges the adapter into a float32 copy: up to rounding the same policy, so the same
    greedy actions as the PEFT model; bfloat16 with --prefill-dtype bfloat16 plays (faster on AMX, rounding may
    change a choice); a dtype that cannot work is refused before anything loads."""
    settings = dict(adapter="warmstart_epoch", temperature=0.0, limit=1, max_steps=3, max_new_tokens=24)
    runs = {}
    for name, extra in (("peft", {}), ("merged", {"sample_dtype": "float32"}),
                        ("bf16", {"sample_dtype": "bfloat16", "prefill_dtype": "bfloat16"})):
        evaluate(tiny_eval(tmp_path / name, tiny_games.root, **settings, **extra), progress=False)
        (record,) = read_records(tmp_path / name)
        runs[name] = [turn["action"] for turn in record["trajectory"]["turns"]]
    assert runs["merged"] == runs["peft"] and len(runs["peft"]) == 3 and 1 <= len(runs["bf16"]) <= 3
    for flag, value in (("sample_dtype", "fp32"), ("prefill_dtype", "float32")):
        with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} must be .*got '{value}'"):
            evaluate(tiny_eval(tmp_path / "bad", tiny_games.root, **{flag: value}), progress=False)
