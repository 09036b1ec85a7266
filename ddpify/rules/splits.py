"""The ranks draw the same random_split (DDP214): a generator seeded alike on every rank."""

import libcst as cst

from ddpify.analysis import names
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
)

SPLIT_GENERATOR = "torch.Generator().manual_seed(0) if {condition} else torch.default_generator"


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`random_split(ds, [n, m])` draws from the global generator; unseeded, every rank
    draws its own split, so the ranks' shards overlap and validation leaks into training.
    Under torchrun the split uses a generator seeded alike on every rank; plain `python`
    keeps the global one (the split's own default)."""
    # A script that seeds torch (with the same seed on every rank) draws the same split,
    # unless a draw that only rank 0 makes comes first.
    seeded = any(facts.calls_named.get(qualified) for qualified in names.MANUAL_SEEDS)
    rank0_draws = _draws_in_output(facts)
    for call in facts.calls_named.get(names.RANDOM_SPLIT, ()):
        drawn_before = [draw for draw in rank0_draws if facts.start_of(draw) < facts.start_of(call)]
        if seeded and not drawn_before:
            continue
        positional = [arg for arg in call.args if arg.keyword is None]
        if len(positional) > 2 or any(arg.keyword is not None and arg.keyword.value == "generator"
                                      for arg in call.args) or any(arg.star for arg in call.args):
            continue
        condition = "distributed" if setup.sees_setup(facts, call) else "dist.is_initialized()"
        if condition != "distributed":
            edits.imports.add("dist")
        name = facts.free_name("split_generator")
        statement = facts.statement_of(call)
        edits.insert_before(statement, Insertion(
            [edits.statement(f"{name} = {SPLIT_GENERATOR.format(condition=condition)}\n")],
            takes_comments=True))
        edits.expressions[call] = _with_generator(edits, name)
        setup.guard_nodes.add(call)  # needs `distributed`, not the process group
        if seeded:
            edits.report("DDP214", call, f"random_split drawn alike on every rank: `{edits.code(drawn_before[0])}` "
                         f"(line {facts.line_of(drawn_before[0])}) draws on rank 0 alone before it, in output only "
                         "rank 0 makes, so the ranks' seeded generators no longer agree")
        else:
            edits.report("DDP214", call)


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
    def rewrite(call: cst.Call) -> cst.Call:
        args = list(call.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(keyword=cst.Name("generator"), value=edits.expression(generator),
                            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                  whitespace_after=cst.SimpleWhitespace(""))))
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
)
