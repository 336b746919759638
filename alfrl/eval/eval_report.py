"""Tables and figures that compare evaluated checkpoints (their ``summary.json``), with intervals and
the paired test of :mod:`alfrl.eval.eval_stats`. Taught in notebook 06.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import fmean

from alfrl import TASK_TYPES
from alfrl.eval.eval_stats import outcomes, paired_outcomes, read_records, summarize, wilson_interval

SHORT_TASK_NAMES = {"pick_and_place_simple": "pick", "look_at_obj_in_light": "look", "pick_clean_then_place_in_recep":
                    "clean", "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool",
                    "pick_two_obj_and_place": "pick two"}
"""Short task names for axis labels."""


def _paired_cell(first: str | Path, folder: str | Path) -> str:
    try:
        paired = paired_outcomes(first, folder)
    except ValueError:  # evaluated on other games: nothing to pair
        return "no shared games"
    return f"+{paired['gained']}/-{paired['lost']} (p={p_text(paired['p_value'])})"


def p_text(p: float) -> str:
    """A p-value for a table: two decimals, or one significant digit below 0.01 (so 6e-14 is not 0.00)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.0e}"


Result = str | Path | list[dict]
"""An evaluation folder (its ``summary.json`` and ``records.jsonl``), or a list of records or outcomes
(:func:`alfrl.eval.eval_stats.outcomes`: a committed checkpoint's games, without evaluating it again)."""


def result_summary(result: Result) -> dict:
    """The summary of an evaluation folder, or of a list of records or outcomes."""
    if isinstance(result, list):
        return summarize(result)
    return json.loads((Path(result) / "summary.json").read_text())


def result_records(result: Result) -> list[dict]:
    return result if isinstance(result, list) else read_records(result)


def comparison_table(results: dict[str, Result]):
    """A pandas table, one row per named result: success per split and all, invalid/episode;
    rows after the first also say which games changed against the first (``paired_outcomes``)."""
    import pandas as pd
    rows = []
    first = next(iter(results.values()), None)
    for i, (name, folder) in enumerate(results.items()):
        s = result_summary(folder)
        row = {"checkpoint": name}
        row.update({f"{split} %": 100 * v["success"] for split, v in s["splits"].items()})
        won, games = s["all"]["won"], s["all"]["games"]
        low, high = wilson_interval(won, games)
        row.update({"all %": 100 * s["all"]["success"], "solved": f"{won}/{games}",
                    "95% interval": f"{100 * low:.0f}-{100 * high:.0f}", "games": games,
                    "invalid / episode": s["all"]["invalid_per_episode"],
                    "valid calls %": None if s["all"]["valid_call_rate"] is None else 100 * s["all"]["valid_call_rate"]})
        if i > 0:
            row["vs first: gained/lost (p)"] = _paired_cell(first, folder)
        elif len(results) > 1:
            row["vs first: gained/lost (p)"] = "-"
        rows.append(row)
    return pd.DataFrame(rows).set_index("checkpoint")


def markdown_table(table) -> str:
    """A pandas table as a Markdown table (without the optional tabulate package)."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and v != v):  # not measured (outcomes keep no turns)
            return "-"
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    head = [table.index.name or ""] + list(table.columns)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([str(i)] + [cell(v) for v in row]) + " |" for i, row in zip(table.index, table.values)]
    return "\n".join(lines)


def task_table(results: dict[str, Result]):
    """A pandas table, one row per named result: "won/games" per task type (short names), every split together."""
    import pandas as pd
    rows = {}
    for name, result in results.items():
        records = result_records(result)
        rows[name] = {SHORT_TASK_NAMES.get(t, t): f"{sum(r['won'] for r in records if r['task_type'] == t)}/"
                      f"{sum(r['task_type'] == t for r in records)}"
                      for t in TASK_TYPES if any(r["task_type"] == t for r in records)}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "checkpoint"
    return table


def failure_table(results: dict[str, Result]):
    """A pandas table of how the lost episodes failed (:func:`alfrl.eval.failures.failure_shares`, in %), one row
    per result whose records keep their trajectories (committed outcomes do not: they get no row); None
    when no result has them."""
    import pandas as pd

    from alfrl.eval.failures import failure_shares
    rows = {}
    for name, result in results.items():
        records = result_records(result)
        if records and all("trajectory" in r for r in records):
            shares = failure_shares(records)
            rows[name] = {"lost": shares.pop("lost"), **{f"{mode} %": 100 * v for mode, v in shares.items()}}
    if not rows:
        return None
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "checkpoint"
    return table


def write_comparison(results: dict[str, Result], table: Path, figure: Path, summaries: Path,
                     outcomes_file: Path, note: str = "") -> str:
    """A comparison as files to commit: the Markdown ``table`` (``note`` above it; below it the solved games
    per task type and, for the results that keep trajectories, how the lost episodes failed), the
    ``figure``, every evaluation's summary in one JSON file and every game's outcome per checkpoint in one
    JSONL file (a later checkpoint can be paired with these without evaluating the first again). Returns
    the main table."""
    markdown = markdown_table(comparison_table(results))
    text = (note + "\n\n" if note else "") + markdown + "\n"
    text += "\nSolved per task type:\n\n" + markdown_table(task_table(results)) + "\n"
    failures = failure_table(results)
    if failures is not None:
        text += ("\nHow the lost episodes failed (alfrl.eval.failures; an episode can fail in several ways; results "
                 "without stored trajectories have no row):\n\n" + markdown_table(failures) + "\n")
    Path(table).write_text(text)
    comparison_figure(results, figure)
    Path(summaries).write_text(json.dumps(
        {name: result_summary(folder) for name, folder in results.items()}, indent=1))
    Path(outcomes_file).write_text("".join(json.dumps(row) + "\n" for name, folder in results.items()
                                           for row in outcomes(result_records(folder), name)))
    return markdown


def comparison_figure(results: dict[str, Result], path: str | Path | None = None):
    """Three panels like the reference's: success by split, success per task type, invalid actions."""
    import matplotlib.pyplot as plt
    summaries = {n: result_summary(f) for n, f in results.items()}
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), constrained_layout=True)
    width = 0.8 / max(1, len(summaries))
    splits = sorted({s for v in summaries.values() for s in v["splits"]}) + ["all"]
    for i, (name, s) in enumerate(summaries.items()):
        values = [100 * (s["all"] if sp == "all" else s["splits"].get(sp, {"success": 0}))["success"]
                  for sp in splits]
        axes[0].bar([x + i * width for x in range(len(splits))], values, width, label=name)
        per_task = defaultdict(list)
        for split_tasks in s["tasks"].values():
            for t, v in split_tasks.items():
                per_task[t].extend([v["success"]] * v["games"])
        tasks = [t for t in TASK_TYPES if t in per_task]
        axes[1].bar([x + i * width for x in range(len(tasks))], [100 * fmean(per_task[t]) for t in tasks], width,
                    label=name)
        axes[1].set_xticks([x + width * (len(summaries) - 1) / 2 for x in range(len(tasks))],
                           [SHORT_TASK_NAMES.get(t, t) for t in tasks], rotation=20)
        axes[2].bar(i, s["all"]["invalid_per_episode"], label=name)
    axes[0].set_xticks([x + width * (len(summaries) - 1) / 2 for x in range(len(splits))], splits)
    axes[0].set_title("success % by split")
    axes[1].set_title("success % per task type")
    axes[2].set_xticks(range(len(summaries)), list(summaries), rotation=20)
    axes[2].set_title("invalid actions / episode")
    axes[0].legend()
    if path is not None:
        fig.savefig(path, dpi=90)
        plt.close(fig)
    return fig
