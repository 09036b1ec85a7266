"""Is a draw from a global generator the same on every rank? One reading of seeds for every
rule that asks: random_split (DDP214), a shuffle cut into a train/validation split (DDP230),
a helper module's SubsetRandomSampler indices (rules/data.py), a training setting drawn at
random (DDP902/DDP408), a name built from a draw (shared_names), hand-made batches.

Each rank is its own process with its own global generators (torch's, numpy's, `random`'s).
A draw from one is alike on every rank when a seed of that generator with the same value on
every rank runs before it, or when the draw is handed a seeded generator of its own
(`generator=`, `random_state=`, `seed=`). Rules differ only in how far they look for the
seed: anywhere in the file (`seeded_anywhere`), or on the draw's path (`seeded_before`).
"""
from typing import Optional

import libcst as cst

from ddpify.analysis import names
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, dotted_name, names_in

# The global generators, and the calls that seed each.
SEEDS = {"torch": names.MANUAL_SEEDS, "random": frozenset({"random.seed"}),
         "numpy": frozenset({"numpy.random.seed"})}
# Generators made from a seed: what they draw is alike on every rank that gives the same one.
SEEDED_GENERATORS = frozenset({"numpy.random.RandomState", "numpy.random.default_rng", "random.Random"})
# Keywords that hand a draw a generator or a seed of its own.
OWN_SEED_KEYWORDS = ("generator", "seed", "random_state")


def seed_calls(facts: Facts, *families: str) -> list[cst.Call]:
    """The calls in the file that seed the named global generators, in the order named."""
    return [call for family in families for qualified in sorted(SEEDS[family])
            for call in facts.calls_named.get(qualified, ())]


def seeded_anywhere(facts: Facts, *families: str) -> bool:
    """A seed of one of these generators somewhere in the file."""
    return bool(seed_calls(facts, *families))


def seeded_alike(facts: Facts, *families: str) -> bool:
    """A seed of one of these generators somewhere in the file, given a value that is the
    same on every rank (differs_per_process)."""
    return any(call.args and not differs_per_process(facts, call) for call in seed_calls(facts, *families))


def seeded_by_a_helper(facts: Facts) -> bool:
    """A call of a function named for seeding (`set_seed(args.seed)`, `seed_everything(s)`),
    not a generator's own seed, with a value alike on every rank: it is taken to seed every
    generator alike."""
    own = set(seed_calls(facts, *SEEDS))
    return any("seed" in callee.rsplit(".", 1)[-1].lower() and call not in own
               and not differs_per_process(facts, call)
               for callee, calls in facts.calls_by_callee.items() for call in calls)


# Values that differ from process to process: the clock and the process id, and the draws of
# a generator, by its family, when nothing seeds that generator.
PER_PROCESS = frozenset({"time.time", "time.time_ns", "time.perf_counter", "time.monotonic", "os.getpid",
                         "datetime.datetime.now", "torch.seed", "torch.random.seed"})
DRAWS = {"random": ("random.randint", "random.random", "random.randrange", "random.uniform",
                    "random.getrandbits", "random.choice"),
         "numpy": ("numpy.random.randint", "numpy.random.rand", "numpy.random.random", "numpy.random.uniform",
                   "numpy.random.choice"),
         "torch": ("torch.randint",)}


def differs_per_process(facts: Facts, node: cst.CSTNode, depth: int = 0) -> bool:
    """Rule: a seed is no seed across ranks when its value comes from the clock, the process
    id or a draw of a generator the script never seeds (`random_seed = random.randint(1, 100)`
    then `np.random.seed(random_seed)`; `torch.manual_seed(int(time.time()))`), in the call or
    through a name bound to such a value: each rank seeds its own way. `np.random.seed()` and
    `random.seed()` without a value seed from the system, which differs per process too."""
    for call in calls_within(node):
        qualified = _per_process_name(facts, call)
        if qualified in PER_PROCESS or (qualified in ("random.seed", "numpy.random.seed") and not call.args):
            return True
        family = next((each for each, draws in DRAWS.items() if qualified in draws), None)
        if family is not None and not any(seed.args for seed in seed_calls(facts, family)):
            return True
    if depth >= 2:
        return False
    values = [arg.value for arg in node.args] if isinstance(node, cst.Call) else [node]
    return any(differs_per_process(facts, bound, depth + 1) for value in values for name in names_in(value)
               for bound in facts.assigned_values.get(name, ()))


def _per_process_name(facts: Facts, call: cst.Call) -> Optional[str]:
    return next((qualified for qualified in (*PER_PROCESS, *(d for ds in DRAWS.values() for d in ds),
                                             "random.seed", "numpy.random.seed")
                 if call in facts.calls_named.get(qualified, ())), None)


def has_its_own_seed(call: cst.Call, keywords: tuple[str, ...] = OWN_SEED_KEYWORDS) -> bool:
    """The draw is handed a generator or a seed of its own."""
    return any(arg.keyword is not None and arg.keyword.value in keywords for arg in call.args)


def seeds_a_generator(qualified: Optional[str], call: cst.Call) -> bool:
    """A seed given a value (`np.random.seed()` reseeds from the OS), or a seeded generator
    made (`np.random.RandomState(seed)`)."""
    every = frozenset().union(*SEEDS.values()) | SEEDED_GENERATORS
    return qualified in every and bool(call.args)


def qualified_names(facts: Facts) -> dict[cst.Call, str]:
    """Each call's qualified callee, as the collector named it (`np.random.seed` is
    "numpy.random.seed"), for the calls it names."""
    return {call: name for name, calls in facts.calls_named.items() for call in calls}


def callee_of(call: cst.Call, qualified: dict[cst.Call, str]) -> str:
    return qualified.get(call) or dotted_name(call.func) or ""


def seeded_before(facts: Facts, seed: cst.Call, draw: cst.Call) -> bool:
    """The seed runs before the draw: above it in the same function (or at module level, where
    a module-level seed runs at import, before any function is called), or in a function
    called above the draw in the draw's own function (`set_seed(0)` then the draws)."""
    where, scope = facts.function_of(seed), facts.function_of(draw)
    if where is None:
        return scope is not None or facts.start_of(seed) < facts.start_of(draw)
    if where is scope:
        return facts.start_of(seed) < facts.start_of(draw)
    return any(facts.function_of(call) is scope and facts.start_of(call) < facts.start_of(draw)
               for call in facts.calls_of(where))
