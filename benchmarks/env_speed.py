"""Environment speed: ALFWorld's standard setup vs ``alfrl.world.env.GroupEnv``, on the same games.

Standard setup = what ``AlfredTWEnv`` does: ``textworld.gym.register_games`` with a
batch of K copies of the game, ``AlfredDemangler`` + ``AlfredInfos`` wrappers,
synchronous or asynchronous (one process per copy). For each game (one per task
type) both play the expert's walkthrough in every copy for up to ``--steps`` steps
after a group reset. Printed: seconds per group reset (a new game: nothing cached
yet), env steps per second (copies x steps / seconds), and peak memory (PSS of this
process and its workers, summed). Observations are checked to be identical.

    python benchmarks/env_speed.py                      # generated valid_unseen games, K=8
    python benchmarks/env_speed.py --data-dir ../shared/alfworld-real/json_2.1.1 --split valid_seen
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics as st
import threading
import time

import psutil

from alfrl import TASK_TYPES
from alfrl.world.env import GroupEnv
from alfrl.world.games import load_games


class PeakRSS:
    """Samples the summed PSS (RSS with shared pages split between processes) of this process
    and its children every 50 ms; forked workers share most pages, so RSS would count them twice."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_standard(game, k: int, steps: int, asynchronous: bool) -> tuple[float, float, list[str]]:
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(admissible_commands=True, won=True, feedback=True, extras=["gamefile"])
    env_id = textworld.gym.register_games([str(game.path)] * k, infos, batch_size=k, asynchronous=asynchronous,
                                          max_episode_steps=steps + 1,
                                          wrappers=[functools.partial(AlfredDemangler, shuffle=False), AlfredInfos])
    env = textworld.gym.make(env_id)
    try:
        start = time.perf_counter()
        obs, _ = env.reset()
        reset_s = time.perf_counter() - start
        commands = list(game.walkthrough[:steps])
        observations = []
        start = time.perf_counter()
        for command in commands:
            obs, _, _, _ = env.step([command] * k)
            observations.append(obs[0])
        rate = k * len(commands) / (time.perf_counter() - start)
    finally:
        env.close()
    return reset_s, rate, observations


def run_group(game, k: int, steps: int, workers: int) -> tuple[float, float, list[str]]:
    with GroupEnv(k=k, max_steps=steps + 1, workers=workers) as env:
        start = time.perf_counter()
        env.reset(game)
        reset_s = time.perf_counter() - start
        commands = list(game.walkthrough[:steps])
        observations = []
        start = time.perf_counter()
        for command in commands:
            results = env.step({i: command for i in env.live()})
            observations.append(results[0].observation if 0 in results else "")
        rate = sum(env.steps.values()) / (time.perf_counter() - start)
    return reset_s, rate, observations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="walkthrough steps played per game")
    parser.add_argument("--workers", type=int, default=2, help="GroupEnv worker processes")
    parser.add_argument("--setups", nargs="+", default=["standard-sync", "standard-async", "groupenv"])
    args = parser.parse_args()

    games = load_games(args.split, args.data_dir)
    chosen = [next(g for g in games if g.task_type == t) for t in TASK_TYPES if any(g.task_type == t for g in games)]
    print(f"{len(chosen)} games ({args.split}, one per task type), K={args.k}, up to {args.steps} steps each\n")
    runners = {"standard-sync": lambda g: run_standard(g, args.k, args.steps, asynchronous=False),
               "standard-async": lambda g: run_standard(g, args.k, args.steps, asynchronous=True),
               "groupenv": lambda g: run_group(g, args.k, args.steps, args.workers)}
    reference = {}
    rows = []
    for setup in args.setups:
        gc.collect()
        resets, rates = [], []
        with PeakRSS() as mem:
            for game in chosen:
                reset_s, rate, observations = runners[setup](game)
                resets.append(reset_s)
                rates.append(rate)
                if game.game_id in reference and reference[game.game_id] != observations:
                    raise SystemExit(f"{setup} observations differ from the standard setup on {game.game_id}")
                reference.setdefault(game.game_id, observations)
                print(f"  {setup:<15} {game.task_type:<32} reset {reset_s:6.2f} s   {rate:7.1f} steps/s")
        rows.append((setup, st.mean(resets), max(resets), st.mean(rates), mem.peak / 2**20))
    print("\n| setup | group reset s (mean) | group reset s (max) | env steps/s (mean) | peak PSS MB |")
    print("|---|---|---|---|---|")
    for setup, mean_reset, max_reset, rate, peak in rows:
        print(f"| {setup} | {mean_reset:.2f} | {max_reset:.2f} | {rate:.1f} | {peak:.0f} |")
    print("\nobservations identical across setups: yes")


if __name__ == "__main__":
    main()
