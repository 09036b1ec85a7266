"""Training loops over no DataLoader that stop on what each rank computes (DDP237).

Rule: a training loop whose batches no DataLoader gives (moves of an episode, samples of a
replay buffer, random draws) and that leaves by a `break` whose test reads a value its own
body computes (`if terminated or truncated: break` after `env.step(...)`, `if done: break`
of a maze the script writes, `if loss.item() < tol: break`) stops where this rank's own
data says. Under DDP every backward is an all-reduce: the rank whose episode ends first
leaves the loop while the others wait in the next all-reduce (on NCCL, a hang); a sampler
cannot make the episodes the same length. ddpify cannot show the test is the same on every
rank, so the loop is reported at its break and the file stays single-process (DDP904), as
with other batches built by hand. A test on the loop's own counter or on names the loop
does not set (`if step == max_steps: break`), or on counters it only adds constants to
(`moves += 1`), is the same on every rank: not reported.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import traversal
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name, find_all, names_in, targets_bound_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits
from ddpify.plan import Plan
from ddpify.rules.cases import Emits, Silent

RULES = (
    Rule("DDP237", Severity.WARNING,
         "the training loop stops on a break its own batches decide: ranks would take different numbers of steps",
         "The loop takes its batches from no DataLoader (an environment's moves, a replay buffer, random "
         "draws) and leaves by a break whose test reads what its body computed from them. Each rank "
         "computes its own: the rank that stops first leaves the others waiting forever in the next "
         "all-reduce of the gradients. No sampler can make the ranks' episodes the same length, so the "
         "file is left single-process.",
         "Keep the script on one process, or decide the stop on one rank and share it (stop = "
         "torch.tensor(float(done)); dist.broadcast(stop, 0)) so that every rank leaves at the same step, "
         "then shard or seed the batches per rank by hand."),
)


def report_stop_per_rank(facts: Facts, edits: Edits, setup: Plan, loop: cst.For) -> bool:
    """Report the loop (DDP237) when a break of its own body is decided by what the body
    computes; True when reported."""
    test = _break_test_set_in_the_loop(loop)
    if test is None:
        return False
    setup.hand_made_batches.append(edits.report("DDP237", loop, (
        f"the training loop stops on a break its own batches decide (`for {edits.code(loop.target)} in "
        f"{edits.code(loop.iter)}:` leaves at `if {edits.code(test)}: break`, computed per rank from batches "
        "no DataLoader gives): ranks would take different numbers of steps; keep it single-process, or "
        "broadcast rank 0's decision to stop by hand")))
    return True


def _break_test_set_in_the_loop(loop: cst.For) -> Optional[cst.BaseExpression]:
    """The test of the first `if ...: break` of the loop's own body (not of a loop or function
    inside it) that reads a name the body sets, or calls something; None when there is none."""
    per_rank = _set_per_batch(loop)
    for test in _break_tests(loop):
        if names_in(test) & per_rank or any(dotted_name(call.func) not in _SAME_ON_EVERY_RANK
                                            for call in _calls_in(test)):
            return test
    return None


# Calls whose value depends only on what they are handed (`step >= len(batches) // 2`): a test
# made of them reads per-rank values only through the names it reads. Any other call in a test
# (`env.done()`, `time.time() - start > budget`) may answer differently on each rank.
_SAME_ON_EVERY_RANK = frozenset({"len", "int", "float", "min", "max", "abs", "round"})


def _set_per_batch(loop: cst.For) -> set[str]:
    """Names the loop body binds, other than the loop's own target and counters the body only
    adds a constant to (`moves += 1`, the same on every rank)."""
    updates = _augmentations(loop.body)
    updated_targets = {id(update.target) for update in updates} | {
        id(assign.targets[0].target) for assign in find_all(loop.body, cst.Assign) if _counts_on(assign)}
    plain = set().union(set(), *(names_in(target) for target in targets_bound_in(loop.body)
                                 if id(target) not in updated_targets))
    summed = set().union(set(), *(names_in(update.target) for update in updates
                                  if not isinstance(update.value, (cst.Integer, cst.Float))))
    return (plain | summed) - names_in(loop.target)


def _counts_on(assign: cst.Assign) -> bool:
    """`step = step + 1`: a counter written out, as `step += 1` is."""
    value = assign.value
    return len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) \
        and isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)) \
        and isinstance(value.left, cst.Name) and value.left.value == assign.targets[0].target.value \
        and isinstance(value.right, (cst.Integer, cst.Float))


def _break_tests(loop: cst.For) -> list[cst.BaseExpression]:
    """The tests of the `if`s around each break that leaves this loop."""
    tests: list[cst.BaseExpression] = []

    class _Breaks(cst.CSTVisitor):
        def __init__(self) -> None:
            self.conditions: list[cst.BaseExpression] = []

        def visit_If(self, node: cst.If) -> None:
            self.conditions.append(node.test)

        def leave_If(self, original_node: cst.If) -> None:
            self.conditions.pop()

        def visit_Break(self, node: cst.Break) -> None:
            tests.extend(self.conditions)

        def visit_For(self, node: cst.For) -> bool:
            return False  # its breaks leave that loop

        def visit_While(self, node: cst.While) -> bool:
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    traversal.visit(loop.body, _Breaks())
    return tests


def _augmentations(node: cst.CSTNode) -> list[cst.AugAssign]:
    found: list[cst.AugAssign] = []

    class _Updates(cst.CSTVisitor):
        def visit_AugAssign(self, update: cst.AugAssign) -> None:
            found.append(update)

    traversal.visit(node, _Updates())
    return found


def _calls_in(test: cst.BaseExpression) -> list[cst.Call]:
    found: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

    traversal.visit(test, _Calls())
    return found


_EPISODES = """\
import random
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for episode in range(3):
    state = torch.randn(4)
    for move in range(50):
        action = int(model(state.to(device)).argmax())
        state = torch.randn(4)
        done = random.random() < 0.1
        loss = model(state.to(device)).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if done:
            break
    print(episode, loss.item())
"""

CASES = (
    Emits(_EPISODES, "DDP237"),
    # A stop on the loop's own counter and a constant count is the same on every rank.
    Silent(_EPISODES.replace("        if done:\n", "        if move == 20:\n"), "DDP237"),
    # ...and one on a counter written out, against a length.
    Silent(_EPISODES.replace("        if done:\n",
                             "        taken = taken + 1\n        if taken > 5 * len(optimizer.param_groups):\n")
           .replace("    state = torch.randn(4)\n", "    state = torch.randn(4)\n    taken = 0\n", 1), "DDP237"),
    # ...and so is one on a counter the body only adds a constant to.
    Silent(_EPISODES.replace("        if done:\n", "        taken += 1\n        if taken > 20:\n")
           .replace("    state = torch.randn(4)\n", "    state = torch.randn(4)\n    taken = 0\n", 1), "DDP237"),
)
