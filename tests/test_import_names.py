"""The names an import by a computed name can load (ddpify.analysis.import_names), read from
the module's own code: known parts kept, the part the command line picks left open."""
import libcst as cst
import pytest

from ddpify.analysis.import_names import LoadedNames, Text


class _Parents(cst.CSTVisitor):
    def __init__(self) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        for child in node.children:
            self.parents[child] = node
        return True


def loaded(source: str, module_name: str = "train"):
    module = cst.parse_module(source)
    finder = _Parents()
    module.visit(finder)
    call = next(node for node in finder.parents if isinstance(node, cst.Call)
                and isinstance(node.func, (cst.Name, cst.Attribute))
                and (node.func.value if isinstance(node.func, cst.Name) else node.func.attr.value) == "import_module")
    return LoadedNames(module, finder.parents, module_name).loaded_by(call)


@pytest.mark.parametrize("spelling", [
    '"models." + args.model', 'f"models.{args.model}"', '"models.%s" % args.model',
    '"models.{}".format(args.model)', '".".join(["models", args.model])'])
def test_a_package_prefix_is_read_in_every_spelling(spelling):
    assert loaded(f"import importlib\nnet = importlib.import_module({spelling})\n") == {Text("models.", True)}


def test_a_table_of_names_built_from_a_folder_and_read_by_a_lazy_dict():
    source = '''import importlib
import os


class Exp:
    def __init__(self, args):
        self.models = Lazy(self._scan())

    def _scan(self):
        table = {}
        folder = "models"
        for filename in os.listdir(folder):
            name = filename[:-3]
            table[name] = f"{folder}.{name}"
        return table


class Lazy(dict):
    def __init__(self, table):
        self.table = table

    def __getitem__(self, key):
        return importlib.import_module(self.table[key]).Model
'''
    assert loaded(source) == {Text("models.", True)}


def test_a_relative_name_is_read_from_the_package_handed_in():
    source = ('from importlib import import_module\n\n'
              'def get(name):\n    return import_module("." + name, package=__name__)\n')
    assert loaded(source, "solvers") == {Text("solvers.", True)}


@pytest.mark.parametrize("source", [
    "import importlib\nfor name in names:\n    importlib.import_module(name)\n",
    "import importlib\nname = get_name()\nimportlib.import_module(name)\n",
    "import importlib\ntable = {}\ntable.update(extra)\nimportlib.import_module(table[key])\n",
])
def test_a_name_the_code_does_not_write_is_unknown(source):
    assert loaded(source) is None
