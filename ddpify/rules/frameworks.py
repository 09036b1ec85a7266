"""Scripts that another framework already distributes: left byte-identical, reported as DDP900.

A DDP layer on top of Accelerate, FSDP, DeepSpeed, Lightning, Horovod or a hand-written
torch.distributed setup would initialise a second process group, wrap a wrapped model and
shard a sharded loader. One walk over the `ast` tree that the compile check already built
finds calls (and base classes) whose qualified name, through the file's own imports, belongs
to one of them; analysis never runs on such a file.
"""
import ast
import re
from collections.abc import Iterator
from typing import Optional

from ddpify import ast_walk
from ddpify.analysis import names
from ddpify.diagnostics import Diagnostic, Rule
from ddpify.rules.cases import TRAINING, Emits, Silent

# DDP900, the only code reported here, is a verdict on the whole file: rules/whole_file.py.
RULES: tuple[Rule, ...] = ()

# Qualified-name prefixes and the framework each one means; "": plain torch.distributed.
_FRAMEWORKS = (
    ("torch.distributed.fsdp", "FSDP"),
    ("torch.distributed._composable.fsdp", "FSDP"),
    ("torch.distributed._composable.fully_shard", "FSDP"),
    ("accelerate", "Accelerate"),
    ("deepspeed", "DeepSpeed"),
    ("lightning", "Lightning"),
    ("pytorch_lightning", "Lightning"),
    ("lightning_fabric", "Lightning"),
    ("horovod", "Horovod"),
    ("torch.multiprocessing.spawn", ""),
    ("torch.multiprocessing.start_processes", ""),
    ("torch.distributed", ""),
    ("torch.nn.parallel.DistributedDataParallel", ""),
    ("torch.nn.parallel.distributed", ""),
    ("torch.utils.data.distributed", ""),
)
# Hogwild (pytorch/examples' mnist_hogwild): processes that torch.multiprocessing starts train one
# model whose parameters they share (`model.share_memory()`). Already parallel: one DDP replica
# per process would undo the sharing. A process started without a shared model is not this.
_HOGWILD_STARTS = ("torch.multiprocessing.Process", "torch.multiprocessing.Pool")
_HOGWILD = "Hogwild (torch.multiprocessing processes training one shared model)"
# A file that names none of these words imports none of the frameworks: no walk needed.
_WORDS = re.compile(r"distributed|accelerate|deepspeed|lightning|horovod|multiprocessing")
# The calls analysis itself reports as "already distributed": the same line wins here.
_SETUP_CALLS = names.INIT_PROCESS_GROUP | names.DISTRIBUTED_DATA_PARALLEL


def already_distributed(tree: ast.Module, text: str) -> Optional[Diagnostic]:
    """DDP900 at the first use of the framework that distributes the script, if one does."""
    if not _WORDS.search(text):
        return None
    uses = sorted(_uses(tree), key=lambda use: use[:2])
    if not uses:
        return None
    named = [use for use in uses if use[2]]
    setup = [use for use in uses if use[3] in _SETUP_CALLS]
    line, byte_column, framework, _ = (named or setup or uses)[0]
    message = f"already distributed with {framework}: left unchanged" if framework else (
        "already distributed: left unchanged")
    return Diagnostic("DDP900", line, _column(text, line, byte_column), message)


def _uses(tree: ast.Module) -> Iterator[tuple[int, int, str, str]]:
    """(line, byte column, framework, qualified name) of every call or base class that
    resolves into a distributing framework."""
    imported: dict[str, str] = {}
    candidates: list[ast.expr] = []
    shares_memory = False
    for node in ast_walk.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add_import(imported, alias.name, alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    names.add_import_from(imported, node.module, alias.name, alias.asname)
        elif isinstance(node, ast.Call):
            candidates.append(node.func)
            shares_memory |= isinstance(node.func, ast.Attribute) and node.func.attr == "share_memory"
        elif isinstance(node, ast.ClassDef):
            candidates.extend(node.bases)
    for expression in candidates:
        qualified = _qualified(expression, imported)
        framework = _framework(qualified) if qualified else None
        if shares_memory and qualified in _HOGWILD_STARTS:
            framework = _HOGWILD
        if framework is not None and qualified is not None:
            yield expression.lineno, expression.col_offset, framework, qualified


def _qualified(expression: ast.expr, imported: dict[str, str]) -> Optional[str]:
    attributes = []
    while isinstance(expression, ast.Attribute):
        attributes.append(expression.attr)
        expression = expression.value
    if not isinstance(expression, ast.Name) or expression.id not in imported:
        return None
    return names.qualify(".".join([expression.id, *reversed(attributes)]), imported)


def _framework(qualified: str) -> Optional[str]:
    """The framework a qualified name belongs to ("": plain torch.distributed), if any."""
    for prefix, framework in _FRAMEWORKS:
        if qualified == prefix or qualified.startswith(prefix + "."):
            return framework
    return None


def _column(text: str, line: int, byte_column: int) -> int:
    """`ast` counts columns in UTF-8 bytes; diagnostics count characters, from 1."""
    lines = re.split(r"\r\n|\r|\n", text, maxsplit=line)
    source_line = lines[line - 1] if line <= len(lines) else ""
    if source_line.isascii():
        return byte_column + 1
    return len(source_line.encode("utf-8")[:byte_column].decode("utf-8", errors="replace")) + 1


CASES = (
    Emits(TRAINING.replace("import torch\n", "import torch\nfrom accelerate import Accelerator\n", 1)
          .replace("for epoch", "accelerator = Accelerator()\n"
                   "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
                   "for epoch"), "DDP900"),
    # Hogwild: processes started on one model in shared memory.
    Emits(TRAINING.replace("import torch\n", "import torch\nimport torch.multiprocessing as mp\n", 1)
          + "model.share_memory()\nmp.Process(target=print, args=(model,)).start()\n", "DDP900"),
    # A process started without a shared model (a data-preparing worker) is not Hogwild.
    Silent(TRAINING.replace("import torch\n", "import torch\nimport torch.multiprocessing as mp\n", 1)
           + "mp.Process(target=print, args=(1,)).start()\n", "DDP900"),
)
