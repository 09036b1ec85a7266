"""The shape of a path as the code builds it: `os.path.join("ckpt", f"epoch{epoch}.pt")`,
`f"ckpt/epoch{epoch - 2}.pt"` and the `"ckpt/epoch*.pt"` a glob deletes from are all
`ckpt/epoch*.pt`. Two accesses of one file under different spellings (a name bound once to
the path, a loop over a glob, another offset in the f-string) are found by their shapes,
where their text differs. A name or attribute whose value is not known stands for itself
(`<args.run_dir>/best.pt` lies in the folder `<args.run_dir>`); any other unknown part is `*`.
"""
import fnmatch
import re
from typing import Optional, cast

import libcst as cst

from ddpify.analysis.navigation import ancestors_up_to
from ddpify.analysis.nodes import calls_within, dotted_name, string_value

# Functions and methods that list the files a pattern matches (by the last part of their name).
_GLOBS = frozenset({"glob", "iglob", "rglob"})
# Calls that hand back the path (or the list of paths) they are given.
_SAME_PATH = frozenset({"str", "Path", "pathlib.Path", "os.fspath", "sorted", "list", "os.path.abspath",
                        "os.path.normpath", "os.path.expanduser"})
_PERCENT_FIELD = re.compile(r"%[-+ #0-9.]*[a-zA-Z]")
_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")
_DEPTH = 4


def path_shape(parents: dict, assigned: dict[str, list[cst.BaseExpression]],
               node: cst.BaseExpression, depth: int = 0) -> Optional[str]:
    """The path's shape, or None where it is not known (a parameter, a name bound twice)."""
    if depth > _DEPTH:
        return None
    shape = _shape(parents, assigned, node, depth)
    return shape if shape is not None and shape.strip("*/") else None


def _shape(parents: dict, assigned: dict[str, list[cst.BaseExpression]],
           node: cst.BaseExpression, depth: int) -> Optional[str]:
    if depth > _DEPTH:
        return None
    if isinstance(node, cst.SimpleString):
        return string_value(node)
    if isinstance(node, cst.FormattedString):
        return "".join(part.value if isinstance(part, cst.FormattedStringText) else _held(
            cast(cst.FormattedStringExpression, part).expression) for part in node.parts)
    if isinstance(node, (cst.ConcatenatedString, cst.BinaryOperation)):
        return _joined_shape(parents, assigned, node, depth)
    if isinstance(node, cst.Subscript):  # `sorted(glob(...))[:-k]`: some of the same paths
        return _shape(parents, assigned, node.value, depth + 1)
    if isinstance(node, cst.Call):
        return _call_shape(parents, assigned, node, depth)
    if isinstance(node, cst.Name):
        return _name_shape(parents, assigned, node, depth)
    return _held(node) if isinstance(node, cst.Attribute) else None


def _joined_shape(parents: dict, assigned: dict[str, list[cst.BaseExpression]],
                  node: cst.ConcatenatedString | cst.BinaryOperation, depth: int) -> Optional[str]:
    """`"ckpt/" + name`, `folder / "best.pt"`, `"epoch%d.pt" % epoch`, implicit concatenation."""
    def inner(part: cst.BaseExpression) -> str:
        return _shape(parents, assigned, part, depth + 1) or "*"

    if isinstance(node, cst.ConcatenatedString):
        return inner(node.left) + inner(node.right)
    if isinstance(node.operator, cst.Add):
        return inner(node.left) + inner(node.right)
    if isinstance(node.operator, cst.Divide):
        return inner(node.left) + "/" + inner(node.right)
    if isinstance(node.operator, cst.Modulo) and isinstance(node.left, cst.SimpleString):
        return _PERCENT_FIELD.sub("*", string_value(node.left) or "")
    return None


def _held(node: cst.BaseExpression) -> str:
    """What an unknown part stands for: a name or attribute, itself; anything else, `*`."""
    name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    return f"<{name}>" if name is not None else "*"


def _call_shape(parents: dict, assigned: dict[str, list[cst.BaseExpression]],
                call: cst.Call, depth: int) -> Optional[str]:
    name = dotted_name(call.func) or ""
    last = name.rpartition(".")[2]
    args = [arg.value for arg in call.args if not arg.star]
    if not args and not (isinstance(call.func, cst.Attribute) and last in _GLOBS):
        return None

    def inner(part: cst.BaseExpression) -> str:
        return _shape(parents, assigned, part, depth + 1) or "*"

    if last == "join" and isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) in (
            "os.path", "osp", "path", "posixpath"):
        return "/".join(inner(arg) for arg in args)
    if last == "format" and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.SimpleString):
        return _FORMAT_FIELD.sub("*", string_value(call.func.value) or "")
    if name in _SAME_PATH:
        return _shape(parents, assigned, args[0], depth + 1)
    if last in _GLOBS:
        if isinstance(call.func, cst.Attribute) and name not in ("glob.glob", "glob.iglob"):
            # `Path(folder).glob("epoch*.pt")`: the pattern under the folder.
            return inner(call.func.value) + "/" + (inner(args[0]) if args else "*")
        return inner(args[0])
    return None


def _name_shape(parents: dict, assigned: dict[str, list[cst.BaseExpression]],
                name: cst.Name, depth: int) -> Optional[str]:
    """A name bound once (`best = os.path.join("ckpt", "epoch3.pt")`), or the variable of a
    loop over listed files (`for stale in glob.glob("ckpt/*.pt"):`)."""
    for ancestor in ancestors_up_to(parents, name, None):
        if isinstance(ancestor, (cst.For, cst.CompFor)) and isinstance(ancestor.target, cst.Name) \
                and ancestor.target.value == name.value:
            listed = [call for call in calls_within(ancestor.iter)
                      if (dotted_name(call.func) or "").rpartition(".")[2] in _GLOBS]
            return _shape(parents, assigned, listed[0], depth + 1) if listed else _held(name)
    values = _bound_here(parents, assigned, name)
    return (_shape(parents, assigned, values[0], depth + 1) if len(values) == 1 else None) or _held(name)


def _bound_here(parents: dict, assigned: dict[str, list[cst.BaseExpression]], name: cst.Name
                ) -> list[cst.BaseExpression]:
    """The values the name is bound to, where each binding is in the name's own function (a
    parameter of the same name in another function is another value)."""
    values = assigned.get(name.value, [])
    function = _function_of(parents, name)
    return values if all(_function_of(parents, value) is function for value in values) else []


def _function_of(parents: dict, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
    return next((ancestor for ancestor in ancestors_up_to(parents, node, None)
                 if isinstance(ancestor, cst.FunctionDef)), None)


def has_a_written_part(shape: Optional[str]) -> bool:
    """The shape holds text the code wrote (a string or a glob pattern), not names alone."""
    return shape is not None and bool(re.sub(r"<[^>]*>", "", shape).strip("*/"))


def may_be_within(path: str, deleted: str) -> bool:
    """Whether a file of shape `path` may be the one deleted (shape `deleted`, a glob pattern
    among them) or lie in that folder."""
    path, deleted = _normal(path), _normal(deleted)
    return fnmatch.fnmatchcase(path, deleted) or fnmatch.fnmatchcase(deleted, path) or (
        fnmatch.fnmatchcase(path, deleted + "/*"))


def _normal(shape: str) -> str:
    shape = re.sub(r"/+", "/", shape)
    while shape.startswith("./"):
        shape = shape[2:]
    return shape.rstrip("/")


def path_fields(parents: dict, assigned: dict[str, list[cst.BaseExpression]], node: cst.BaseExpression,
                depth: int = 0) -> list[str]:
    """The code of the expressions formatted into the path, in order, through names bound
    once: `epoch` for `os.path.join("ckpt", f"epoch{epoch}.pt")`, `epoch - 2` for
    `f"ckpt/epoch{epoch - 2}.pt"`. Two paths of one shape with other fields name other files
    in the same pass."""
    if depth > _DEPTH:
        return []
    if isinstance(node, cst.FormattedString):
        return [_code(part.expression) for part in node.parts if isinstance(part, cst.FormattedStringExpression)]
    if isinstance(node, cst.Name):
        values = _bound_here(parents, assigned, node)
        return path_fields(parents, assigned, values[0], depth + 1) if len(values) == 1 else []
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Modulo) and isinstance(node.left, cst.SimpleString):
            return [_code(node.right)]
        return [*path_fields(parents, assigned, node.left, depth + 1),
                *path_fields(parents, assigned, node.right, depth + 1)]
    if isinstance(node, cst.Call):
        name = dotted_name(node.func) or ""
        if name.endswith(".format") and isinstance(node.func, cst.Attribute) \
                and isinstance(node.func.value, cst.SimpleString):
            return [_code(arg.value) for arg in node.args]
        if name.endswith(".join") or name in _SAME_PATH:
            return [field for arg in node.args if not arg.star
                    for field in path_fields(parents, assigned, arg.value, depth + 1)]
    return []


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
