"""Play the scale run's pre-registered held-out panel (data/scale/PREREGISTRATION.md) with one adapter.

    python scripts/scale_panel.py start warmstart_epoch
    python scripts/scale_panel.py grpo_u10 data/scale/grpo/adapters/step_00010

Three parts, each a command printed before it runs, each resumable (an interrupted part continues where
it stopped when the same line is run again, and a finished one is not played twice):

- greedy: every room of the panel (data/panel), temperature 0.01, seed 42, 10 turns;
- official: ALFWorld's official valid_seen rooms as small as the training rooms, greedy the same way
  (skipped with a note when ``$ALFWORLD_DATA`` or ../shared/alfworld-real is absent);
- sampled: the fixed 100 rooms of data/scale/panel_sampled100.txt, 4 episodes each at temperature 0.6
  (sampling seed 1 for every adapter: common random numbers).

The full records go to ``runs/scale_panel/NAME/``; what is committed is small: each game's outcome
and the actions it took (``data/scale/panel/NAME_greedy.jsonl``, ``NAME_official.jsonl``), each sampled game's wins
(``NAME_sampled.jsonl``), the wall time of each part (``NAME_seconds.json``; a part that was resumed is
marked, its time being that of the rest only) and, after the greedy part, one room the start won and NAME lost,
both episodes in full (``NAME_lost_room.jsonl.xz``, read by notebook 06; ``--parts lost_room`` writes only it).
``scripts/scale_report.py`` turns them into the tables and the learning curve. ``--rewrite`` plays nothing and
writes the committed files again from the full records (when their format changes).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.eval.eval_stats import outcomes, read_records
from alfrl.eval.scale import lost_room

PANEL = REPO_ROOT / "data/scale/panel"
SAMPLED_GAMES = REPO_ROOT / "data/scale/panel_sampled100.txt"
PLAY = ["--max-expert-steps", "8", "--max-receptacles", "20", "--max-steps", "10", "--max-new-tokens", "48",
        "--max-trajectory-tokens", "4000"]
"""The rooms and episodes of the cpu presets (what the arms train on)."""


def official_data() -> Path | None:
    """ALFWorld's official games: ``$ALFWORLD_DATA``, else the workspace's ../shared/alfworld-real; None if absent."""
    for root in (os.environ.get("ALFWORLD_DATA"), REPO_ROOT.parent / "shared/alfworld-real"):
        if root and (Path(root) / "json_2.1.1/valid_seen").is_dir():
            return Path(root) / "json_2.1.1"
    return None


def commands(name: str, adapter: str, threads: int) -> dict[str, list[str]]:
    """The command of each part of the panel for one adapter."""
    out = REPO_ROOT / "runs/scale_panel" / name
    common = ["--adapter", adapter, *PLAY, "--threads", str(threads), "--resume"]
    parts = {"greedy": ["eval", "--data-dir", "data/panel", "--split", "valid_unseen", "--out", str(out / "greedy"),
                        *common],
             "sampled": ["profile", "--data-dir", "data/panel", "--split", "valid_unseen", "--games",
                         str(SAMPLED_GAMES.relative_to(REPO_ROOT)), "--k", "4", "--temperature", "0.6", "--seed",
                         "1", "--out", str(out / "sampled"), *common]}
    official = official_data()
    if official is not None:
        parts["official"] = ["eval", "--data-dir", str(official), "--split", "valid_seen",
                             "--out", str(out / "official"), *common]
    return {part: [sys.executable, "-m", "alfrl", *args] for part, args in parts.items()}


def keep(name: str, part: str, folder: Path) -> Path:
    """The small file committed for one finished part."""
    PANEL.mkdir(parents=True, exist_ok=True)
    path = PANEL / f"{name}_{part}.jsonl"
    if part == "sampled":
        rows = [{"checkpoint": name, "game_id": r["game_id"], "task_type": r["task_type"], "wins": r["wins"],
                 "k": r["k"]} for r in read_jsonl(folder / "profile.jsonl")]
    else:  # each game's outcome and its actions (None for a turn that did not move the game)
        records = read_records(folder)
        rows = [{**row, "actions": [t["action"] if t["admissible"] else None for t in record["trajectory"]["turns"]]}
                for row, record in zip(outcomes(records, name), records)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def keep_lost_room(name: str) -> Path | None:
    """Both episodes of the first room the start won and ``name`` lost (None for the start itself, when the
    start's full greedy records are not on this machine, or when no such room exists)."""
    start = REPO_ROOT / "runs/scale_panel/start/greedy"
    if name == "start" or not (start / "records.jsonl").is_file():
        return None
    try:
        pair = lost_room(read_records(start), read_records(REPO_ROOT / "runs/scale_panel" / name / "greedy"))
    except ValueError:  # every room the start won is still won
        return None
    path = PANEL / f"{name}_lost_room.jsonl.xz"
    with lzma.open(path, "wt") as f:
        f.writelines(json.dumps(record["trajectory"]) + "\n" for record in pair)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the checkpoint's name in the tables (e.g. start, grpo_u10)")
    parser.add_argument("adapter", help="the adapter: a folder, or a shipped one's name (warmstart_epoch)")
    parser.add_argument("--parts", nargs="+", default=["greedy", "official", "sampled"],
                        choices=["greedy", "official", "sampled", "lost_room"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rewrite", action="store_true",
                        help="play nothing: write the committed files of the parts already played again, from "
                             "the full records in runs/scale_panel/NAME (after their format changes)")
    parser.add_argument("--played", action="store_true",
                        help="play nothing: exit 0 if every part in --parts that can be played here is committed "
                             "(named in data/scale/panel/NAME_seconds.json), else 1")
    args = parser.parse_args()
    if args.rewrite:
        for part in args.parts:
            folder = REPO_ROOT / "runs/scale_panel" / args.name / part
            done = (folder / ("profile.jsonl" if part == "sampled" else "records.jsonl")).is_file()
            print(f"[scale_panel] {part}: {keep(args.name, part, folder) if done else f'not played here ({folder})'}")
        return
    plan = commands(args.name, args.adapter, args.threads)
    seconds_file = PANEL / f"{args.name}_seconds.json"
    seconds = json.loads(seconds_file.read_text()) if seconds_file.is_file() else {}
    if args.played:
        missing = [part for part in args.parts if part in plan and part not in seconds]
        print(f"[scale_panel] {args.name}: " + (f"not played yet: {', '.join(missing)}" if missing else "played"))
        sys.exit(1 if missing else 0)
    for part in args.parts:
        if part == "lost_room":
            print(f"[scale_panel] lost_room: {keep_lost_room(args.name) or 'not written (no start records here, or no room the start won was lost)'}")
            continue
        if part not in plan:
            print(f"[scale_panel] {part}: no official ALFWorld games here (set ALFWORLD_DATA); skipped")
            continue
        command = plan[part]
        folder = Path(command[command.index("--out") + 1])
        if part in seconds and folder.is_dir():  # finished here before: its wall time stays that of its play
            print(f"[scale_panel] {part}: already played ({seconds[part] / 60:.1f} min); delete {folder} to play "
                  "it again", flush=True)
        else:
            print(f"[scale_panel] {part}: {shlex.join(command)}", flush=True)
            resumed = folder.is_dir()
            tick = time.time()
            subprocess.run(command, cwd=REPO_ROOT, check=True)
            seconds[part] = round(time.time() - tick, 1)
            if resumed:  # the time of the rest only
                seconds[f"{part}_resumed"] = True
            seconds_file.write_text(json.dumps(seconds, indent=2) + "\n")
        path = keep(args.name, part, folder)
        print(f"[scale_panel] {part}: {path} ({seconds[part] / 60:.1f} min)", flush=True)
        if part == "greedy" and (example := keep_lost_room(args.name)):
            print(f"[scale_panel] lost_room: {example}", flush=True)


if __name__ == "__main__":
    main()
