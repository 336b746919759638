"""The scale run's report (alfrl/eval/scale.py): hand-computed tables on a hand-built panel, and the committed report
being exactly what the committed panel files and metrics give."""

from __future__ import annotations

import json

import pytest

from alfrl.base.paths import REPO_ROOT
from alfrl.eval.scale import (ScaleRun, arm_rows, continued_arm, cost_lines, curve, detour_rows, lost_room, markdown_table,
                              origin_rows, summary_rows, task_rows, verdict_lines)

from script_loader import load_script

ROOMS = [("a", "pick_and_place_simple", "_s1_"), ("b", "pick_and_place_simple", "_s3_"),
         ("c", "look_at_obj_in_light", "_s1_"), ("d", "look_at_obj_in_light", "_s3_"),
         ("e", "pick_and_place_simple", "_s3_"), ("f", "look_at_obj_in_light", "_s3_")]
WON = {"start": "abc", "grpo_u10": "bcdef", "gigpo_u10": "ab"}
"""Rooms won greedily: GRPO gains d, e, f and loses a (+3/-1); GiGPO loses c (+0/-1)."""


def game_id(room: str, task: str, origin: str) -> str:
    return f"{task}-X-None-Y-30{ord(room) % 10}/trial_alfrl{origin}valid_unseen_{room}"


def report_script():
    return load_script("scale_report")


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def run(tmp_path) -> ScaleRun:
    for name, won in WON.items():
        write_jsonl(tmp_path / "panel" / f"{name}_greedy.jsonl",
                    [{"checkpoint": name, "split": "valid_unseen", "game_id": game_id(*room), "task_type": room[1],
                      "won": room[0] in won} for room in ROOMS])
    # Sampled, 4 episodes a room on two rooms: the start wins 1 and 2, GRPO 3 and 2, GiGPO 1 and 0.
    for name, wins in {"start": (1, 2), "grpo_u10": (3, 2), "gigpo_u10": (1, 0)}.items():
        write_jsonl(tmp_path / "panel" / f"{name}_sampled.jsonl",
                    [{"game_id": game_id(*ROOMS[i]), "k": 4, "wins": w} for i, w in enumerate(wins)])
    for arm, trained in (("grpo", 8), ("gigpo", 6)):
        write_jsonl(tmp_path / arm / "metrics.jsonl",
                    [{"step": s, "trajectories": 16, "trajectories_trained": trained, "groups": 2,
                      "groups_dropped": 1, "success": 0.5 + s / 100,
                      "rollout_seconds": 50.0, "update_seconds": 10.0} for s in range(1, 13)])
    return ScaleRun(tmp_path)


def test_checkpoints_start_first_then_each_arm_by_update(run, tmp_path):
    write_jsonl(tmp_path / "panel" / "grpo_u2_greedy.jsonl", [])
    write_jsonl(tmp_path / "panel" / "notes_greedy.jsonl", [])
    assert run.checkpoints() == ["start", "grpo_u2", "grpo_u10", "gigpo_u10"]


def test_episodes_count_only_the_updates_before_the_checkpoint(run):
    assert run.episodes("start") == (0, 0)
    assert run.episodes("grpo_u10") == (80, 160)
    assert run.episodes("gigpo_u10") == (60, 160)
    with pytest.raises(ValueError, match="not a scale checkpoint"):
        run.episodes("ppo_u10")
    with pytest.raises(ValueError, match="part must be one of"):
        run.results("start", "beam")


def test_summary_rows_pair_each_checkpoint_with_the_start(run):
    rows = {r["checkpoint"]: r for r in summary_rows(run)}
    assert rows["start"]["panel, greedy"] == "3/6 (50.0%, 19-81)"
    assert rows["start"]["panel vs start"] == ""
    # +3/-1 of 4 changed rooms: two-sided exact sign test 2 * (1 + 4) / 16 = 0.625.
    assert rows["grpo_u10"]["panel, greedy"] == "5/6 (83.3%, 44-97)"
    assert rows["grpo_u10"]["panel vs start"] == "+33.3 pts, +3/-1, p = 0.62"
    assert rows["gigpo_u10"]["panel vs start"] == "-16.7 pts, +0/-1, p = 1.00"
    assert rows["grpo_u10"]["episodes trained (played)"] == "80 (160)"
    assert rows["grpo_u10"]["official valid_seen"] == "not played"
    # Sampled: the start 3/8; GRPO's changes +0.5 and 0: all four sign flips give |sum| >= 0.5, so p = 1.
    assert rows["start"]["100 rooms x 4 sampled"] == "3/8 (37.5%, 14-69)"
    assert rows["grpo_u10"]["sampled vs start"] == "+25.0 pts, p = 1.00"
    assert rows["gigpo_u10"]["sampled vs start"] == "-25.0 pts, p = 1.00"


def test_task_rows_count_wins_per_task_and_the_rooms_lost(run):
    rows = {r["checkpoint"]: r for r in task_rows(run)}
    assert rows["start"] == {"checkpoint": "start", "pick (3)": 2, "look (3)": 1, "rooms the start won, lost here": ""}
    assert rows["grpo_u10"] == {"checkpoint": "grpo_u10", "pick (3)": 2, "look (3)": 3,
                                "rooms the start won, lost here": 1}
    assert rows["gigpo_u10"]["rooms the start won, lost here"] == 1


def test_origin_rows_split_the_panel_by_the_game_ids_seed(run):
    grpo = origin_rows(run)[1]
    assert grpo["123 earlier rooms (seed 1): won"] == "1/2 (50.0%, 9-91)"  # a lost, c kept
    assert grpo["123 earlier rooms (seed 1): vs start"] == "-50.0 pts, +0/-1, p = 1.00"
    assert grpo["202 new rooms (seed 3): won"] == "4/4 (100.0%, 51-100)"
    assert grpo["202 new rooms (seed 3): vs start"] == "+75.0 pts, +3/-0, p = 0.25"


def test_arm_rows_pair_gigpo_against_grpo_at_the_same_update(run):
    (row,) = arm_rows(run)
    # GRPO won b-f, GiGPO a-b: GiGPO gains a, loses c, d, e, f: +1/-4, p = 2 * (1 + 5) / 32 = 0.375.
    assert row == {"update": 10, "greedy: GiGPO vs GRPO": "2 vs 5, -50.0 pts, +1/-4, p = 0.38",
                   "official: GiGPO vs GRPO": "not played",
                   "sampled: GiGPO vs GRPO": "1 vs 5, -50.0 pts, p = 0.50"}


def test_curve_and_costs(run):
    assert curve(run, "grpo") == [(0, 3, 6), (80, 5, 6)]
    assert curve(run, "gigpo") == [(0, 3, 6), (60, 2, 6)]
    grpo = cost_lines(run)[0]
    # 12 updates of 60 s; 96 trained of 192 played; each update drops 1 group of 2: 12 of 24 taught.
    assert grpo.startswith("grpo: 12 updates, 96 episodes trained of 192 played, 0.2 h (125 min per 1,000 trained "
                           "episodes, 62 per 1,000 played); 12 of 24 played groups taught (50%)")
    assert grpo.endswith("0.51 (update 1) -> 0.62 (update 12)")


def test_detour_rows_count_each_checkpoints_first_stops_on_pick_and_place(run, tmp_path):
    assert detour_rows(run, "greedy") == []  # the fixture's records keep no actions
    place = "pick_and_place_simple-Pen-None-Desk-1/t"
    actions = {"start": [["take pen 1 from bed 1", "go to desk 1"], ["take pen 1 from bed 1", "go to desk 1"],
                         ["look"]],
               "grpo_u10": [["take pen 1 from bed 1", "go to sinkbasin 1"], ["take pen 1 from bed 1", "go to desk 1"],
                            ["take pen 1 from bed 1", "go to shelf 2"]]}
    for name, episodes in actions.items():
        rows = [{"game_id": place, "task_type": "pick_and_place_simple", "won": a[-1] == "go to desk 1",
                 "actions": a} for a in episodes]
        rows.append({"game_id": "look_at_obj_in_light-Pen-None-DeskLamp-1/t", "task_type": "look_at_obj_in_light",
                     "won": False, "actions": ["take pen 1 from bed 1", "go to sinkbasin 1"]})
        write_jsonl(tmp_path / "panel" / f"{name}_official.jsonl", rows)
    assert detour_rows(run, "official") == [
        {"checkpoint": "start", "rooms": 3, "won": 2, "then to the goal": 2, "then to a sinkbasin": 0,
         "then elsewhere": 0, "took, never moved": 0, "took nothing": 1},
        {"checkpoint": "grpo_u10", "rooms": 3, "won": 1, "then to the goal": 1, "then to a sinkbasin": 1,
         "then elsewhere": 1, "took, never moved": 0, "took nothing": 0}]


def test_the_report_says_when_no_records_keep_their_actions(run):
    module = report_script()
    text = module.report(run)
    assert "No checkpoint's committed records keep their actions yet." in text


def test_markdown_table():
    assert markdown_table([{"a": 1, "b": "x"}, {"a": 2, "b": ""}]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2 |  |"


def test_the_committed_report_is_what_the_committed_files_give():
    """data/results/scale.md is regenerated whenever the panel or an arm's metrics change."""
    module = report_script()
    committed = (REPO_ROOT / "data/results/scale.md").read_text()
    assert module.report(ScaleRun()) == committed, "run: python scripts/scale_report.py"
    start = ScaleRun().results("start", "greedy")
    assert len(start) == 325 and sum(r["won"] for r in start) == 161


def test_lost_room_is_the_first_room_the_start_won_and_the_checkpoint_lost(run):
    start = [{"game_id": g, "won": w, "trajectory": g} for g, w in (("a", True), ("b", True), ("c", False))]
    after = [{"game_id": g, "won": w, "trajectory": g} for g, w in (("c", False), ("a", True), ("b", False))]
    assert lost_room(start, after) == (start[1], after[2])
    with pytest.raises(ValueError, match="lost no room"):
        lost_room(start, start)
    with pytest.raises(FileNotFoundError, match="--parts lost_room"):
        run.lost_room("grpo_u10")


def test_the_committed_lost_rooms_were_won_by_the_start_and_lost_after():
    start = {r["game_id"]: r["won"] for r in ScaleRun().results("start", "greedy")}
    for path in sorted((REPO_ROOT / "data/scale/panel").glob("*_lost_room.jsonl.xz")):
        name = path.name[:-len("_lost_room.jsonl.xz")]
        won, lost = ScaleRun().lost_room(name)
        after = {r["game_id"]: r["won"] for r in ScaleRun().results(name, "greedy")}
        assert won.game_id == lost.game_id and won.won and not lost.won, name
        assert start[won.game_id] and not after[won.game_id], name


def write_panel(root, name: str, won: int, rooms: int = 20, part: str = "greedy") -> None:
    """A hand-built panel result: rooms r0..r{rooms-1}, the first ``won`` won."""
    write_jsonl(root / "panel" / f"{name}_{part}.jsonl",
                [{"split": "valid_unseen", "game_id": f"r{i}", "task_type": "pick_and_place_simple", "won": i < won}
                 for i in range(rooms)])


def test_verdict_lines_follow_the_plan_from_update_40_to_the_primary_test(tmp_path):
    run = ScaleRun(tmp_path)
    write_panel(tmp_path, "start", 10)
    write_panel(tmp_path, "grpo_u40", 16)
    assert verdict_lines(run)[-1] == "Falsifier: not decided yet (not every arm has played the panel at update 40)."
    assert continued_arm(run) is None
    # Both arms at update 40 win 16 of 20: +6/-0 each, p = 2 / 64 = 0.031. A tie on the greedy panel goes to
    # the arm with more sampled wins (GRPO here), not to GiGPO, the last tie-break.
    write_panel(tmp_path, "gigpo_u40", 16)
    write_jsonl(tmp_path / "panel" / "grpo_u40_sampled.jsonl", [{"game_id": "r0", "k": 4, "wins": 3}])
    write_jsonl(tmp_path / "panel" / "gigpo_u40_sampled.jsonl", [{"game_id": "r0", "k": 4, "wins": 2}])
    assert continued_arm(run) == "grpo"
    lines = verdict_lines(run)
    assert lines[0] == "GRPO at update 40: +6 rooms net, +6/-0, two-sided p = 0.03"
    assert lines[2] == "Falsifier (neither arm gains on the greedy panel by update 40, two-sided p < 0.05): does not hold."
    assert lines[-1] == "Primary test (GRPO at update 80 against the start): not played yet."
    # Update 80 wins all 20: +10/-0, p = 2 / 1024 = 2e-03, and 10 rooms net >= ceil(5% of 20) = 1. Official rooms:
    # the start 2 of 3, update 80 1 of 3: one lost, p = 1, no significant loss: the target is met.
    write_panel(tmp_path, "grpo_u80", 20)
    write_panel(tmp_path, "start", 2, rooms=3, part="official")
    write_panel(tmp_path, "grpo_u80", 1, rooms=3, part="official")
    lines = verdict_lines(run)
    assert lines[-2] == ("**Primary test** (GRPO at update 80 against the start, greedy panel, exact two-sided sign "
                         "test): +10 rooms net of 20 (+50.0 points), +10/-0, p = 2e-03.")
    assert lines[-1] == ("Target (at least 1 rooms net with p < 0.05, and no significant loss on the official rooms): "
                         "**met**; gain met, official rooms -1 net, +0/-1, two-sided p = 1.00: no significant loss.")
    # Without the official rooms the guard is unchecked, so the target is not called met.
    (tmp_path / "panel" / "grpo_u80_official.jsonl").unlink()
    assert verdict_lines(run)[-1].endswith("**not met**; gain met, official rooms not played here, so the guard is "
                                           "unchecked.")


def test_the_falsifier_holds_when_no_arm_gains_by_update_40(tmp_path):
    run = ScaleRun(tmp_path)
    write_panel(tmp_path, "start", 10)
    write_panel(tmp_path, "grpo_u40", 12)  # +2/-0: p = 0.5
    write_panel(tmp_path, "gigpo_u40", 12)
    lines = verdict_lines(run)
    assert lines[2].endswith("**holds**: neither arm gained.")
    assert continued_arm(run) == "gigpo"  # tied everywhere: GiGPO, the plan's last tie-break
