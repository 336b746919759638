"""ALFWorld's text engine, with the repeated work done once.

A profile of the standard setup (TextWorld's ``PddlEnv`` + ``AlfredDemangler`` +
``AlfredInfos``, as ``textworld.gym.register_games`` builds it) on a heat game:

* ``load`` and ``reset`` each translate the PDDL problem to SAS twice
  (``fast_downward.pddl2sas``: once as is, once optimised for a planner we never
  call): about 70% of a load + reset;
* every step re-parses, with TatSu, each admissible command's template and every
  grammar condition it meets (``_parse_and_convert``): about half of a step;
* every symbol expanded deep-copies its context (entity infos, mappings): most of
  the other half, and about 80% of a step once the parses are memoised.

:class:`FastPddlEnv` is a ``PddlEnv`` that keeps ALFWorld's domain, grammar and
state semantics and only removes that repetition: a game is compiled once per
process (parsed grammar + one SAS translation) and shared by every copy; the
TatSu parses are memoised and contexts copied shallowly (:class:`CachedGrammar`).
The equivalence tests replay whole walkthroughs of every task type in both engines
and compare every observation and admissible-command list.

Taught in notebook 01 (why the env is fast); 02 steps it.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from copy import deepcopy
from dataclasses import dataclass

import fast_downward
import textworld
from textworld.core import GameState
from textworld.envs.pddl import PddlEnv
from textworld.envs.pddl import logic as pddl_logic
from textworld.envs.pddl.textgen import (ConditionalSymbol, ContextSensitiveGrammar, EvalSymbol,
                                         ListSymbol, NonterminalSymbol, TerminalSymbol,
                                         _parse_and_convert, display_list)
from textworld.logic import Proposition, Rule, Variable


def copy_context(context: dict) -> dict:
    """``textgen.copy_context`` without deep copies.

    TextWorld deep-copies the variables (entity infos) and the mapping for every
    symbol it expands; derivation only reads them and adds keys to the copy's own
    dicts, so fresh dicts holding the same values derive the same text. This one
    change is most of a step's cost (the equivalence tests check the text).
    """
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


class CachedGrammar(ContextSensitiveGrammar):
    """TextWorld's context-sensitive grammar with its TatSu parses memoised.

    ``derive`` and ``replace`` follow ``ContextSensitiveGrammar`` line for line;
    only the parsing of a symbol string or a condition happens once per string.
    """

    # Parses depend only on the text, so every game in the process shares them.
    _symbols: dict[str, list] = {}
    _queries: dict[str, Rule] = {}

    def __init__(self, base: ContextSensitiveGrammar):
        super().__init__()
        self._rules = base._rules

    def _parse(self, text: str) -> list:
        if text not in self._symbols:
            self._symbols[text] = _parse_and_convert(text, rule_name="symbols")
        return deepcopy(self._symbols[text])

    def _query(self, expression: str) -> Rule:
        if expression not in self._queries:
            self._queries[expression] = Rule.parse_conjunctive_query(expression)
        return self._queries[expression]

    def replace(self, start):
        rules = self._rules.get(str(start))
        if not rules:
            return super().replace(start)  # raises TextWorld's CSGUnknownSymbolError

        def applicable(rule) -> bool:
            if not rule.condition:
                return True
            query = self._query(rule.condition)
            return any(True for _ in start.context["state"].all_assignments(query, start.context["mapping"]))

        chosen = [r for r in rules if applicable(r)][0]
        symbols = deepcopy(chosen.rhs)
        for symbol in symbols:
            symbol.context = copy_context(start.context)
        return symbols

    def _conditional(self, symbol: ConditionalSymbol) -> list:
        """``ConditionalSymbol.derive`` with a memoised query."""
        context = copy_context(symbol.context)
        contexts = [context]
        if symbol.given:
            contexts = []
            query = self._query(symbol.given)
            for mapping in context["state"].all_assignments(query, context["mapping"]):
                sub = copy_context(context)
                sub["variables"].update({ph.name: sub["entity_infos"][var.name] for ph, var in mapping.items()})
                sub["mapping"].update(mapping)
                contexts.append(sub)
        expression = symbol.expression
        saved, expression.context = expression.context, {}  # Symbol.copy deep-copies its context
        try:
            copies = []
            for c in contexts:  # Symbol.copy
                copy = deepcopy(expression)
                copy.context = copy_context(c)
                copies.append(copy)
            return copies
        finally:
            expression.context = saved

    def derive(self, start: str, context={}) -> str:
        derivation = self._parse(start)[::-1]
        for symbol in derivation:
            symbol.context = copy_context(context)
        derived = []
        while derivation:
            symbol = derivation.pop()
            if isinstance(symbol, TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, NonterminalSymbol):
                derivation += self.replace(symbol)[::-1]
            elif isinstance(symbol, ConditionalSymbol):
                derivation += self._conditional(symbol)[::-1]
            elif isinstance(symbol, ListSymbol):
                symbol.symbol.context = symbol.context
                inner = self._conditional(symbol.symbol) if isinstance(symbol.symbol, ConditionalSymbol) \
                    else symbol.symbol.derive()
                derivation += display_list(inner, symbol.context)[::-1]
            elif isinstance(symbol, EvalSymbol):
                derivation += symbol.derive()[::-1]
            else:
                raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
        return "".join(map(str, derived))


@dataclass
class CompiledGame:
    """What every copy of one game shares: its JSON, parsed logic and SAS translation."""

    data: dict
    logic: pddl_logic.GameLogic
    task: object
    sas: str
    init_facts: list


def compile_game(data: dict) -> CompiledGame:
    """Parse the grammar and translate the problem to SAS, once."""
    logic = pddl_logic.GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
    logic.grammar = CachedGrammar(logic.grammar)
    task, sas = fast_downward.pddl2sas(logic.domain, data["pddl_problem"])
    name2type = {o.name: o.type_name for o in task.objects}
    facts = []
    for atom in task.init:  # PddlState.__init__'s _atom2proposition
        if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
            if atom.predicate != "=":
                facts.append(Proposition(atom.predicate, [Variable(a, name2type[a]) for a in atom.args]))
        elif isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
            name = f"{atom.expression.value}"
            if atom.fluent.symbol != "total-cost" and not name.isdigit():
                facts.append(Proposition(name, [Variable(a, name2type[a]) for a in atom.fluent.args]))
    return CompiledGame(data=data, logic=logic, task=task, sas=sas, init_facts=facts)


class SharedPddlState(pddl_logic.PddlState):
    """``PddlState`` built from a :class:`CompiledGame` instead of translating the PDDL again."""

    def __init__(self, downward_lib, game: CompiledGame):
        from collections import Counter, defaultdict
        self._facts = defaultdict(set)
        self._vars_by_name = {}
        self._vars_by_type = defaultdict(set)
        self._var_counts = Counter()
        self._logic = game.logic
        self.downward_lib = downward_lib
        self.pddl_problem = game.data["pddl_problem"]
        self.task, self.sas = game.task, game.sas
        self._actions = {a.name: a for a in self.task.actions}
        for type_ in self.task.types:
            try:
                self._logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
            except ValueError:
                pass
        self.downward_lib.load_sas(self.sas.encode("utf-8"))
        self.name2type = {o.name: o.type_name for o in self.task.objects}
        self.add_facts(game.init_facts)
        atoms = (pddl_logic.Atom * self.downward_lib.get_state_size())()
        self.downward_lib.get_state(atoms)
        self.add_facts([f for f in (a.get_fact(self.name2type) for a in atoms) if not f.is_negation])

    def replan(self, infos):
        raise NotImplementedError("FastPddlEnv skips the planner's translation; use PddlEnv to replan")


_COMPILED: "OrderedDict[str, CompiledGame]" = OrderedDict()
COMPILED_CACHE_SIZE = 4
"""Compiled games kept per process: every copy of a game in the process shares one."""


def compiled(path: str) -> CompiledGame:
    """The compiled game of ``path``, from this process's small LRU cache.

    The cache is keyed by the file's content, not its name: games regenerated into the
    same folder (say, from a notebook) are compiled again instead of replaying the old ones.
    Reading and hashing a game file costs well under a millisecond.
    """
    with open(path, "rb") as f:
        raw = f.read()
    key = hashlib.sha256(raw).hexdigest()
    if key not in _COMPILED:
        _COMPILED[key] = compile_game(json.loads(raw))
        while len(_COMPILED) > COMPILED_CACHE_SIZE:
            _COMPILED.popitem(last=False)
    _COMPILED.move_to_end(key)
    return _COMPILED[key]


class FastPddlEnv(PddlEnv):
    """TextWorld's ``PddlEnv`` over compiled games: same observations, less repeated work."""

    def load(self, path: str) -> None:
        game = compiled(str(path))
        self._game_file = str(path)
        self._game = game
        self._game_data = game.data
        self.walkthrough = game.data.get("walkthrough")
        self._logic = game.logic
        self._pddl_state = SharedPddlState(self.downward_lib, game)
        self._fresh = True  # the state just built is the initial state: reset can use it
        self._entity_infos = self._get_entity_infos()

    def step(self, command: str):
        self._fresh = False
        return super().step(command)

    def reset(self):
        # PddlEnv.reset, with the shared state instead of a fresh translation.
        if not self._fresh:
            self._pddl_state = SharedPddlState(self.downward_lib, self._game)
        self._fresh = False
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts), "variables": {},
                   "mapping": {}, "entity_infos": self._entity_infos}
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        if "walkthrough" in self.request_infos.extras:
            self.state["extra.walkthrough"] = self.walkthrough
        return self.state


def make_fast_engine(facts: bool = False) -> textworld.core.Environment:
    """The fast engine wrapped exactly like :func:`alfrl.world.expert.make_engine` wraps ``PddlEnv``."""
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(admissible_commands=True, won=True, feedback=True, facts=facts,
                               extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(FastPddlEnv(infos), shuffle=False))
