"""Process-group setup, this rank's device, the rank-0 guard and teardown (DDP001, DDP005).

The setup block goes where the script chose its device, so the diff reads as "the device
choice became a distributed setup"; it moves up only when earlier code already needs it.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Set

import libcst as cst

from ddpify.analysis import DeviceAssignment, Facts
from ddpify.transforms.edits import Edits, Insertion
from ddpify.transforms.imports import imports_of

SETUP_COMMENT = "# Distributed setup: one process per device under torchrun; plain `python` runs as before."

SETUP_CODE = """\
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if {use_gpu}:
    torch.cuda.set_device(local_rank)
{device} = torch.device("cuda", local_rank) if {use_gpu} else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if {use_gpu} else "gloo")
"""

IS_MAIN_CODE = "is_main = not distributed or dist.get_rank() == 0\n"
WORLD_SIZE_CODE = 'world_size = int(os.environ.get("WORLD_SIZE", 1))\n'

IS_MAIN_HELPER = '''\


def is_main_process():
    """True in the process that prints and writes files: rank 0, or the only process."""
    return not dist.is_initialized() or dist.get_rank() == 0
'''

TEARDOWN_CODE = "\nif distributed:\n    dist.destroy_process_group()\n"
TEARDOWN_IF_INITIALIZED = "if dist.is_initialized():\n    dist.destroy_process_group()\n"


@dataclass
class SetupPlan:
    """Where the setup block goes and what the other transforms may rely on."""

    function: Optional[cst.FunctionDef]
    block: cst.CSTNode
    device: str
    device_assignment: Optional[DeviceAssignment]
    guards_used: Set[str] = field(default_factory=set)
    # Set when --keep-global-batch divides a batch size by `world_size`.
    needs_world_size: bool = False
    # When the script uses the GPU: devices.py keeps the script's own condition (`use_cuda`
    # from a --no-cuda flag) so that the migrated script still honours it.
    use_gpu: str = "torch.cuda.is_available()"

    def sees_setup(self, facts: Facts, node: cst.CSTNode) -> bool:
        """Whether code at node can read the names the setup block defines."""
        return self.function is None or facts.function_of(node) is self.function

    def guard_for(self, facts: Facts, node: cst.CSTNode) -> str:
        guard = "is_main" if self.sees_setup(facts, node) else "is_main_process()"
        self.guards_used.add(guard)
        return guard


def choose(facts: Facts) -> Optional[SetupPlan]:
    """Pick the scope of the setup: the device choice, else the training loop's function."""
    if facts.device_assignments:
        assignment = facts.device_assignments[0]
        return SetupPlan(assignment.function, facts.block_of(assignment.statement),
                         assignment.name, assignment)
    function = _training_function(facts)
    block = function.body if function is not None else facts.module
    return SetupPlan(function, block, "device", None)


def _training_function(facts: Facts) -> Optional[cst.FunctionDef]:
    for loader in facts.loaders:
        for loop in facts.loops_over.get(loader.name, ()):
            return facts.function_of(loop)
    if facts.models:
        return facts.models[0].function
    return None


def place(facts: Facts, edits: Edits, plan: SetupPlan) -> None:
    """Insert the setup block before the first statement of its block that needs it."""
    edits.imports.update({"os", "dist"})
    code = SETUP_CODE.format(device=plan.device, use_gpu=plan.use_gpu)
    if plan.needs_world_size:
        first_line, rest = code.split("\n", 1)
        code = first_line + "\n" + WORLD_SIZE_CODE + rest
    if "is_main" in plan.guards_used:
        code += IS_MAIN_CODE
    setup = edits.statements(code)
    comment = cst.EmptyLine(comment=cst.Comment(SETUP_COMMENT))
    anchor = _first_statement_needing_setup(facts, edits, plan)
    assignment = plan.device_assignment
    if assignment is not None and anchor is assignment.statement:
        lines = list(assignment.statement.leading_lines) + [comment]
        setup[0] = setup[0].with_changes(leading_lines=lines)
        edits.replaced[anchor] = setup
        edits.report("DDP001", anchor)
        return
    if assignment is not None:
        edits.removed.add(assignment.statement)
    setup[0] = setup[0].with_changes(leading_lines=[comment])
    if anchor is None:
        edits.module_end.extend(setup)
        return
    edits.before.setdefault(anchor, []).insert(0, Insertion(setup, takes_blank_lines=True))
    edits.report("DDP001", anchor)


def _first_statement_needing_setup(facts: Facts, edits: Edits, plan: SetupPlan):
    body = list(plan.block.body)
    candidates = []
    if plan.device_assignment is not None:
        candidates.append(plan.device_assignment.statement)
    touched = (
        list(edits.before) + list(edits.after) + list(edits.replaced)
        + list(edits.guarded) + list(edits.expressions)
    )
    for node in touched + _calls_of_functions_holding(facts, touched, plan):
        statement = facts.ancestor_in(node, plan.block)
        # Definitions run nothing: code inside them needs the setup only when called.
        if statement is not None and not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            candidates.append(statement)
    if not candidates:
        return _first_code_statement(body)
    return min(candidates, key=body.index)


def _calls_of_functions_holding(facts: Facts, nodes, plan: SetupPlan) -> list:
    """Calls of the functions that hold edited code: `make_loaders()` needs the process
    group if the loader it builds now gets a DistributedSampler."""
    calls = []
    for function in {facts.function_of(node) for node in nodes} - {None, plan.function}:
        for callee in (function.name.value, "self." + function.name.value):
            if facts.functions.get(callee) is function:
                calls.extend(facts.calls_by_callee.get(callee, ()))
    return calls


def _first_code_statement(body: List[cst.BaseStatement]) -> Optional[cst.BaseStatement]:
    for statement in body:
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not imports_of(statement):
            return statement
    return None


def add_guard_helper(edits: Edits, plan: SetupPlan) -> None:
    if "is_main_process()" in plan.guards_used:
        helper = edits.statements(IS_MAIN_HELPER)
        # Two blank lines above a top-level def, as PEP 8 and black have it.
        helper[0] = helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        edits.module_prelude.extend(helper)


def teardown(facts: Facts, edits: Edits, plan: SetupPlan) -> None:
    """Destroy the group once, after training: around the call to main() when there is one,
    so that it also runs when training raises, else at the end of the script."""
    if plan.function is None:
        statements = edits.statements(TEARDOWN_CODE)
        # A parsed module keeps a leading blank line in its header; put it back on the code.
        statements[0] = statements[0].with_changes(leading_lines=[cst.EmptyLine()])
        edits.module_end.extend(statements)
        edits.report("DDP005", facts.module.body[-1])
        return
    call = _call_of_function_under_main(facts, plan.function.name.value)
    if call is not None:
        edits.finally_bodies[call] = edits.statements(TEARDOWN_IF_INITIALIZED)
        edits.report("DDP005", call)
        return
    cleanup = edits.statements(TEARDOWN_IF_INITIALIZED)
    guard = facts.main_guard
    if guard is not None and isinstance(guard.body, cst.IndentedBlock):
        edits.after.setdefault(guard.body.body[-1], []).extend(cleanup)
        edits.report("DDP005", guard)
        return
    cleanup[0] = cleanup[0].with_changes(leading_lines=[cst.EmptyLine()])
    edits.module_end.extend(cleanup)
    edits.report("DDP005", facts.module.body[-1])


def _call_of_function_under_main(facts: Facts, function_name: str):
    guard = facts.main_guard
    if guard is None or not isinstance(guard.body, cst.IndentedBlock):
        return None
    for statement in guard.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            value = getattr(small, "value", None)
            if (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Name)
                and value.func.value == function_name
            ):
                return statement
    return None
