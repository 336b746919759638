"""scripts/scoreboard.py: the committed scoreboard is what the committed outcome files say."""

from __future__ import annotations

from alfrl.base.paths import REPO_ROOT
from tests.script_loader import load_script


def test_the_committed_scoreboard_is_the_outcome_files_recounted():
    board = load_script("scoreboard")
    cells = board.cells()
    assert cells["default warm start (SFT, 1,030 walkthroughs)"]["325"] == (161, 325)  # README's headline start
    assert cells["scale run GRPO, update 80"]["325"] == (225, 325)
    assert cells["default warm start (SFT, 1,030 walkthroughs)"]["27"] == (16, 27)
    committed = (REPO_ROOT / "data/results/scoreboard.md").read_text()
    assert committed == "# Scoreboard\n\n" + board.markdown(cells), "run: python scripts/scoreboard.py --write"
    assert board.cell_text(161, 325) == "161/325 (44-55%)"  # Wilson 95%: 0.441-0.549
