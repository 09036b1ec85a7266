"""The pre-filter (ddpify/analysis/inert.py) and the cheap readers the speed of a project
rests on: each must give what the full, slow reading gives."""
import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from fixture_cases import slow_unless_sampled
from libcst._nodes.base import CSTCodegenError
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify import api, project
from ddpify.analysis import inert, memo, nodes, positions, reading, traversal
from ddpify.emit import printing
from ddpify.options import Options

ROOT = Path(__file__).resolve().parent.parent
# The real-world suite beside the project (DESIGN.md §7), when this checkout has it.
REALWORLD = ROOT.parent / "shared" / "realworld" / "cases"


def _modules() -> list[Path]:
    roots = [ROOT / "fixtures", REALWORLD]
    return sorted(path for root in roots if root.is_dir() for path in root.rglob("*.py"))


def _taken() -> list[Path]:
    """The modules the pre-filter decides on: on every other one both paths are the same code."""
    taken = []
    for path in _modules():
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        if inert.nothing_to_migrate(tree):
            taken.append(path)
    return taken


TAKEN = _taken()


def test_the_pre_filter_takes_modules_of_the_suites():
    assert len(TAKEN) >= 5


@pytest.mark.parametrize("options", [Options(), Options(strategy="fsdp2")], ids=["ddp", "fsdp2"])
@pytest.mark.parametrize("path", TAKEN, ids=lambda path: str(path.relative_to(path.parents[2])))
def test_a_module_the_pre_filter_takes_migrates_as_the_full_reading_has_it(path, options, monkeypatch):
    text = path.read_text(encoding="utf-8")
    view = project.read(str(path), text)
    quick = api.migrate_source(text, options, view)
    monkeypatch.setattr(inert, "nothing_to_migrate", lambda *asked: False)
    full = api.migrate_source(text, options, view)
    assert quick == full
    assert quick.code == text


LAYER = '''
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """A residual block."""

    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.scale = 1 / math.sqrt(width)

    def forward(self, x):
        if x.dim() > 2:
            x = x.flatten(1)
        return x + self.scale * F.relu(self.linear(x))


def total(values, scale=2):
    result = 0.0
    for position, value in enumerate(values):
        result += value * scale if position % 2 else -value
    return {"total": result, "count": len(values)}
'''


def test_a_layer_module_has_nothing_to_migrate():
    assert inert.nothing_to_migrate(ast.parse(LAYER))
    assert inert.nothing_to_migrate(ast.parse("import helpers\n" + LAYER))  # the base of the next test


@pytest.mark.parametrize("added", [
    "print(x)",                                  # output
    "x = x.to(self.device)",                     # a device
    "x = x.cuda()",
    'torch.save(x, "x.pt")',                     # a file
    "self.linear.eval()",                        # a model's mode
    "x = self.model.weight",                     # through an object a subclass may train
    "loss = x.sum(); loss.backward()",           # training
    'y = "cuda:0"',
    'y = x == "cpu"',                            # a device test
    "y = helpers.scale(x)",                      # another module of the project
    "y = torch.utils.data.DataLoader(x)",
    "y = open(x)",
    "y = x.item()",
    "y = len(x, download=True)",
])
def test_a_module_with_anything_off_the_lists_is_read_in_full(added):
    source = LAYER.replace("        return x + self.scale", f"        {added}\n        return x + self.scale")
    source = "import helpers\n" + source
    assert not inert.nothing_to_migrate(ast.parse(source))


@pytest.mark.parametrize("source", [
    'if __name__ == "__main__":\n    main()\n',    # code that runs
    "from .utils import *\n",                     # names nobody can list
    "import torch\ntorch.manual_seed(0)\n",
    "import torch.nn as nn\n\n\nclass Data(torch.utils.data.Dataset):\n    pass\n",
    "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def f(self):\n        import os\n",
])
def test_modules_that_do_something_on_import_or_hide_names_are_read_in_full(source):
    assert not inert.nothing_to_migrate(ast.parse(source))


def test_a_project_helper_the_pre_filter_takes_keeps_what_the_full_reading_reports(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("import torch\nfrom layers import Block\n\nmodel = Block(4)\n")
    (tmp_path / "layers.py").write_text(LAYER.replace("class Block", "class Unused").replace(
        "def total", "class Block(nn.Module):\n    pass\n\n\ndef total"))
    for name in ("layers.py", "train.py"):
        text = (tmp_path / name).read_text()
        view = project.read(str(tmp_path / name), text)
        quick = api.migrate_source(text, Options(), view)
        with monkeypatch.context() as patched:
            patched.setattr(inert, "nothing_to_migrate", lambda *asked: False)
            assert api.migrate_source(text, Options(), view) == quick


@pytest.mark.slow
def test_a_project_module_the_pre_filter_takes_with_its_project_migrates_as_the_full_reading_has_it(monkeypatch):
    """Asked with its project, the pre-filter also takes what calls the project's inert
    definitions (a model built from its layers, a package re-exporting its modules): every
    module of fixtures/projects it takes that way migrates as the full reading has it."""
    compared = 0
    for path in sorted((ROOT / "fixtures" / "projects").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        view = project.read(str(path), text)
        if inert.nothing_to_migrate(tree) or not inert.nothing_to_migrate(tree, view.inert_definition, view.package):
            continue
        quick = api.migrate_source(text, Options(), view)
        with monkeypatch.context() as patched:
            patched.setattr(inert, "nothing_to_migrate", lambda *asked: False)
            assert api.migrate_source(text, Options(), view) == quick, path
        assert quick.code == text
        compared += 1
    assert compared >= 4


def _project_with_layers(tmp_path, layer: str) -> None:
    (tmp_path / "layers").mkdir()
    (tmp_path / "layers" / "__init__.py").write_text("from .blocks import *\n")
    (tmp_path / "layers" / "blocks.py").write_text(layer)
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\nfrom layers import Block\nfrom layers.blocks import total\n\n\n"
        "def build_model(width):\n    return nn.Sequential(Block(width), Block(width), nn.Linear(width, 2))\n\n\n"
        "def summary(values):\n    return total(values)\n")
    (tmp_path / "train.py").write_text("import torch\nfrom model import build_model\n\nmodel = build_model(4)\n")


def _inert_here(path: Path) -> bool:
    text = path.read_text()
    view = project.read(str(path), text)
    return inert.nothing_to_migrate(ast.parse(text), view.inert_definition, view.package)


def test_a_module_that_builds_from_the_projects_inert_layers_is_inert_too(tmp_path):
    _project_with_layers(tmp_path, LAYER)
    assert not inert.nothing_to_migrate(ast.parse((tmp_path / "model.py").read_text()))  # alone, it cannot tell
    assert _inert_here(tmp_path / "model.py")
    assert _inert_here(tmp_path / "layers" / "__init__.py")  # a re-export of the project's own modules


@pytest.mark.parametrize("added", ["print(x)", "x = x.cuda()", 'torch.save(x, "x.pt")'])
def test_a_module_that_calls_a_project_definition_with_something_to_migrate_is_read_in_full(tmp_path, added):
    _project_with_layers(tmp_path, LAYER.replace("        return x + self.scale",
                                                 f"        {added}\n        return x + self.scale"))
    assert not _inert_here(tmp_path / "model.py")
    for name in ("model.py", "layers/blocks.py"):
        text = (tmp_path / name).read_text()
        view = project.read(str(tmp_path / name), text)
        assert api.migrate_source(text, Options(), view) is not None


class _Order(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.seen.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)  # a subtree left out, as a visitor may

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.seen.append(("leave", id(original_node)))


# A sample: every twelfth script, every fourth module of the projects; of those, the fast tier
# takes one in FAST_SAMPLE (fixture_cases.slow_unless_sampled) and CI's slow tier the rest.
SOURCES = sorted((ROOT / "fixtures").glob("*/*/input.py"))[::12] + sorted(
    (ROOT / "fixtures" / "projects").rglob("*.py"))[::4]
SAMPLED_SOURCES = [pytest.param(path, id=str(path.relative_to(ROOT / "fixtures")), marks=slow_unless_sampled(index))
                   for index, path in enumerate(SOURCES)]


@pytest.mark.parametrize("path", SAMPLED_SOURCES)
def test_the_read_only_walk_visits_what_libcst_visits_in_its_order(path):
    tree = cst.parse_module(path.read_text(encoding="utf-8"))
    theirs, ours = _Order(), _Order()
    tree.visit(theirs)
    traversal.visit(tree, ours)
    assert ours.seen == theirs.seen


@pytest.mark.parametrize("path", SOURCES[::10], ids=lambda path: str(path.relative_to(ROOT / "fixtures")))
def test_children_and_the_preorder_are_libcsts_children_and_visit_order(path):
    tree = cst.parse_module(path.read_text(encoding="utf-8"))
    visited = _Order()
    tree.visit(visited)
    walked = [id(node) for node in traversal.preorder(tree, lambda node: not isinstance(node, cst.Lambda))]
    assert walked == [node for event, node in visited.seen if event == "visit"]
    for node in traversal.preorder(tree, lambda node: True):
        assert [id(child) for child in traversal.children(node)] == [id(child) for child in node.children]


def test_the_walk_visits_an_f_string_format_spec_only_where_there_is_one():
    tree = cst.parse_module('a = f"{x}"\nb = f"{y:>{width}}"\nc = f"{z}"\n')
    theirs, ours = _Order(), _Order()
    tree.visit(theirs)
    traversal.visit(tree, ours)
    assert ours.seen == theirs.seen


@pytest.mark.parametrize("path", SAMPLED_SOURCES)
def test_import_statements_come_in_the_order_of_ast_walk(path):
    tree = ast.parse(path.read_bytes())
    assert project.import_statements(tree) == [
        node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_import_statements_inside_handlers_and_branches_keep_the_walks_order():
    tree = ast.parse(textwrap.dedent("""
        try:
            import a
        except ImportError:
            import b
        else:
            import c
        finally:
            import d
        if x:
            def f():
                import e
        import g
    """))
    assert [alias.name for node in project.import_statements(tree) for alias in node.names] == [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]


@pytest.mark.parametrize("path", SAMPLED_SOURCES)
def test_positions_are_libcsts(path):
    tree = cst.parse_module(path.read_text(encoding="utf-8"))
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    ours = positions.Positions(tree)
    assert dict(ours) == dict(wrapper.resolve(PositionProvider))


@pytest.mark.parametrize("path", SAMPLED_SOURCES)
def test_printing_is_libcsts(path):
    tree = cst.parse_module(path.read_text(encoding="utf-8"))
    for node in [tree, *traversal.preorder(tree, lambda _node: True)][::7]:
        try:
            expected = tree.code_for_node(node)
        except CSTCodegenError:  # a node that prints only in its parent (an annotation)
            continue
        assert printing.code_for_node(tree, node) == expected


def test_no_memo_outlives_its_migration():
    """The memos of ddpify.analysis.memo are keyed by nodes: one left filled after its
    migration would keep that file's whole tree alive through a walk over many files."""
    source = (ROOT / "fixtures" / "guide" / "guide_image_classifier" / "input.py").read_text(encoding="utf-8")
    assert api.migrate_source(source).diagnostics
    assert [memo_ for memo_ in memo._MEMOS if memo_.cache_info().currsize] == []
    assert len(memo._MEMOS) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLED_SOURCES)
def test_subtrees_read_from_the_visit_order_are_walks(path):
    """nodes.find_all slices the analysed module's visit order (reading.analyse records it):
    every function, class, loop and statement gives what a walk of it gives, with and without
    the insides of nested functions."""
    tree = cst.parse_module(path.read_text(encoding="utf-8"))
    try:
        reading.analyse(MetadataWrapper(tree, unsafe_skip_copy=True))
        for node in traversal.preorder(tree, lambda _: True):
            if not isinstance(node, (cst.Module, cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.If,
                                     cst.IndentedBlock, cst.SimpleStatementLine)):
                continue
            for into_functions in (True, False):
                walked = tuple(traversal.preorder(
                    node, lambda child, into=into_functions: into or not isinstance(child, cst.FunctionDef)))
                assert nodes._subtree(node, into_functions) == walked
    finally:
        memo.clear()
