"""Batches drawn at random by hand (`ix = torch.randint(len(data) - block_size, (batch_size,))`
in a get_batch(), as nanoGPT-style scripts do): each rank seeds its own generator (DDP219).

No sampler can shard a random draw, and none is needed: the draws are independent, so ranks
that draw different indices together see N times the batches of one process per step, as a
DistributedSampler would give them. Every rank starts from the script's seed (the models
are built alike, and DDP broadcasts rank 0's parameters anyway); right before training each
rank moves its generator to the script's seed plus its rank. As a group of one nothing
changes, so plain `python` reproduces the original's numbers.
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import seeding
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, dotted_name, find_all, names_in
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP219", Severity.EDIT, "random batches drawn by hand: each rank seeds its own draws",
         "The training loop draws its batches at random (torch.randint in a get_batch()), so "
         "no sampler can shard it, and with one seed every rank would draw the same batches. "
         "Right before training each rank moves torch's generator to the script's seed plus "
         "its rank, so the ranks draw different batches and together see N times the data of "
         "one process per step. As a group of one nothing changes. Batches drawn only by "
         "the `random` or numpy generators, which nothing in the file seeds, already differ "
         "per process (each seeds itself from the operating system): nothing is changed.",
         "Nothing to do. Scale the number of steps (or the learning rate) for the larger "
         "global batch if you want the original's schedule."),
)

# Draws from torch's global generator that pick the samples of a batch.
RANDOM_INDEX_DRAWS = ("torch.randint", "torch.randperm", "torch.multinomial")
SEED_PER_RANK_CODE = """\
if distributed:
    # Each rank draws its own random batches: the script's seed plus the rank.
    torch.manual_seed(torch.initial_seed() + dist.get_rank())
"""


def seed_per_rank(facts: Facts, edits: Edits, setup: Plan, loop: cst.For) -> bool:
    """Give each rank its own draws when the training loop's batches are drawn at random
    from torch's global generator (in the loop or in a function of this file it calls);
    False when they are not, or the setup's names are out of reach there."""
    if _random_draw_feeding(facts, loop) is None:
        return _drawn_apart_already(facts, edits, loop)
    reason = _not_all_drawn_by_torch(facts, loop)
    if reason is not None:
        setup.hand_made_batches.append(edits.report(
            "DDP208", loop, f"batches built by hand: every rank trains on the same data: {reason}; draw "
            "every index from torch (seeded per rank), or use a DataLoader with a DistributedSampler"))
        return True
    if not setup.sees_setup(facts, loop):
        return False
    outermost = ([loop] + facts.enclosing_loops(loop))[-1]
    if outermost not in setup.reseeded_loops:
        setup.reseeded_loops.append(outermost)
        edits.insert_before(outermost, Insertion(edits.statements(SEED_PER_RANK_CODE)))
        edits.report("DDP219", outermost)
    return True


def _drawn_apart_already(facts: Facts, edits: Edits, loop: cst.For) -> bool:
    """Rule: batches drawn only from the `random` or numpy generators (`start =
    random.randint(0, n - window)` in a helper the loop calls), none of which the file seeds:
    each process seeds them from the operating system, so every rank already draws its own
    batches, as DDP219 makes torch's draws do. Nothing to change (DDP219, reported with the
    draw). A seed of that generator anywhere in the file, or a seeding helper, makes the
    draws alike on every rank: reported as before (DDP208)."""
    draws = _other_draws_feeding(facts, loop)
    if not draws or seeding.seeded_by_a_helper(facts) or any(
            seeding.seeded_anywhere(facts, _family(qualified)) for qualified, _ in draws):
        return False
    qualified, draw = draws[0]
    edits.report("DDP219", loop, f"random batches drawn by hand: each rank draws its own: "
                 f"`{qualified.replace('numpy.', 'np.')}` at line {facts.line_of(draw)} draws from a generator "
                 "nothing seeds, which differs from process to process")
    return True


def _family(qualified: str) -> str:
    return qualified.split(".", 1)[0]


def _other_draws_feeding(facts: Facts, loop: cst.For) -> list[tuple[str, cst.Call]]:
    functions_called = {facts.functions[name] for name in _called_names(loop.body) if name in facts.functions}
    return [(qualified, draw) for qualified in OTHER_INDEX_DRAWS for draw in facts.calls_named.get(qualified, ())
            if facts.ancestor_in(draw, loop.body) is not None or facts.function_of(draw) in functions_called]


def _random_draw_feeding(facts: Facts, loop: cst.For) -> Optional[cst.Call]:
    functions_called = {facts.functions[name] for name in _called_names(loop.body) if name in facts.functions}
    for qualified in RANDOM_INDEX_DRAWS:
        for draw in facts.calls_named.get(qualified, ()):
            if any(arg.keyword is not None and arg.keyword.value == "generator" for arg in draw.args):
                continue  # a generator of its own, which the script seeds as it likes
            if facts.ancestor_in(draw, loop.body) is not None or facts.function_of(draw) in functions_called:
                return draw
    return None


# Draws from the numpy and random modules' global generators that pick samples: seeding
# torch per rank leaves them alike on every rank.
OTHER_INDEX_DRAWS = ("numpy.random.choice", "numpy.random.randint", "numpy.random.permutation",
                     "numpy.random.shuffle", "random.choice", "random.choices", "random.sample",
                     "random.randint", "random.randrange", "random.shuffle")


def _not_all_drawn_by_torch(facts: Facts, loop: cst.For) -> Optional[str]:
    """Rule: reseeding torch per rank shards random batches only when torch draws them all.
    A loop that also picks samples with numpy or random (`img_i = np.random.choice(ids)`),
    or walks its data by a counter of its own (`batch = rays[i:i + n]; i += n`, torch only
    reshuffling after a pass), would give every rank the same batches: reported (DDP208)."""
    functions_called = {facts.functions[name] for name in _called_names(loop.body) if name in facts.functions}
    for qualified in OTHER_INDEX_DRAWS:
        for draw in facts.calls_named.get(qualified, ()):
            if facts.ancestor_in(draw, loop.body) is not None or facts.function_of(draw) in functions_called:
                return (f"`{qualified.replace('numpy.', 'np.')}` at line {facts.line_of(draw)} draws from a generator "
                        "seeded alike on every rank")
    counter = _walking_counter(loop)
    if counter is not None:
        return f"the loop walks its data by its own counter `{counter}`, from the same start on every rank"
    return None


def _walking_counter(loop: cst.For) -> Optional[str]:
    """`i` in `data[i:i + n]` in the loop's body, where the body also advances `i += n`."""
    advanced = {name for statement in find_all(loop.body, cst.AugAssign)
                if isinstance(statement.operator, cst.AddAssign) and (name := dotted_name(statement.target))}
    for subscript in find_all(loop.body, cst.Subscript):
        for element in subscript.slice:
            if isinstance(element.slice, cst.Slice) and element.slice.lower is not None:
                start = dotted_name(element.slice.lower)
                if start in advanced and start not in names_in(loop.target):
                    return start
    return None


def _called_names(body: cst.BaseSuite) -> list[str]:
    return [call.func.value for call in calls_within(body) if isinstance(call.func, cst.Name)]


_WINDOWS = '''\
import random

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = torch.randn(1000, 4)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def get_batch():
    start = random.randint(0, len(data) - 8)
    return data[start:start + 8].to(device)


for step in range(100):
    loss = model(get_batch()).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''

CASES = (
    Emits('''\
import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = torch.randn(1000, 4)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def get_batch():
    index = torch.randint(len(data), (8,))
    return data[index].to(device)


for step in range(100):
    loss = model(get_batch()).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
''', "DDP219", ("torch.manual_seed(",)),
    Silent(TRAINING, "DDP219"),
    # Windows drawn by the random module, which nothing seeds: each rank draws its own already.
    Emits(_WINDOWS, "DDP219", ("model = DDP(",)),
    # Seeded alike on every rank, the same draws would give every rank the same batches.
    Emits(_WINDOWS.replace("import torch\n", "import torch\n\nrandom.seed(0)\n", 1), "DDP208"),
    # An index also drawn by numpy: seeding torch per rank leaves it alike on every rank.
    Emits('''\
import numpy as np
import torch

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = torch.randn(10, 100, 4)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for step in range(100):
    rows = data[np.random.randint(10)]
    loss = model(rows[torch.randint(100, (8,))].to(device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
''', "DDP208"),
)
