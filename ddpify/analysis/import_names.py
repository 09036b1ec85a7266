"""The module names an import by a computed name can load, read from the module's own code.

A model registry imports the network's module by name: `importlib.import_module("models." +
args.model)`, or through a table of names built from the folder's listing
(`model_map[name] = f"{models_dir}.{name}"`, handed to a lazy dict whose `__getitem__`
imports `self.model_map[key]`). The part the command line chooses is unknown; the part the
code writes is not: every name begins `models.`, so the module loaded is one of the package's.
A name is read as the strings it can hold, each either whole or a known beginning
(`Text(prefix, open=True)`), through assignments, `self` attributes, the entries a dict is
given, function returns and the arguments every caller hands a parameter, inside this
module only. Anything else (a loop variable, a slice, a call of another module) is unknown.
"""
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis.nodes import argument_among, find_all, parameter_names, positional_parameters, string_value
from ddpify.analysis.traversal import preorder

# A chain of names past this is following something it should not.
MAX_DEPTH = 12

Scope = Union[cst.FunctionDef, cst.Module]


@dataclass(frozen=True)
class Text:
    value: str
    open: bool = False  # the string goes on past `value` with a part the code does not write


class LoadedNames:
    """Reads one module: `loaded_by(call)` is every name `call`'s first argument can hold."""

    def __init__(self, module: cst.Module, parents: Mapping[cst.CSTNode, cst.CSTNode], module_name: str) -> None:
        self.module = module
        self.parents = parents
        self.module_name = module_name

    def loaded_by(self, call: cst.Call) -> Optional[set[Text]]:
        if not call.args or call.args[0].keyword is not None:
            return None
        scope = self._scope_of(call)
        names = self._strings(call.args[0].value, scope, 0)
        if names is None or not any(name.value.startswith(".") for name in names):
            return names
        # `import_module("." + name, package=__name__)`: relative to the package handed in.
        package = next((arg.value for arg in call.args[1:] if arg.keyword is None or arg.keyword.value == "package"),
                       None)
        packages = self._strings(package, scope, 0) if package is not None else None
        if packages is None or any(each.open for each in packages) or any(
                name.value.startswith("..") for name in names):
            return None
        return {Text(base.value + name.value, name.open) if name.value.startswith(".") else name
                for base in packages for name in names}

    # Strings -----------------------------------------------------------------------------

    def _strings(self, value: cst.BaseExpression, scope: Scope, depth: int) -> Optional[set[Text]]:
        if depth > MAX_DEPTH:
            return None
        text = string_value(value) if isinstance(value, cst.SimpleString) else None
        if text is not None:
            return {Text(text)}
        if isinstance(value, cst.FormattedString):
            return self._joined([part.expression if isinstance(part, cst.FormattedStringExpression)
                                 else cast(cst.FormattedStringText, part).value for part in value.parts], scope, depth)
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            return self._joined([value.left, value.right], scope, depth)
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo):
            return self._template(value.left, "%")
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value == "format":
                return self._template(value.func.value, "{")
            separator = string_value(value.func.value) if isinstance(value.func.value, cst.SimpleString) else None
            if value.func.attr.value == "join" and separator is not None and len(value.args) == 1 \
                    and isinstance(value.args[0].value, (cst.List, cst.Tuple)):
                parts: list[Union[str, cst.BaseExpression]] = []
                for index, element in enumerate(value.args[0].value.elements):
                    parts += [separator, element.value] if index else [element.value]
                return self._joined(parts, scope, depth)
        if isinstance(value, cst.Name) and value.value == "__name__":
            return {Text(self.module_name)}
        if isinstance(value, cst.Subscript) and _single_index(value):
            return self._entries(value.value, scope, depth + 1)
        return self._bound(value, scope, depth, self._strings)

    def _joined(self, parts: list[Union[str, cst.BaseExpression]], scope: Scope, depth: int) -> Optional[set[Text]]:
        """The parts one after another: a part the code does not write leaves the rest open."""
        heads = {Text("")}
        for part in parts:
            found = {Text(part)} if isinstance(part, str) else self._strings(part, scope, depth + 1)
            if found is None:
                return {Text(head.value, True) for head in heads}
            heads = {head if head.open else Text(head.value + each.value, each.open)
                     for head in heads for each in found}
        return heads

    @staticmethod
    def _template(template: cst.BaseExpression, marker: str) -> Optional[set[Text]]:
        text = string_value(template) if isinstance(template, cst.SimpleString) else None
        if text is None:
            return None
        return {Text(text.partition(marker)[0], marker in text)}

    # Containers: the strings a dict or list is given ------------------------------------

    def _entries(self, container: cst.BaseExpression, scope: Scope, depth: int) -> Optional[set[Text]]:
        if depth > MAX_DEPTH:
            return None
        if isinstance(container, cst.Dict):
            return self._union([element.value for element in container.elements
                                if isinstance(element, cst.DictElement)], scope, depth, self._strings)
        if isinstance(container, (cst.List, cst.Tuple)):
            if any(isinstance(element, cst.StarredElement) for element in container.elements):
                return None
            return self._union([element.value for element in container.elements], scope, depth, self._strings)
        if isinstance(container, cst.Call) and isinstance(container.func, cst.Name) \
                and container.func.value == "dict" and not container.args:
            return set()
        found = self._bound(container, scope, depth, self._entries)
        if found is None:
            return None
        stored = self._stored_entries(container, scope)
        if stored is None:
            return None
        more = self._union([value for value, _ in stored], scope, depth, self._strings, [where for _, where in stored])
        return None if more is None else found | more

    def _stored_entries(self, container: cst.BaseExpression,
                        scope: Scope) -> Optional[list[tuple[cst.BaseExpression, Scope]]]:
        """`d[k] = v` wherever `d` (a name of the scope, or `self.d` in the class) is written
        into; None when it is changed some other way (`d.update(...)`)."""
        key = _key(container)
        if key is None:
            return []
        stored: list[tuple[cst.BaseExpression, Scope]] = []
        for where in self._scopes_sharing(container, scope):
            for assign in find_all(_body(where), cst.Assign, into_functions=False):
                for target in assign.targets:
                    if isinstance(target.target, cst.Subscript) and _key(target.target.value) == key:
                        stored.append((assign.value, where))
            for call in find_all(_body(where), cst.Call, into_functions=False):
                if isinstance(call.func, cst.Attribute) and _key(call.func.value) == key \
                        and call.func.attr.value in ("update", "setdefault", "append", "extend", "insert"):
                    return None
        return stored

    # Names: what a name or `self` attribute is bound to ----------------------------------

    def _bound(self, value: cst.BaseExpression, scope: Scope, depth: int, read) -> Optional[set[Text]]:
        """The values a name, `self.x` or a call of a function of this module can hold, each read
        with `read` (strings, or the entries of a container)."""
        if isinstance(value, cst.Call):
            function = self._callee(value, scope)
            if function is None:
                return None
            returned = [each.value for each in find_all(function.body, cst.Return, into_functions=False)]
            if not returned or any(each is None for each in returned):
                return None
            return self._union(cast(list[cst.BaseExpression], returned), function, depth, read)
        bindings = self._bindings(value, scope)
        if not bindings:
            return None
        return self._union([each for each, _ in bindings], scope, depth, read, [where for _, where in bindings])

    def _bindings(self, value: cst.BaseExpression, scope: Scope) -> Optional[list[tuple[cst.BaseExpression, Scope]]]:
        """Each value assigned to a name or `self.x`, and for a parameter what every caller
        hands it; None when it is also bound some other way (a loop, an unpacking)."""
        key = _key(value)
        if key is None:
            return None
        bindings: list[tuple[cst.BaseExpression, Scope]] = []
        for where in self._scopes_sharing(value, scope):
            for node in _nodes_in(_body(where)):
                if isinstance(node, (cst.For, cst.CompFor, cst.With, cst.AugAssign, cst.NamedExpr)) \
                        and key in _bound_keys(node):
                    return None
                if not isinstance(node, (cst.Assign, cst.AnnAssign)) or node.value is None:
                    continue
                targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
                if any(_key(target) == key for target in targets):
                    bindings.append((node.value, where))
                elif any(isinstance(target, (cst.Tuple, cst.List)) and key in _bound_keys(target)
                         for target in targets):
                    return None  # unpacked from a tuple: not followed
        if isinstance(value, cst.Name) and isinstance(scope, cst.FunctionDef) \
                and value.value in parameter_names(scope):
            handed = self._handed(scope, value.value)
            if handed is None:
                return None
            bindings += handed
        return bindings

    def _handed(self, function: cst.FunctionDef, parameter: str) -> Optional[list[tuple[cst.BaseExpression, Scope]]]:
        """What each caller of this module hands the parameter: `LazyModelDict(model_map)` for
        `__init__`'s, `self.method(x)` for a method's, `f(x)` for a function's."""
        owner = self._class_of(function)
        positional = positional_parameters(function)
        if owner is not None:
            positional = positional[1:]
        if parameter not in positional:
            return None
        handed: list[tuple[cst.BaseExpression, Scope]] = []
        for call in find_all(self.module, cst.Call):
            if not self._calls(call, function, owner):
                continue
            argument = argument_among(call, parameter, positional)
            if argument is None:
                return None
            handed.append((argument, self._scope_of(call)))
        return handed or None

    def _calls(self, call: cst.Call, function: cst.FunctionDef, owner: Optional[cst.ClassDef]) -> bool:
        if owner is None:
            return isinstance(call.func, cst.Name) and call.func.value == function.name.value \
                and self.parents.get(function) is self.module
        if function.name.value == "__init__":
            return isinstance(call.func, cst.Name) and call.func.value == owner.name.value
        return isinstance(call.func, cst.Attribute) and _key(call.func.value) == "self" \
            and call.func.attr.value == function.name.value and self._class_around(call) is owner

    def _callee(self, call: cst.Call, scope: Scope) -> Optional[cst.FunctionDef]:
        """The function of this module a call runs: `f(...)` at the top, `self.m(...)` in the class."""
        if isinstance(call.func, cst.Name):
            return next((statement for statement in self.module.body if isinstance(statement, cst.FunctionDef)
                         and statement.name.value == call.func.value), None)
        if isinstance(call.func, cst.Attribute) and _key(call.func.value) == "self" and isinstance(
                scope, cst.FunctionDef):
            owner = self._class_of(scope)
            if owner is not None:
                return _method(owner, call.func.attr.value)
        return None

    def _scopes_sharing(self, value: cst.BaseExpression, scope: Scope) -> list[Scope]:
        """Where a binding of `value` counts: its own function for a name, every method of
        the class for `self.x`."""
        if isinstance(value, cst.Attribute) and isinstance(scope, cst.FunctionDef):
            owner = self._class_of(scope)
            if owner is None:
                return []
            return [statement for statement in owner.body.body if isinstance(statement, cst.FunctionDef)]
        return [scope] if isinstance(value, cst.Name) else []

    def _union(self, values: list[cst.BaseExpression], scope: Scope, depth: int, read,
               scopes: Optional[list[Scope]] = None) -> Optional[set[Text]]:
        found: set[Text] = set()
        for index, each in enumerate(values):
            more = read(each, scopes[index] if scopes else scope, depth + 1)
            if more is None:
                return None
            found |= more
        return found

    # Where a node sits --------------------------------------------------------------------

    def _scope_of(self, node: cst.CSTNode) -> Scope:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            parent = self.parents.get(parent)
        return parent if isinstance(parent, cst.FunctionDef) else self.module

    def _class_of(self, function: cst.FunctionDef) -> Optional[cst.ClassDef]:
        """The class a method is defined in, directly."""
        block = self.parents.get(function)
        owner = self.parents.get(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    def _class_around(self, node: cst.CSTNode) -> Optional[cst.ClassDef]:
        scope = self._scope_of(node)
        return self._class_of(scope) if isinstance(scope, cst.FunctionDef) else None


def _nodes_in(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """Every node within, not inside a nested function."""
    return tuple(preorder(node, lambda child: not isinstance(child, cst.FunctionDef)))


def _body(scope: Scope) -> cst.CSTNode:
    return scope.body if isinstance(scope, cst.FunctionDef) else scope


def _single_index(subscript: cst.Subscript) -> bool:
    return len(subscript.slice) == 1 and isinstance(subscript.slice[0].slice, cst.Index)


def _key(node: cst.BaseExpression) -> Optional[str]:
    """`name` or `self.attr` (`self` for self itself); None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return f"self.{node.attr.value}"
    return None


def _bound_keys(node: cst.CSTNode) -> set[str]:
    """The names and `self.x` a loop, `with`, augmented assignment or unpacking binds."""
    if isinstance(node, (cst.For, cst.CompFor)):
        targets: list[cst.CSTNode] = [node.target]
    elif isinstance(node, cst.With):
        targets = [item.asname.name for item in node.items if item.asname is not None]
    elif isinstance(node, (cst.AugAssign, cst.NamedExpr)):
        targets = [node.target]
    else:
        targets = [node]
    keys: set[str] = set()
    for target in targets:
        for part in _nodes_in(target):
            key = _key(part) if isinstance(part, cst.BaseExpression) else None
            if key is not None:
                keys.add(key)
    return keys


def _method(owner: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    return next((statement for statement in owner.body.body
                 if isinstance(statement, cst.FunctionDef) and statement.name.value == name), None)
