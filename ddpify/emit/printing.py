"""libcst's `Module.code_for_node`, without a `contextlib` generator per node.

Every node's codegen opens `state.record_syntactic_position(...)`, which libcst's plain
state makes a `@contextmanager` generator that records nothing: a generator, a context
manager object and their calls for each of them, more than a third of printing a snippet.
Here it is one shared, stateless context manager. The tokens are libcst's own, so the text
is the same (tests/test_inert.py holds the two to it).
"""
import libcst as cst
from libcst._nodes.internal import CodegenState


class _Nothing:
    """A context manager that does nothing: one object serves every (nested) use."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exception: object) -> None:
        return None


_NOTHING = _Nothing()


class _PrintState(CodegenState):
    __slots__ = ()

    # libcst types it as a generator-based context manager; nodes only enter and exit it.
    def record_syntactic_position(self, *_node: object, **_around: object) -> _Nothing:  # type: ignore[override]
        return _NOTHING


def code_for_node(module: cst.Module, node: cst.CSTNode) -> str:
    """`module.code_for_node(node)`: node's code with the module's indent and newline."""
    state = _PrintState(default_indent=module.default_indent, default_newline=module.default_newline)
    node._codegen(state)
    return "".join(state.tokens)
