"""alfrl.eval.practice and the practice result's statistics: the profile's selection of a pool and matched
controls, the committed pool and preset, the permutation tests against enumeration, the by-visit metric
from hand-built trajectories, and a real profile (played by the small model) that resumes."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys

import pytest

from alfrl.base.paths import REPO_ROOT
from alfrl.eval.eval_stats import sign_flip_test, two_sample_permutation_test
from alfrl.eval.practice import (game_ids, game_wins, matched_pools, pick_by_win_rate, read_pool, read_profile,
                                 visit_curves)
from alfrl.rl.trajectory import Trajectory


def line(game: str, wins: int, k: int = 8) -> dict:
    return {"game_id": game, "task_type": "t", "k": k, "wins": wins, "invalid": 0, "won": [True] * wins +
            [False] * (k - wins), "steps": [1] * k}


PROFILE = [line(f"g{i:02d}", w) for i, w in enumerate([0, 8, 1, 3, 3, 5, 6, 2, 7, 4, 0, 2, 1, 6, 5, 4, 3, 8])]


def test_pick_by_win_rate_keeps_the_range_hardest_first():
    picked = pick_by_win_rate(PROFILE, 1 / 8, 6 / 8)
    assert [r["wins"] for r in picked] == [1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 6]
    assert picked[0]["game_id"] == "g02" and picked[1]["game_id"] == "g12"  # ties by id
    assert [r["game_id"] for r in pick_by_win_rate(PROFILE, 1, 1)] == ["g01", "g17"]
    with pytest.raises(ValueError, match="low <= high"):
        pick_by_win_rate(PROFILE, 0.8, 0.2)


def test_matched_pools_pair_neighbours_and_split_each_pair_by_a_seeded_coin():
    pool = matched_pools(PROFILE, size=4, seed=3)
    # 13 games in [1/8, 6/8] make 6 neighbouring pairs (the 13th, g13, is left over): (1,1) (2,2) (3,3) (3,4)
    # (4,5) (5,6) wins; the 4 whose mean win rate is nearest one half are (3,4) and (4,5), 0.5/8 from it, (3,3),
    # 1/8, and (5,6), 1.5/8; (1,1) and (2,2) are left out. They are listed by difficulty.
    pairs = [{"g03", "g04"}, {"g16", "g09"}, {"g15", "g05"}, {"g14", "g06"}]
    assert [{p, c} for p, c in zip(pool["practice"], pool["control"])] == pairs
    assert not set(pool["practice"]) & set(pool["control"])
    wins = {r["game_id"]: r["wins"] for r in PROFILE}
    assert pool["practice_wins"] == [wins[g] for g in pool["practice"]]
    assert abs(sum(pool["practice_wins"]) - sum(pool["control_wins"])) <= 2  # matched: at most 1 apart a pair
    assert matched_pools(PROFILE, size=4, seed=3) == pool  # the same seed, the same split
    coins = {tuple(matched_pools(PROFILE, size=4, seed=s)["practice"]) for s in range(20)}
    assert len(coins) > 1  # the coin does decide
    with pytest.raises(ValueError, match="16 are needed"):
        matched_pools(PROFILE, size=8)


def test_game_ids_from_a_file_a_pool_or_a_list(tmp_path):
    listed = tmp_path / "ids.txt"
    listed.write_text("# a comment\na/trial_1\n\nb/trial_2  # why\n")
    assert game_ids(str(listed)) == ["a/trial_1", "b/trial_2"]
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"practice": ["p/trial_1"], "control": ["c/trial_2"]}))
    assert game_ids(str(pool)) == ["p/trial_1", "c/trial_2"]
    assert game_ids("x/trial_1, y/trial_2") == ["x/trial_1", "y/trial_2"]
    with pytest.raises(FileNotFoundError, match="no such file"):
        game_ids(str(tmp_path / "missing" / "ids.txt"))


def test_read_pool_refuses_what_is_not_a_pool(tmp_path):
    path = tmp_path / "pool.json"
    with pytest.raises(FileNotFoundError, match="python -m alfrl pool"):
        read_pool(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_pool(path)
    path.write_text(json.dumps({"practice": []}))
    with pytest.raises(ValueError, match="non-empty list"):
        read_pool(path)
    path.write_text(json.dumps({"practice": ["a"], "control": ["a"]}))
    with pytest.raises(ValueError, match="both practised and control"):
        read_pool(path)


def _enumerated_sign_flip(d: list[float]) -> dict[str, float]:
    observed, n = sum(d), len(d)
    sums = [sum(s * x for s, x in zip(signs, d)) for signs in itertools.product((1, -1), repeat=n)]
    return {"greater": sum(s >= observed - 1e-9 for s in sums) / 2 ** n,
            "less": sum(s <= observed + 1e-9 for s in sums) / 2 ** n,
            "two-sided": sum(abs(s) >= abs(observed) - 1e-9 for s in sums) / 2 ** n}


def test_sign_flip_test_by_hand_and_against_enumeration():
    assert sign_flip_test([1.0, 1.0, 1.0])["p_value"] == 1 / 8  # only all-plus reaches the sum 3
    assert sign_flip_test([1.0, 1.0, 1.0], "two-sided")["p_value"] == 2 / 8
    assert sign_flip_test([0.5, 0.0, -0.25])["p_value"] == pytest.approx(4 / 8)  # 0 flips to itself: 2 x 2 patterns
    rng = random.Random(0)
    for _ in range(40):  # differences of win shares out of 16, as the practice evaluation makes
        d = [rng.randint(-16, 16) / 16 for _ in range(rng.randint(1, 10))]
        want = _enumerated_sign_flip(d)
        for alternative, p in want.items():
            assert sign_flip_test(d, alternative)["p_value"] == pytest.approx(p, abs=1e-12), (d, alternative)
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_test([1.0], "bigger")


def test_two_sample_permutation_test_by_hand_and_against_enumeration():
    # first [1, 1], second [0]: of the 3 splits only {1, 1} vs {0} reaches a gap of 1
    assert two_sample_permutation_test([1.0, 1.0], [0.0]) == {"difference": 1.0, "splits": 3, "p_value": 1 / 3}
    rng = random.Random(1)
    for _ in range(20):
        a = [rng.randint(-8, 8) / 8 for _ in range(rng.randint(1, 4))]
        b = [rng.randint(-8, 8) / 8 for _ in range(rng.randint(1, 4))]
        pooled, observed = a + b, sum(a) / len(a) - sum(b) / len(b)
        gaps = []
        for order in itertools.permutations(pooled):  # every relabelling, each split counted equally often
            x, y = order[:len(a)], order[len(a):]
            gaps.append(sum(x) / len(x) - sum(y) / len(y))
        want = sum(g >= observed - 1e-9 for g in gaps) / len(gaps)
        assert two_sample_permutation_test(a, b)["p_value"] == pytest.approx(want, abs=1e-12)
        two = sum(abs(g) >= abs(observed) - 1e-9 for g in gaps) / len(gaps)
        assert two_sample_permutation_test(a, b, "two-sided")["p_value"] == pytest.approx(two, abs=1e-12)


def _trajectory(game: str, won: bool, branch: int) -> Trajectory:
    return Trajectory(game_id=game, task_type="t", branch=branch, seed=0, tokens=[1, 2], mask=[0, 1],
                      logprobs=[0.0, -1.0], turns=[], won=won, steps=1, invalid=0,
                      end_reason="won" if won else "max_steps", prompt_tokens=1, prefilled=1, sampled=1,
                      model_seconds=0.0, env_seconds=0.0)


def test_visit_curves_from_hand_built_trajectories():
    def group(game, wins, k=4):
        return [_trajectory(game, b < wins, b) for b in range(k)]
    updates = [[group("a", 1), group("b", 0)], [group("c", 2), group("a", 3)], [group("b", 4), group("a", 4)]]
    metrics = [{"step": s, "game_wins": game_wins(played)} for s, played in enumerate(updates, 1)]
    assert metrics[1]["game_wins"] == [["c", 2, 4], ["a", 3, 4]]
    assert visit_curves(metrics) == {"a": [(1, 1, 4), (2, 3, 4), (3, 4, 4)], "b": [(1, 0, 4), (3, 4, 4)],
                                     "c": [(2, 2, 4)]}
    assert visit_curves([{"step": 1, "reward": 0.0}]) == {}  # a run logged before game_wins existed


def test_the_plot_shows_a_visit_panel_only_when_games_come_back():
    from alfrl.training.plots import plot_training
    base = {"reward": 0.1, "invalid_per_episode": 0.5, "success": 0.5}
    once = [{"step": 1, **base, "game_wins": [["g/trial_1", 1, 8]]}, {"step": 2, **base, "game_wins": [["h/trial_2", 2, 8]]}]
    again = once + [{"step": 3, **base, "game_wins": [["g/trial_1", 5, 8]]}]
    assert len(plot_training(once).axes) == 4
    fig = plot_training(again)
    assert len(fig.axes) == 5 and fig.axes[-1].get_title().startswith("wins / K at each visit")
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in fig.axes[-1].get_lines()}
    assert lines["mean"] == [1 / 8, 5 / 8]  # visit 1: only g's (h came once and is not drawn), visit 2: g's


def test_the_committed_pool_is_matched_and_the_preset_visits_each_game_five_times():
    from alfrl.eval.practice import select_games
    from alfrl.training.train import preset
    config = preset("practice")
    pool = read_pool(REPO_ROOT / config.pool)
    profile = {r["game_id"]: r for r in read_profile(REPO_ROOT / "data" / "practice" / "profile_warmstart.jsonl")}
    assert len(pool["practice"]) == len(pool["control"]) == 8
    assert matched_pools(list(profile.values()), size=8, low=pool["low"], high=pool["high"],
                         seed=pool["seed"])["practice"] == pool["practice"]  # the pool is what the profile picks
    for game in pool["practice"] + pool["control"]:
        assert 1 <= profile[game]["wins"] <= 6 and profile[game]["k"] == 8
    assert config.updates * config.games_per_update / len(pool["practice"]) == 5
    assert not config.dynamic_sampling and config.init_adapter == "warmstart_epoch"  # the course's one warm start
    cpu = preset("cpu")  # the reference method, unchanged: the same rollouts, reward and update as the cpu preset
    for field in ("k", "temperature", "lr", "clip_low", "clip_high", "invalid_penalty", "normalize_std", "algo",
                  "max_steps", "max_new_tokens", "max_trajectory_tokens", "lora_rank", "bf16", "sample_dtype"):
        assert getattr(config, field) == getattr(cpu, field), field
    games = select_games(config.split, config.data_dir, pool["practice"] + pool["control"], config.max_expert_steps,
                         config.max_receptacles)  # every pool game is a training game the filters keep
    assert len(games) == 16


def test_a_real_profile_resumes_without_playing_a_game_twice(tmp_path, tiny_games):
    """The small model plays 2 tiny games twice each, is interrupted after the first (its line kept), and
    --resume plays only the second."""
    games = tiny_games.games("train")[:2]
    out = tmp_path / "profile"
    cmd = [sys.executable, "-m", "alfrl", "profile", "--games", ",".join(g.game_id for g in games), "--out", str(out),
           "--data-dir", str(tiny_games.root), "--max-expert-steps", "100", "--max-receptacles", "100", "--k", "2",
           "--max-steps", "2", "--max-new-tokens", "8", "--groups-per-batch", "1", "--adapter", "none"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = read_profile(out)
    assert [r["game_id"] for r in lines] == [g.game_id for g in games]
    assert all(r["k"] == 2 and len(r["won"]) == 2 and r["wins"] == sum(r["won"]) for r in lines)
    trajectories = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(trajectories) == 4
    first = (out / "profile.jsonl").read_text().splitlines()[0]
    (out / "profile.jsonl").write_text(first + "\n")  # as if killed after the first game
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again = read_profile(out)
    assert json.dumps(again[0]) == first and [r["game_id"] for r in again] == [g.game_id for g in games]
    assert again[1] == lines[1]  # the same seed: the second game plays as it did
    changed = subprocess.run(cmd + ["--resume", "--k", "3"], capture_output=True, text=True)
    assert changed.returncode == 2 and "other settings (k)" in changed.stderr


def test_compare_profiles_pairs_checkpoints_game_by_game(tmp_path):
    """scripts/compare_profiles.py: totals, games won at least once and every time, per task type, and the
    gain against the first checkpoint with the sign-flip p, by hand on three games of 4 samples."""
    from script_loader import load_script

    module = load_script("compare_profiles")
    start = [dict(line("a", 1, 4), task_type="pick_and_place_simple"),
             dict(line("b", 0, 4), task_type="look_at_obj_in_light"),
             dict(line("c", 4, 4), task_type="pick_and_place_simple")]
    after = [dict(line("c", 4, 4), task_type="pick_and_place_simple"),  # in another order: paired by game id
             dict(line("a", 3, 4), task_type="pick_and_place_simple"),
             dict(line("b", 1, 4), task_type="look_at_obj_in_light")]
    rows = module.compare({"start": start, "after": after})
    assert (rows["start"]["won"], rows["start"]["episodes"], rows["start"]["games_won"],
            rows["start"]["games_always_won"]) == (5, 12, 2, 1)
    assert (rows["after"]["won"], rows["after"]["games_won"], rows["after"]["games_always_won"]) == (8, 3, 1)
    assert rows["after"]["tasks"] == {"pick_and_place_simple": (7, 8), "look_at_obj_in_light": (1, 4)}
    a = rows["after"]["against_first"]
    # differences +0.5, +0.25, 0: of the 4 sign flips of the two non-zero ones, only "both +" reaches +0.75
    assert a["gain_points"] == pytest.approx(100 * 3 / 12) and (a["games_up"], a["games_down"]) == (2, 0)
    assert a["p_value"] == pytest.approx(1 / 4) and a["p_two_sided"] == pytest.approx(2 / 4)
    text = module.markdown(rows, "note")
    assert text.startswith("note\n") and "| after | 8/12 (67%, " in text and "| +25.0 | 2/0 | 0.25; 0.50 |" in text
    assert "| pick (8) | look (4) |" in text and "| after | 7 | 1 |" in text
    with pytest.raises(ValueError, match="other games"):
        module.compare({"start": start, "after": after[:2]})
