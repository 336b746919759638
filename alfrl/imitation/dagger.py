"""DAgger: the expert labels the states the policy reaches itself, and the warm start learns from them.

A warm start cloned from the expert's walkthroughs has only seen the states the expert passes
through. Its first mistake (the wrong receptacle, the wrong object) takes it somewhere the
expert never was, where it has no example to copy, so one error leads to the next. DAgger
(Ross, Gordon and Bagnell, 2011) closes that gap: play the current policy, ask the expert what
it would do in every state the policy visited, add those labels to the data and fine-tune
again. ALFWorld's handcoded expert can answer from any state: it searches receptacles in an
order set by the object's type and remembers what it saw, so it can be driven along the
policy's own actions (:func:`expert_labels`).

A labelled turn becomes a target: the policy's own conversation up to that turn, then the
expert's reply, the loss on the expert's tokens only (:func:`dagger_examples`). Where the policy
already did what the expert would, its own reply is the target, in place. One episode's targets
share its history, so the fine-tune runs the episode once and each expert reply branches off it.

``python -m alfrl dagger --out runs/dagger --rounds 2 --games-per-round 64`` plays, labels and
fine-tunes round after round (``--resume`` continues an interrupted run), writing
``OUT/round_NN/adapter`` and one line per round to ``OUT/metrics.jsonl``.

Taught in notebook 02 (why imitating an expert is not enough, in its imitation section).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm.auto import tqdm

from alfrl.agent.models import BUNDLED, DEFAULT_WARM_START
from alfrl.agent.protocol import ChatFormat, policy_format
from alfrl.base.checkpoint import append_jsonl, read_jsonl
from alfrl.imitation.label_kinds import walkthrough_kinds, weigh_branches
from alfrl.imitation.sft import fit
from alfrl.rl.scripted import tool_call
from alfrl.rl.trajectory import Trajectory
from alfrl.world.expert import MAX_EXPERT_STEPS, _move_as_put


class ExpertOracle:
    """ALFWorld's handcoded expert, kept beside a game that someone else plays: ``label`` is the
    expert's action in the current state, and ``step(action)`` plays any action (the policy's own)
    while the expert watches its outcome as if it had chosen it, so it knows what was seen and what
    is held. ``label`` is None once the expert has given up (no subgoal left, or past its step limit)
    or the game is won."""

    def __init__(self, game_file: str | Path, seed: int = 0, engine=None):
        from alfworld.agents.expert import HandCodedTWAgent

        from alfrl.world.engine import make_fast_engine

        self.engine = engine or make_fast_engine(facts=True)
        random.seed(seed)  # the expert breaks ties with the global random, as in alfrl.world.expert.solve
        self.engine.load(str(game_file))
        self.state = self.engine.reset()
        self.expert = HandCodedTWAgent(max_steps=MAX_EXPERT_STEPS)
        self.expert.reset(str(game_file))
        _move_as_put(self.expert.policy)
        self.expert.observe(self.state["feedback"])
        self.label: str | None = "look"  # the expert's first command, as in its walkthroughs
        self.won = False

    def step(self, action: str | None) -> bool:
        """Play ``action``; False (and nothing changes, the label included) when it is None or not
        admissible, as the env treats it."""
        if self.won or action is None or action.strip() not in self.state["admissible_commands"]:
            return False
        action = action.strip()
        self.state, _, _ = self.engine.step(action)
        self.won = bool(self.state["won"])
        if self.won or self.label is None:
            self.label = None
            return True
        try:
            label = self.expert.act(self.state, 0, self.won, action)
        except Exception:  # HandCodedAgentFailed / HandCodedAgentTimeout: it has nothing left to try
            self.label = None
            return True
        # what alfrl.world.expert.solve (and ALFWorld's AlfredExpert) does with an inadmissible pick
        self.label = label if label in self.state["admissible_commands"] else "look"
        return True


def expert_labels(game_file: str | Path, actions: list[str | None], seed: int = 0, engine=None) -> list[str | None]:
    """The expert's action in each state a list of actions passes through: ``labels[t]`` is what the
    expert would do before ``actions[t]``, for every t (:class:`ExpertOracle` driven along them).

    An action that is None (a reply that broke the format) or not admissible changes nothing, so the
    next label is the same. With ``actions`` the expert's own walkthrough (solved with the same
    ``seed``), the labels are that walkthrough.
    """
    oracle = ExpertOracle(game_file, seed, engine)
    labels: list[str | None] = []
    for action in actions:
        labels.append(oracle.label)
        oracle.step(action)
    return labels


def expert_finish(game_file: str | Path, actions: list[str | None], seed: int = 0, max_steps: int = 50,
                  engine=None) -> list[str] | None:
    """The expert's own actions from the state ``actions`` lead to, until it wins (returned), or None
    if it gives up or needs more than ``max_steps``: whether that state could still be won."""
    oracle = ExpertOracle(game_file, seed, engine)
    for action in actions:
        oracle.step(action)
    finish: list[str] = []
    while not oracle.won:
        if oracle.label is None or len(finish) >= max_steps:
            return None
        finish.append(oracle.label)
        oracle.step(oracle.label)
    return finish


@dataclass(frozen=True)
class Branch:
    """The expert's reply at one turn, in place of the policy's: it follows the first ``at`` tokens of
    the example it belongs to, and every one of its tokens is a target."""

    at: int
    target: list[int]
    turn: int
    weight: float = 1.0
    """How much each of its tokens counts in the loss (1 as any target; ``--weight-labels`` sets it by
    the label's action kind, :mod:`alfrl.imitation.label_kinds`)."""


@dataclass
class Example:
    """A sequence to learn from: tokens, and the spans ``[start, end)`` whose tokens are the targets.

    A DAgger example is a tree: ``tokens`` is the policy's own episode (its trunk), ``spans`` the
    replies that are already the expert's, and each of ``branches`` the expert's reply at another
    turn. The trunk runs through the model once and every branch reads its keys and values up to
    its turn (:func:`alfrl.imitation.sft.tree_nll`); :meth:`sequences` spells the same targets out as plain
    sequences, each with its whole history."""

    game_id: str
    tokens: list[int]
    spans: list[tuple[int, int]]
    turns: list[int] = field(default_factory=list)
    """The turn each span labels."""
    branches: list[Branch] = field(default_factory=list)
    weight: float = 1.0
    """How much each of its spans' tokens counts in the loss (a branch spelled out as a sequence keeps its weight)."""

    @property
    def mask(self) -> list[int]:
        """1 on the trunk's own targets (the spans); the branches' targets are not in the trunk."""
        mask = [0] * len(self.tokens)
        for start, end in self.spans:
            mask[start:end] = [1] * (end - start)
        return mask

    @property
    def target_tokens(self) -> int:
        return sum(end - start for start, end in self.spans) + sum(len(b.target) for b in self.branches)

    @property
    def target_weight(self) -> float:
        """The targets' summed weight: what the loss is averaged over (``target_tokens`` when every weight is 1)."""
        return (self.weight * sum(end - start for start, end in self.spans)
                + sum(b.weight * len(b.target) for b in self.branches))

    def sequences(self) -> list["Example"]:
        """The same targets as plain sequences: the trunk with its spans (if any), then one sequence per
        branch, its history then the expert's reply."""
        own = [Example(self.game_id, self.tokens, self.spans, self.turns, weight=self.weight)] if self.spans else []
        return own + [Example(self.game_id, self.tokens[:b.at] + b.target, [(b.at, b.at + len(b.target))], [b.turn],
                              weight=b.weight) for b in self.branches]

    def to_json(self) -> dict:
        """Weights are not stored: they are set when the rounds' examples are aggregated."""
        return {"game_id": self.game_id, "tokens": self.tokens, "spans": [list(s) for s in self.spans],
                "turns": self.turns, "branches": [[b.at, b.target, b.turn] for b in self.branches]}

    @classmethod
    def from_json(cls, data: dict) -> "Example":
        return cls(data["game_id"], data["tokens"], [tuple(s) for s in data["spans"]], data.get("turns", []),
                   [Branch(at, list(target), turn) for at, target, turn in data.get("branches", [])])


def reply_spans(mask: list[int]) -> list[tuple[int, int]]:
    """The runs of 1s in a trajectory's mask: one ``[start, end)`` per reply, in turn order."""
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def dagger_examples(trajectory: Trajectory, labels: list[str | None], fmt: ChatFormat,
                    max_branches: int | None = None, seed: int = 0) -> list[Example]:
    """What one played trajectory and the expert's label at each of its turns teach: one example (or
    none, when no turn is labelled).

    Its trunk is the trajectory, with the loss on the replies that are exactly the expert's reply to
    the same state (none may be). Every other labelled turn gives a branch: the expert's reply (its
    tool call and the end-of-turn token) after the conversation up to that turn, the loss on that
    reply alone. ``max_branches`` keeps a seeded sample of the branches. Turns labelled None give
    nothing. The trunk ends at its last target or branch point: later tokens condition nothing.
    """
    spans = reply_spans(trajectory.mask)
    if len(spans) != len(trajectory.turns) or len(labels) != len(trajectory.turns):
        raise ValueError(f"{trajectory.game_id}: {len(trajectory.turns)} turns, {len(spans)} replies in the mask "
                         f"and {len(labels)} labels; they must match")
    end_of_turn = fmt.encode(fmt.closing)[0]
    tokens = trajectory.tokens
    own, own_turns, branches = [], [], []
    for turn, ((start, end), label) in enumerate(zip(spans, labels)):
        if label is None:
            continue
        target = fmt.encode(tool_call(label)) + [end_of_turn]
        if tokens[start:end] == target:
            own.append((start, end))
            own_turns.append(turn)
        else:
            branches.append(Branch(start, target, turn))
    if max_branches is not None and len(branches) > max_branches:
        keep = sorted(random.Random(f"{seed}/{trajectory.game_id}/{trajectory.branch}").sample(
            range(len(branches)), max_branches))
        branches = [branches[i] for i in keep]
    if not own and not branches:
        return []
    trunk = max([end for _, end in own] + [b.at for b in branches])
    return [Example(trajectory.game_id, tokens[:trunk], own, own_turns, branches)]


def agreement(trajectory: Trajectory, labels: list[str | None]) -> tuple[int, int]:
    """(turns whose action is the expert's label, labelled turns): how often the policy already does
    what the expert would."""
    labelled = [(t.action, label) for t, label in zip(trajectory.turns, labels) if label is not None]
    return sum(action is not None and action.strip() == label for action, label in labelled), len(labelled)


@dataclass
class DaggerConfig:
    """DAgger's settings; each field is a ``--flag`` of ``python -m alfrl dagger``."""

    out: str = "runs/dagger"
    """Run folder: config.json, metrics.jsonl (one line per round), round_NN/{labelled.jsonl, adapter}."""
    resume: bool = False
    """Continue the run in --out: finished rounds are kept, an unfinished one goes on from its last game."""
    overwrite: bool = False
    """Replace an existing run folder instead of refusing."""
    model: str = BUNDLED
    """A hub id, a local model directory, or "bundled"."""
    device: str = "auto"
    """"auto" (a CUDA GPU if there is one, else the CPU), or "cpu", "cuda", "cuda:1", "mps"."""
    dtype: str = "auto"
    """Model dtype: "auto" (bfloat16 on a CUDA GPU, float32 elsewhere), or "float32", "bfloat16"."""
    init_adapter: str | None = DEFAULT_WARM_START
    """The policy of the first round: a saved adapter (a folder, or a shipped one: "warmstart_epoch"; the earlier
    "warmstart_expert", "warmstart" once rebuilt); None: a fresh one."""
    data_dir: str | None = None
    """Games folder (default: the committed generated games)."""
    split: str = "train"
    """Split the games come from (never an evaluation split)."""
    rounds: int = 2
    """Rounds of play, label, aggregate and fine-tune."""
    games_per_round: int = 64
    """Games the policy plays each round, one episode each, new games every round."""
    expert_games: int = 150
    """Expert walkthroughs in the aggregate from the start (the behaviour-cloning data; 0: none)."""
    max_expert_steps: int | None = None
    """Only walkthroughs of at most this many steps among the expert games."""
    max_receptacles: int | None = None
    """Only rooms with at most this many receptacles (played and expert games alike)."""
    max_steps: int = 20
    """Turns per episode when the policy plays (room to search) and when walkthroughs are rendered."""
    max_new_tokens: int = 48
    """Tokens per reply (a tool call takes about 30)."""
    max_trajectory_tokens: int = 12000
    """Token budget of an episode."""
    temperature: float = 0.6
    """The policy's sampling temperature when it plays (0: greedy)."""
    games_per_batch: int = 4
    """Games decoded together when the policy plays."""
    max_branches: int = 8
    """Labelled turns kept per episode where the policy's reply differs from the expert's (a seeded sample)."""
    weight_labels: bool = False
    """Weight each expert label the policy did not follow by its action kind, so each kind counts as in the
    games' walkthroughs (alfrl.imitation.label_kinds); off: every label counts 1."""
    epochs: int = 2
    """Passes over the aggregate each round."""
    lr: float = 1e-4
    """Adam learning rate."""
    batch_size: int = 4
    """Sequences per optimizer step."""
    micro_batch_tokens: int = 1
    """Padded tokens per forward/backward pass for the expert's walkthroughs; 1: each alone (faster on a CPU,
    alfrl.imitation.sft.SFTConfig.micro_batch_tokens). Trees run one at a time in any case."""
    bf16: bool = False
    """bfloat16 autocast for the fine-tuning passes (fast only on a CPU with native bf16; alfrl.agent.precision)."""
    share_prefix: bool = True
    """Run each episode through the model once in the fine-tune, its branches reading its keys and values
    (alfrl.imitation.sft.tree_nll): the same loss and gradient as every branch with its whole history, far fewer tokens."""
    seed: int = 0
    """Seeds the game order, the sampling, the branch sample and the fine-tuning order."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""

    def __post_init__(self):
        if self.rounds < 1 or self.games_per_round < 1:
            raise ValueError(f"rounds and games_per_round must be >= 1 (got {self.rounds}, {self.games_per_round})")
        if self.max_branches < 0 or self.expert_games < 0:
            raise ValueError(f"max_branches and expert_games must be >= 0 (got {self.max_branches}, {self.expert_games})")


RESUMABLE = ("out", "resume", "overwrite", "threads", "device", "micro_batch_tokens")
"""Fields a resumed run may change: they do not change what any round plays or learns."""


def round_dir(out: Path, r: int) -> Path:
    return out / f"round_{r:02d}"


def dagger(config: DaggerConfig | None = None, progress: bool = True) -> Path:
    """Run DAgger's rounds (or the rest of them, with ``config.resume``); returns the last round's adapter."""
    from alfrl.agent.models import torch_threads
    from alfrl.base.rundir import DAGGER, check_resumed_config, prepare_output_dir

    config = config or DaggerConfig()
    out = prepare_output_dir(config.out, DAGGER, overwrite=config.overwrite, resume=config.resume).path
    check_resumed_config(out, config, RESUMABLE)
    with torch_threads(config.threads):
        return _dagger(config, out, progress)


def _dagger(config: DaggerConfig, out: Path, progress: bool) -> Path:
    import torch

    from alfrl.agent.models import LoraSpec, load_policy, save_adapter
    from alfrl.world.games import load_games

    done = [r for r in range(1, config.rounds + 1) if (round_dir(out, r) / "adapter").is_dir()]
    last = max(done, default=0)
    start = str(round_dir(out, last) / "adapter") if last else config.init_adapter
    torch.manual_seed(config.seed)
    policy = load_policy(config.model, lora=start or LoraSpec(), dtype=config.dtype, device=config.device)
    fmt = policy_format(policy)
    games = load_games(config.split, config.data_dir, seed=config.seed, max_receptacles=config.max_receptacles)
    needed = config.rounds * config.games_per_round
    if len(games) < needed:
        raise ValueError(f"{config.rounds} rounds of {config.games_per_round} games need {needed} {config.split} games; "
                         f"the data has {len(games)}: make more (python -m alfrl generate) or lower --games-per-round")
    aggregate = expert_examples(policy, config, progress)
    walkthroughs = walkthrough_kinds(games, config.max_expert_steps)  # what --weight-labels weighs the labels toward
    labelled_examples: list[tuple[Example, list[str | None]]] = []  # every round's examples with their labels
    for r in range(1, config.rounds + 1):
        folder = round_dir(out, r)
        labelled = play_and_label(policy, fmt, games[(r - 1) * config.games_per_round:r * config.games_per_round],
                                  config, folder / "labelled.jsonl", r, progress)
        new = [(Example.from_json(e), line["labels"]) for line in labelled for e in line["examples"]]
        labelled_examples += new
        aggregate += [example for example, _ in new]
        if r <= last:
            continue
        weights = weigh_branches(labelled_examples, walkthroughs) if config.weight_labels else None
        tick = time.perf_counter()
        (folder / "sft_metrics.jsonl").unlink(missing_ok=True)  # an interrupted fine-tune starts again
        steps = fit(policy, aggregate, replace(config, seed=config.seed + r),  # another order each round
                    folder / "sft_metrics.jsonl", None, progress, desc=f"round {r}: fine-tune",
                    share_prefix=config.share_prefix)
        partial = folder / "adapter.partial"
        save_adapter(policy, partial)
        partial.rename(folder / "adapter")
        append_jsonl(out / "metrics.jsonl", [round_metrics(r, labelled, aggregate, steps, time.perf_counter() - tick,
                                                           weights)])
    return round_dir(out, config.rounds) / "adapter"


def expert_examples(policy, config: DaggerConfig, progress: bool) -> list[Example]:
    """The expert's walkthroughs rendered as the policy's rollouts would be, every reply a target."""
    from alfrl.imitation.sft import SFTConfig, expert_trajectories
    from alfrl.world.games import load_games

    if not config.expert_games:
        return []
    games = load_games(config.split, config.data_dir, seed=config.seed + 1, limit=config.expert_games,
                       max_expert_steps=config.max_expert_steps, max_receptacles=config.max_receptacles)
    render = SFTConfig(max_steps=config.max_steps, max_trajectory_tokens=config.max_trajectory_tokens)
    return [Example(t.game_id, t.tokens, reply_spans(t.mask), list(range(len(t.turns))))
            for t in expert_trajectories(policy, games, render, progress)]


def play_and_label(policy, fmt: ChatFormat, games: list, config: DaggerConfig, path: Path, r: int,
                   progress: bool) -> list[dict]:
    """Round ``r``'s episodes, one per game, each labelled by the expert; one JSON line per game in
    ``path`` (its actions, the labels, the outcome and its examples), appended as each batch of games
    ends, so an interrupted round goes on from there. Returns every line of the round."""
    from alfrl.rl.rollout import RolloutConfig, rollout_games

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = read_jsonl(path, repair=True) if path.exists() else []
    seen = {line["game_id"] for line in lines}
    todo = [g for g in games if g.game_id not in seen]
    rollout = RolloutConfig(k=1, max_steps=config.max_steps, max_new_tokens=config.max_new_tokens,
                            max_trajectory_tokens=config.max_trajectory_tokens, temperature=config.temperature,
                            seed=config.seed * 1000 + r)
    bar = tqdm(total=len(games), initial=len(games) - len(todo), desc=f"round {r}: play and label", unit="game",
               disable=not progress)
    policy.model.eval()
    for start in range(0, len(todo), config.games_per_batch):
        chunk = todo[start:start + config.games_per_batch]
        new = []
        for game, trajectory in zip(chunk, rollout_games(policy, chunk, rollout, fmt=fmt)):
            labels = expert_labels(game.path, [t.action for t in trajectory.turns], seed=config.seed)
            agree, labelled = agreement(trajectory, labels)
            examples = dagger_examples(trajectory, labels, fmt, config.max_branches, config.seed)
            new.append({"game_id": game.game_id, "task_type": game.task_type, "won": trajectory.won,
                        "steps": trajectory.steps, "invalid": trajectory.invalid, "agree": agree, "labelled": labelled,
                        "actions": [t.action for t in trajectory.turns], "labels": labels,
                        "examples": [e.to_json() for e in examples]})
        append_jsonl(path, new)
        lines += new
        bar.update(len(chunk))
        bar.set_postfix(won=f"{sum(line['won'] for line in lines)}/{len(lines)}",
                        agree=f"{sum(line['agree'] for line in lines) / max(1, sum(line['labelled'] for line in lines)):.2f}")
    bar.close()
    return lines


def round_metrics(r: int, labelled: list[dict], aggregate: list[Example], steps: int, seconds: float,
                  label_weights: dict[str, float] | None = None) -> dict:
    """One round in a line: how the policy played (before this round's fine-tune), what it learned from, and
    the labels' weights by kind (with --weight-labels)."""
    return {"round": r, "games": len(labelled), "won": sum(line["won"] for line in labelled),
            "invalid_per_episode": sum(line["invalid"] for line in labelled) / len(labelled),
            "agreement": sum(line["agree"] for line in labelled) / max(1, sum(line["labelled"] for line in labelled)),
            "new_examples": sum(len(line["examples"]) for line in labelled), "aggregate_examples": len(aggregate),
            "aggregate_targets": sum(len(e.spans) + len(e.branches) for e in aggregate),
            "aggregate_target_tokens": sum(e.target_tokens for e in aggregate),
            "sft_steps": steps, "fine_tune_seconds": seconds,
            **({"label_weights": label_weights} if label_weights is not None else {})}
