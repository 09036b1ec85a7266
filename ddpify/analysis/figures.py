"""What an evaluation loop leaves behind, and whether ddpify can gather it (evaluation.py).

A loop can be sharded only when everything it hands to the code after it is a figure that
gathering restores exactly: sums of Python numbers, batch counts, per-batch lists of values
on the CPU, tables of counts. Anything else (a metric object, a tensor sum, the last batch,
an exit on a value of the batch, gradients on) is a reason, in words, to keep the set whole.
"""
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from ddpify.analysis import synced_metrics, traversal
from ddpify.analysis.bindings import in_order, names_read_after, rebound, scope_statements
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, dotted_name, find_all, names_in

NO_GRAD = ("no_grad", "inference_mode")
# Methods that change an object's state: a metric or meter filled batch by batch holds this
# rank's share only, and ddpify cannot merge it.
STATEFUL_METHODS = frozenset({"update", "add", "add_", "accumulate", "insert", "record",
                              "compute", "__setitem__", "copy_", "index_add_", "setdefault"})
# Methods that fill a list or a dict: `errors[group].append(e)` fills an outer value's item.
FILLING_METHODS = frozenset({"append", "extend", "setdefault", "pop", "remove", "clear"})
# How many subscripts an update of each kind of table takes: `counts[c] += 1`,
# `confusion[t][p] += 1`; a tensor takes either (`cm[t, p]`, `cm[t][p]`).
TABLE_DEPTHS = {"dict": (1,), "list": (1,), "matrix": (2,), "tensor": (1, 2)}
HOST_METHODS = frozenset({"cpu", "tolist", "item", "numpy"})
SCALAR_METHODS = frozenset({"item", "size", "numel", "dim", "nelement"})
MATH_FUNCTIONS = frozenset({"log", "log10", "log2", "exp", "sqrt", "pow", "floor", "ceil", "fabs"})
SCALAR_FUNCTIONS = frozenset({"len", "int", "float", "round", "abs", "sum", "min", "max"})


@dataclass
class Figures:
    """What an evaluation loop leaves behind, in the order the loop first sets it."""

    sums: list[str] = field(default_factory=list)
    # Lists filled once per batch: name -> items per batch ("1" for append, the batch size
    # for extend).
    lists: dict[str, str] = field(default_factory=dict)
    # `num_batches = len(loader)` before the loop: this rank's count, gathered like a sum.
    batch_counts: list[str] = field(default_factory=list)
    # `len(loader)` read after the loop: replaced by a gathered count.
    batch_count_reads: list[cst.Call] = field(default_factory=list)
    # `len(loader.sampler)` read after the loop (the samples this rank drew once sharded):
    # replaced by a gathered count.
    sample_count_reads: list[cst.Call] = field(default_factory=list)
    # Tables of counts filled by `table[key] += ...`: name -> "dict", "list" or "tensor".
    tables: dict[str, str] = field(default_factory=dict)
    # torchmetrics objects the loop updates: their compute() gathers every rank's share
    # itself, so the loop may be sharded with nothing for ddpify to gather.
    synced: list[str] = field(default_factory=list)
    # `args.dry_run` in `if args.dry_run: break`: a test that every rank shares and the loop
    # does not change, under which the loop ends after its first batch (see _first_batch_flag).
    first_batch_only: Optional[str] = None

    @property
    def gathers(self) -> bool:
        return bool(self.sums or self.lists or self.batch_count_reads or self.sample_count_reads or self.tables)


def figures_of(facts: Facts, loop: cst.For, batch_size: str, iterable: Optional[str] = None):
    """The loop's figures, or why they cannot be gathered (a str). `batch_size`: the
    loader's, the items a list gains per batch when it is extended; `iterable`: the name of
    the loader the loop goes over, when it is not one built in this file."""
    if _peeks(loop):
        return Figures()
    shape = _why_not_a_pass(facts, loop)
    if shape is not None:
        return shape
    outside = names_read_after(facts, loop)
    bound = rebound(loop.body) | names_in(loop.target)
    targets = names_in(loop.target)
    found = Figures()
    for name in in_order(loop, bound & outside):
        if name in targets:
            return f"`{name}` from the last batch is used after the loop"
        kind = _accumulation(facts, loop, name)
        if kind is None:
            return (f"`{name}` is set in the loop and read after it, where each rank would hold "
                    "its own value (not a sum ddpify can gather)")
        if kind == "sum":
            found.sums.append(name)
    state = _stateful_call(facts, loop, outside, found.tables, found.synced)
    if state is not None:
        return state
    for name, kind in _filled_lists(facts, loop, outside).items():
        if kind is None:
            return (f"`{name}` is filled in a way ddpify cannot merge in order (once per batch, "
                    "with values on the CPU: `.cpu()`, `.tolist()`, `.item()`)")
        found.lists[name] = "1" if kind == "append" else batch_size
    iterable = iterable or loader_name_in(facts, loop)
    if iterable is not None:
        found.batch_counts = _batch_counts_before(facts, loop, iterable, outside)
        found.batch_count_reads = _batch_count_reads_after(facts, loop, iterable)
        found.sample_count_reads = _batch_count_reads_after(facts, loop, f"{iterable}.sampler")
    if not found.gathers and not found.synced:
        return "the loop keeps no figure ddpify can gather"
    return _with_first_batch_flag(facts, loop, found)


def _with_first_batch_flag(facts: Facts, loop: cst.For, found: Figures):
    """The figures, with the test under which the loop ends after its first batch; a reason
    where a metric object's compute(), which gathers every rank's batch itself, is read."""
    found.first_batch_only = _first_batch_flag(facts, loop)
    if found.first_batch_only is not None and found.synced:
        return f"the loop at line {facts.line_of(loop)} can stop early (`break`)"
    return found


def _why_not_a_pass(facts: Facts, loop: cst.For) -> Optional[str]:
    """Why the loop is no plain pass over the set that the ranks may split, if it is not."""
    if not _without_gradients(facts, loop):
        return ("it is evaluated with gradients on, where DDP syncs buffers at every forward "
                "and the ranks' batch counts differ")
    exit_statement = _exit_in(facts, loop)
    if exit_statement is not None:
        return f"the loop at line {facts.line_of(loop)} can stop early (`{exit_statement}`)"
    flag = _first_batch_flag(facts, loop)
    if flag is not None and flag.startswith(EARLY_STOP):
        return flag.removeprefix(EARLY_STOP)
    cap = batch_cap(loop.iter) or _drawn_count(loop.iter)
    if cap is not None:
        return (f"the loop at line {facts.line_of(loop)} takes at most `{facts.module.code_for_node(cap)}` "
                "batches: sharded, each rank would take as many of its own share and the gathered figure "
                "would cover N times as many; whole, every rank evaluates the batches one process does")
    return None


def _drawn_count(iterated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """Rule: `for _ in range(eval_iters): x, y = next(batches)` over `batches = iter(loader)`
    (a loop that reaches the loader only through next()) draws k batches: the first k, as
    zip(range(k), loader) takes them. `range(len(loader))` draws them all, a pass over the set."""
    if not (isinstance(iterated, cst.Call) and dotted_name(iterated.func) == "range" and iterated.args):
        return None
    count = iterated.args[0].value if len(iterated.args) == 1 else iterated.args[1].value
    return None if any(dotted_name(call.func) == "len" for call in calls_within(count)) else count


def batch_cap(iterated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """Rule: `zip(range(k), loader)` (or `zip(loader, range(k))`, under enumerate or tqdm) goes
    over the first k batches of the loader: the figure the loop makes is the first k batches'
    (k random batches of a shuffled loader). Sharded, every rank would take k batches of its
    own share. The count, `k`, or None when nothing caps the loop."""
    for call in calls_within(iterated):
        if dotted_name(call.func) == "zip":
            for argument in call.args:
                value = argument.value
                if isinstance(value, cst.Call) and dotted_name(value.func) == "range" and value.args:
                    return value.args[0].value if len(value.args) == 1 else value.args[1].value
    return None


def _without_gradients(facts: Facts, loop: cst.For) -> bool:
    """Gradients are off where the model runs: around the loop (a no_grad block or a
    decorated function), or inside it, around every call of the model the loop makes
    (`for x, y in loader: with torch.no_grad(): logits = model(x)`)."""
    if under_no_grad(facts, loop) or called_only_without_gradients(facts, facts.function_of(loop)):
        return True
    model_calls = _model_calls_in(facts, loop)
    return bool(model_calls) and all(under_no_grad(facts, call, within=loop) for call in model_calls)


# How many callers up a function's calls are followed to a no_grad block.
_CALLER_DEPTH = 3


def called_only_without_gradients(facts: Facts, function: Optional[cst.FunctionDef], depth: int = 0) -> bool:
    """Rule: a function every call of which in this script sits in a no_grad block (`with
    torch.no_grad(): model, valid_loss = validate(valid_loader, model, criterion, device)`, the
    LeNet-5 tutorial's loop), or in a function itself called only so, runs without gradients,
    as one decorated with `@torch.no_grad()` does. A function named anywhere but as a callee
    (handed on as a callback), or one of a helper module, whose callers are in other files,
    is not known to."""
    if function is None or facts.library or depth > _CALLER_DEPTH:
        return False
    calls = facts.calls_of(function)
    if not calls or not _only_called(facts, function, calls):
        return False
    return all(under_no_grad(facts, call)
               or called_only_without_gradients(facts, facts.function_of(call), depth + 1) for call in calls)


def _only_called(facts: Facts, function: cst.FunctionDef, calls: list[cst.Call]) -> bool:
    """Every mention of the function's name is its definition or the callee of one of `calls`."""
    callees = {id(call.func) for call in calls}
    for name in facts.nodes_of(cst.Name):
        if name.value != function.name.value or name is function.name or id(name) in callees:
            continue
        parent = facts.parents.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name and id(parent) in callees:
            continue
        return False
    return True


def under_no_grad(facts: Facts, node: cst.CSTNode, within: Optional[cst.For] = None) -> bool:
    """A no_grad block or decorator around node; with `within`, one inside that loop."""
    current: Optional[cst.CSTNode] = node
    while current is not None and current is not within:
        if isinstance(current, cst.With) and any(_is_no_grad(item.item) for item in current.items):
            return True
        if isinstance(current, cst.FunctionDef):
            return within is None and any(_is_no_grad(decorator.decorator) for decorator in current.decorators)
        current = facts.parents.get(current)
    return False


def _model_calls_in(facts: Facts, loop: cst.For) -> list[cst.Call]:
    """Calls in the loop's body of a name that holds a trained model in the loop's function
    (or at module level)."""
    function = facts.function_of(loop)
    models = {name for model in facts.models for holder, name in facts.model_holders(model)
              if holder is function or holder is None}
    return [call for call in calls_within(loop.body) if dotted_name(call.func) in models]


def _is_no_grad(expression: cst.BaseExpression) -> bool:
    if isinstance(expression, cst.Call):
        name = dotted_name(expression.func) or ""
        if name.endswith("set_grad_enabled"):
            return bool(expression.args) and isinstance(expression.args[0].value, cst.Name) \
                and expression.args[0].value.value == "False"
        expression = expression.func
    name = dotted_name(expression) or ""
    return name.rsplit(".", 1)[-1] in NO_GRAD


def _exit_in(facts: Facts, loop: cst.For) -> Optional[str]:
    """A way out of the loop that would stop the ranks at different batches, or skip the
    gathering: a return, a yield, or a break taken on a value of the batch. A break on a
    value every rank shares (`if args.dry_run: break`) stops them all at the same batch."""
    found: list[str] = []
    bound = rebound(loop.body) | names_in(loop.target)

    class _Exits(cst.CSTVisitor):
        def visit_Break(self, node: cst.Break) -> None:
            if not _shared_condition(facts, node, loop, bound):
                found.append("break")

        def visit_Return(self, node: cst.Return) -> None:
            found.append("return")

        def visit_Yield(self, node: cst.Yield) -> None:
            found.append("yield")

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_For(self, node: cst.For) -> bool:
            # A break in an inner loop ends that loop only.
            return node is loop

        def visit_While(self, node: cst.While) -> bool:
            return False

    traversal.visit(loop, _Exits())
    return found[0] if found else None


# Marks _first_batch_flag's answer as a reason to keep the set whole, not a test.
EARLY_STOP = "early stop: "


def _first_batch_flag(facts: Facts, loop: cst.For) -> Optional[str]:
    """Rule: a break the loop takes under tests of values every rank shares and the loop does
    not change (`if args.dry_run: break`, mnist's smoke-test flag) ends the loop after its first
    batch whenever the tests hold, and never otherwise. One process then evaluates batch 0; a
    rank of the sharded loop evaluates its own first batch, which for rank 0 is batch 0 (each
    rank takes batches r, r + N, ...; of a shuffled training loader, one random batch as the
    original's was). So the figures stay sharded and gathered, and when the tests hold the
    gather keeps rank 0's alone. The tests' code (None without such a break), or EARLY_STOP and
    the reason the loop cannot be split: a break in an `else` branch, a test that calls
    something, a `continue` that may skip the first batch."""
    breaks: list[cst.Break] = []
    continues: list[cst.Continue] = []

    class _Exits(cst.CSTVisitor):
        def visit_Break(self, node: cst.Break) -> None:
            breaks.append(node)

        def visit_Continue(self, node: cst.Continue) -> None:
            continues.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_For(self, node: cst.For) -> bool:
            return node is loop

        def visit_While(self, node: cst.While) -> bool:
            return False

    traversal.visit(loop.body, _Exits())
    if not breaks:
        return None
    early = f"{EARLY_STOP}the loop at line {facts.line_of(loop)} can stop early (`break`)"
    if continues:
        return early
    alternatives = []
    for node in breaks:
        tests = _tests_above(facts, node, loop)
        if tests is None:
            return early
        alternatives.append(" and ".join(tests))
    if not all(alternatives):
        return early
    return " or ".join(f"({each})" if " and " in each and len(alternatives) > 1 else each for each in alternatives)


def _tests_above(facts: Facts, node: cst.CSTNode, loop: cst.For) -> Optional[list[str]]:
    """The tests of the `if`s whose bodies hold node within the loop, outermost first; None
    when node sits in an `else` branch (or under try, with) or a test calls something."""
    tests: list[str] = []
    child, parent = node, facts.parents.get(node)
    while parent is not None and parent is not loop:
        if isinstance(parent, cst.If):
            # A call (`time.time() > deadline`) may answer differently per batch and per rank.
            if child is not parent.body or any(isinstance(part, (cst.Call, cst.NamedExpr))
                                               for part in traversal.preorder(parent.test, lambda _: True)):
                return None
            code = facts.module.code_for_node(parent.test)
            tests.insert(0, f"({code})" if isinstance(parent.test, cst.BooleanOperation) else code)
        elif isinstance(parent, (cst.Else, cst.Try, cst.With)):
            return None
        child, parent = parent, facts.parents.get(parent)
    return tests


def _shared_condition(facts: Facts, node: cst.CSTNode, loop: cst.For, bound: set[str]) -> bool:
    """Every `if` between node and the loop tests names the loop does not bind."""
    parent = facts.parents.get(node)
    while parent is not None and parent is not loop:
        if isinstance(parent, cst.If) and names_in(parent.test) & bound:
            return False
        if isinstance(parent, (cst.Try, cst.With)):
            return False
        parent = facts.parents.get(parent)
    return True


def _peeks(loop: cst.For) -> bool:
    """`for x, y in loader: print(x.shape); break`: one batch, on every rank the same."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    return any(isinstance(statement, cst.SimpleStatementLine)
               and any(isinstance(small, cst.Break) for small in statement.body) for statement in body)


def _accumulation(facts: Facts, loop: cst.For, name: str) -> Optional[str]:
    """"sum" when every binding of `name` in the loop is `name += <a Python number>` and it
    starts from a number before the loop; "list" for a list only appended to (see
    _filled_lists); None otherwise."""
    increments: list[cst.BaseExpression] = []
    other = False

    class _Bindings(cst.CSTVisitor):
        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            nonlocal other
            if isinstance(node.target, cst.Name) and node.target.value == name:
                if isinstance(node.operator, cst.AddAssign):
                    increments.append(node.value)
                else:
                    other = True

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            nonlocal other
            if name in names_in(node.target):
                other = True

        def visit_For(self, node: cst.For) -> None:
            nonlocal other
            if node is not loop and name in names_in(node.target):
                other = True

    traversal.visit(loop.body, _Bindings())
    if other or not increments:
        return None
    if not _starts_from_number(facts, loop, name):
        return None
    assigned_in_loop = _simple_assignments(loop.body)
    if all(_python_number(value, assigned_in_loop) or _returns_python_numbers(facts, value)
           or _count_of_matches(value, assigned_in_loop) for value in increments):
        return "sum"
    return None


COMPARING_METHODS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _count_of_matches(value: cst.BaseExpression, assigned: dict[str, list[cst.BaseExpression]]) -> bool:
    """Rule: `(predictions == y).sum()`, `predictions.eq(y).sum()`, `torch.sum(preds == y)`
    (or a name the loop sets to one): a count of matching elements, an integer tensor. Its
    sum over the ranks' disjoint batches is the original's count exactly, and the gathered
    figure stays a tensor, as the original's was, so what is printed of it is unchanged."""
    if isinstance(value, cst.Name):
        values = assigned.get(value.value, [])
        return len(values) == 1 and not isinstance(values[0], cst.Name) and _count_of_matches(values[0], assigned)
    if not isinstance(value, cst.Call) or value.args and not (
            dotted_name(value.func) == "torch.sum" and len(value.args) == 1):
        return False
    if dotted_name(value.func) == "torch.sum":
        return _compares(value.args[0].value)
    return isinstance(value.func, cst.Attribute) and value.func.attr.value == "sum" and _compares(value.func.value)


def _compares(value: cst.BaseExpression) -> bool:
    """`a == b` (in any parentheses), or `a.eq(b)` and its kin: a tensor of booleans."""
    if isinstance(value, cst.Comparison):
        return len(value.comparisons) == 1 and isinstance(
            value.comparisons[0].operator, (cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan,
                                            cst.LessThanEqual, cst.GreaterThanEqual))
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
        and value.func.attr.value in COMPARING_METHODS and len(value.args) == 1


def _returns_python_numbers(facts: Facts, value: cst.BaseExpression) -> bool:
    """`dice_score(preds, masks)`: a function of this file whose every return is a Python
    number (`(2 * inter / union).item()`), as _python_number reads it in the function; or
    one of another module of the project that the collector found so (`metrics.count(...)`)."""
    if isinstance(value, cst.Call) and dotted_name(value.func) in facts.number_functions:
        return True
    function = facts.functions.get(dotted_name(value.func) or "") if isinstance(value, cst.Call) else None
    if function is None:
        return False
    returned = [node.value for node in find_all(function.body, cst.Return, into_functions=False)]
    assigned = _simple_assignments(function.body)
    return bool(returned) and all(each is not None and _python_number(each, assigned) for each in returned)


def _starts_from_number(facts: Facts, loop: cst.For, name: str) -> bool:
    return any(isinstance(value, (cst.Integer, cst.Float)) for value in _values_before(facts, loop, name))


def _values_before(facts: Facts, loop: cst.For, name: str) -> list[cst.BaseExpression]:
    """What `name = ...` (or `a, name = 0, 0`, `a = name = 0`) assigns in the loop's scope, outside it."""
    found: list[cst.BaseExpression] = []

    class _Assignments(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if node is loop or isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not function:
                return False
            if not isinstance(node, cst.Assign):
                return True
            value = node.value
            for assign_target in node.targets:  # `correct = total = 0` binds both
                target = assign_target.target
                if isinstance(target, cst.Name) and target.value == name:
                    found.append(value)
                elif isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(
                        target.elements) == len(value.elements):
                    for element, item in zip(target.elements, value.elements):
                        if isinstance(element.value, cst.Name) and element.value.value == name:
                            found.append(item.value)
            return True

    function = facts.function_of(loop)
    for node in scope_statements(facts, loop):
        traversal.visit(node, _Assignments())
    return found


def _simple_assignments(body: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    found: dict[str, list[cst.BaseExpression]] = {}

    class _Assignments(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    found.setdefault(target.target.value, []).append(node.value)

    traversal.visit(body, _Assignments())
    return found


def _python_number(value: cst.BaseExpression, assigned: dict[str, list[cst.BaseExpression]],
                   depth: int = 0) -> bool:
    """A Python int or float, not a tensor: `loss.item() * x.size(0)`, `len(y)`, `2`."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.BinaryOperation):
        return (_python_number(value.left, assigned, depth) and _python_number(value.right, assigned, depth))
    if isinstance(value, cst.UnaryOperation):
        return _python_number(value.expression, assigned, depth)
    if isinstance(value, cst.Call):
        function = dotted_name(value.func) or ""
        if function.rsplit(".", 1)[-1] in MATH_FUNCTIONS and function in (
                function.rsplit(".", 1)[-1], "math." + function.rsplit(".", 1)[-1]):
            # `10 * log10(1 / mse.item())`: math on Python numbers gives a Python float.
            return all(_python_number(arg.value, assigned, depth) for arg in value.args)
        if isinstance(value.func, cst.Attribute):
            return value.func.attr.value in SCALAR_METHODS
        return dotted_name(value.func) in SCALAR_FUNCTIONS and dotted_name(value.func) != "sum"
    if isinstance(value, cst.Subscript):
        # `x.shape[0]`
        return isinstance(value.value, cst.Attribute) and value.value.attr.value == "shape"
    if isinstance(value, cst.Name) and depth < 3:
        values = assigned.get(value.value, [])
        return bool(values) and all(_python_number(v, assigned, depth + 1) for v in values)
    return False


def _stateful_call(facts: Facts, loop: cst.For, outside: set[str], tables: dict[str, str],
                   synced: list[str]) -> Optional[str]:
    """A metric, meter or table outside the loop that the loop changes in place. Tables of
    counts (`correct_pred[classname] += 1` into a dict, a list or a CPU tensor of numbers)
    go into `tables`, by name and kind, to be summed across ranks; torchmetrics objects,
    which gather themselves, into `synced`."""
    mutations = _Mutations(facts, loop, outside, tables, synced)
    traversal.visit(loop.body, mutations)
    return mutations.found[0] if mutations.found else None


class _Mutations(cst.CSTVisitor):
    """Changes in place, inside the loop, of values that live outside it."""

    def __init__(self, facts: Facts, loop: cst.For, outside: set[str], tables: dict[str, str],
                 synced: list[str]) -> None:
        super().__init__()
        self.facts, self.loop, self.outside, self.tables, self.synced = facts, loop, outside, tables, synced
        self.bound_in_loop = rebound(loop.body) | names_in(loop.target)
        self.assigned_in_loop = _simple_assignments(loop.body)
        # A torchmetrics object keeps this rank's share too, but its compute() gathers the
        # others' (synced_metrics): the loop may be sharded.
        self.metrics = synced_metrics.metric_names(facts)
        self.found: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        owner = dotted_name(func.value)
        if owner is None:
            # A method of an item of an outer value (`errors[group].append(e)`,
            # `stats["loss"].update(v)`) changes that value: its root owns the change.
            root = _root_owner(func.value)
            if root is not None and self._outer(root) and func.attr.value in STATEFUL_METHODS | FILLING_METHODS:
                code = self.facts.module.code_for_node(func.value)
                self.found.append(f"`{code}.{func.attr.value}(...)` keeps this rank's share only")
            return
        if func.attr.value in STATEFUL_METHODS and self._outer(owner) and owner in self.metrics:
            if owner not in self.synced:
                self.synced.append(owner)
        elif func.attr.value in STATEFUL_METHODS and self._outer(owner) and not _progress_bar(
                self.facts, self.loop, owner):
            self.found.append(f"`{owner}.{func.attr.value}(...)` keeps this rank's share only")

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        target = node.target
        depth, base = _subscript_depth(target)
        if depth and isinstance(base, cst.Name) and isinstance(node.operator, cst.AddAssign) and self._outer(
                base.value):
            owner = base.value
            kind = _table_kind(self.facts, self.loop, owner)
            if kind is not None and depth in TABLE_DEPTHS[kind] and _python_number(
                    node.value, self.assigned_in_loop) and self.tables.get(owner, kind) == kind:
                self.tables[owner] = kind
                return
        self._target(node.target)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def _target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            # `confusion[t][p] = ...` changes `confusion`, however deep the item.
            owner = _root_owner(target.value)
            if owner is not None and self._outer(owner):
                self.found.append(f"`{self.facts.module.code_for_node(target)}` is updated in place, per rank")

    def _outer(self, owner: str) -> bool:
        root = owner.split(".", 1)[0]
        return root == "self" or root not in self.bound_in_loop and root in self.outside


def _root_owner(expression: cst.BaseExpression) -> Optional[str]:
    """The name whose value an item or attribute chain reaches into: `confusion` in
    `confusion[t]`, `self.stats` in `self.stats["loss"][i]`."""
    while dotted_name(expression) is None and isinstance(expression, (cst.Subscript, cst.Attribute)):
        expression = expression.value
    return dotted_name(expression)


def _subscript_depth(target: cst.BaseExpression) -> tuple[int, cst.BaseExpression]:
    """How many subscripts `target` takes, and of what: (2, `confusion`) for `confusion[t][p]`."""
    depth = 0
    while isinstance(target, cst.Subscript):
        depth, target = depth + 1, target.value
    return depth, target


def _table_kind(facts: Facts, loop: cst.For, owner: str) -> Optional[str]:
    """"dict", "list", "matrix" or "tensor" when `owner` starts as a table of zeros before the
    loop: `{c: 0 for c in classes}`, `[0.0] * 10`, `list(0. for i in range(10))`, a list of
    such lists (`[[0] * n for _ in range(n)]`, a confusion matrix), `torch.zeros(n, n)`."""
    values = _values_before(facts, loop, owner)
    kinds = {_table_of_zeros(value) for value in values}
    return kinds.pop() if len(kinds) == 1 else None


def _table_of_zeros(value: cst.BaseExpression) -> Optional[str]:
    """The kind of table `value` builds when every entry starts at zero. Only zeros: the
    ranks' tables are summed, so a start of 1 (`[1] * n`, smoothed counts) would be counted
    once per rank."""
    if isinstance(value, cst.DictComp) and _zero(value.value):
        return "dict"
    if isinstance(value, cst.Dict) and value.elements and all(
            isinstance(element, cst.DictElement) and _zero(element.value) for element in value.elements):
        return "dict"
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply) and isinstance(
            value.left, cst.List) and len(value.left.elements) == 1 and _zero(value.left.elements[0].value):
        return "list"
    if isinstance(value, cst.ListComp) and _zero(value.elt):
        return "list"
    if isinstance(value, cst.List) and value.elements and all(_zero(element.value) for element in value.elements):
        return "list"
    if isinstance(value, cst.ListComp) and _table_of_zeros(value.elt) == "list":
        # A fresh row per item; `[[0] * n] * n` would share one row and is left alone.
        return "matrix"
    if isinstance(value, cst.List) and value.elements and all(
            isinstance(element.value, cst.List) and _table_of_zeros(element.value) == "list"
            for element in value.elements):
        return "matrix"  # `[[0, 0], [0, 0]]`
    if isinstance(value, cst.Call):
        name = dotted_name(value.func) or ""
        if name == "list" and len(value.args) == 1 and isinstance(value.args[0].value, cst.GeneratorExp) \
                and _zero(value.args[0].value.elt):
            return "list"
        # A CPU tensor pickles without a device; one made on the GPU would land on rank 1's
        # GPU in rank 0's sum.
        if name.rsplit(".", 1)[-1] == "zeros" and name.startswith("torch") and not any(
                arg.keyword is not None and arg.keyword.value == "device" for arg in value.args):
            return "tensor"
    return None


def _zero(value: cst.BaseExpression) -> bool:
    """`0`, `0.0`, `0.`"""
    if isinstance(value, cst.Integer):
        return value.evaluated_value == 0
    return isinstance(value, cst.Float) and value.evaluated_value == 0.0


def _progress_bar(facts: Facts, loop: cst.For, owner: str) -> bool:
    """`pbar.update(1)` on a tqdm bar only draws."""
    return any(isinstance(value, cst.Call) and "tqdm" in (dotted_name(value.func) or "")
               for value in _values_before(facts, loop, owner))


def _filled_lists(facts: Facts, loop: cst.For, outside: set[str]) -> dict[str, Optional[str]]:
    """Lists made empty before the loop and filled in it, used after it: "append" or
    "extend" when each iteration adds to it once, at the top of the loop body, else None."""
    found: dict[str, Optional[str]] = {}
    top_level: set[int] = set()
    for statement in loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ():
        if isinstance(statement, cst.SimpleStatementLine):
            top_level.update(id(small) for small in statement.body)
    bound_in_loop = rebound(loop.body)

    for node in find_all(loop.body, cst.Expr):
        call = node.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and isinstance(call.func.value, cst.Name)):
            continue
        method, owner = call.func.attr.value, call.func.value.value
        if method not in ("append", "extend") or owner in bound_in_loop or owner not in outside:
            continue
        if not any(isinstance(v, cst.List) and not v.elements for v in _values_before(facts, loop, owner)):
            continue
        if id(node) not in top_level or owner in found or not call.args or not _on_host(
                call.args[0].value, loop):
            found[owner] = None
        else:
            found[owner] = method
    return found


def _on_host(value: cst.BaseExpression, loop: cst.For) -> bool:
    """A value that pickles without a device: `.cpu()`, `.tolist()`, `.item()`, a number,
    or a batch element the loop never moves. A CUDA tensor gathered from rank 1 would land
    on rank 1's GPU in rank 0's list, and `torch.cat` would fail there."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        return value.func.attr.value in HOST_METHODS
    if isinstance(value, cst.Name):
        return value.value in names_in(loop.target) and value.value not in rebound(loop.body)
    return _python_number(value, {})


def loader_name_in(facts: Facts, loop: cst.For, holders: Optional[set[str]] = None) -> Optional[str]:
    """The name the loop iterates (`test_loader` in `enumerate(test_loader)`), among the
    names that hold a loader built in this file, or among `holders`."""
    if holders is None:
        holders = {name for _, name in facts.loader_holders()}
    names = [name for name in _whole_names_in(loop.iter) if name in holders]
    return names[0] if len(set(names)) == 1 else None


def _whole_names_in(node: cst.CSTNode) -> list[str]:
    """`self.val_loader` in `enumerate(tqdm(self.val_loader))`, not its `val_loader` part."""
    found: list[str] = []

    class _Names(cst.CSTVisitor):
        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            name = dotted_name(attribute)
            if name is not None:
                found.append(name)
                return False
            return True

        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

    traversal.visit(node, _Names())
    return found


def _batch_counts_before(facts: Facts, loop: cst.For, iterable: str, read_after: set[str]) -> list[str]:
    """`num_batches = len(dataloader)` (or `num_samples = len(dataloader.sampler)`) before the
    loop, read after it: this rank's count of batches (samples) once sharded, gathered like a sum."""
    before, _ = _nodes_around(facts, loop, into_definitions=True)
    return [node.targets[0].target.value for node in before
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
            and (_is_len_of(node.value, iterable) or _is_len_of(node.value, f"{iterable}.sampler"))
            and node.targets[0].target.value in read_after]


def _nodes_around(facts: Facts, loop: cst.For, *,
                  into_definitions: bool) -> tuple[list[cst.CSTNode], list[cst.CSTNode]]:
    """The nodes of the loop's scope before it and after it, in source order (the loop's own
    nodes in neither); without `into_definitions`, not those of the functions and classes
    defined there, other than the loop's own function."""
    before: list[cst.CSTNode] = []
    after: list[cst.CSTNode] = []
    current = before
    own_function = facts.function_of(loop)

    class _Walk(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal current
            if node is loop:
                current = after
                return False
            current.append(node)
            return into_definitions or not isinstance(node, (cst.FunctionDef, cst.ClassDef)) or node is own_function

    for node in scope_statements(facts, loop):
        traversal.visit(node, _Walk())
    return before, after


def _is_len_of(value: cst.BaseExpression, iterable: str) -> bool:
    return (isinstance(value, cst.Call) and dotted_name(value.func) == "len" and len(value.args) == 1
            and dotted_name(value.args[0].value) == iterable)


def _batch_count_reads_after(facts: Facts, loop: cst.For, iterable: str) -> list[cst.Call]:
    """`len(test_loader)` (`iterable`: `test_loader.sampler`, its sampler's) after the loop, in its scope."""
    _, after = _nodes_around(facts, loop, into_definitions=False)
    return [node for node in after if isinstance(node, cst.Call) and _is_len_of(node, iterable)]
