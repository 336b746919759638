"""The scale run's report: every checkpoint played on the pre-registered panel, with the tests
data/scale/PREREGISTRATION.md fixed, the learning curve and the run's costs.

    python scripts/scale_report.py            # writes data/results/scale.md and data/results/scale.png

Reads only committed files: the panel results of ``scripts/scale_panel.py`` (``data/scale/panel/NAME_*.jsonl``;
NAME is ``start`` or ``ARM_uN``) and each arm's ``data/scale/ARM/metrics.jsonl``. Every test is two-sided: the exact
sign test on rooms gained and lost (greedy), the exact sign-flip test on each room's change in its share of 4
sampled episodes won; every rate has its Wilson 95% interval.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from alfrl.base.paths import REPO_ROOT
from alfrl.eval.scale import (ScaleRun, arm_rows, cost_lines, detour_rows, markdown_table, origin_rows, plot_curve,
                              summary_rows, task_rows, verdict_lines)


def figure(run: ScaleRun, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    plot_curve(run, ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(run: ScaleRun, figure_name: str = "scale.png") -> str:
    """The report's markdown, from the committed files under ``run.root``."""
    heads = arm_rows(run)
    head_to_head = markdown_table(heads) if heads else "No update has been played by both arms yet."
    detours = "\n\n".join(f"{label}:\n\n{markdown_table(rows)}" for label, rows in
                           (("Panel, greedy", detour_rows(run, "greedy")),
                            ("Official valid_seen", detour_rows(run, "official"))) if rows) \
        or "No checkpoint's committed records keep their actions yet."
    costs = "\n".join(f"- {line}" for line in cost_lines(run)) or "- no update yet"
    verdicts = "\n".join(f"- {line}" for line in verdict_lines(run))
    return f"""# The scale run on its pre-registered panel

Made by `python scripts/scale_report.py` from `data/scale/panel/` and `data/scale/ARM/metrics.jsonl` (the code:
`alfrl/eval/scale.py`); the plan, the tests and their sidedness are in `data/scale/PREREGISTRATION.md`. Panel: 325
generated held-out rooms, greedy (temperature 0.01), 10 turns; official: ALFWorld's 27 small valid_seen rooms, the
same way; sampled: 100 panel rooms x 4 episodes at temperature 0.6, sampling seed 1. "vs start": points gained,
rooms gained/lost and the exact two-sided sign test (greedy), or the exact two-sided sign-flip test over rooms of
each room's change in its share won (sampled). Intervals: Wilson 95%. Every p is unadjusted; only the continued
arm at update 80 on the greedy panel is the primary test.

The pre-registered tests, read off the panel by `alfrl.eval.scale.verdict_lines`:

{verdicts}

{markdown_table(summary_rows(run))}

Panel rooms won greedily per task type (the last column: rooms the start won and this checkpoint lost):

{markdown_table(task_rows(run))}

GiGPO against GRPO at the same update, paired by room the same ways (secondary, two-sided):

{head_to_head}

The same greedy panel in its two parts (a split the pre-registration did not plan, shown for its caveat: the earlier
rooms were played when the warm starts were compared; the new ones never before the run; two-sided sign tests):

{markdown_table(origin_rows(run))}

Where each checkpoint first went with the object it took, on the pick-and-place rooms (read from the committed
actions by `alfrl.eval.failures.first_stop`; descriptive, a look the pre-registration did not plan). A sinkbasin that is not
the goal is where the clean task goes next; a pick-and-place room never needs one:

{detours}

![panel success by episodes trained]({figure_name})

Costs (from each arm's metrics; wall time of rollouts and updates on 2 cores):

{costs}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO_ROOT / "data/results/scale"), help="path prefix of the files")
    parser.add_argument("--root", default=str(REPO_ROOT / "data/scale"), help="the scale run's directory")
    args = parser.parse_args()
    run = ScaleRun(Path(args.root))
    if "start" not in run.checkpoints():
        raise SystemExit("the warm start has not played the panel yet: python scripts/scale_panel.py start warmstart_epoch")
    out = Path(args.out)
    figure(run, out.with_suffix(".png"))
    text = report(run, out.with_suffix(".png").name)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
