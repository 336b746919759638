"""One scoreboard: every model stage on every evaluation set, from the committed per-game outcomes.

    .venv/bin/python scripts/scoreboard.py            # prints the table
    .venv/bin/python scripts/scoreboard.py --write    # also data/results/scoreboard.md and scoreboard.png

Each cell is the games won greedily out of the set, with a Wilson 95% interval; a blank cell was not measured. The
sets differ in size, rooms and turns, so a cell compares only with cells of its own column: the 60 generated rooms
are 60 of the 123, and the 123 are part of the 325 (``SETS`` says which contains which). Every figure is
read from the outcome file named in ``SOURCES``; nothing is typed in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from alfrl.base.checkpoint import read_jsonl
from alfrl.base.paths import REPO_ROOT
from alfrl.eval.eval_stats import wilson_interval

SETS = {
    "60": "60 generated rooms, 10 turns (60 of the 123)",
    "123": "123 generated held-out rooms (`data/heldout`), 10 turns (part of the 325)",
    "325": "325 generated panel rooms (`data/panel`), 10 turns",
    "24": "24 generated rooms of every size, 20 turns",
    "27": "ALFWorld's 27 small official valid_seen rooms, 10 turns",
    "155": "ALFWorld's 155 solvable official valid_seen games, every size, 50 steps",
}
"""The evaluation sets, by column: generated rooms lie on ALFRED's test floor plans, never trained on."""

R = "data/results/"
P = "data/scale/panel/"
SOURCES: list[tuple[str, str, str, str | None]] = [
    # (stage, set, outcome file, checkpoint name in it; None: every line)
    ("first warm start (SFT, 150 walkthroughs)", "60", R + "cpu_seed1_20updates_outcomes.jsonl", "warm start"),
    ("first warm start (SFT, 150 walkthroughs)", "123", R + "warmstart_stages_heldout_outcomes.jsonl", "warm start"),
    ("first warm start (SFT, 150 walkthroughs)", "24", R + "warmstart_long20_heldout_outcomes.jsonl",
     "first warm start"),
    ("first warm start (SFT, 150 walkthroughs)", "27", R + "warmstart_stages_official_valid_seen_outcomes.jsonl",
     "warm start"),
    ("GRPO, 12 updates from the first (cpu, seed 0)", "60", R + "cpu_seed1_20updates_outcomes.jsonl",
     "GRPO seed 0, 12 updates"),
    ("SFT step 80 (470 walkthroughs)", "123", R + "warmstart_stages_heldout_outcomes.jsonl", "more expert games (320)"),
    ("SFT step 80 (470 walkthroughs)", "24", R + "warmstart_long20_heldout_outcomes.jsonl",
     "more expert games, step 80 (320)"),
    ("SFT step 80 (470 walkthroughs)", "27", R + "warmstart_stages_official_valid_seen_outcomes.jsonl",
     "more expert games (320)"),
    ("DAgger, 2 rounds from step 80", "123", R + "warmstart_stages_heldout_outcomes.jsonl", "DAgger round 2"),
    ("DAgger, 2 rounds from step 80", "27", R + "warmstart_stages_official_valid_seen_outcomes.jsonl", "DAgger round 2"),
    ("default warm start (SFT, 1,030 walkthroughs)", "123", R + "warmstart_stages_heldout_outcomes.jsonl",
     "one epoch of expert games (880)"),
    ("default warm start (SFT, 1,030 walkthroughs)", "325", P + "start_greedy.jsonl", None),
    ("default warm start (SFT, 1,030 walkthroughs)", "24", R + "warmstart_long20_heldout_outcomes.jsonl",
     "one epoch of expert games (880)"),
    ("default warm start (SFT, 1,030 walkthroughs)", "27", P + "start_official.jsonl", None),
    ("GRPO, 6 updates from the default (cpu, seed 0)", "123", R + "rl_on_warmstart_epoch_heldout_outcomes.jsonl",
     "GRPO seed 0, 6 updates"),
    ("GRPO, 6 updates from the default (cpu, seed 0)", "27",
     R + "rl_on_warmstart_epoch_official_valid_seen_outcomes.jsonl", "GRPO seed 0, 6 updates"),
    *[(f"scale run GRPO, update {u}", s, P + f"grpo_u{u}_{part}.jsonl", None)
      for u in (10, 20, 40, 80) for s, part in (("325", "greedy"), ("27", "official"))],
    *[(f"scale run GiGPO, update {u}", s, P + f"gigpo_u{u}_{part}.jsonl", None)
      for u in (10, 20, 40) for s, part in (("325", "greedy"), ("27", "official"))],
    *[(f"{name} on GRPO's first 10 updates' episodes", s, P + f"{tag}_{part}.jsonl", None)
      for name, tag in (("RFT", "rft_replay_u10"), ("DPO", "dpo_replay_u10"), ("subgoal reward", "grpo_subgoals_replay_u10"))
      for s, part in (("325", "greedy"), ("27", "official"))],
]
"""Where each cell comes from."""


def read_outcomes(path: str, checkpoint: str | None) -> list[dict]:
    chosen = [r for r in read_jsonl(REPO_ROOT / path) if checkpoint is None or r["checkpoint"] == checkpoint]
    if not chosen:
        raise SystemExit(f"{path} has no outcomes of checkpoint {checkpoint!r}")
    return chosen


def cells() -> dict[str, dict[str, tuple[int, int]]]:
    """{stage: {set: (won, games)}}, stages in SOURCES' order."""
    board: dict[str, dict[str, tuple[int, int]]] = {}
    for stage, column, path, checkpoint in SOURCES:
        games = read_outcomes(path, checkpoint)
        if str(len(games)) != column:
            raise SystemExit(f"{path} ({checkpoint}) holds {len(games)} games, not the {column} of its column")
        board.setdefault(stage, {})[column] = (sum(bool(g["won"]) for g in games), len(games))
    return board


def cell_text(won: int, games: int) -> str:
    low, high = wilson_interval(won, games)
    return f"{won}/{games} ({100 * low:.0f}-{100 * high:.0f}%)"


def markdown(board: dict) -> str:
    columns = [c for c in SETS if c == "155" or any(c in row for row in board.values())]
    head = "| model stage | " + " | ".join(f"{c}" for c in columns) + " |"
    rows = [head, "|" + "---|" * (len(columns) + 1)]
    for stage, row in board.items():
        rows.append(f"| {stage} | " + " | ".join(cell_text(*row[c]) if c in row else "" for c in columns) + " |")
    legend = "\n".join(f"- **{c}**: {SETS[c]}" + (" (not measured yet)" if c == "155" and not any(c in r for r in
                       board.values()) else "") for c in columns)
    return ("Games won greedily out of each set, with Wilson 95% intervals (made by `python scripts/scoreboard.py "
            "--write` from the outcome files it names). Compare a cell only with cells of its own column.\n\n"
            + "\n".join(rows) + "\n\n" + legend + "\n")


def figure(board: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [c for c in SETS if any(c in row for row in board.values())]
    stages = list(board)
    fig, axes = plt.subplots(1, len(columns), figsize=(2.3 * len(columns) + 3, 0.32 * len(stages) + 1.6), sharey=True)
    for ax, column in zip(axes, columns):
        for y, stage in enumerate(stages):
            if column not in board[stage]:
                continue
            won, games = board[stage][column]
            low, high = wilson_interval(won, games)
            ax.errorbar([100 * won / games], [y], xerr=[[100 * (won / games - low)], [100 * (high - won / games)]],
                        fmt="o", color="C0" if "warm" in stage or "SFT" in stage or "DAgger" in stage else "C3",
                        markersize=4, capsize=2)
        ax.set_title(f"{column} games", fontsize=9)
        ax.set_xlim(0, 100)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel("won, %", fontsize=8)
    axes[0].set_yticks(range(len(stages)), stages, fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("Every stage on every set (blue: imitation of the expert; red: trained on its own episodes); "
                 "Wilson 95% intervals", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write data/results/scoreboard.md and scoreboard.png")
    args = parser.parse_args()
    board = cells()
    text = markdown(board)
    print(text)
    if args.write:
        (REPO_ROOT / "data/results/scoreboard.md").write_text("# Scoreboard\n\n" + text)
        figure(board, REPO_ROOT / "data/results/scoreboard.png")
        print("wrote data/results/scoreboard.md and scoreboard.png")


if __name__ == "__main__":
    main()
