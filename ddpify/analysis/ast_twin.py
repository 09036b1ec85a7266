"""The stdlib `ast` tree of the module being migrated, parsed once per migration.

api.migrate_source compiles the source with the stdlib (syntax.checked_tree) before libcst
parses it. The rules that read the module with `ast` (rules/part_runs.py) take that tree
rather than print the libcst module and parse its text again: the print alone costs about
what libcst's parse does. A libcst module prints as exactly the text it was parsed from, so
both trees are of one text. Emptied when the migration ends (analysis.memo), as every memo is.
"""
import ast
import warnings
from typing import Optional

import libcst as cst

from ddpify.analysis import memo

_TWINS: dict[cst.Module, Optional[ast.Module]] = memo.per_migration_store()


def remember(module: cst.Module, tree: ast.Module) -> None:
    """`tree` is the stdlib's tree of the text `module` was parsed from."""
    _TWINS[module] = tree


def of(module: cst.Module) -> Optional[ast.Module]:
    """The module's `ast` tree (None where the stdlib does not parse its text)."""
    if module not in _TWINS:
        try:
            with warnings.catch_warnings():
                # Warnings about the script's code (invalid escapes) are for its author, not for us.
                warnings.simplefilter("ignore")
                _TWINS[module] = ast.parse(module.code)
        except SyntaxError:
            _TWINS[module] = None
    return _TWINS[module]
