"""Names the output reads that nothing binds (DDP919): a rewrite that names the setup's
`device` (or `is_main`, a helper) where the setup did not define it raises NameError on the
first run, on every rank. Found with the stdlib's `symtable`, scope by scope, as Python
resolves names; a name the original already read unbound (a `from x import *`, an `exec`)
is the user's, not ours. Also a name a scope binds on some paths only and reads where the
others lead (ddpify.selfcheck.bound): a sampler bound in one arm of an `if` and read after
it raises UnboundLocalError on the other arm; again only where the original's same scope
did not already read that name so.
"""
import ast
import builtins
import symtable
from collections.abc import Iterator

from ddpify import ast_walk
from ddpify.selfcheck.bound import possibly_unbound
from ddpify.selfcheck.source import Source

Finding = tuple[str, int, str]

# What every module has without binding it.
MODULE_ATTRIBUTES = frozenset({
    "__name__", "__file__", "__doc__", "__builtins__", "__spec__", "__loader__", "__package__",
    "__path__", "__annotations__", "__dict__", "__debug__",
})


def names_read_unbound(before: Source, original: str, after: Source, migrated: str) -> Iterator[Finding]:
    if _star_import(after):
        return  # anything may come from the star
    # (The original's names are read only when the output reads one unbound: most read none.)
    new = _unbound(migrated)
    if new:
        new -= _unbound(original)
    if new:
        for node in ast_walk.walk(after.tree):
            if new and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in new:
                new.discard(node.id)
                yield "DDP919", node.lineno, f"`{node.id}` is read here, and nothing in the file binds it"
    found = possibly_unbound(after.tree)
    already = possibly_unbound(before.tree) if found else {}  # (most outputs have none: skip the reading)
    for (scope, name), read in sorted(found.items(), key=lambda item: item[1].lineno):
        if (scope, name) not in already:
            where = f"`{scope}`" if scope else "the module"
            yield ("DDP919", read.lineno, f"`{name}` is read here, but {where} binds it only on some paths "
                   f"to this line: the others raise UnboundLocalError or NameError")


def _unbound(code: str) -> set[str]:
    """Names some scope reads as a global that neither the module binds nor Python provides."""
    try:
        table = symtable.symtable(code, "<migrated>", "exec")
    except SyntaxError:
        return set()
    bound = set(dir(builtins)) | MODULE_ATTRIBUTES
    scopes = [table]
    while scopes:
        scope = scopes.pop()
        scopes.extend(scope.get_children())
        for symbol in scope.get_symbols():
            at_module = scope is table or symbol.is_declared_global()
            if at_module and (symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()
                              or symbol.is_parameter()):
                bound.add(symbol.get_name())
    found: set[str] = set()
    scopes = [table]
    while scopes:
        scope = scopes.pop()
        scopes.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if not symbol.is_referenced() or symbol.get_name() in bound:
                continue
            if scope is table or symbol.is_global():
                found.add(symbol.get_name())
    return found


def _star_import(source: Source) -> bool:
    return any(isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names)
               for node in source.nodes)
