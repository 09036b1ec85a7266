"""One process per machine downloads the data while the others wait (DDP209, DDP212)."""
from collections.abc import Sequence

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP209", Severity.EDIT, "one process per machine downloads the dataset; the others wait",
         "Every rank would download into the same directory at once and could read a "
         "half-written file.",
         "Nothing to do."),
    Rule("DDP212", Severity.WARNING, "dataset download may race between ranks",
         "Every rank downloads into the same directory at once; ddpify could not add the "
         "barrier because the distributed setup is not in scope here.",
         "Download on local rank 0 first: `if local_rank != 0: dist.barrier()` before, and "
         "`if local_rank == 0: dist.barrier()` after."),
)

DOWNLOAD_BEFORE_CODE = """\
if distributed and local_rank != 0:
    dist.barrier()  # wait while local rank 0 downloads the data
"""


DOWNLOAD_AFTER_CODE = """\
if distributed and local_rank == 0:
    dist.barrier()  # the data is in place: release the other ranks
"""


# In a helper module, which sees no setup block: the same barriers, asked at run time.
DOWNLOAD_BEFORE_IN_HELPER_CODE = """\
if dist.is_initialized() and int(os.environ.get("LOCAL_RANK", 0)) != 0:
    dist.barrier()  # wait while local rank 0 downloads the data
"""


DOWNLOAD_AFTER_IN_HELPER_CODE = """\
if dist.is_initialized() and int(os.environ.get("LOCAL_RANK", 0)) == 0:
    dist.barrier()  # the data is in place: release the other ranks
"""


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Barriers around each run of statements that download a dataset (`download=True`,
    urlretrieve, unpacking an archive), or call a helper of the script's that does."""
    for group in _consecutive_groups(facts, _download_sites(facts, setup)):
        first, last = group[0], group[-1]
        if _inside_class(facts, first) and not setup.library:
            continue
        before, after = DOWNLOAD_BEFORE_CODE, DOWNLOAD_AFTER_CODE
        if setup.library:
            # A helper module's loader class or factory, which every rank runs.
            before, after = DOWNLOAD_BEFORE_IN_HELPER_CODE, DOWNLOAD_AFTER_IN_HELPER_CODE
            edits.imports.add("os")
        elif not setup.sees_setup(facts, first):
            edits.report("DDP212", first)
            continue
        # First of all that goes before the statement: a dataset hoisted out of the loader
        # call (`DataLoader(MNIST(download=True), ...)`) downloads too.
        edits.insert_before(first, Insertion(edits.statements(before), takes_comments=True), first=True)
        edits.insert_after(last, edits.statements(after))
        edits.imports.add("dist")
        edits.report("DDP209", first)


def _download_sites(facts: Facts, setup: Plan) -> list[Statement]:
    """Each download statement, or, inside a helper that the setup's scope calls, each
    call of that helper. A test of the file system around it (`if not os.path.exists`)
    goes inside the barriers: the ranks that wait see the files once they are there."""
    sites: list[Statement] = []
    for statement in facts.download_statements:
        function = facts.function_of(statement)
        calls = facts.calls_of(function)
        if function is not None and not setup.sees_setup(facts, statement) and calls and all(
                setup.sees_setup(facts, call) for call in calls):
            candidates = [facts.statement_of(call) for call in calls]
        else:
            candidates = [statement]
        for candidate in candidates:
            candidate = _outside_file_tests(facts, candidate)
            if candidate not in sites:
                sites.append(candidate)
    return sorted(sites, key=facts.line_of)


def _outside_file_tests(facts: Facts, statement: Statement) -> Statement:
    while True:
        block = facts.parents.get(statement)
        branch = facts.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if not isinstance(branch, cst.If) or not any(
                word in facts.module.code_for_node(branch.test) for word in ("exists(", "isdir(", "isfile(")):
            return statement
        statement = branch


def _consecutive_groups(facts: Facts, statements: Sequence[Statement]) -> list[list[Statement]]:
    groups: list[list[Statement]] = []
    for statement in statements:
        block = facts.block_of(statement)
        if groups and facts.block_of(groups[-1][-1]) is block:
            body = list(block.body)
            if body.index(statement) == body.index(groups[-1][-1]) + 1:
                groups[-1].append(statement)
                continue
        groups.append([statement])
    return groups


def _inside_class(facts: Facts, node: cst.CSTNode) -> bool:
    parent = facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, cst.ClassDef):
            return True
        parent = facts.parents.get(parent)
    return False


CASES = (
    Emits(TRAINING.replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))",
                           'dataset = torchvision.datasets.MNIST("data", download=True)')
          .replace("import torch\n", "import torch\nimport torchvision\n", 1), "DDP209", ("dist.barrier()",)),
    Silent(TRAINING, "DDP209"),
)
