"""Every course notebook runs end to end (papermill, smoke parameters), and teaches the package's code.

Add a notebook by adding one line to ``NOTEBOOKS``.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
TMP_RUN_DIR = "<tmp_path>/run"
"""A smoke parameter that test_notebook_runs replaces by a folder under the test's tmp_path."""

NOTEBOOKS = [
    # (file, smoke parameters for papermill); data_dir None = the committed games (data/packs)
    ("00_setup.ipynb", {"data_dir": None, "split": "valid_seen", "demo_index": 0, "max_steps_shown": 5}),
    ("01_alfworld_env.ipynb", {"data_dir": None, "split": "valid_seen", "k": 4, "workers": 2,
                               "interactive": False, "timing_steps": 5}),
    ("02_tool_protocol.ipynb", {"model": "bundled", "data_dir": None, "split": "valid_seen", "game_index": 0,
                                "turns": 3, "max_new_tokens": 24}),
    ("03_group_rollouts.ipynb", {"model": "bundled", "adapter": "warmstart_epoch", "data_dir": None, "split": "train",
                                 "k": 2, "max_steps": 2, "max_new_tokens": 8, "inline_turns": 1, "workers": 2,
                                 "compare_one_by_one": False}),
    ("04_advantages_masks.ipynb", {"model": "bundled", "adapter": "warmstart_epoch", "interactive": False}),
    ("05_ppo_loop.ipynb", {"train": True, "preset": "cpu", "run_dir": TMP_RUN_DIR, "split": "valid_seen", "updates": 1,
                           "dynamic_sampling": False,
                           "games_per_update": 1, "k": 2, "max_steps": 1, "max_new_tokens": 8, "workers": 0,
                           "extra_updates": 0, "live_plots": False,
                           "inline_updates": 1, "inline_k": 2, "inline_max_steps": 1, "inline_pool": None}),
    ("06_evaluation.ipynb", {"model": "bundled", "data_dir": None, "split": "valid_unseen", "limit": 2,
                             "max_steps": 2, "max_new_tokens": 12, "batch": 2, "out_dir": TMP_RUN_DIR,
                             "evaluate_base": True, "interactive": False}),
    ("07_beyond_grpo.ipynb", {"model": "bundled", "groups_replayed": 2, "max_pair_tokens": 600,
                              "planner_steps": 2}),
    ("08_long_games.ipynb", {}),
]


def read_notebook(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK_DIR / name, as_version=4)


def notebook_definitions(name: str, wanted: str, namespace: dict | None = None) -> dict:
    """Exec only the imports, constants (UPPER_CASE names), classes and defs of the code cell
    that defines ``wanted``, so a test checks the code the learner reads, not a copy of it."""
    for cell in read_notebook(name).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        if not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == wanted for n in tree.body):
            continue
        keep = [n for n in tree.body
                if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
                or (isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper()
                                                      for t in n.targets))]
        namespace = dict(namespace or {})
        exec(compile(ast.Module(body=keep, type_ignores=[]), f"{name}:{wanted}", "exec"), namespace)
        return namespace
    raise AssertionError(f"{name} has no code cell defining {wanted!r}")


def _outputs():
    """scripts/notebook_outputs.py, which makes an executed notebook lean and checks a committed one."""
    from script_loader import load_script

    return load_script("notebook_outputs")


@pytest.mark.parametrize("name", [n for n, _ in NOTEBOOKS])
def test_notebook_is_committed_with_a_default_run(name):
    """A `parameters` cell for papermill, and the outputs of a run at the defaults: every code cell
    executed and unedited since, no error, no path of the machine it ran on, under 1 MB."""
    nb = read_notebook(name)
    nbformat.validate(nb)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code", "need exactly one code cell tagged 'parameters'"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    found = _outputs().problems(NOTEBOOK_DIR / name)
    assert not found, (f"{name}: " + "; ".join(found)
                       + f" (re-run it: .venv/bin/python scripts/time_notebooks.py --write {name[:2]})")


def test_the_committed_notebooks_fit_their_size_budget():
    outputs = _outputs()
    total = sum((NOTEBOOK_DIR / name).stat().st_size for name, _ in NOTEBOOKS)
    assert total <= outputs.MAX_TOTAL_BYTES, f"the notebooks take {total / 1e6:.2f} MB, over {outputs.MAX_TOTAL_BYTES / 1e6:.0f} MB"


MAX_CELL_WORDS = 200
MAX_NOTEBOOK_WORDS = {"05_ppo_loop.ipynb": 2500, "06_evaluation.ipynb": 2500}
"""Prose a learner reads in one go: no markdown cell over 200 words, and the two longest stories (the
training loop, evaluation) at about 2,500 words each."""


@pytest.mark.parametrize("name", [n for n, _ in NOTEBOOKS])
def test_prose_comes_in_short_cells(name):
    words = [len("".join(c.source).split()) for c in read_notebook(name).cells if c.cell_type == "markdown"]
    long = [(i, n) for i, n in enumerate(words) if n > MAX_CELL_WORDS]
    assert not long, f"{name}: markdown cells (index among markdown cells, words) over {MAX_CELL_WORDS}: {long}"
    assert sum(words) <= MAX_NOTEBOOK_WORDS.get(name, 3500), f"{name}: {sum(words)} markdown words"


def test_lean_keeps_what_a_page_shows_and_drops_the_machine(tmp_path):
    """An executed notebook made lean: a progress bar's last state, paths relative to the repository,
    a widget's text fallback without its model (and none for a progress widget, frozen at 0%), every code cell stamped; problems() then finds nothing,
    and finds an edit, an error and an absolute path."""
    outputs = _outputs()
    root = tmp_path / "repo"
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}, "papermill": {"x": 1},
                                            "widgets": {"state": {}}})
    code = nbformat.v4.new_code_cell("print(1)", execution_count=1, metadata={"papermill": {}, "execution": {}})
    code.outputs = [nbformat.v4.new_output("stream", name="stderr", text="bar 10%\rbar 50%\rbar 100%\ndone\n"),
                    nbformat.v4.new_output("stream", name="stdout", text=f"wrote {root}/runs/x.json\n"),
                    nbformat.v4.new_output("display_data", data={outputs.WIDGET: {"model_id": "m"},
                                                                  "text/plain": "Tab(...)"}),
                    nbformat.v4.new_output("display_data", data={  # a tqdm widget, stored as created
                        outputs.WIDGET: {"model_id": "b"}, "text/plain": "eval valid_unseen:   0%|          | 0/8 "
                                                                           "[00:00<?, ?game/s]"})]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), code]
    lean = outputs.lean(nb, root)
    assert "papermill" not in lean.metadata and "widgets" not in lean.metadata
    assert set(code.metadata) == {"alfrl_source"}
    assert [o.get("text") for o in code.outputs[:2]] == ["bar 100%\ndone\n", "wrote runs/x.json\n"]
    assert code.outputs[2].data == {"text/plain": "Tab(...)"} and len(code.outputs) == 3  # no frozen bar
    path = tmp_path / "nb.ipynb"
    nbformat.write(lean, path)
    assert outputs.problems(path) == []
    code.source = "print(2)"
    code.outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[]))
    code.outputs.append(nbformat.v4.new_output("stream", name="stdout", text="/home/me/alfrl/data\n"))
    nbformat.write(lean, path)
    found = outputs.problems(path)
    assert len(found) == 3 and "edited after the run" in found[0] and "ValueError" in found[1]
    assert "absolute path" in found[2]


@pytest.mark.parametrize("name,parameters", NOTEBOOKS, ids=[n for n, _ in NOTEBOOKS])
def test_notebook_runs(name, parameters, tmp_path):
    import papermill

    out = tmp_path / name
    parameters = {key: str(tmp_path / "run") if value == TMP_RUN_DIR else value for key, value in parameters.items()}
    papermill.execute_notebook(str(NOTEBOOK_DIR / name), str(out), parameters=parameters,
                               kernel_name="python3", cwd=str(NOTEBOOK_DIR), progress_bar=False)
    errors = [o for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors


# --- 00_setup: the notebook's is_playable is ALFWorld's filter, as alfrl.world.games applies it -------

@pytest.fixture(scope="module")
def one_game(tmp_path_factory) -> Path:
    """The trial folder of one small generated game (the expert wins it)."""
    from alfrl.world.generate import GenerateConfig, generate
    from alfrl.world.rooms import SizeConfig

    out = tmp_path_factory.mktemp("gen")
    generate(GenerateConfig(out=str(out), n=1, splits=("valid_unseen",), workers=1,
                            size=SizeConfig(max_receptacles=6, max_object_types=3)))
    (game,) = (out / "valid_unseen").glob("*/*/game.tw-pddl")
    return game.parent


def _variant(trial: Path, split_dir: Path, task_folder: str, edit=None) -> Path:
    dst = split_dir / task_folder / trial.name
    shutil.copytree(trial, dst)
    if edit:
        edit(dst)
    return dst / "game.tw-pddl"


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_is_playable_matches_alfrl_games(one_game, tmp_path):
    from alfrl.world.games import find_game_files, read_game

    ns = notebook_definitions("00_setup.ipynb", "is_playable", {"Path": Path, "json": json})
    is_playable = ns["is_playable"]
    split_dir = tmp_path / "valid_unseen"
    name = one_game.parent.name  # <task>-<Obj>-<Mrecep>-<Parent>-<scene>
    files = {
        "kept": _variant(one_game, split_dir, name),
        "movable": _variant(one_game, split_dir, name + "-movable"),
        "sliced": _variant(one_game, split_dir, name.replace("-", "-Sliced-", 1)),
        "unsolvable": _variant(one_game, split_dir, name + "-unsolvable",
                               lambda d: _edit_json(d / "game.tw-pddl", solvable=False)),
        "other task type": _variant(one_game, split_dir, name + "-othertask",
                                    lambda d: _edit_json(d / "traj_data.json",
                                                         task_type="pick_and_place_with_movable_recep")),
    }
    package = {f for f in find_game_files(split_dir) if read_game(f) is not None}
    notebook = {f for f in sorted(split_dir.glob("*/*/game.tw-pddl")) if is_playable(f)}
    assert notebook == package == {files["kept"]}


# --- 02_tool_protocol: the notebook's parse_tool_call is alfrl.agent.protocol.parse_reply on JSON calls ---

def _call(action, name="alfworld_step") -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": {"action": action}})}\n</tool_call>'


# JSON-form replies only: the notebook's parser does not read the XML-parameter form or arguments
# given as a JSON string, which parse_reply also accepts.
JSON_REPLIES = [
    _call("go to countertop 1"),
    "I should look in the fridge.\n" + _call("open fridge 1"),
    _call("Take  Apple 1 from   CounterTop 1") + "\n  ",
    _call("\tlook\n"),
    '<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}, "id": 3}</tool_call>',
    "go to countertop 1",
    _call("look") + "\n" + _call("inventory"),
    _call("look") + " done!",
    '<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}}',
    '{"name": "alfworld_step", "arguments": {"action": "look"}}</tool_call>',
    _call("look", name="python"),
    _call("go to\ncountertop 1"),
    _call("   "),
    _call(""),
    '<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}</tool_call>',
    '<tool_call>{"name": "alfworld_step", "arguments": {"action": "look"}} extra</tool_call>',
    '<tool_call>{"name": "alfworld_step", "arguments": {"act": "look"}}</tool_call>',
    '<tool_call>{"name": "alfworld_step", "arguments": {"action": 3}}</tool_call>',
    '<tool_call>{"name": "alfworld_step", "arguments": ["look"]}</tool_call>',
    '<tool_call>{"name": "alfworld_step"}</tool_call>',
    '<tool_call>{"tool": "alfworld_step"}</tool_call>',
    '<tool_call>["alfworld_step", "look"]</tool_call>',
    "<tool_call>go to countertop 1</tool_call>",
    "</tool_call> <tool_call>",
    "<tool_call></tool_call>",
]


@pytest.fixture(scope="module")
def parse_tool_call():
    return notebook_definitions("02_tool_protocol.ipynb", "parse_tool_call")["parse_tool_call"]


@pytest.mark.parametrize("reply", JSON_REPLIES)
def test_nb02_parse_tool_call_matches_parse_reply(parse_tool_call, reply):
    from alfrl.agent.protocol import parse_reply

    action, reason = parse_tool_call(reply)
    parsed = parse_reply(reply)
    assert action == parsed.action
    assert (action is not None) == parsed.valid == (not reason)


# --- 03_group_rollouts: the notebook's play_group_inline plays what alfrl.rl.rollout.rollout_group plays ---

def test_nb03_play_group_inline_matches_rollout_group():
    """Scripted replies (a winner, a winner after a bad format and an inadmissible action, a loser that
    alternates valid and broken calls) through both loops: same replies, outcomes and tokens."""
    from alfrl.agent.models import load_policy
    from alfrl.agent.protocol import ChatFormat
    from alfrl.rl.rollout import RolloutConfig, rollout_group
    from alfrl.rl.scripted import ScriptedSession, expert_replies, tool_call
    from alfrl.world.games import load_games

    play_group_inline = notebook_definitions("03_group_rollouts.ipynb", "play_group_inline")["play_group_inline"]
    policy = load_policy()
    game = min(load_games("valid_unseen")[:20], key=lambda g: len(g.walkthrough))
    fmt, walk = ChatFormat(policy.tokenizer), list(game.walkthrough)
    scripts = {0: expert_replies(game),
               1: ["I will look around.", tool_call("fly to the moon"), tool_call("Look  ")] + expert_replies(game)[1:],
               2: [tool_call("look"), "<tool_call>{bad json</tool_call>"] * len(walk)}
    max_steps = len(walk) + 2
    mine = play_group_inline(policy, game, k=3, max_steps=max_steps, workers=0, session=ScriptedSession(fmt, scripts))
    theirs = rollout_group(policy, game, RolloutConfig(k=3, max_steps=max_steps, workers=0), fmt=fmt,
                           session=ScriptedSession(fmt, scripts))  # notebook 03's protocol: the list every turn
    for m, t in zip(mine, theirs, strict=True):
        assert m["replies"] == [turn.reply for turn in t.turns]
        assert (m["won"], m["steps"], m["invalid"], m["end"]) == (t.won, t.steps, t.invalid, t.end_reason)
        assert m["tokens"] == t.tokens
    assert [(m["won"], m["steps"], m["invalid"]) for m in mine] == [
        (True, len(walk), 0), (True, len(walk) + 2, 2), (False, max_steps, max_steps // 2)]


# --- 04_advantages_masks: the notebook's reward and advantages are alfrl.rl.advantage's ------------

REWARD_LISTS = [[1.0, 0.8, -0.3, 0.0], [0.0, 0.0, 1.0], [-0.4, -0.4, -0.4, -0.3], [1.0, 0.9, 0.0, -0.5, -5.0],
                [0.5], [-0.2] * 8]


def test_nb04_rewards_and_advantages_match_alfrl_advantage():
    from types import SimpleNamespace

    from alfrl.rl.advantage import episode_reward, group_advantages

    ns = notebook_definitions("04_advantages_masks.ipynb", "advantages")
    for won, invalid in [(True, 2), (False, 3), (True, 0), (False, 0), (False, 50)]:
        assert ns["reward"](won, invalid) == pytest.approx(episode_reward(SimpleNamespace(won=won, invalid=invalid)))
    for rewards in REWARD_LISTS:
        for normalize in (False, True):
            assert ns["advantages"](rewards, normalize) == pytest.approx(group_advantages(rewards, normalize),
                                                                          abs=1e-9)


def test_nb04_step_credit_by_hand_is_alfrl_gigpo():
    """Section 5's hand-written step rewards, returns, state keys and step advantages are alfrl.rl.gigpo's, on the
    hand-built group of tests/test_gigpo.py and with other penalties and discounts."""
    from alfrl.rl import gigpo
    from test_gigpo import hand_group

    ns = notebook_definitions("04_advantages_masks.ipynb", "step_advantages_by_hand")
    group = hand_group()
    for t in group:
        assert ns["turn_rewards"](t) == pytest.approx(gigpo.step_rewards(t, ns["STEP_PENALTY"]))
        assert ns["state_keys"](t) == gigpo.state_keys(t)
        for gamma in (0.0, 0.5, ns["GAMMA"], 1.0):
            assert ns["discounted"](ns["turn_rewards"](t), gamma) == pytest.approx(
                gigpo.discounted_returns(gigpo.step_rewards(t), gamma))
    for mine, theirs in zip(ns["step_advantages_by_hand"](group), gigpo.step_advantages(group, gamma=ns["GAMMA"])):
        assert mine == pytest.approx(theirs)


# --- 05_ppo_loop: its exercises (the clipped loss, which tokens stop pulling, LoRALinear, the step) are
# checked against alfrl.rl.ppo and peft in tests/test_exercises_nb05.py; the loop written out, with the worked
# step, is alfrl.training.train's first update (the notebook's own run checks the package's step in the loop) ----

def test_nb05_train_by_hand_is_alfrl_trains_first_update(tmp_path):
    """The outer loop the learner reads (play, reward, advantage) with the worked policy_gradient_step, and
    alfrl.training.train, from the same config in float32: the same games and seeds, so the same wins, loss and
    gradient norm."""
    import sys

    import torch

    import alfrl.training.train

    sys.path.insert(0, str(NOTEBOOK_DIR))
    from solutions.nb05 import policy_gradient_step

    train_by_hand = notebook_definitions("05_ppo_loop.ipynb", "train_by_hand", {
        "torch": torch, "my_step_works": True, "policy_gradient_step": policy_gradient_step})["train_by_hand"]
    config = alfrl.training.train.preset("practice", run_dir=str(tmp_path / "run"), games_per_update=1, k=4, max_steps=6,
                                updates=1, bf16=False, log="none", seed=0)  # its first group has a reward spread
    by_hand = train_by_hand(config, 1)[0]
    package = alfrl.training.train.train(config, progress=False)[0]
    assert by_hand["loss"] is not None, "the game's group had no reward spread: pick another seed"
    assert by_hand["episodes"] == package["trajectories"] == 4
    assert by_hand["won"] == round(package["success"] * 4)
    assert by_hand["trajectories_trained"] == package["trajectories_trained"]
    assert by_hand["loss"] == pytest.approx(package["loss"], rel=1e-4, abs=1e-6)
    assert by_hand["grad_norm"] == pytest.approx(package["grad_norm"], rel=1e-4)


# --- 06_evaluation: the notebook's groupby summary is alfrl.eval.evaluate.summarize --------------------

def _record(split: str, task: str, won: bool, invalid: int, turns: int, valid_calls: int) -> dict:
    return {"split": split, "game_id": f"{task}/{split}/{turns}-{invalid}", "task_type": task, "won": won,
            "steps": turns, "invalid": invalid, "end_reason": "won" if won else "max_steps",
            "valid_calls": valid_calls, "admissible": turns - invalid, "turns": turns}


EVAL_RECORDS = [
    _record("valid_seen", "pick_and_place_simple", True, 2, 10, 9),
    _record("valid_seen", "pick_and_place_simple", False, 12, 12, 0),
    _record("valid_seen", "pick_and_place_simple", False, 5, 12, 12),
    _record("valid_seen", "look_at_obj_in_light", True, 0, 3, 3),
    _record("valid_unseen", "pick_heat_then_place_in_recep", False, 12, 12, 4),
    _record("valid_unseen", "pick_heat_then_place_in_recep", True, 1, 7, 7),
    _record("valid_unseen", "pick_clean_then_place_in_recep", False, 12, 12, 0),
]


def test_nb06_summary_table_matches_summarize():
    from alfrl.eval.evaluate import summarize

    summary_table = notebook_definitions("06_evaluation.ipynb", "summary_table")["summary_table"]
    numbers = ["games", "won", "success", "invalid_per_episode", "mean_steps", "valid_call_rate", "admissible_rate"]
    for records in (EVAL_RECORDS, EVAL_RECORDS[4:], EVAL_RECORDS[1:2]):
        theirs = summarize(records)
        per_split = summary_table(records)
        per_task = summary_table(records, ["split", "task_type"])
        assert sorted(per_split.index) == sorted(theirs["splits"])
        assert sorted(per_task.index) == sorted((s, t) for s, tasks in theirs["tasks"].items() for t in tasks)
        for split, row in per_split.iterrows():
            assert [row[n] for n in numbers] == pytest.approx([theirs["splits"][split][n] for n in numbers])
        for (split, task), row in per_task.iterrows():
            assert [row[n] for n in numbers] == pytest.approx([theirs["tasks"][split][task][n] for n in numbers])
        everything = summary_table([{**r, "split": "all"} for r in records]).loc["all"]
        assert [everything[n] for n in numbers] == pytest.approx([theirs["all"][n] for n in numbers])


def test_nb06_reruns_with_a_smaller_limit(tmp_path):
    """Issue 19: 06 run again into the same out_dir with a smaller limit reads only the games it selects
    (the folder keeps the larger run's records; the summary, the tables and the checks agree)."""
    import papermill

    from alfrl.eval.evaluate import read_records

    parameters = {**dict(NOTEBOOKS)["06_evaluation.ipynb"], "out_dir": str(tmp_path / "eval"), "evaluate_base": False,
                  "checkpoints": {"warm start": "warmstart_epoch"},
                  "rl_adapter": None, "max_steps": 2, "batch": 3}
    for limit in (3, 2):
        out = tmp_path / f"06_limit{limit}.ipynb"
        papermill.execute_notebook(str(NOTEBOOK_DIR / "06_evaluation.ipynb"), str(out),
                                   parameters={**parameters, "limit": limit}, kernel_name="python3",
                                   cwd=str(NOTEBOOK_DIR), progress_bar=False)
        cells = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"]
        errors = [o for c in cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, errors
    folder = tmp_path / "eval" / "warm start"
    assert len(read_records(folder)) == 3
    assert json.loads((folder / "summary.json").read_text())["all"]["games"] == 2
    text = "".join(o.get("text", "") for c in cells for o in c.get("outputs", []))
    assert "warm start: 2 selected games (3 stored" in text


# --- 08_long_games: the learner's tool results are the package's, under every protocol ---------------------

@pytest.mark.parametrize("actions", ["every", "first", "local"])
@pytest.mark.parametrize("valid", [True, False])
def test_nb08_tool_result_is_alfrls_tool_content(actions, valid):
    from alfrl.agent.models import load_tokenizer
    from alfrl.agent.protocol import ChatFormat, actions_block
    tool_result = notebook_definitions("08_long_games.ipynb", "tool_result",
                                       {"actions_block": actions_block})["tool_result"]
    room = ["go to drawer 1", "go to sinkbasin 1", "examine drawer 1", "inventory", "look", "open drawer 1"]
    fmt = ChatFormat(load_tokenizer(), actions=actions)
    assert tool_result("Action executed.", " The drawer 1 is closed. ", room, actions, valid) == \
        fmt.tool_content("Action executed.", " The drawer 1 is closed. ", room, valid)
