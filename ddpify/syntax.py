"""Python's own verdict on a source, before libcst sees it.

libcst's native parser accepts some sources that Python rejects (1,000 nested parentheses)
and crashes the whole process, with no message, on others (10,000 of them). Python's
compiler rejects both with a clear error, at a fraction of libcst's cost, so every source is
compiled first: what Python cannot run is a syntax error, and libcst never sees it.
"""
import ast
import re
import warnings
from typing import Optional, cast

from ddpify import ast_walk


class Rejected(Exception):
    """Python does not accept the source; `message` says why, in Python's words."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


# Python's own messages for Python 2 code that Python 3 rejects.
_PYTHON2_HINTS = (
    "Missing parentheses in call to",
    "multiple exception types must be parenthesized",
    "leading zeros in decimal integer literals",
    "invalid syntax. Perhaps you forgot a comma?",
)
_PYTHON2_LINE = re.compile(r"print\s+[^\s(=]|exec\s+[\"']|.*`|.*<>")


def checked_tree(text: str, filename: str = "<source>", parsed: Optional[ast.Module] = None) -> ast.Module:
    """The source's `ast` tree, once the whole source has compiled; raises Rejected.
    `parsed` is the tree of `text` where it was read before (a project's walk parses each of
    its modules): only the compiler's own checks are left to run on it."""
    try:
        with warnings.catch_warnings():
            # "is not callable; perhaps you missed a comma?" is for the script's author, who
            # sees it when running it: not something ddpify should print.
            warnings.simplefilter("ignore")
            # PyCF_ONLY_AST in "exec" mode returns an ast.Module.
            tree = parsed if parsed is not None else cast(
                ast.Module, compile(text, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True))
            # The AST alone misses what only the compiler checks (`return` outside a
            # function, nesting too deep for the compiler's recursion limit).
            compile(tree, filename, "exec", dont_inherit=True)
        _check_chains(tree, text)
    except SyntaxError as error:
        raise _rejected(error) from None
    except (RecursionError, MemoryError):
        raise Rejected("syntax error: nested too deeply for Python to compile") from None
    except ValueError as error:  # e.g. null bytes in the source
        raise Rejected(f"syntax error: {error}") from None
    return tree


# `a and b and ...` is one flat node for Python, but libcst's parser recurses once per
# operand and overflows its native stack between 3,000 and 10,000 of them (measured).
MAX_BOOLEAN_OPERANDS = 2000


def _check_chains(tree: ast.Module, text: str) -> None:
    # Each operand after the first is written after an `and` or an `or`: a text with fewer
    # of these letters than the limit holds no chain that long, and needs no walk.
    if text.count("and") + text.count("or") < MAX_BOOLEAN_OPERANDS:
        return
    for node in ast_walk.walk(tree):
        if isinstance(node, ast.BoolOp) and len(node.values) > MAX_BOOLEAN_OPERANDS:
            raise Rejected(f"syntax error: nested too deeply for libcst's parser: an and/or chain "
                           f"of {len(node.values)} operands (at most {MAX_BOOLEAN_OPERANDS})",
                           node.lineno, node.col_offset + 1)


def _rejected(error: SyntaxError) -> Rejected:
    message = f"syntax error: {error.msg}"
    line = (error.text or "").strip()
    if any(hint in error.msg for hint in _PYTHON2_HINTS) or _PYTHON2_LINE.match(line):
        message += " (Python 2 source? ddpify reads Python 3 only)"
    return Rejected(message, error.lineno or 0, error.offset or 0)

