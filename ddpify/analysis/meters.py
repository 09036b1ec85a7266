"""Running-average objects (the `AverageMeter` many training scripts copy): whether a class
keeps exactly a sum and a count, so that summing those two across ranks and dividing again
gives the whole run's average (training.py).

Read with certainty only: `update(self, val, n=1)` whose statements are `self.val = val`
(any name but the three below), `self.sum += val * n`, `self.count += n` and
`self.avg = self.sum / self.count` (ASSIGNED), nothing else; or the same without the last
statement, in a class whose `avg` is a property returning `self.sum / self.count` or
`self.sum / max(self.count, 1)` (DERIVED: summing sum and count is enough). Any other class
is not guessed at.
"""
import ast
from typing import Optional

import libcst as cst

RUNNING_MEAN_ATTRIBUTES = ("sum", "count", "avg")


ASSIGNED = "assigned"
DERIVED = "derived"


def running_mean_kind(update: Optional[ast.FunctionDef], average: Optional[ast.FunctionDef]) -> Optional[str]:
    """ASSIGNED or DERIVED for the update() and `avg` property of a running-mean class, as the
    module docstring spells them; None for any other class."""
    if _keeps_running_mean(update, with_average=True):
        return None if average is not None else ASSIGNED
    if _keeps_running_mean(update, with_average=False) and _average_property(average):
        return DERIVED
    return None


def _average_property(average: Optional[ast.FunctionDef]) -> bool:
    """`@property def avg(self): return self.sum / self.count` (or `/ max(self.count, 1)`)."""
    if average is None or len(average.body) != 1 or not isinstance(average.body[0], ast.Return):
        return False
    if not any(isinstance(each, ast.Name) and each.id == "property" for each in average.decorator_list):
        return False
    quotient = average.body[0].value
    if not (isinstance(quotient, ast.BinOp) and isinstance(quotient.op, ast.Div)
            and _self_attribute(quotient.left) == "sum"):
        return False
    divisor = quotient.right
    if _self_attribute(divisor) == "count":
        return True
    return (isinstance(divisor, ast.Call) and isinstance(divisor.func, ast.Name) and divisor.func.id == "max"
            and len(divisor.args) == 2 and _self_attribute(divisor.args[0]) == "count" and _is_one(divisor.args[1]))


def _keeps_running_mean(update: Optional[ast.FunctionDef], with_average: bool) -> bool:
    if update is None:
        return False
    parameters = [argument.arg for argument in update.args.args]
    if len(parameters) not in (2, 3) or update.args.vararg or update.args.kwarg or update.args.kwonlyargs:
        return False
    value = parameters[1]
    weight = parameters[2] if len(parameters) == 3 else None
    body = [statement for statement in update.body
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))]
    seen: set[str] = set()
    for statement in body:
        kind = _statement_kind(statement, value, weight)
        if kind is None or kind in seen and kind != "other":
            return False
        seen.add(kind)
    return seen - {"other"} == ({"sum", "count", "avg"} if with_average else {"sum", "count"})


def _self_attribute(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _statement_kind(statement: ast.stmt, value: str, weight: Optional[str]) -> Optional[str]:
    if isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Add):
        attribute = _self_attribute(statement.target)
        added = statement.value
        if attribute == "count" and (_is_name(added, weight) if weight else _is_one(added)):
            return "count"
        if attribute == "sum" and (_is_name(added, value) and weight is None or _product(added, value, weight)):
            return "sum"
        return None
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        attribute = _self_attribute(statement.targets[0])
        if attribute == "avg":
            quotient = statement.value
            return "avg" if (isinstance(quotient, ast.BinOp) and isinstance(quotient.op, ast.Div)
                             and _self_attribute(quotient.left) == "sum"
                             and _self_attribute(quotient.right) == "count") else None
        if attribute is not None and attribute not in RUNNING_MEAN_ATTRIBUTES and _is_name(statement.value, value):
            return "other"
    return None


def _is_name(node: ast.expr, name: Optional[str]) -> bool:
    return name is not None and isinstance(node, ast.Name) and node.id == name


def _is_one(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 1


def _product(node: ast.expr, value: str, weight: Optional[str]) -> bool:
    return (weight is not None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
            and {_name_of(node.left), _name_of(node.right)} == {value, weight})


def _name_of(node: ast.expr) -> Optional[str]:
    return node.id if isinstance(node, ast.Name) else None


def class_kind(node: ast.ClassDef) -> Optional[str]:
    """ASSIGNED, DERIVED or None for a class (its update() and `avg`)."""
    methods = {method.name: method for method in node.body if isinstance(method, ast.FunctionDef)}
    return running_mean_kind(methods.get("update"), methods.get("avg"))


def running_mean_class(node: cst.ClassDef) -> Optional[str]:
    """class_kind of a class of this module."""
    try:
        tree = ast.parse(cst.Module(body=[node]).code)
    except SyntaxError:
        return None
    classes = [each for each in tree.body if isinstance(each, ast.ClassDef)]
    return class_kind(classes[0]) if classes else None
