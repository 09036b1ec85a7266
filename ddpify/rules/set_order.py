"""A set's iteration order numbers the data differently on each rank (DDP227).

Python salts the hash of str and bytes per process (PYTHONHASHSEED), so a set of strings
iterates in another order in each process. `chars = list(set(text))`, `enumerate(set(words))`
or `for word in set(tokens): vocab[word] = len(vocab)` then give each rank its own numbering
of the same vocabulary (or classes): token 5 is one word on rank 0 and another on rank 1, the
ranks train the same embedding rows on different words, and DDP averages their gradients. It
runs, silently wrong. Reported, not rewritten: sorting changes the original's order, which for
a set of numbers was the same in every run.
"""
from collections.abc import Iterator
from typing import Optional

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP227", Severity.WARNING, "a set's order numbers the data differently on each rank",
         "Python salts the hash of strings per process, so a set of strings iterates in another "
         "order in each process: `list(set(text))`, `enumerate(set(words))` or `for w in "
         "set(tokens): vocab[w] = len(vocab)` give each rank its own numbering of the same "
         "vocabulary or classes. The ranks then train the same embedding rows (or output "
         "classes) on different items and DDP averages their gradients: it runs, silently wrong.",
         "Sort the set (`sorted(set(...))`): every rank, and every run, gets the same order."),
)

SET_MAKERS = frozenset({"builtins.set", "builtins.frozenset"})
# Calls whose result keeps the order of the iterable they are given.
ORDERED_CONSUMERS = frozenset({"builtins.list", "builtins.tuple", "builtins.enumerate", "builtins.zip",
                               "numpy.array", "numpy.asarray", "torch.tensor", "builtins.dict.fromkeys"})
# Calls whose result does not depend on the order of what they are given.
ORDER_FREE = frozenset({"builtins.sorted", "builtins.set", "builtins.frozenset", "builtins.len", "builtins.sum",
                        "builtins.min", "builtins.max", "builtins.any", "builtins.all", "collections.Counter"})
# What makes numbers, whose hash (and so a set's order) is the same in every process.
_NUMBER_METHODS = frozenset({"tolist", "unique", "numpy", "item", "keys_as_ints"})
_NUMBER_CALLS = frozenset({"int", "float", "range", "len", "round"})


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Report each place a set of items that may be strings is read in its iteration order
    to number or list them: a list/tuple/enumerate/zip/array of it, a list or dict
    comprehension over it, or a for loop over it that appends or numbers (`len(...)`)."""
    sets = _Sets(facts)
    reported: set[cst.CSTNode] = set()
    for where, items in sets.read_in_order():
        if where in reported:
            continue
        reported.add(where)
        _report(edits, where, items)


def report_in_helper(facts: Facts, edits: Edits) -> None:
    """Rule: a module of the project that does not train, whose functions other modules
    import (`build_vocab(texts)` in vocab.py): the vocabulary or class list it builds is what
    every rank's training reads, so a set read in its order there is reported as in the
    script, where it runs when the script runs (module level, or a function or class that
    another module imports)."""
    sets = _Sets(facts)
    reported: set[cst.CSTNode] = set()
    for where, items in sets.read_in_order():
        top = _top_level_statement(facts, where)
        if where in reported or isinstance(top, (cst.FunctionDef, cst.ClassDef)) and (
                top.name.value not in facts.used_elsewhere):
            continue
        reported.add(where)
        _report(edits, where, items)


def _top_level_statement(facts: Facts, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    current: Optional[cst.CSTNode] = node
    while current is not None and facts.parents.get(current) is not facts.module:
        current = facts.parents.get(current)
    return current


def _report(edits: Edits, where: cst.CSTNode, items: cst.BaseExpression) -> None:
    edits.report("DDP227", where, (
        f"a set's order numbers the data differently on each rank: `{edits.code(items)}` is read in "
        "its iteration order, which for strings differs per process (hash salt), so each rank numbers "
        f"the items its own way; sort it (`sorted({edits.code(items)})`)"))


class _Sets:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.qualified = {call: name for name, calls in facts.calls_named.items() for call in calls}
        self.names = _names_bound_to_sets(facts, self.qualified)

    def is_set(self, node: cst.BaseExpression, around: cst.CSTNode, depth: int = 0) -> bool:
        if isinstance(node, cst.Name):
            scope = self.facts.function_of(around)
            kept = self.names.get((scope, node.value))
            if kept is None and scope is not None and not _binds(self.facts, scope, node.value):
                kept = self.names.get((None, node.value))
            return bool(kept)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and depth < 2:
            # `enumerate(unique_words(texts))`: a function of this file whose every return is
            # a set of items that may be strings.
            function = self.facts.functions.get(node.func.value)
            returned = [each.value for each in find_all(function.body, cst.Return, into_functions=False)] \
                if function is not None else []
            if returned and all(value is not None and self.is_set(value, value, depth + 1) for value in returned):
                return True
        return _makes_a_set(node, self.qualified) and not _of_numbers(node)

    def order_dropped(self, node: cst.CSTNode) -> bool:
        """What is made in the set's order goes straight into a call that drops the order
        (`sorted(list(set(text)))`, `len([w for w in words])`)."""
        call = self.facts.call_taking(node)
        return call is not None and self.qualified.get(call) in ORDER_FREE

    def read_in_order(self) -> Iterator[tuple[cst.CSTNode, cst.BaseExpression]]:
        """(where, the set) for each read of a set in its iteration order."""
        for name, calls in self.facts.calls_named.items():
            for call in calls if name in ORDERED_CONSUMERS else ():
                first = call.args[0] if call.args else None
                if first is not None and first.keyword is None and not first.star \
                        and self.is_set(first.value, call) and not self.order_dropped(call):
                    yield call, first.value
        for comprehension in [*self.facts.nodes_of(cst.ListComp), *self.facts.nodes_of(cst.DictComp)]:
            clause: Optional[cst.CompFor] = comprehension.for_in
            while clause is not None:
                if self.is_set(clause.iter, comprehension) and not self.order_dropped(comprehension):
                    yield comprehension, clause.iter
                clause = clause.inner_for_in
        for loop in self.facts.nodes_of(cst.For):
            if self.is_set(loop.iter, loop) and _numbers_or_lists(loop.body):
                yield loop, loop.iter


def _makes_a_set(node: cst.BaseExpression, qualified: dict[cst.Call, str]) -> bool:
    if isinstance(node, cst.Call):
        return qualified.get(node) in SET_MAKERS
    if isinstance(node, cst.SetComp):
        return True
    return isinstance(node, cst.Set) and not all(
        isinstance(element.value, (cst.Integer, cst.Float)) for element in node.elements)


def _of_numbers(node: cst.BaseExpression) -> bool:
    """A set built from numbers (`set(range(n))`, `set(labels.tolist())`, `{int(r) for r in
    rows}`): the same order in every process."""
    items: Optional[cst.BaseExpression] = None
    if isinstance(node, cst.Call):
        if not node.args:
            return False  # `set()`, filled later: its items are unknown here
        items = node.args[0].value
        if isinstance(items, (cst.GeneratorExp, cst.ListComp, cst.SetComp)):
            items = items.elt
    elif isinstance(node, cst.SetComp):
        items = node.elt
    if isinstance(items, (cst.Integer, cst.Float)):
        return True
    if isinstance(items, cst.Call):
        if isinstance(items.func, cst.Attribute):
            return items.func.attr.value in _NUMBER_METHODS
        return dotted_name(items.func) in _NUMBER_CALLS
    return False


def _names_bound_to_sets(facts: Facts,
                         qualified: dict[cst.Call, str]) -> dict[tuple[Optional[cst.FunctionDef], str], bool]:
    """(function or None, name) -> whether every assignment of the name there binds a set
    that may hold strings (a name bound to a set and to anything else is not followed)."""
    bound: dict[tuple[Optional[cst.FunctionDef], str], bool] = {}
    for assign in facts.nodes_of(cst.Assign):
        for target in assign.targets:
            if not isinstance(target.target, cst.Name):
                continue
            key = (facts.function_of(assign), target.target.value)
            a_set = _makes_a_set(assign.value, qualified) and not _of_numbers(assign.value)
            bound[key] = bound.get(key, True) and a_set
    return bound


def _binds(facts: Facts, function: cst.FunctionDef, name: str) -> bool:
    """The function assigns the name itself (or takes it as a parameter)."""
    if any(param.name.value == name for param in function.params.params):
        return True
    return any(isinstance(target.target, cst.Name) and target.target.value == name
               for assign in facts.own_statements(function, cst.Assign) for target in assign.targets)


def _numbers_or_lists(body: cst.BaseSuite) -> bool:
    """A loop body whose result depends on the order it runs in: it appends (`order.append(w)`)
    or numbers (`vocab[w] = len(vocab)`)."""
    for call in find_all(body, cst.Call):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("append", "insert"):
            return True
    for assign in find_all(body, cst.Assign):
        if any(isinstance(target.target, cst.Subscript) for target in assign.targets) \
                and any(dotted_name(call.func) == "len" for call in find_all(assign.value, cst.Call)):
            return True
    return False


_VOCAB = TRAINING.replace("device = torch", 'text = "to be or not to be"\n{vocab}\ndevice = torch', 1)

CASES = (
    Emits(_VOCAB.format(vocab="chars = list(set(text))\nstoi = {c: i for i, c in enumerate(chars)}"), "DDP227"),
    Emits(_VOCAB.format(vocab="stoi = {w: i for i, w in enumerate(set(text.split()))}"), "DDP227"),
    Emits(_VOCAB.format(vocab="words = set(text.split())\nvocab = {}\nfor w in words:\n    vocab[w] = len(vocab)"),
          "DDP227"),
    Emits(_VOCAB.format(vocab="itos = [w for w in {t.lower() for t in text.split()}]"), "DDP227"),
    Silent(_VOCAB.format(vocab="chars = sorted(set(text))\nstoi = {c: i for i, c in enumerate(chars)}"), "DDP227"),
    Silent(_VOCAB.format(vocab="n_words = len(set(text.split()))"), "DDP227"),
    Silent(_VOCAB.format(vocab="chars = sorted(list(set(text)))\nitos = dict(enumerate(chars))"), "DDP227"),
    Silent(_VOCAB.format(vocab="labels = [3, 1, 2]\nclasses = list(set(range(4)))\n"
                               "ids = list({int(v) for v in labels})"), "DDP227"),
)
