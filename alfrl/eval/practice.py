"""Practice: how often the policy wins each game (a difficulty profile), a pool of games to practise
picked from it with a matched set of controls never trained on, and the wins at every visit of a
practised game during training.

``python -m alfrl profile --games data/practice/candidates.txt --out runs/profile/warmstart_epoch`` plays
every listed game K times at the rollout temperature and writes ``OUT/profile.jsonl``: one line per game
(its wins out of K and each branch's outcome), appended as each group ends, so ``--resume`` continues an
interrupted profile. The same command, with ``--k 16`` or ``--temperature 0`` on a pool's games, is the
before/after evaluation of the practice result (``scripts/practice_result.py``).

``python -m alfrl pool --profile runs/profile/warmstart_epoch/profile.jsonl`` picks the pool: games of
intermediate difficulty, paired by win rate, one of each pair practised and the other a control.

Taught in notebooks 05 (wins at each visit of a practised game) and 06 (the profile, the pool and
its before/after result).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.agent.bundled import BUNDLED
from alfrl.agent.precision import native_bf16_cpu
from alfrl.base.checkpoint import append_jsonl, read_jsonl
from alfrl.base.checks import Range, check_fields

PROFILE = "profile.jsonl"
TRAJECTORIES = "trajectories.jsonl"


@dataclass
class ProfileConfig:
    """Which games to play, how often and with which policy; each field is a ``--flag`` of
    ``python -m alfrl profile``. The defaults are the cpu preset's rollouts (its temperature, rooms and
    episode budgets) with the default warm start (the practice preset's start; the committed pool was chosen from
    the first warm start's profile, ``--adapter warmstart``)."""

    out: str = "runs/profile/warmstart_epoch"
    """Folder for profile.jsonl (one line per game), trajectories.jsonl (every episode) and config.json."""
    games: str | None = None
    """The games to play: a text file with one game id per line (e.g. data/practice/candidates.txt), a
    pool file made by ``python -m alfrl pool`` (its practice and control games), or ids separated by commas.
    None: every game of the split after the filters."""
    overwrite: bool = False
    """Replace an existing profile instead of refusing."""
    resume: bool = False
    """Continue an interrupted profile in ``out`` (games already recorded are skipped)."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled"."""
    adapter: str | None = "warmstart_epoch"
    """The LoRA adapter to profile: "warmstart_epoch" (the default warm start, the practice preset's start), a folder (e.g. runs/practice/checkpoints/step_00020/adapter),
    or "none" for the bare model."""
    data_dir: str | None = None
    """Games folder (default: the committed generated games)."""
    split: str = "train"
    """The split the games come from."""
    max_expert_steps: int | None = 8
    """Only games the expert solves in at most this many steps (the cpu preset's filter)."""
    max_receptacles: int | None = 20
    """Only rooms with at most this many receptacles (the cpu preset's filter)."""
    k: int = 8
    """Episodes per game."""
    temperature: float = 0.6
    """Sampling temperature (the cpu preset's rollouts; 0 = greedy)."""
    seed: int = 1
    """Sampling seed of every branch (with the game id and branch index). The same seed before and after
    training gives common random numbers: a game's difference then comes from the weights, not the dice."""
    max_steps: int = 10
    """Turns per episode."""
    max_trajectory_tokens: int = 4000
    """Token budget of one episode."""
    max_new_tokens: int = 48
    """Tokens per reply."""
    groups_per_batch: int = 2
    """Games decoded together (k x this many rows per forward pass)."""
    draft_tokens: int = 8
    """Speculative decoding by prompt lookup (the same replies' distribution in fewer passes; 0 = off)."""
    prefill_dtype: str | None = "auto"
    """Prompt reads under this autocast: "auto" (bfloat16 on a CPU with native bfloat16, as the cpu preset),
    "bfloat16", or None/"none"."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""

    def check(self) -> None:
        check_fields(self, PROFILE_RANGES, check_types=False)

    def prefill(self) -> str | None:
        if self.prefill_dtype in (None, "none"):
            return None
        if self.prefill_dtype == "auto":
            return "bfloat16" if native_bf16_cpu() else None
        return self.prefill_dtype


PROFILE_RANGES = {**{n: Range(at_least=1) for n in ("k", "max_steps", "max_trajectory_tokens", "max_new_tokens",
                                                     "groups_per_batch", "max_expert_steps", "max_receptacles",
                                                     "threads")},
                  "temperature": Range(at_least=0), "draft_tokens": Range(at_least=0)}

RESUMABLE = ("out", "overwrite", "resume", "groups_per_batch", "threads")
"""Fields a resumed profile may change: they do not change any game's outcome (up to float rounding)."""


def game_ids(games: str | None) -> list[str] | None:
    """The game ids ``--games`` names: a pool file's practice then control games, a file of ids (one per
    line, ``#`` comments), or ids separated by commas; None for None."""
    if games is None:
        return None
    path = Path(games)
    if path.suffix == ".json" and path.is_file():
        pool = read_pool(path)
        return list(pool["practice"]) + list(pool.get("control", []))
    if path.is_file():
        lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
        return [line for line in lines if line]
    ids = [g.strip() for g in games.split(",") if g.strip()]
    if not ids or not all("/trial_" in g for g in ids):  # a game id is <task folder>/trial_<...>
        raise FileNotFoundError(f"--games {games}: no such file, and not game ids (<task>/trial_...); pass a file "
                                "of game ids, a pool file, or ids separated by commas")
    return ids


def select_games(split: str, data_dir: str | None, ids: list[str] | None, max_expert_steps: int | None = None,
                 max_receptacles: int | None = None) -> list:
    """The GameSpecs of ``ids`` in that order (every game after the filters if None); a clear error naming
    the first id the split does not hold (or that the filters leave out)."""
    from alfrl.world.games import load_games
    games = load_games(split, data_dir, max_expert_steps=max_expert_steps, max_receptacles=max_receptacles)
    if ids is None:
        return games
    by_id = {g.game_id: g for g in games}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} of the {len(ids)} games are not in the {split} split of "
                         f"{data_dir or 'the committed games'} after the filters (max_expert_steps "
                         f"{max_expert_steps}, max_receptacles {max_receptacles}), e.g. {missing[0]}; "
                         "check the ids, the --data-dir and the filters")
    return [by_id[i] for i in ids]


def profile_line(group: list) -> dict:
    """One line of profile.jsonl: a game's wins out of K, its invalid actions, each branch's outcome."""
    return {"game_id": group[0].game_id, "task_type": group[0].task_type, "k": len(group),
            "wins": sum(t.won for t in group), "invalid": sum(t.invalid for t in group),
            "won": [bool(t.won) for t in group], "steps": [t.steps for t in group]}


def profile(config: ProfileConfig | None = None, policy=None, progress: bool = True) -> list[dict]:
    """Play every selected game ``k`` times; append each game's line to ``OUT/profile.jsonl`` (and its
    episodes to ``OUT/trajectories.jsonl``) as its group ends; return every game's line."""
    from alfrl.agent.models import check_adapter, load_policy, sampling_copy, torch_threads
    from alfrl.base.rundir import CONFIG, EVAL, changed_settings, prepare_output_dir, read_config
    from alfrl.rl.rollout import RolloutConfig, rollout_batch
    from alfrl.world.games import check_games

    config = config or ProfileConfig()
    config.check()
    adapter = None if config.adapter in (None, "", "none") else config.adapter
    if policy is None and adapter:
        check_adapter(adapter, config.model)
    games = select_games(config.split, config.data_dir, game_ids(config.games), config.max_expert_steps,
                         config.max_receptacles)
    out = Path(config.out)
    done: dict[str, dict] = {}
    if config.resume and (out / PROFILE).is_file():
        saved = read_config(out) or {}
        changed = changed_settings(saved, asdict(config), RESUMABLE, added_ok=True)
        if changed:
            raise ValueError(f"{out} holds a profile made with other settings ({', '.join(changed)}); resume with "
                             "the same settings, pass --overwrite, or choose another --out")
        done = {r["game_id"]: r for r in read_jsonl(out / PROFILE, repair=True)}
    todo = [g for g in games if g.game_id not in done]
    check_games(todo)
    prepare_output_dir(out, EVAL, overwrite=config.overwrite, resume=config.resume, flag="--out")
    (out / CONFIG).write_text(json.dumps(asdict(config), indent=2))
    rollout = RolloutConfig(k=config.k, max_steps=config.max_steps, max_trajectory_tokens=config.max_trajectory_tokens,
                            max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=config.seed,
                            workers=0, groups_per_batch=config.groups_per_batch, prefill_dtype=config.prefill(),
                            draft_tokens=config.draft_tokens)
    with torch_threads(config.threads):
        if todo and policy is None:
            policy = sampling_copy(load_policy(config.model, lora=adapter, dtype="float32", device="cpu"), "float32")
        bar = tqdm(total=len(games), initial=len(games) - len(todo), desc="profile", unit="game",
                   disable=not progress)
        per = config.groups_per_batch
        for start in range(0, len(todo), per):
            groups = rollout_batch(policy, todo[start:start + per], rollout, progress=False)
            append_jsonl(out / TRAJECTORIES, [json.loads(t.to_json()) for g in groups for t in g])
            lines = [profile_line(g) for g in groups]
            append_jsonl(out / PROFILE, lines)
            done.update({line["game_id"]: line for line in lines})
            bar.update(len(groups))
            bar.set_postfix(wins=f"{sum(r['wins'] for r in done.values())}/{sum(r['k'] for r in done.values())}")
        bar.close()
    return [done[g.game_id] for g in games]


def read_profile(path: str | Path) -> list[dict]:
    """The lines of a profile: a profile folder or its profile.jsonl."""
    path = Path(path)
    return read_jsonl(path / PROFILE if path.is_dir() else path)


def pick_by_win_rate(lines: list[dict], low: float, high: float) -> list[dict]:
    """The games whose win rate (wins / k) lies in [low, high], hardest first (ties by game id)."""
    if not 0 <= low <= high <= 1:
        raise ValueError(f"need 0 <= low <= high <= 1 (got {low}, {high})")
    chosen = [r for r in lines if low <= r["wins"] / r["k"] <= high]
    return sorted(chosen, key=lambda r: (r["wins"] / r["k"], r["game_id"]))


def matched_pools(lines: list[dict], size: int = 8, low: float = 1 / 8, high: float = 6 / 8, seed: int = 0
                  ) -> dict:
    """A practice pool and a control set of ``size`` games each, matched in difficulty: the games in
    [low, high] by win rate, sorted, taken in neighbouring pairs (the pairs nearest a win rate of one half
    first when there are more than needed), and in each pair a seeded coin decides which game is practised.
    The control is never trained on; before and after training both sets are evaluated, so what the
    practised games gain beyond the controls is what practice did."""
    middle = pick_by_win_rate(lines, low, high)
    if len(middle) < 2 * size:
        raise ValueError(f"the profile has {len(middle)} games with a win rate in [{low:.3f}, {high:.3f}], "
                         f"{2 * size} are needed for {size} practised and {size} control games: profile more "
                         "games, widen the range, or lower the size")
    pairs = [middle[i:i + 2] for i in range(0, len(middle) - 1, 2)]
    pairs = sorted(pairs, key=lambda p: (abs(sum(r["wins"] / r["k"] for r in p) / 2 - 0.5), p[0]["game_id"]))[:size]
    pairs = sorted(pairs, key=lambda p: (p[0]["wins"] / p[0]["k"], p[0]["game_id"]))
    rng = random.Random(seed)
    practice, control = [], []
    for pair in pairs:
        first, second = pair if rng.random() < 0.5 else pair[::-1]
        practice.append(first)
        control.append(second)
    return {"practice": [r["game_id"] for r in practice], "control": [r["game_id"] for r in control],
            "practice_wins": [r["wins"] for r in practice], "control_wins": [r["wins"] for r in control],
            "k": practice[0]["k"], "low": low, "high": high, "seed": seed}


def read_pool(path: str | Path) -> dict:
    """A pool file (``python -m alfrl pool``), checked: practice and control lists of game ids, disjoint."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pool file {path} does not exist; make one with python -m alfrl pool --profile "
                                "PROFILE --out POOL (or use the committed data/practice/pool.json)")
    try:
        pool = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); make it again with python -m alfrl pool") from None
    if not isinstance(pool, dict) or not isinstance(pool.get("practice"), list) or not pool["practice"]:
        raise ValueError(f"{path} is not a pool file: it needs a non-empty list of game ids under \"practice\" "
                         "(and \"control\"); make one with python -m alfrl pool")
    overlap = set(pool["practice"]) & set(pool.get("control", []))
    if overlap:
        raise ValueError(f"{path}: {len(overlap)} games are both practised and control (e.g. {sorted(overlap)[0]})")
    return pool


def visit_curves(metrics: list[dict]) -> dict[str, list[tuple[int, int, int]]]:
    """For every game a run played: (update, wins, k) at each visit, in order, from the ``game_wins`` of
    each update's metrics (one ``[game_id, wins, k]`` per group played)."""
    curves: dict[str, list[tuple[int, int, int]]] = {}
    for m in metrics:
        for game_id, wins, k in m.get("game_wins", []):
            curves.setdefault(game_id, []).append((m["step"], wins, k))
    return curves


def game_wins(groups: list[list]) -> list[list]:
    """``[game_id, wins, k]`` of each group: what :func:`visit_curves` reads back from metrics.jsonl."""
    return [[g[0].game_id, sum(t.won for t in g), len(g)] for g in groups]


def resolve_pool(pool: str | Path) -> Path:
    """A pool file's path: as given, or relative to the repository (so notebooks, run from notebooks/, find
    data/practice/pool.json)."""
    from alfrl.base.paths import REPO_ROOT
    path = Path(pool)
    if path.is_file() or path.is_absolute():
        return path
    return REPO_ROOT / path if (REPO_ROOT / path).is_file() else path


def paired_gain(before: list[dict], after: list[dict], games: list[str]) -> dict:
    """Before against after on ``games`` (profile lines of each): episodes won out of played on each side,
    the gain in points of win rate, each game's difference of win shares, and the sign-flip test's one-sided
    p that the games gained (:func:`alfrl.eval.eval_stats.sign_flip_test`)."""
    from alfrl.eval.eval_stats import sign_flip_test
    b, a = {r["game_id"]: r for r in before}, {r["game_id"]: r for r in after}
    missing = [g for g in games if g not in b or g not in a]
    if missing:
        raise ValueError(f"{len(missing)} games lack a profile line before or after (e.g. {missing[0]}): "
                         "profile both checkpoints on the same games")
    diffs = [a[g]["wins"] / a[g]["k"] - b[g]["wins"] / b[g]["k"] for g in games]
    won_b, n_b = sum(b[g]["wins"] for g in games), sum(b[g]["k"] for g in games)
    won_a, n_a = sum(a[g]["wins"] for g in games), sum(a[g]["k"] for g in games)
    return {"games": len(games), "before_won": won_b, "before_episodes": n_b, "after_won": won_a,
            "after_episodes": n_a, "gain_points": 100 * (won_a / n_a - won_b / n_b), "differences": diffs,
            "p_value": sign_flip_test(diffs, "greater")["p_value"],
            "p_two_sided": sign_flip_test(diffs, "two-sided")["p_value"]}


def practice_result(pool: dict, before: list[dict], after: list[dict]) -> dict:
    """The practice result on one measure (e.g. 16 samples a game at the rollout temperature, or greedy):
    the practised games' and the controls' paired gains, and practised minus control, tested by
    permuting the practice/control labels of the games' differences (one-sided)."""
    from alfrl.eval.eval_stats import two_sample_permutation_test
    practised = paired_gain(before, after, pool["practice"])
    control = paired_gain(before, after, pool["control"])
    beyond = two_sample_permutation_test(practised["differences"], control["differences"], "greater")
    return {"practised": practised, "control": control,
            "beyond_control": {"gain_points": 100 * beyond["difference"], "p_value": beyond["p_value"]}}
