"""Placing the imports the emitted code needs, and dropping DataParallel's."""
import libcst as cst

from ddpify.emit.imports import add_imports, remove_unused_imports

DATA_PARALLEL = [("torch.nn", "DataParallel", None)]


def test_new_imports_go_where_isort_would_put_them():
    module = cst.parse_module('"""Doc."""\nimport argparse\n\nimport torch\nfrom torch import nn\n')
    added = add_imports(module, [("os", None, None), ("torch.distributed", None, "dist")])
    assert added.code == ('"""Doc."""\nimport argparse\nimport os\n\nimport torch\n'
                          "import torch.distributed as dist\nfrom torch import nn\n")


def test_an_import_already_there_is_not_added_again():
    module = cst.parse_module("import os\nimport torch.distributed as dist\n")
    assert add_imports(module, [("os", None, None), ("torch.distributed", None, "dist")]).code == module.code


def test_data_parallel_import_goes_only_when_nothing_uses_it():
    unused = cst.parse_module(
        '"""DataParallel in words only."""\nfrom torch.nn import DataParallel, Linear\nm = Linear(1, 1)\n')
    assert remove_unused_imports(unused, DATA_PARALLEL).code == (
        '"""DataParallel in words only."""\nfrom torch.nn import Linear\nm = Linear(1, 1)\n')
    used = cst.parse_module("from torch.nn import DataParallel\nok = isinstance(m, DataParallel)\n")
    assert remove_unused_imports(used, DATA_PARALLEL).code == used.code
