"""Add the imports the emitted code needs, where isort would put them.

libcst's AddImportsVisitor appends new imports after the last one, so `import os` lands
below `import torch` and every diff shows an import block a reviewer would re-sort by hand.
Here each missing import goes to its sorted place in the leading import block (stdlib,
third party; plain imports before from-imports; by module), which matches isort's default
and leaves the existing lines untouched.
"""
import functools
import sys
from collections.abc import Sequence
from typing import Optional, Union, cast

import libcst as cst

from ddpify.analysis import traversal
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import dotted_name
from ddpify.emit.layout import LINE_LENGTH

# (module, imported name or None, alias or None): ("torch.distributed", None, "dist").
ImportSpec = tuple[str, Optional[str], Optional[str]]
# isort's sort key of an import: (section, is a from-import, module).
SortKey = tuple[int, bool, str]

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"os", "sys", "contextlib"}


def add_imports(module: cst.Module, specs: Sequence[ImportSpec]) -> cst.Module:
    body = list(module.body)
    start, end = import_block(body)
    present = _present(body[start:end])
    missing = [spec for spec in dict.fromkeys(specs) if spec not in present]
    config = module.config_for_parsing  # (a new config, validated, on every read)
    for spec in missing:
        if spec in present:
            continue
        # Names new to the file from one module share one line (`from m import a, b`).
        together = [other for other in missing if other[0] == spec[0] and other[1] and not other[2]
                    ] if spec[1] and not spec[2] else [spec]
        imported = sorted(name for _, name, _ in together if name)
        code = _from_import(spec[0], imported) if len(together) > 1 else _code(spec)
        statement = _import_statement(code, config)
        body, end = _insert_sorted(body, start, end, statement, _key_of_spec(spec))
        present.update(together)
    return module.with_changes(body=body)


# The same few import lines (`import torch.distributed as dist`, ...) are parsed for file
# after file: libcst trees never change, so one parse serves every migration (as the
# templates of emit/edits.py do); add_imports puts each line in a module once.
@functools.lru_cache(maxsize=256)
def _import_statement(code: str, config: cst.PartialParserConfig) -> Statement:
    return cst.parse_statement(code, config=config)


def remove_unused_imports(module: cst.Module, specs: Sequence[ImportSpec]) -> cst.Module:
    """Drop `from M import N` names that the migrated code no longer uses (DataParallel).

    Only DataParallel files pay for this: one look for the name outside its import,
    rather than libcst's RemoveImportsVisitor and the scope analysis it needs.
    """
    body: list[Union[Statement, cst.RemovalSentinel]] = list(module.body)
    for index, statement in enumerate(module.body):
        for node in imports_of(statement):
            if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
                continue
            source = dotted_name(node.module) if node.module is not None else None
            kept = [alias for alias in node.names if not (
                (source, _name(alias), _alias(alias)) in specs
                and not _used_elsewhere(module, statement, _alias(alias) or _name(alias)))]
            if len(kept) == len(node.names):
                continue
            if not kept:
                body[index] = cst.RemovalSentinel.REMOVE
            else:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                body[index] = statement.with_changes(body=[node.with_changes(names=kept)])
    return module.with_changes(body=[s for s in body if s is not cst.RemovalSentinel.REMOVE])


def _used_elsewhere(module: cst.Module, import_statement: cst.BaseStatement, name: str) -> bool:
    used = []

    class _Uses(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                used.append(node)

    for statement in module.body:
        if statement is not import_statement:
            traversal.visit(statement, _Uses())
    return bool(used)


def _from_import(module: str, imported: Sequence[str]) -> str:
    """`from m import a, b`, or one name a line in parentheses when that is too long (isort)."""
    line = f"from {module} import {', '.join(imported)}"
    if len(line) <= LINE_LENGTH:
        return line + "\n"
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in imported) + ")\n"


def _code(spec: ImportSpec) -> str:
    module, name, alias = spec
    suffix = f" as {alias}" if alias else ""
    return f"from {module} import {name}{suffix}\n" if name else f"import {module}{suffix}\n"


def import_block(body: Sequence[cst.BaseStatement]) -> tuple[int, int]:
    """[start, end) of the imports at the top, after a docstring."""
    start = 0
    if body and _is_docstring(body[0]):
        start = 1
    end = start
    while end < len(body) and imports_of(body[end]):
        end += 1
    return start, end


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def imports_of(statement: cst.CSTNode) -> list[Union[cst.Import, cst.ImportFrom]]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    if not all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
        return []
    # Every small statement was just checked to be an import.
    return cast(list[Union[cst.Import, cst.ImportFrom]], list(statement.body))


def _present(block: Sequence[cst.BaseStatement]) -> set[tuple[Optional[str], Optional[str], Optional[str]]]:
    present: set[tuple[Optional[str], Optional[str], Optional[str]]] = set()
    for statement in block:
        for node in imports_of(statement):
            if isinstance(node, cst.Import):
                for alias in node.names:
                    present.add((dotted_name(alias.name), None, _alias(alias)))
            elif node.module is not None and not node.relative and not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    present.add((dotted_name(node.module), _name(alias), _alias(alias)))
    return present


def _alias(alias: cst.ImportAlias) -> Optional[str]:
    # libcst types AsName.name for `with`/`except` targets too; in an import it is a Name.
    return cast(cst.Name, alias.asname.name).value if alias.asname is not None else None


def _name(alias: cst.ImportAlias) -> str:
    """The imported name of a from-import alias: a plain Name (only `import a.b` dots it)."""
    return cast(cst.Name, alias.name).value


def _key_of_spec(spec: ImportSpec) -> SortKey:
    module, name, _ = spec
    return (_section(module), name is not None, module.lower())


def _key_of(statement: cst.BaseStatement) -> SortKey:
    node = imports_of(statement)[0]
    if isinstance(node, cst.Import):
        module = dotted_name(node.names[0].name) or ""
        return (_section(module), False, module.lower())
    source = dotted_name(node.module) if node.module is not None else ""
    section = 3 if node.relative else _section(source or "")
    return (section, True, (source or "").lower())


def _section(module: str) -> int:
    top = module.split(".")[0]
    if top == "__future__":
        return 0
    return 1 if top in _STDLIB else 2


def _insert_sorted(body: list[Statement], start: int, end: int, statement: Statement,
                   key: SortKey) -> tuple[list[Statement], int]:
    index = next((i for i in range(start, end) if _key_of(body[i]) > key), end)
    previous_section = _key_of(body[index - 1])[0] if index > start else None
    next_section = _key_of(body[index])[0] if index < end else None
    if previous_section == key[0]:
        statement = statement.with_changes(leading_lines=())
    elif index == end and index < len(body):
        # A new section at the end of the imports: the code below keeps the blank lines that
        # set it apart from the imports (two before a def or class).
        following = body[index]
        if previous_section is not None:
            statement = statement.with_changes(leading_lines=[cst.EmptyLine()])
        elif index == 0 and all(line.comment is None for line in following.leading_lines):
            # The file's first line: blank lines before it (two before an inserted helper
            # function, in a file with no imports) would open the file.
            blank = 2 if isinstance(following, (cst.FunctionDef, cst.ClassDef)) else 1
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine()] * blank)
        else:
            statement = statement.with_changes(leading_lines=following.leading_lines)
            blank = 2 if isinstance(following, (cst.FunctionDef, cst.ClassDef)) else 1
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine()] * blank)
    elif index < len(body):
        # First of its section: it takes the blank lines and comments that led into the
        # next line, and a blank line separates it from a following section.
        statement = statement.with_changes(leading_lines=body[index].leading_lines)
        if next_section != key[0]:
            body[index] = body[index].with_changes(leading_lines=[cst.EmptyLine()])
        else:
            body[index] = body[index].with_changes(leading_lines=())
        if previous_section is not None:
            statement = statement.with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(index, statement)
    return body, end + 1
