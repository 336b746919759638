"""DAgger: the expert's labels along any actions, the training sequences made from them, and a run
that aggregates its rounds and resumes where it was interrupted."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from alfrl.agent.protocol import ChatFormat
from alfrl.imitation.dagger import Branch, DaggerConfig, Example, dagger, dagger_examples, expert_finish, expert_labels, reply_spans
from alfrl.rl.rollout import RolloutConfig, rollout_group
from alfrl.rl.scripted import ScriptedSession, tool_call
from alfrl.world.expert import replay, solve


def test_labels_on_the_experts_own_states_are_its_walkthrough(tiny_games):
    """Driven along its own walkthrough (solved in ALFWorld's engine with the same seed), the expert
    labels every state with the walkthrough's next command: one game of each task type."""
    for game in tiny_games.games("train"):
        walkthrough = solve(game.path, seed=3)
        assert walkthrough is not None
        assert expert_labels(game.path, walkthrough, seed=3) == walkthrough, game.task_type


def test_the_expert_labels_a_detour_and_its_labels_lead_back_to_a_win(tiny_games):
    """After a wrong receptacle and a broken reply, the label is unchanged by the broken reply
    (the game did not move), and following the labels from there wins the game."""
    game = next(g for g in tiny_games.games("train") if g.task_type == "pick_and_place_simple")
    wrong = next(a for a in game_admissible(game) if a.startswith("go to") and a not in game.walkthrough)
    actions = ["look", wrong, None, "fly to the moon"]
    labels = expert_labels(game.path, actions + [None])
    assert labels[0] == "look" and labels[2] == labels[3] == labels[4]
    finish = expert_finish(game.path, actions)
    assert finish and finish[0] == labels[4]
    assert replay(game.path, [a for a in actions if a] + finish).won, actions + finish
    assert expert_finish(game.path, game.walkthrough) == []  # won already


def game_admissible(game) -> list[str]:
    from alfrl.world.engine import make_fast_engine
    engine = make_fast_engine()
    engine.load(str(game.path))
    engine.reset()
    state, _, _ = engine.step("look")
    return list(state["admissible_commands"])


def _scripted(policy, game, replies: list[str]):
    fmt = ChatFormat(policy.tokenizer)
    config = RolloutConfig(k=1, max_steps=len(replies), max_new_tokens=10_000, workers=0)
    (trajectory,) = rollout_group(policy, game, config, fmt=fmt, session=ScriptedSession(fmt, {0: replies}))
    return trajectory


def _played(policy, game):
    """An episode with a right action, a wrong one, a broken reply and one more, and the expert's labels."""
    wrong = next(a for a in game_admissible(game) if a.startswith("go to") and a not in game.walkthrough)
    replies = [tool_call("look"), tool_call(wrong), "I will look around.", tool_call("inventory")]
    played = _scripted(policy, game, replies)
    labels = expert_labels(game.path, [t.action for t in played.turns])
    assert labels[0] == "look" and labels[1] != wrong and labels[2] == labels[3]
    return replies, played, labels


def test_examples_are_the_policys_history_then_the_experts_reply_token_for_token(policy, tiny_games):
    """A played episode (a right action, a wrong one, a broken reply): the turns the expert agrees with
    stay targets in place; each other turn is a branch that is, token for token, the episode replayed
    up to that turn with the expert's reply there, its loss on that reply alone. On the expert's own
    walkthrough the one example is the supervised warm start's: the trajectory with its own mask."""
    fmt = ChatFormat(policy.tokenizer)
    game = next(g for g in tiny_games.games("train") if g.task_type == "pick_and_place_simple")
    replies, played, labels = _played(policy, game)
    (tree,) = dagger_examples(played, labels, fmt)
    spans = reply_spans(played.mask)
    assert len(spans) == 4
    assert tree.spans == [spans[0]] and tree.turns == [0] and [b.turn for b in tree.branches] == [1, 2, 3]
    assert tree.tokens == played.tokens[:spans[3][0]]  # the trunk ends where the last branch starts
    own, *branches = tree.sequences()
    (start, end), n = spans[0], len(tree.tokens)
    assert own.tokens == tree.tokens and own.mask == [0] * start + [1] * (end - start) + [0] * (n - end)
    assert tree.target_tokens == sum(own.mask) + sum(sum(b.mask) for b in branches)
    for branch in branches:
        turn = branch.turns[0]
        replayed = _scripted(policy, game, replies[:turn] + [tool_call(labels[turn])])
        assert branch.tokens == replayed.tokens
        assert branch.mask == [0] * spans[turn][0] + [1] * (len(branch.tokens) - spans[turn][0])
        assert branch.mask == [0] * spans[turn][0] + replayed.mask[spans[turn][0]:]
    (two,) = dagger_examples(played, labels, fmt, max_branches=2)
    assert len(two.branches) == 2 and dagger_examples(played, labels, fmt, max_branches=2) == [two]
    assert dagger_examples(played, [None] * 4, fmt) == []  # nothing labelled, nothing to learn

    walkthrough = list(game.walkthrough)
    expert = _scripted(policy, game, [tool_call(a) for a in walkthrough])
    (only,) = dagger_examples(expert, walkthrough, fmt)
    assert not only.branches and only.tokens == expert.tokens[:len(only.tokens)]
    assert only.mask == expert.mask[:len(only.tokens)] and sum(only.mask) == sum(expert.mask)


def test_a_tree_trains_as_its_sequences_do(policy, tiny_games):
    """The trunk run once with its branches reading its keys and values gives the loss and the LoRA
    gradient of every branch run with its whole history (float32; the adapter moved off zero so that
    every LoRA weight has a gradient)."""
    import copy

    import torch

    from alfrl.imitation.sft import nll_loss
    from alfrl.rl.prefix import can_share

    fmt = ChatFormat(policy.tokenizer)
    game = next(g for g in tiny_games.games("train") if g.task_type == "pick_and_place_simple")
    _, played, labels = _played(policy, game)
    (tree,) = dagger_examples(played, labels, fmt)
    p = copy.deepcopy(policy)
    torch.manual_seed(1)
    lora = [q for q in p.model.parameters() if q.requires_grad]
    with torch.no_grad():
        for q in lora:
            q.add_(torch.randn_like(q) * 0.02)
    assert can_share(p.model)
    results = []
    for share in (True, False):
        p.model.zero_grad(set_to_none=True)
        loss, tokens = nll_loss(p.model, [tree], share_prefix=share)
        results.append((loss, tokens, [q.grad.clone() for q in lora]))
    (shared, n, grads), (plain, m, plain_grads) = results
    assert n == m == tree.target_tokens and shared == pytest.approx(plain, rel=1e-5)
    norm = torch.cat([g.flatten() for g in plain_grads]).norm()
    assert norm > 0
    assert torch.cat([(a - b).flatten() for a, b in zip(grads, plain_grads)]).norm() < 1e-4 * norm


@pytest.mark.parametrize("weights", [(2.0, 0.5, 1.0)])
def test_weighted_labels_give_the_weighted_mean_of_each_sequences_loss(policy, tiny_games, weights):
    """Branch weights (--weight-labels): the tree's loss is each target sequence's summed NLL times its
    weight over the summed weights of the target tokens, computed here from each sequence's own loss,
    and the tree run once gives what its weighted sequences give."""
    import torch

    from alfrl.imitation.sft import nll_loss

    fmt = ChatFormat(policy.tokenizer)
    game = next(g for g in tiny_games.games("train") if g.task_type == "pick_and_place_simple")
    _, played, labels = _played(policy, game)
    (tree,) = dagger_examples(played, labels, fmt)
    tree.branches = [replace(b, weight=w) for b, w in zip(tree.branches, weights)]
    own, *branches = tree.sequences()
    assert [b.weight for b in branches] == list(weights) and own.weight == 1.0
    with torch.no_grad():
        summed = [(loss * n, n, s.weight) for s in [own, *branches]
                  for loss, n in [nll_loss(policy.model, [Example(s.game_id, s.tokens, s.spans, s.turns)],
                                           backward=False)]]
    by_hand = sum(w * nll for nll, _, w in summed) / sum(w * n for _, n, w in summed)
    assert tree.target_weight == pytest.approx(sum(w * n for _, n, w in summed))
    for share in (True, False):
        with torch.no_grad():
            loss, tokens = nll_loss(policy.model, [tree], backward=False, share_prefix=share)
        assert tokens == tree.target_tokens and loss == pytest.approx(by_hand, rel=1e-5)
    zero = Example(tree.game_id, tree.tokens, [], [], [replace(tree.branches[0], weight=0.0)])
    assert nll_loss(policy.model, [zero], backward=False) == (0.0, len(tree.branches[0].target))  # no 0/0


def test_labels_are_weighted_so_each_kind_counts_as_in_the_walkthroughs():
    """kind_weights: a kind's share of the walkthroughs over its share of the labels, so the weighted labels
    have the walkthroughs' shares; weigh_branches sets each branch's weight from its turn's label."""
    from collections import Counter

    from alfrl.imitation.label_kinds import action_kind, kind_weights, weigh_branches

    assert [action_kind(a) for a in ("go to desk 1", "take pen 1 from desk 1", "move pen 1 to shelf 2")] == [
        "go to", "take", "move"]
    walkthroughs = Counter({"go to": 6, "take": 2, "move": 2})  # 60%, 20%, 20%
    labels = Counter({"go to": 8, "take": 1, "move": 1})  # 80%, 10%, 10%
    weights = kind_weights(walkthroughs, labels)
    assert weights == pytest.approx({"go to": 0.75, "take": 2.0, "move": 2.0})
    weighted = {k: labels[k] * w for k, w in weights.items()}
    assert {k: v / sum(weighted.values()) for k, v in weighted.items()} == pytest.approx({"go to": 0.6, "take": 0.2,
                                                                                          "move": 0.2})
    assert kind_weights(Counter({"go to": 1}), Counter({"go to": 1, "look": 1})) == {"go to": 2.0, "look": 0.0}
    with pytest.raises(ValueError, match="no reference actions"):
        kind_weights(Counter(), labels)
    example = Example("g", [1, 2, 3, 4], [], [], [Branch(1, [9], 0), Branch(2, [9], 1), Branch(3, [9], 2)])
    episode_labels = ["go to desk 1", "go to shelf 2", "take pen 1 from shelf 2"]
    assert weigh_branches([(example, episode_labels)], walkthroughs) == pytest.approx({"go to": 0.9, "take": 0.6})
    assert [b.weight for b in example.branches] == pytest.approx([0.9, 0.9, 0.6])
    assert example.target_weight == pytest.approx(2.4) and example.target_tokens == 3


def test_example_json_round_trip():
    example = Example("g", [5, 6, 7, 8], [(1, 3)], [2], [Branch(2, [9, 10], 3)])
    assert Example.from_json(json.loads(json.dumps(example.to_json()))) == example
    assert example.mask == [0, 1, 1, 0] and example.target_tokens == 4
    assert [e.tokens for e in example.sequences()] == [[5, 6, 7, 8], [5, 6, 9, 10]]
    assert [e.mask for e in example.sequences()] == [[0, 1, 1, 0], [0, 0, 1, 1]]


def test_label_kinds_count_every_label_and_the_branches_apart(tmp_path):
    """scripts/dagger_label_kinds.py: a label the policy already followed is a label but not a branch;
    an unlabelled turn is neither; walkthroughs longer than the limit are left out."""
    import lzma
    import subprocess
    import sys

    played = tmp_path / "round_01_played.jsonl"
    played.write_text(json.dumps({"actions": ["go to desk 1", "take pen 1 from desk 1", "look", None],
                                  "labels": ["go to desk 1", "go to shelf 2", None, "take pen 1 from shelf 2"]}) + "\n")
    pack = tmp_path / "train.jsonl.xz"
    with lzma.open(pack, "wt") as f:
        f.write(json.dumps({"walkthrough": ["go to shelf 2", "take pen 1 from shelf 2"]}) + "\n")
        f.write(json.dumps({"walkthrough": ["go to desk 1"] * 3}) + "\n")  # longer than --max-expert-steps 2
    table = subprocess.run([sys.executable, "scripts/dagger_label_kinds.py", str(played), "--walkthroughs", str(pack),
                            "--max-expert-steps", "2"], capture_output=True, text=True, check=True).stdout
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    assert rows["| actions"] == "| actions | 2 | 3 | 2 |"
    assert rows["| go to"] == "| go to | 50% (1) | 67% (2) | 50% (1) |"
    assert rows["| take"] == "| take | 50% (1) | 33% (1) | 50% (1) |"


def _config(tmp_path, tiny_games, name: str, **kw) -> DaggerConfig:
    return DaggerConfig(out=str(tmp_path / name), data_dir=str(tiny_games.root), rounds=2, games_per_round=2,
                        expert_games=1, max_steps=2, max_new_tokens=48, games_per_batch=1, epochs=1,
                        batch_size=4, max_branches=1, threads=1, **kw)


def _adapter_weights(folder):
    from safetensors.torch import load_file
    return load_file(str(folder / "adapter_model.safetensors"))


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # about 4 minutes on 2 cores: bash scripts/test.sh -m slow -k dagger
def test_a_run_aggregates_its_rounds_and_resumes_to_the_same_adapter(tmp_path, tiny_games):
    """Two rounds of two games; then the same run as an interruption in round 2 leaves it (its first
    game labelled, no adapter, no metrics line) resumed: the same episodes, labels, aggregate and
    final adapter as the run that was not interrupted. A resume with other settings is refused. The run
    weights its labels by kind (--weight-labels): each round logs the weights, and the resumed one the same."""
    import shutil

    whole = dagger(_config(tmp_path, tiny_games, "whole", weight_labels=True), progress=False).parent.parent
    rounds = _lines(whole / "metrics.jsonl")
    assert [r["round"] for r in rounds] == [1, 2] and all(r["games"] == 2 for r in rounds)
    assert rounds[1]["aggregate_examples"] == rounds[0]["aggregate_examples"] + rounds[1]["new_examples"]
    assert rounds[0]["aggregate_examples"] == 1 + rounds[0]["new_examples"]  # the walkthrough and the labels
    assert rounds[0]["new_examples"] == 2  # each episode gives one example: its own turns and its branches
    played = [_lines(whole / r / "labelled.jsonl") for r in ("round_01", "round_02")]
    assert len({line["game_id"] for lines in played for line in lines}) == 4  # new games every round
    branches = [sum(len(e["branches"]) for lines in played[:r] for line in lines for e in line["examples"])
                for r in (1, 2)]  # the labels the policy did not follow, aggregated up to each round
    assert [sorted(r["label_weights"]) != [] for r in rounds] == [n > 0 for n in branches]
    assert all(w >= 0 for r in rounds for w in r["label_weights"].values())

    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / "round_02" / "adapter")
    (cut / "round_02" / "labelled.jsonl").write_text(json.dumps(played[1][0]) + "\n")
    (cut / "metrics.jsonl").write_text(json.dumps(rounds[0]) + "\n")
    with pytest.raises(ValueError, match="other settings"):
        dagger(_config(tmp_path, tiny_games, "cut", resume=True, lr=3e-4, weight_labels=True), progress=False)
    resumed = dagger(_config(tmp_path, tiny_games, "cut", resume=True, weight_labels=True), progress=False)
    assert _lines(cut / "round_02" / "labelled.jsonl") == played[1]
    again = _lines(cut / "metrics.jsonl")
    assert [r["aggregate_examples"] for r in again] == [r["aggregate_examples"] for r in rounds]
    assert [r["label_weights"] for r in again] == [r["label_weights"] for r in rounds]
    mine, theirs = _adapter_weights(whole / "round_02" / "adapter"), _adapter_weights(resumed)
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert mine[key].allclose(theirs[key], atol=1e-6), key
