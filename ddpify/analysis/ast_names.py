"""Dotted names of `ast` expressions, for the modules that read source with `ast` (the
effects of other modules, the loaders they return, the inert-module pre-filter): one reader
that none of them owns, so that each can import it without importing the others."""
import ast
from typing import Optional


def dotted_ast(node: ast.expr) -> Optional[str]:
    """`a.b.c` for a chain of attributes on a name; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))
