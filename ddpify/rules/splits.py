"""The ranks draw the same random_split (DDP214): a generator seeded alike on every rank;
the same for scikit-learn's splits drawn from numpy's global generator (DDP239). An unseeded
shuffle before a split by slices is reported (DDP230)."""

from collections.abc import Callable

import libcst as cst

from ddpify.analysis import names, seeding
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import calls_within, dotted_name
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP214", Severity.EDIT, "random_split drawn alike on every rank",
         "The script never seeds torch, so each rank would draw its own train/validation "
         "split: the ranks' shards would overlap and validation samples would leak into "
         "training. Under torchrun the split uses a generator seeded the same on every rank.",
         "Nothing to do; seed it yourself (generator=torch.Generator().manual_seed(s)) to "
         "choose the split."),
    Rule("DDP239", Severity.EDIT, "scikit-learn split drawn alike on every rank",
         "`train_test_split(X, y, test_size=0.2)` (or `KFold(n_splits=5, shuffle=True)`) without a "
         "`random_state` draws from numpy's global generator, which the script never seeds: each rank "
         "would split its own way, the ranks' shards would overlap and validation rows would leak into "
         "training. Under torchrun the split gets `random_state=0`; plain `python` keeps the original's draw.",
         "Nothing to do; give it `random_state=` yourself to choose the split."),
    Rule("DDP230", Severity.WARNING, "unseeded shuffle before a train/validation split: each rank splits its own way",
         "A permutation drawn from an unseeded generator (`dataset.shuffle()`, `random.shuffle(idx)`, "
         "`np.random.shuffle(idx)`, `torch.randperm(n)`) and then cut into a training and a "
         "validation part by slices (`ds[:k]`, `ds[k:]`) differs on every rank: the ranks' "
         "shards overlap and validation samples leak into training.",
         "Seed the generator alike on every rank before the shuffle (`torch.manual_seed(s)`, "
         "`np.random.seed(s)`, `random.seed(s)`), or draw it from a seeded generator "
         "(`torch.randperm(n, generator=torch.Generator().manual_seed(s))`)."),
)

SPLIT_GENERATOR = "torch.Generator().manual_seed(0) if {condition} else torch.default_generator"


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`random_split(ds, [n, m])` draws from the global generator; unseeded, every rank
    draws its own split, so the ranks' shards overlap and validation leaks into training.
    Under torchrun the split uses a generator seeded alike on every rank; plain `python`
    keeps the global one (the split's own default)."""
    _random_splits_alike(facts, edits, lambda node: setup.sees_setup(facts, node), setup.guard_nodes)
    _report_unseeded_shuffles(facts, edits)
    _library_splits_alike(facts, edits, lambda node: setup.sees_setup(facts, node), setup.guard_nodes)


def plan_in_helper(facts: Facts, edits: Edits) -> None:
    """A helper module that trains nothing but draws the split the training reads (a
    `train_set, val_set = random_split(...)` run when the script imports it, a
    `build_datasets()` of a data module): the same rules, out of the setup's sight. The
    module's top level runs at the script's import, above its setup."""
    _random_splits_alike(facts, edits, lambda node: False, set())
    _library_splits_alike(facts, edits, lambda node: False, set())


def _random_splits_alike(facts: Facts, edits: Edits, sees_setup: Callable[[cst.CSTNode], bool],
                         guarded: set[cst.CSTNode]) -> None:
    # A script that seeds torch (with the same seed on every rank) draws the same split,
    # unless a draw that only rank 0 makes comes first.
    seeded = seeding.seeded_alike(facts, "torch")
    rank0_draws = _draws_in_output(facts)
    for call in sorted((call for qualified in names.RANDOM_SPLITS for call in facts.calls_named.get(qualified, ())),
                       key=facts.start_of):
        drawn_before = [draw for draw in rank0_draws if facts.start_of(draw) < facts.start_of(call)]
        if seeded and not drawn_before:
            continue
        positional = [arg for arg in call.args if arg.keyword is None]
        if len(positional) > 2 or any(arg.keyword is not None and arg.keyword.value == "generator"
                                      for arg in call.args) or any(arg.star for arg in call.args):
            continue
        # Out of the setup's sight (a helper that may run before the group is joined: a
        # `get_loaders()` above the device choice, a data module's function), torchrun's own
        # variable says it, as DDP239's seed does: `dist.is_initialized()` is False there on
        # every rank, and each would draw its own split.
        condition = "distributed" if sees_setup(call) else '"WORLD_SIZE" in os.environ'
        if condition != "distributed":
            edits.imports.add("os")
        name = facts.free_name("split_generator")
        statement = facts.statement_of(call)
        edits.insert_before(statement, Insertion(
            [edits.statement(f"{name} = {SPLIT_GENERATOR.format(condition=condition)}\n")],
            takes_comments=True))
        edits.expressions[call] = _with_generator(edits, name)
        guarded.add(call)  # needs `distributed`, not the process group
        if seeded:
            edits.report("DDP214", call, f"random_split drawn alike on every rank: `{edits.code(drawn_before[0])}` "
                         f"(line {facts.line_of(drawn_before[0])}) draws on rank 0 alone before it, in output only "
                         "rank 0 makes, so the ranks' seeded generators no longer agree")
        else:
            edits.report("DDP214", call)


# scikit-learn's splits that draw from numpy's global generator without a `random_state`: always
# (train_test_split shuffles unless told not to, ShuffleSplit), or when they shuffle (KFold).
_LIBRARY_SPLITS = frozenset({"sklearn.model_selection.train_test_split", "sklearn.model_selection.ShuffleSplit",
                             "sklearn.model_selection.StratifiedShuffleSplit"})
_SHUFFLED_FOLDS = frozenset({"sklearn.model_selection.KFold", "sklearn.model_selection.StratifiedKFold"})


def _library_splits_alike(facts: Facts, edits: Edits, sees_setup: Callable[[cst.CSTNode], bool],
                          guarded: set[cst.CSTNode]) -> None:
    """Rule (as DDP214's): a scikit-learn split without a `random_state` in a script that
    never seeds numpy alike on every rank draws another split on each rank; under torchrun it
    gets `random_state=0`, and plain `python` keeps `None`, the original's draw (DDP239). The
    seed is a name of its own, above the statement, as DDP214's generator is."""
    if seeding.seeded_alike(facts, "numpy") or seeding.seeded_by_a_helper(facts):
        return
    calls = [call for qualified in (*_LIBRARY_SPLITS, *_SHUFFLED_FOLDS) for call in facts.calls_named.get(qualified, ())
             if qualified in _LIBRARY_SPLITS or _keyword_is(call, "shuffle", "True")]
    for call in sorted(calls, key=facts.start_of):
        if any(arg.star for arg in call.args) or _keyword_is(call, "shuffle", "False") or any(
                arg.keyword is not None and arg.keyword.value == "random_state" for arg in call.args):
            continue
        # Where the setup's `distributed` is out of reach (a helper that may run before the group
        # is joined), torchrun's own variable says it: the split needs no group, only to know.
        condition = "distributed" if sees_setup(call) else '"WORLD_SIZE" in os.environ'
        if condition != "distributed":
            edits.imports.add("os")
        name = facts.free_name("split_seed")
        edits.insert_before(facts.statement_of(call), Insertion(
            [edits.statement(f"{name} = 0 if {condition} else None  # the same split on every rank\n")],
            takes_comments=True))
        edits.expressions[call] = _with_keyword(edits, "random_state", name)
        guarded.add(call)  # needs `distributed`, not the process group
        edits.report("DDP239", call)


def _keyword_is(call: cst.Call, keyword: str, value: str) -> bool:
    return any(arg.keyword is not None and arg.keyword.value == keyword and isinstance(arg.value, cst.Name)
               and arg.value.value == value for arg in call.args)


# Draws of a permutation from a global generator, by the family whose seed fixes them.
_SHUFFLE_CALLS = {"random.shuffle": "random", "numpy.random.shuffle": "numpy",
                  "numpy.random.permutation": "numpy", "torch.randperm": "torch"}


def _report_unseeded_shuffles(facts: Facts, edits: Edits) -> None:
    """Rule: a permutation drawn from a global generator the script never seeds, then cut into
    a training and a validation part by slices (`ds = ds.shuffle()`, `train, val = ds[:k],
    ds[k:]`; `random.shuffle(idx)`, `idx[:k]`, `idx[k:]`), differs on every rank: the ranks'
    shards overlap and validation leaks into training (DDP230, with the fix). A seed of that
    generator anywhere in the script (the same on every rank), or a call of a function named
    for seeding (`set_seed(args.seed)`, `seed_everything(s)`), keeps it quiet."""
    if seeding.seeded_by_a_helper(facts):
        return
    draws = {call: qualified for qualified in _SHUFFLE_CALLS for call in facts.calls_named.get(qualified, ())}
    for call in facts.nodes_of(cst.Call):
        drawn = _shuffled(facts, call, draws)
        if drawn is None:
            continue
        family, target = drawn
        families = ("torch", "numpy") if family == "method" else (family,)
        if seeding.seeded_alike(facts, *families):
            continue
        split = _split_by_slices(facts, call, target)
        if split is None:
            continue
        differing = seeding.seed_calls(facts, *families)
        seeded_apart = (f", seeded by `{edits.code(differing[0])}` (line {facts.line_of(differing[0])}) with a "
                        "value that differs per process,") if differing else ""
        edits.report("DDP230", call, (
            f"unseeded shuffle before a train/validation split: `{edits.code(call)}` (line {facts.line_of(call)})"
            f"{seeded_apart} draws its own permutation on each rank, "
            f"and `{edits.code(split)}` (line {facts.line_of(split)}) "
            "cuts it into parts: the ranks' shards overlap and validation samples leak into training. "
            "Seed it alike on every rank before the shuffle (torch.manual_seed(s), np.random.seed(s), "
            "random.seed(s)) or draw it from a seeded generator"))


def _shuffled(facts: Facts, call: cst.Call, draws: dict[cst.Call, str]) -> "tuple[str, str] | None":
    """(the generator's family, the name that holds the permutation) for a draw of one."""
    statement = facts.statement_of(call)
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    qualified = draws.get(call)
    if seeding.has_its_own_seed(call):
        return None
    if qualified in ("random.shuffle", "numpy.random.shuffle"):
        if isinstance(small, cst.Expr) and small.value is call and call.args:
            target = dotted_name(call.args[0].value)
            return (_SHUFFLE_CALLS[qualified], target) if target else None
        return None
    if qualified is not None:
        family = _SHUFFLE_CALLS[qualified]
    elif (isinstance(call.func, cst.Attribute) and call.func.attr.value == "shuffle" and not call.args
          and dotted_name(call.func) not in ("random.shuffle", "np.random.shuffle", "numpy.random.shuffle")):
        family = "method"  # `dataset.shuffle()`: PyG's draws from torch, a datasets.Dataset's from numpy
    else:
        return None
    if isinstance(small, cst.Assign) and _drawn_value(small.value) is call and len(small.targets) == 1:
        target = dotted_name(small.targets[0].target)
        return (family, target) if target else None
    return None


def _drawn_value(value: cst.BaseExpression) -> cst.BaseExpression:
    """The draw under the conversions that keep its order: `torch.randperm(n).tolist()` (the
    split of pytorch/tutorials' detection finetuning), `.numpy()`, `list(...)`."""
    while isinstance(value, cst.Call):
        if isinstance(value.func, cst.Attribute) and value.func.attr.value in ("tolist", "numpy") \
                and isinstance(value.func.value, cst.Call) and not value.args:
            value = value.func.value
        elif dotted_name(value.func) == "list" and len(value.args) == 1:
            value = value.args[0].value
        else:
            break
    return value


def _split_by_slices(facts: Facts, draw: cst.Call, target: str) -> "cst.Subscript | None":
    """A slice of `target` from the start (`ds[:k]`) and one to the end (`ds[k:]`) after the
    draw in its function: a train/validation split. The first of them."""
    function = facts.function_of(draw)
    heads, tails = [], []
    for subscript in facts.nodes_of(cst.Subscript):
        if dotted_name(subscript.value) != target or facts.function_of(subscript) is not function \
                or facts.start_of(subscript) <= facts.start_of(draw) or len(subscript.slice) != 1:
            continue
        index = subscript.slice[0].slice
        if not isinstance(index, cst.Slice) or index.step is not None:
            continue
        if index.lower is None and index.upper is not None:
            heads.append(subscript)
        elif index.lower is not None and index.upper is None:
            tails.append(subscript)
    if heads and tails:
        return min(heads + tails, key=facts.start_of)
    return None


# torch's draws from its global generator.
TORCH_DRAWS = frozenset({"torch.randn", "torch.rand", "torch.randint", "torch.randperm", "torch.normal",
                         "torch.randn_like", "torch.rand_like", "torch.randint_like", "torch.bernoulli",
                         "torch.multinomial"})


def _draws_in_output(facts: Facts) -> list[cst.Call]:
    """Draws from torch's global generator inside a print or save (`print(torch.randn(2))`,
    `save_image(torch.rand(16, 3, 8, 8), path)`): output runs on rank 0 alone once migrated,
    so after it rank 0's generator has moved on and the others' have not. A split drawn from
    the global generator after such a draw differs between ranks even in a seeded script: it
    gets a generator seeded alike on every rank (the rule for an unseeded script)."""
    return [call for statement in facts.output_statements for call in calls_within(statement)
            if dotted_name(call.func) in TORCH_DRAWS and not _guarded_in_helper(facts, statement)]


def _guarded_in_helper(facts: Facts, statement) -> bool:
    """A helper's call that its own module guards: its arguments are drawn on every rank."""
    expression = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else None
    return isinstance(expression, cst.Expr) and expression.value in facts.guarded_in_helper


def _with_generator(edits: Edits, generator: str):
    return _with_keyword(edits, "generator", generator)


def _with_keyword(edits: Edits, keyword: str, value: str):
    def rewrite(call: cst.Call) -> cst.Call:
        args = list(call.args)
        last = args[-1]
        added = cst.Arg(keyword=cst.Name(keyword), value=edits.expression(value),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace("")))
        if isinstance(last.comma, cst.Comma):
            # `f(\n    a,\n    b,\n)`: the new argument takes the trailing comma, and the last one
            # the separator the others use.
            separator = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))
            args[-1] = last.with_changes(comma=separator)
            added = added.with_changes(comma=last.comma)
        else:
            # The space (or the line break) before `)` stays before `)`.
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                         whitespace_after_arg=cst.SimpleWhitespace(""))
            added = added.with_changes(whitespace_after_arg=last.whitespace_after_arg)
        args.append(added)
        return call.with_changes(args=args)

    return rewrite


CASES = (
    Emits(TRAINING.replace("loader = DataLoader(dataset,",
                           "train_set, val_set = torch.utils.data.random_split(dataset, [48, 16])\n"
                           "loader = DataLoader(train_set,"), "DDP214", ("generator=",)),
    Silent(TRAINING.replace("loader = DataLoader(dataset,",
                            "torch.manual_seed(0)\n"
                            "train_set, val_set = torch.utils.data.random_split(dataset, [48, 16])\n"
                            "loader = DataLoader(train_set,"), "DDP214"),
    # Seeded, but a draw in a print (rank 0's alone once migrated) comes before the split.
    Emits(TRAINING.replace("loader = DataLoader(dataset,",
                           "torch.manual_seed(0)\nprint(\"noise sample\", torch.randn(2))\n"
                           "train_set, val_set = torch.utils.data.random_split(dataset, [48, 16])\n"
                           "loader = DataLoader(train_set,"), "DDP214", ("generator=",)),
    # An unseeded permutation cut into a training and a validation part: reported with the fix.
    Emits(TRAINING.replace("loader = DataLoader(dataset,",
                           "perm = torch.randperm(len(dataset))\n"
                           "train_set = torch.utils.data.Subset(dataset, perm[:48])\n"
                           "val_set = torch.utils.data.Subset(dataset, perm[48:])\n"
                           "loader = DataLoader(train_set,"), "DDP230"),
    Emits("import random\n" + TRAINING.replace("loader = DataLoader(dataset,",
                                                "order = list(range(64))\nrandom.shuffle(order)\n"
                                                "val_set = torch.utils.data.Subset(dataset, order[:16])\n"
                                                "train_set = torch.utils.data.Subset(dataset, order[16:])\n"
                                                "loader = DataLoader(train_set,"), "DDP230"),
    Silent(TRAINING.replace("loader = DataLoader(dataset,",
                            "perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))\n"
                            "train_set = torch.utils.data.Subset(dataset, perm[:48])\n"
                            "loader = DataLoader(train_set,"), "DDP230"),
    # A seed whose value differs per process (an unseeded draw, the clock, none at all) is no
    # seed across ranks; a draw of a generator seeded first is the same on every rank.
    Emits("import random\nimport numpy as np\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "random_seed = random.randint(1, 100)\nnp.random.seed(random_seed)\n"
        "order = np.random.permutation(64)\ntrain_set = torch.utils.data.Subset(dataset, order[:48])\n"
        "val_set = torch.utils.data.Subset(dataset, order[48:])\nloader = DataLoader(train_set,"),
        "DDP230"),
    Emits("import numpy as np\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "indices = list(range(64))\nnp.random.seed()\nnp.random.shuffle(indices)\n"
        "train_set = torch.utils.data.Subset(dataset, indices[16:])\nloader = DataLoader(train_set,")
        .replace("for epoch in", "val_set = torch.utils.data.Subset(dataset, indices[:16])\nfor epoch in"), "DDP230"),
    Silent("import random\nimport numpy as np\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "random.seed(7)\nrandom_seed = random.randint(1, 100)\n"
        "np.random.seed(random_seed)\norder = np.random.permutation(64)\n"
        "train_set = torch.utils.data.Subset(dataset, order[:48])\n"
        "val_set = torch.utils.data.Subset(dataset, order[48:])\nloader = DataLoader(train_set,"), "DDP230"),
    Emits("import time\n" + TRAINING.replace("loader = DataLoader(dataset,",
                                             "torch.manual_seed(int(time.time()))\n"
                                             "train_set, val_set = torch.utils.data.random_split(dataset, [48, 16])\n"
                                             "loader = DataLoader(train_set,"), "DDP214", ("generator=",)),
    Silent("import random\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "def seeding(seed):\n    random.seed(seed)\n\n\nseeding(42)\n"
        "order = list(range(64))\nrandom.shuffle(order)\ntrain_set = torch.utils.data.Subset(dataset, order[:48])\n"
        "val_set = torch.utils.data.Subset(dataset, order[48:])\nloader = DataLoader(train_set,"), "DDP230"),
    # Slices of a permutation that are not a split from the start and one to the end.
    Silent(TRAINING.replace("loader = DataLoader(dataset,",
                            "perm = torch.randperm(len(dataset))\n"
                            "first = torch.utils.data.Subset(dataset, perm[0:8])\n"
                            "loader = DataLoader(dataset,"), "DDP230"),
    # scikit-learn's split without a random_state: seeded alike under torchrun; not when numpy is
    # seeded, the split has a random_state of its own, or a KFold does not shuffle.
    Emits("from sklearn.model_selection import train_test_split\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "train_idx, val_idx = train_test_split(list(range(64)), test_size=0.25)\n"
        "loader = DataLoader(torch.utils.data.Subset(dataset, train_idx),"), "DDP239",
        ("split_seed = 0 if distributed else None", "random_state=split_seed")),
    # In a helper run before the group may exist: torchrun's variable, not the group, decides.
    Emits("import numpy as np\nfrom sklearn.model_selection import train_test_split\n\n\n"
          "def load():\n    x = np.arange(40).reshape(10, 4)\n    return train_test_split(x, test_size=0.2)\n\n\n"
          + TRAINING.replace("import torch\n", "").replace(
              "loader = DataLoader(dataset,", "train_x, val_x = load()\nloader = DataLoader(dataset,"), "DDP239",
          ("split_seed = 0 if ", "random_state=split_seed")),
    Silent("import numpy as np\nfrom sklearn.model_selection import train_test_split\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "np.random.seed(0)\n"
        "train_idx, val_idx = train_test_split(list(range(64)), test_size=0.25)\n"
        "loader = DataLoader(torch.utils.data.Subset(dataset, train_idx),"), "DDP239"),
    Silent("from sklearn.model_selection import train_test_split\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "train_idx, val_idx = train_test_split(list(range(64)), random_state=1)\n"
        "loader = DataLoader(torch.utils.data.Subset(dataset, train_idx),"), "DDP239"),
    Emits("from sklearn.model_selection import KFold\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "folds = KFold(n_splits=4, shuffle=True)\n"
        "train_idx, val_idx = next(iter(folds.split(list(range(64)))))\n"
        "loader = DataLoader(torch.utils.data.Subset(dataset, train_idx),"), "DDP239",
        ("KFold(n_splits=4, shuffle=True, random_state=split_seed)",)),
    Silent("from sklearn.model_selection import KFold\n" + TRAINING.replace(
        "loader = DataLoader(dataset,", "folds = KFold(n_splits=4)\n"
        "train_idx, val_idx = next(iter(folds.split(list(range(64)))))\n"
        "loader = DataLoader(torch.utils.data.Subset(dataset, train_idx),"), "DDP239"),
)
