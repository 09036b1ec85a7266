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


def main_guarded(tree: ast.Module) -> bool:
    """The module keeps its work under `if __name__ == "__main__":` at its top level."""
    for statement in tree.body:
        if isinstance(statement, ast.If) and isinstance(statement.test, ast.Compare):
            names = [statement.test.left, *statement.test.comparators]
            if any(isinstance(node, ast.Name) and node.id == "__name__" for node in names) and any(
                    isinstance(node, ast.Constant) and node.value == "__main__" for node in names):
                return True
    return False
