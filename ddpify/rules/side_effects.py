"""Rank-0 guards for output, files and experiment trackers (DDP301-DDP308, DDP311, DDP411).

Every rank runs the same code: without a guard each print appears N times, N processes race
to write the same file and a tracker records N runs. The smallest guard that is correct wins:
a keyword where the API has one (`tqdm(..., disable=not is_main)`, `wandb.init(mode=...)`),
`if is_main:` around whole statements otherwise, and one guard around a `for`/`with` whose
body is nothing but guarded statements.
"""
from collections.abc import Callable, Iterator, Sequence
from typing import Optional, cast

import libcst as cst

from ddpify.analysis import effects, names, shell, synced_metrics, traversal
from ddpify.analysis.control import Facts, receiver_of
from ddpify.analysis.facts import WHOLE_VALUE, BlockItem, Slot, Statement
from ddpify.analysis.nodes import (
    argument_among,
    argument_for,
    calls_within,
    dotted_name,
    find_all,
    first_free,
    literal_open_mode,
    names_within,
    opens_for_writing,
    parameter_names,
    positional_parameters,
)
from ddpify.analysis.synced_metrics import syncs_a_metric
from ddpify.diagnostics import Rule, Severity, Status
from ddpify.emit import guards
from ddpify.emit.arguments import add_keyword
from ddpify.emit.edits import Edits, Insertion, replacement
from ddpify.plan import Plan
from ddpify.rules import downloads
from ddpify.rules.cases import TRAINING, Emits, Silent

RULES = (
    Rule("DDP301", Severity.EDIT, "output only on rank 0",
         "Every rank runs the same code, so each print, log line and progress bar would "
         "appear once per process.",
         "Nothing to do."),
    Rule("DDP302", Severity.EDIT, "files written only on rank 0",
         "Ranks writing the same file race and can leave a corrupt checkpoint.",
         "Nothing to do."),
    Rule("DDP304", Severity.EDIT, "other ranks log errors only",
         "Every rank logs the same lines, warnings included; raising the level once on the "
         "other ranks to ERROR keeps the errors, which may be specific to one rank, and leaves "
         "every logging call as it was.",
         "Nothing to do; lower ERROR to WARNING if your warnings differ per rank."),
    Rule("DDP305", Severity.EDIT, "progress bar shown only on rank 0",
         "Each rank would draw its own bar over the same terminal line.",
         "Nothing to do."),
    Rule("DDP306", Severity.EDIT, "experiment tracker created and used only on rank 0",
         "A TensorBoard writer or wandb run per rank logs every figure N times into N runs (a "
         "visdom client per rank plots each point N times into the same window).",
         "Nothing to do."),
    Rule("DDP307", Severity.WARNING, "rank-0-only writer used where its guard cannot follow",
         "ddpify guards the statements that create and use a file, TensorBoard writer or wandb "
         "run; this use is part of a larger statement (an argument to a function, say), so "
         "guarding it would skip other work and leaving it would fail on ranks without the "
         "object. The object is left on every rank.",
         "Create it only on rank 0 (`writer = SummaryWriter() if is_main else None`) and "
         "skip its uses when it is None."),
    Rule("DDP308", Severity.EDIT, "the model's run moved out of a print only rank 0 makes",
         "Guarding the print as it stands would run the model (or an evaluation that gathers "
         "its figures) on rank 0 alone, and a DDP forward or a gather on one rank waits "
         "forever for the others. The call runs on every rank, into a name, before the "
         "print; where it cannot be moved (inside a comprehension) the print stays on every "
         "rank and this is a warning.",
         "Nothing to do."),
    Rule("DDP411", Severity.EDIT, "a metric's compute() moved out of a print only rank 0 makes",
         "A torchmetrics object's `compute()` gathers the state of every rank under torchrun "
         "(an all_gather), so the figure it prints covers the whole epoch; made inside the "
         "print only rank 0 runs, it would wait forever for the other ranks. The compute runs "
         "on every rank, into a name, before the print.",
         "Nothing to do."),
    Rule("DDP412", Severity.WARNING, "a metric on the CPU gathers CPU tensors, which NCCL cannot carry",
         "Under torchrun a torchmetrics object's compute() all-gathers its state. Left on the "
         "CPU (fed `.cpu()` predictions), that state is a CPU tensor: Gloo carries it, so it "
         "runs on a CPU machine, but the NCCL group of a GPU run refuses it and compute() "
         "fails. ddpify does not move the metric: its updates would need the device too.",
         "Move the metric to the device (`metric = Accuracy(...).to(device)`) and update it "
         "with tensors on the device (drop the `.cpu()` before `update`)."),
    Rule("DDP311", Severity.WARNING, "prints or writes on every rank: the helper does more than that "
         "(retired: the helper's own module is migrated with the script, and guards its output there)",
         "This function of the project's own modules prints or writes files, but it also "
         "does work every rank must do (it runs the model, or calls something ddpify cannot "
         "see into), so the call stays on every rank, and so does its output: every rank "
         "prints, and every rank writes the same file. ddpify does not rewrite the "
         "project's other modules.",
         "In the helper, print only on rank 0: `if not dist.is_initialized() or "
         "dist.get_rank() == 0: print(...)`.",
         status=Status.REMOVED),
)

LOWER_LOG_LEVEL_CODE = """\
if not {guard}:  # rank 0 logs as before; the other ranks log errors only
    logging.getLogger().setLevel(logging.ERROR)
"""


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    _guard_prints_and_saves(facts, edits, setup)
    if not setup.cpu_only and facts.models:
        for name, made in synced_metrics.metrics_left_on_the_cpu(facts).items():
            edits.report("DDP412", made, f"`{name}` stays on the CPU: on GPUs its compute() all-gathers "
                         "a CPU tensor over NCCL, which fails; move it `.to(device)` and update it on the device")
    _prints_handed_on(facts, edits)
    _progress_bars(facts, edits, setup)
    _file_writes(facts, edits, setup)
    for call in image_saves(facts):
        _guard_statement_call(facts, edits, setup, call, "DDP302")
    _trackers(facts, edits, setup)
    _lower_log_level(facts, edits, setup)
    _logger_levels_on_rank0(facts, edits, setup)
    _log_files_on_rank0(facts, edits, setup)
    _loguru_on_rank0(facts, edits, setup)
    guards.guard_loops_ended_by_a_guarded_statement(edits)
    guards.fold_into_loops_and_withs(edits, keep_inside=facts.training_loops)
    guards.drop_guards_inside_guards(edits)
    setup.rank0_statements.update(edits.guarded)


def _guard_prints_and_saves(facts: Facts, edits: Edits, setup: Plan) -> None:
    model_names = {model.name for model in facts.models}
    for output in facts.output_calls_in_suites:
        statement = facts.statement_of(output)
        if _single_expression(statement) is None and output not in setup.collective_saves \
                and not (output in facts.save_calls and _saves_to_memory(facts, output)):
            _guard_in_one_line_suite(facts, edits, setup, cast(cst.Expr, facts.parents.get(output)), statement,
                                     "DDP302" if output in facts.save_calls else "DDP301")
    for save in facts.save_calls:
        if not isinstance(facts.parents.get(save), cst.Expr) and save not in setup.collective_saves:
            _guard_discarded_expression(facts, edits, setup, save, "DDP302") or _guard_returned_write(
                facts, edits, setup, save, "DDP302")
    for statement in facts.output_statements:
        expression = _single_expression(statement)
        if expression is None:
            continue
        call = expression.value
        if call in facts.guarded_in_helper:
            continue  # its own module, migrated in this run, prints or writes on rank 0 alone
        writes = call in facts.save_calls or isinstance(call, cst.Call) and facts.helper_effects.get(
            call) == effects.WRITES
        # `save_image(G(z), path)`, `torch.save(G(z), path)`: rank 0 alone would run a DDP
        # forward the others never join.
        if _runs_model(facts, call, model_names) and not _hoist_model_runs(
                facts, edits, statement, call, model_names):
            edits.report("DDP308", statement)
            continue
        if _saves_to_memory(facts, call):
            continue  # serialising into a buffer writes no file
        if call in setup.collective_saves:
            continue  # dcp.save: every rank writes its own shards
        if _in_dataset_class(facts, statement):
            continue
        edits.guarded[statement] = setup.guard_for(facts, statement)
        edits.report("DDP302" if writes else "DDP301", statement)


PRINT_ON_RANK0_HELPER = '''\


def print_on_rank0(*args, **kwargs):
    """`print` where the script hands it on as a value (`trace_func=print`): it prints in
    rank 0 only, asked at each call (before the group exists, torchrun's RANK tells)."""
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))
    if rank == 0:
        print(*args, **kwargs)
'''


def _prints_handed_on(facts: Facts, edits: Edits) -> None:
    """`def __init__(self, trace_func=print)`, `log = print`, `callback=print`: the calls go
    through another name, so the value itself becomes a print that only rank 0 makes."""
    for node in facts.print_values:
        edits.expressions[node] = replacement(edits, "print_on_rank0")
        edits.add_helper("print_on_rank0", PRINT_ON_RANK0_HELPER, "dist", "os")
        edits.report("DDP301", node)


def _saves_to_memory(facts: Facts, call: cst.BaseExpression) -> bool:
    """`torch.save(obj, buffer)`, `plt.savefig(buf)`, `json.dump(d, out)` where the name is
    only ever an in-memory file (`buf = io.BytesIO()`, `io.StringIO()`): it writes no file,
    and the ranks that read the buffer back need it filled, so it stays on every rank."""
    if not isinstance(call, cst.Call):
        return False
    return any(_in_memory_file(facts, arg.value) for arg in call.args if not arg.star)


def _in_memory_file(facts: Facts, value: cst.BaseExpression) -> bool:
    name = dotted_name(value)
    assigned = facts.assigned_values.get(name, []) if name is not None else []
    return bool(assigned) and all(
        isinstance(each, cst.Call) and (dotted_name(each.func) or "").endswith(("BytesIO", "StringIO"))
        for each in assigned)


def _runs_model(facts: Facts, call: cst.BaseExpression, model_names: set[str]) -> bool:
    """A call inside the printed arguments that calls the model, is handed the model, or is
    a function of this file that uses it (`evaluate(val_data)` on the global model)."""
    return any(_runs_the_model(facts, inner, model_names) for inner in calls_within(call) if inner is not call)


def runs_shared_work(facts: Facts, write: cst.Call) -> bool:
    """For deferred_writes.py: inside the write, a call every rank must make (a model run, a
    function of this file that runs one, a metric's compute) or a collective: the write cannot
    go to rank 0 alone as it stands."""
    return _runs_model(facts, write, {model.name for model in facts.models}) or any(
        (dotted_name(inner.func) or "").startswith(("dist.", "torch.distributed.")) for inner in calls_within(write))


# Builtins that look at what they are handed without calling it.
INSPECTING_BUILTINS = frozenset({"isinstance", "hasattr", "getattr", "type", "id", "len", "str", "repr", "vars"})


def _runs_the_model(facts: Facts, inner: cst.Call, model_names: set[str]) -> bool:
    """A call that every rank must make: a run of the model (or of a function that runs it),
    or a metric's `compute()`, which gathers from every rank (synced_metrics)."""
    if syncs_a_metric(facts, inner):
        return True
    if dotted_name(inner.func) in INSPECTING_BUILTINS:
        return False
    if facts.helper_effects.get(inner, effects.MIXED) != effects.MIXED:
        return False  # a helper that only reads the model (its parameters, its state dict)
    if dotted_name(inner.func) in model_names or _calls_own_parameter(facts, inner):
        return True
    if any(dotted_name(arg.value) in model_names for arg in inner.args):
        return True
    function = facts.functions.get(dotted_name(inner.func) or "") or facts.method_called(inner)
    return function is not None and _function_runs_model(facts, function, model_names, set())


def _function_runs_model(facts: Facts, function: cst.FunctionDef, model_names: set[str],
                         seen: set[cst.FunctionDef]) -> bool:
    """A function of this file that names a model (`model`, `self.model`), runs one it is
    handed, or calls a method of its own class that does (`self.validate()` in `fit()`)."""
    seen.add(function)
    if set(names_within(function.body)) & model_names or _calls_a_parameter(function):
        return True
    return any(method not in seen and _function_runs_model(facts, method, model_names, seen)
               for call in calls_within(function.body)
               for method in [facts.method_called(call)] if method is not None)


def _calls_own_parameter(facts: Facts, inner: cst.Call) -> bool:
    """`def save_embeddings(model, x, path): np.save(path, model(x).cpu().numpy())`: a call of
    a parameter of the function it sits in may run the model a caller hands in, from this
    file or from another module of the project where the model is never named here (the
    reading _calls_a_parameter makes of a function called inside the line). Treated as a
    run, it is hoisted to every rank before the write rank 0 alone makes: a DDP forward on
    one rank syncs buffers with peers that never join."""
    function = facts.function_of(inner)
    return isinstance(inner.func, cst.Name) and function is not None and (
        inner.func.value in parameter_names(function) - {"self", "cls"})


def _calls_a_parameter(function: cst.FunctionDef) -> bool:
    """`def evaluate(model, loader): ... model(x) ...`: the function runs a model it is handed
    (in a helper module, where the model is never named)."""
    parameters = parameter_names(function) - {"self", "cls"}
    return any(isinstance(call.func, cst.Name) and call.func.value in parameters
               for call in calls_within(function.body))


HOISTED_SUFFIX = "_value"


def _hoist_model_runs(facts: Facts, edits: Edits, statement: Statement, call: cst.BaseExpression,
                      model_names: set[str]) -> bool:
    """`print(f"... {evaluate(val_data):.2f}")`: the evaluation runs on every rank, into a
    name, before the print that only rank 0 makes (a DDP forward on rank 0 alone would wait
    for the others). False when a run of the model is not an argument's own call."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False  # out of `if test: print(evaluate(model))` the run would lose its test
    runs = [inner for inner in calls_within(call) if inner is not call and _runs_the_model(facts, inner, model_names)]
    outermost = [inner for inner in runs if not any(other is not inner and inner in calls_within(other)
                                                   for other in runs)]
    if any(_inside_a_scope(facts, inner, statement) for inner in outermost):
        return False
    hoisted: list[Statement] = []
    insertion = Insertion(hoisted, takes_comments=True)
    for inner in outermost:
        called = inner.func.attr.value if isinstance(inner.func, cst.Attribute) else dotted_name(inner.func)
        if syncs_a_metric(facts, inner):  # `accuracy.compute()` -> `accuracy_value`
            called = dotted_name(cast(cst.Attribute, inner.func).value)
        base = (called or "result").rsplit(".", 1)[-1] + HOISTED_SUFFIX
        name = first_free(base, lambda candidate: candidate in facts.bound_names or any(
            candidate in edits.code(h) for h in hoisted))
        hoisted.append(edits.statement(f"{name} = {edits.code(inner)}\n"))
        edits.expressions[inner] = _hoisted_as(insertion, len(hoisted) - 1, name)
    edits.before.setdefault(statement, []).append(insertion)
    metrics_only = all(syncs_a_metric(facts, inner) for inner in outermost)
    edits.report("DDP411" if metrics_only else "DDP308", statement)
    return True


def _hoisted_as(insertion: Insertion, index: int, name: str) -> Callable[[cst.BaseExpression], cst.Name]:
    """The run, as the other rules rewrote it (`torch.jit.script(getattr(model, "module",
    model))`), assigned to `name` by the hoisted statement; `name` in its place. (The
    statement is inserted when its block is rebuilt, after the run's own edits.)"""
    def rewrite(updated: cst.BaseExpression) -> cst.Name:
        assignment = cast(cst.SimpleStatementLine, insertion.statements[index])
        assign = cast(cst.Assign, assignment.body[0])
        insertion.statements[index] = assignment.with_changes(
            body=[assign.with_changes(value=updated)])
        return cst.Name(name)
    return rewrite


def _model_runs_kept_on_every_rank(facts: Facts, edits: Edits, statement: cst.BaseStatement) -> bool:
    """Any line about to run on rank 0 alone (`tqdm.write(f"{evaluate(loader)}")`,
    `json.dump({"val": trainer.validate()}, open(path, "w"))`), as a print: the runs of the
    model in it go first, on every rank, into names. False (the line stays on every rank,
    DDP308) where they cannot be moved."""
    expression = _single_expression(statement)
    if expression is None:
        return True
    model_names = {model.name for model in facts.models}
    if not _runs_model(facts, expression.value, model_names):
        return True
    if isinstance(statement, (cst.SimpleStatementLine, cst.If)) and _hoist_model_runs(
            facts, edits, statement, expression.value, model_names):
        return True
    edits.report("DDP308", statement)
    return False


def _inside_a_scope(facts: Facts, node: cst.CSTNode, statement: Statement) -> bool:
    """In a comprehension or lambda, where a hoisted name would not be the same value."""
    parent = facts.parents.get(node)
    while parent is not None and parent is not statement:
        if isinstance(parent, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return True
        parent = facts.parents.get(parent)
    return False


def _progress_bars(facts: Facts, edits: Edits, setup: Plan) -> None:
    for qualified in sorted(names.PROGRESS_BARS):
        for call in facts.calls_named.get(qualified, ()):
            if any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args):
                continue
            guard = setup.guard_for(facts, call)
            add_keyword(facts, edits, call, "disable", f"not {guard}")
            edits.report("DDP305", call)
    for qualified in sorted(names.PROGRESS_WRITE):
        for call in facts.calls_named.get(qualified, ()):
            # tqdm.write prints whether or not a bar is disabled.
            _guard_statement_call(facts, edits, setup, call, "DDP301")


# Methods by which a table or a figure writes itself to a file, and by which a pretrained
# model, its tokenizer, config or processor (Hugging Face's save_pretrained) writes itself
# into a folder: config.json and the weights, once per rank unless rank 0 alone saves them.
FILE_WRITING_METHODS = frozenset({"to_csv", "to_json", "to_parquet", "to_excel", "to_pickle", "savefig",
                                  "save_pretrained"})
# The keywords that name the file (or folder) they write to.
PATH_KEYWORDS = frozenset({"path_or_buf", "path", "excel_writer", "fname", "save_directory"})


def _file_writes(facts: Facts, edits: Edits, setup: Plan) -> None:
    named = [call for qualified in sorted(names.MAKE_DIRECTORIES | names.DUMP_TO_FILE)
             for call in facts.calls_named.get(qualified, ())]
    for call in [*named, *_writes_of_objects_made_on_the_spot(facts), *_path_writes(facts, set(named))]:
        _guard_statement_call(facts, edits, setup, call, "DDP302")
    # `run_dir.mkdir(parents=True, exist_ok=False)`: pathlib, on a path of any name.
    # `traced = torch.jit.trace(model, x)` ... `traced.save(path)`: a TorchScript module saving itself.
    exported = {call for qualified in names.SELF_SAVING_EXPORTS for call in facts.calls_named.get(qualified, ())}
    # (A tokenizer saved where its file is missing is saved by local rank 0 while the others wait: downloads.py.)
    saved_where_missing = set(downloads.tokenizer_saves_where_missing(facts, setup))
    for callee, calls in sorted(facts.calls_by_callee.items()):
        if callee.endswith(".mkdir") or callee.endswith(".save") and any(
                value in exported for value in facts.assigned_values.get(callee[: -len(".save")], ())):
            for call in calls:
                _guard_statement_call(facts, edits, setup, call, "DDP302")
        elif callee.rsplit(".", 1)[-1] in FILE_WRITING_METHODS:
            # `data_frame.to_csv("results/stats.csv")`, `fig.savefig(path)`: an object of any
            # name writing itself to the path it is given (with no path, to_csv returns text).
            for call in calls:
                if call in saved_where_missing:
                    continue
                if any(arg.keyword is None or arg.keyword.value in PATH_KEYWORDS for arg in call.args):
                    _guard_statement_call(facts, edits, setup, call, "DDP302")
    for call in _saves_of_exports_made_on_the_spot(facts, exported):
        _guard_statement_call(facts, edits, setup, call, "DDP302")
    for call in downloads.tokenizer_saves(facts):
        if call not in saved_where_missing:
            _guard_statement_call(facts, edits, setup, call, "DDP302")
    _shell_writes(facts, edits, setup)
    _files_opened_for_writing(facts, edits, setup)


def _files_opened_for_writing(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`open(path, "w")`, and a file of a format opened the same way, `h5py.File(path, "a")`."""
    for qualified in sorted(names.OPEN):
        for call in facts.calls_named.get(qualified, ()):
            # (A file a download writes is written on local rank 0 of each machine: downloads.py.)
            if opens_for_writing(call) and facts.statement_of(call) not in edits.guarded \
                    and not _in_a_download(facts, call) \
                    and not downloads.in_a_dataset_downloading_on_request(facts, call) \
                    and not _in_a_guarded_lambda(facts, edits, call):
                # (A statement guarded as a whole: `json.dump(history, open(path, "w"))`.)
                _open_on_rank0(facts, edits, setup, call)
    for qualified in sorted(names.FORMAT_OPENERS):
        for call in facts.calls_named.get(qualified, ()):
            # (An archive written where data is fetched is made once per machine, as a download.)
            if opens_for_writing(call) and facts.statement_of(call) not in edits.guarded \
                    and facts.statement_of(call) not in facts.download_statements:
                _open_on_rank0(facts, edits, setup, call, devnull_elsewhere=False)


def _in_a_download(facts: Facts, call: cst.Call) -> bool:
    """The call is in a download statement (`with tqdm(...) as bar: with open(dest, "wb")`:
    the outer `with` is the download), which downloads.py runs on one process per machine."""
    downloads_here = set(facts.download_statements)
    node: Optional[cst.CSTNode] = facts.statement_of(call)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
        if node in downloads_here:
            return True
        node = facts.parents.get(node)
    return False


def _saves_of_exports_made_on_the_spot(facts: Facts, exported: set[cst.Call]) -> list[cst.Call]:
    """Rule: `torch.jit.trace(model, x).save(path)`, `torch.jit.script(model).save(path)`: a
    TorchScript module saved in the expression that makes it writes its file, once per rank
    unless rank 0 alone saves it (as `traced = ...` then `traced.save(path)` does)."""
    saves = []
    for export in sorted(exported, key=facts.start_of):
        method = facts.parents.get(export)
        if not isinstance(method, cst.Attribute) or method.attr.value != "save":
            continue
        call = facts.parents.get(method)
        if isinstance(call, cst.Call) and call.func is method:
            saves.append(call)
    return saves


def _path_writes(facts: Facts, named: set[cst.Call]) -> list[cst.Call]:
    """Rule: pathlib's writing methods (names.PATH_WRITING_METHODS) on a path of any spelling,
    `Path(out, "config.json").write_text(...)`, `(run_dir / "DONE").touch()`, write a file:
    on rank 0 alone. (`os.unlink(path)` is a named write already; `run_dir.mkdir()` below.)"""
    return [call for call in facts.nodes_of(cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in names.PATH_WRITING_METHODS
            and call not in named and not (call.func.attr.value == "mkdir" and dotted_name(call.func) is not None)]


def _writes_of_objects_made_on_the_spot(facts: Facts) -> list[cst.Call]:
    """Rule: `pd.DataFrame(log).to_csv(path)`, `pd.concat(frames).round(3).to_json(path)`,
    `plt.gcf().savefig(path)`: a table or figure made on the spot, with no name to follow,
    writes itself to the path it is given, once per rank unless rank 0 alone writes it."""
    return [call for call in facts.nodes_of(cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in FILE_WRITING_METHODS
            and isinstance(call.func.value, cst.Call)
            and any(arg.keyword is None or arg.keyword.value in PATH_KEYWORDS for arg in call.args)]


def _shell_writes(facts: Facts, edits: Edits, setup: Plan) -> None:
    """A command that writes files (analysis/shell.py) is a write: its statement goes on rank
    0. One whose result the script uses (`ret = os.system(...)`) cannot, and is reported."""
    for call in shell.writing_commands(facts.calls_named):
        if shell.after_a_download(facts.statement_of(call), facts.parents, facts.download_statements):
            continue
        if _guard_statement_call(facts, edits, setup, call, "DDP302") or facts.statement_of(call) in edits.guarded:
            continue
        edits.report("DDP307", call, (
            f"rank-0-only writer used where its guard cannot follow: `{edits.code(call.func)}(...)` runs a "
            f"command that writes files, and its result is used, so ddpify cannot put it on rank 0 alone; "
            f"run it under `if dist.get_rank() == 0:` and give the other ranks what they need of its result"))


# Methods of a Pillow image that return another image (`.convert("L").resize(size)`).
IMAGE_METHODS = frozenset({"convert", "resize", "rotate", "crop", "transpose", "copy", "filter", "point",
                           "quantize", "reduce", "transform"})


def image_saves(facts: Facts) -> list[cst.Call]:
    """`picture = Image.fromarray(pixels)` ... `picture.save(path)`,
    `Image.fromarray(pixels).convert("L").save(path)`, `to_pil_image(x).save(path)`,
    `to_image = T.ToPILImage()` ... `to_image(x).save(path)`: a Pillow image writes itself to
    the file it is given, once per rank unless rank 0 alone saves it. Only a value the
    script made with Pillow (or torchvision's conversion to it) counts: `.save` of anything
    else is not a file write ddpify can name."""
    makers = {call for qualified in names.IMAGE_MAKERS for call in facts.calls_named.get(qualified, ())}
    transforms = {call for qualified in names.IMAGE_TRANSFORM_MAKERS for call in facts.calls_named.get(qualified, ())}
    if not makers and not transforms:
        return []

    def made_by(value: cst.BaseExpression, depth: int = 0) -> bool:
        while isinstance(value, cst.Call):
            if value in makers or value.func in transforms:
                return True
            if isinstance(value.func, cst.Attribute) and value.func.attr.value in IMAGE_METHODS:
                value = value.func.value
                continue
            name = dotted_name(value.func)  # `to_image(x)`, `to_image = T.ToPILImage()`
            return name is not None and depth < 3 and any(
                each in transforms for each in facts.assigned_values.get(name, ()))
        name = dotted_name(value)
        return name is not None and depth < 3 and any(
            made_by(each, depth + 1) for each in facts.assigned_values.get(name, ()))

    return [call for call in find_all(facts.module, cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "save"
            and call.args and made_by(call.func.value)]


def _open_on_rank0(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, devnull_elsewhere: bool = True) -> None:
    """`with open(...)` around writes only, a line that only opens, a file object used in
    whole statements: guarded; anything else opens os.devnull on the other ranks (a file of
    a format, `h5py.File(path, "w")`, which cannot open os.devnull: reported, DDP307)."""
    expression = facts.parents.get(call)
    parent = facts.parents.get(expression) if expression is not None else None
    if isinstance(parent, cst.With) and len(parent.items) == 1:
        if _only_writes(facts, parent):
            _guard(facts, edits, setup, parent, "DDP302")
        else:
            _open_nothing_elsewhere(facts, edits, setup, call, devnull_elsewhere)
    elif _single_expression(facts.statement_of(call)) is not None:
        # `open(path, "wb").write(data)`: a line that does nothing but write.
        _guard(facts, edits, setup, facts.statement_of(call), "DDP302")
    elif not _guard_object(facts, edits, setup, call, "DDP302", report_failure=False):
        _open_nothing_elsewhere(facts, edits, setup, call, devnull_elsewhere)


def _only_writes(facts: Facts, block: cst.With) -> bool:
    """A `with open(...)` block that can run on rank 0 alone (a download written chunk by
    chunk): no training loop, no call of a model or of a function or method of this file
    (the training, an evaluation that gathers: `trainer.validate()`), nor of a parameter of
    its function, which may be the model a caller hands in (_calls_own_parameter), nor of a
    function of another module of the project handed the model (`validation(model, ...)` of
    test.py: a DDP forward on rank 0 alone waits for a buffer broadcast the others never join),
    nor a move to a device (`f.write(str(model)); model.to(device)`: on rank 0 alone, the other
    ranks would wrap the model where it was)."""
    if any(loop in facts.training_loops or loop in facts.loops_calling_training
           for loop in find_all(block.body, cst.For)):
        return False
    within = set(calls_within(block.body))
    if any(move in within and move.func.attr.value != "cpu"  # type: ignore[attr-defined]
           for moves in facts.device_moves.values() for move in moves):
        return False
    models = {model.name for model in facts.models}
    return not any((dotted_name(call.func) or "") in models or (dotted_name(call.func) or "") in facts.functions
                   or facts.method_called(call) is not None or _calls_own_parameter(facts, call)
                   or call in facts.project_calls and _hands_a_model(call, models)
                   for call in calls_within(block.body))


def _hands_a_model(call: cst.Call, models: set[str]) -> bool:
    """`validation(model, criterion, loader)`, `evaluate(net=self.net)`: the model is an argument."""
    return any((dotted_name(arg.value) or "") in models for arg in call.args)


def _open_nothing_elsewhere(facts: Facts, edits: Edits, setup: Plan, call: cst.Call,
                            devnull_elsewhere: bool = True) -> None:
    """The file is opened where the script opens it, around work every rank must do (the
    training inside `with open(log) as f:`, a handle printed to from everywhere): the other
    ranks open os.devnull instead, so every statement runs everywhere and only rank 0's
    writes reach the file."""
    path = argument_for(call, "file", 0)
    mode = literal_open_mode(call)
    if path is None or mode is None or "x" in mode or not devnull_elsewhere:
        edits.report("DDP307", call)  # `open(p, "x")` fails on os.devnull, which exists
        return
    guard = setup.guard_for(facts, call)
    edits.expressions[path] = replacement(edits, f"{edits.code(path)} if {guard} else os.devnull")
    edits.imports.add("os")
    edits.report("DDP302", call)


def _trackers(facts: Facts, edits: Edits, setup: Plan) -> None:
    for qualified in sorted(names.SUMMARY_WRITER | names.VISDOM):
        for call in facts.calls_named.get(qualified, ()):
            if not _made_by_a_helper(facts, edits, setup, call):
                _guard_object(facts, edits, setup, call, "DDP306")
    for call, slot in facts.calls_returning_trackers:
        _guard_uses_of_a_helper_writer(facts, edits, setup, call, slot)
    _guard_uses_of_an_inherited_writer(facts, edits, setup)
    for qualified in sorted(names.TENSORBOARD_LOGGER_CALLS):
        for call in facts.calls_named.get(qualified, ()):
            if not _guard_statement_call(facts, edits, setup, call, "DDP306"):
                edits.report("DDP307", call)
    _mlflow_on_rank0(facts, edits, setup)
    for call in facts.calls_named.get(names.WANDB_INIT, ()):
        # A disabled run accepts every call and records nothing: one keyword instead of a
        # guard on each wandb.log, wandb.watch and run.finish.
        keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
        guard = setup.guard_for(facts, call)
        mode = keywords.get("mode")
        if mode is None:
            add_keyword(facts, edits, call, "mode", f'None if {guard} else "disabled"')
        else:
            value = edits.code(mode.value)
            edits.expressions[mode.value] = replacement(edits, f'{value} if {guard} else "disabled"')
        edits.report("DDP306", call)


def _mlflow_on_rank0(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: MLflow's calls (`mlflow.log_metric(...)`, `mlflow.start_run()`) on rank 0 alone;
    `with mlflow.start_run():` around the training opens the run on rank 0 and nothing on
    the others (`contextlib.nullcontext()`), so the training inside still runs everywhere.
    A run bound by `as` that the block reads stays, reported (DDP307)."""
    for qualified in sorted(names.MLFLOW_CALLS):
        for call in facts.calls_named.get(qualified, ()):
            item = facts.parents.get(call)
            if isinstance(item, cst.WithItem) and item.item is call:
                if item.asname is not None:
                    edits.report("DDP307", call)
                    continue
                guard = setup.guard_for(facts, call)
                edits.expressions[call] = replacement(
                    edits, f"{edits.code(call)} if {guard} else contextlib.nullcontext()")
                edits.imports.add("contextlib")
                edits.report("DDP306", call)
            elif not _guard_statement_call(facts, edits, setup, call, "DDP306"):
                edits.report("DDP307", call)


LOGGING_FROM_CONFIG = frozenset({"logging.config.dictConfig", "logging.config.fileConfig"})

# Logging set up from a config, whose handlers open files: rank 0 only.
LOG_FILES_ON_RANK0_CODE = """\
if {guard}:
{statement}else:  # rank 0 logs as configured; the other ranks log errors only
    logging.disable(logging.WARNING)
"""


# Logging calls that open the file they are given: (the call, the keyword naming the file or
# None for the first positional argument).
LOG_FILE_OPENERS = {
    "logging.basicConfig": "filename",
    "logging.FileHandler": None,
    "logging.handlers.RotatingFileHandler": None,
    "logging.handlers.TimedRotatingFileHandler": None,
    "logging.handlers.WatchedFileHandler": None,
}


def _log_files_on_rank0(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`logging.config.dictConfig(config)` opens the config's log files on every rank, and
    every rank logs each line: rank 0 keeps the config; the others log errors only. A file
    named to `basicConfig(filename=...)` or a FileHandler is opened by the call itself, on
    every rank: the other ranks log to os.devnull."""
    for qualified, keyword in sorted(LOG_FILE_OPENERS.items()):
        for call in facts.calls_named.get(qualified, ()):
            if keyword:
                named = [arg for arg in call.args if arg.keyword is not None and arg.keyword.value == keyword]
            else:
                named = [arg for arg in call.args[:1] if arg.keyword is None and not arg.star]
            if len(named) != 1 or facts.statement_of(call) in edits.guarded:
                continue
            path = named[0].value
            edits.expressions[path] = replacement(
                edits, f"{edits.code(path)} if {setup.guard_for(facts, call)} else os.devnull")
            edits.imports.add("os")
            edits.report("DDP302", call)
    for qualified in sorted(LOGGING_FROM_CONFIG):
        for call in facts.calls_named.get(qualified, ()):
            statement = facts.statement_of(call)
            if not isinstance(facts.parents.get(call), cst.Expr) or not isinstance(statement, cst.SimpleStatementLine):
                continue
            indented = "".join(f"    {line}\n" for line in edits.code(statement.with_changes(
                leading_lines=())).strip("\n").splitlines())
            code = LOG_FILES_ON_RANK0_CODE.format(guard=setup.guard_for(facts, statement), statement=indented)
            statements = edits.statements(code)
            statements[0] = statements[0].with_changes(leading_lines=statement.leading_lines)
            edits.replace(statement, statements)
            edits.imports.add("logging")
            edits.report("DDP304", call)


LOGURU_REMOVE_CODE = """\
if not {guard}:  # rank 0 logs as configured; loguru's sinks are removed on the other ranks
    {logger}.remove()
"""


def _loguru_on_rank0(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: loguru's `logger` writes to stderr from the import on, and to every sink given to
    `logger.add(...)` (a log file most often), on every rank: each line N times, N ranks
    appending to one file. Each `logger.add(...)` line runs on rank 0 alone, and the other
    ranks remove loguru's sinks once (`if not is_main: logger.remove()`), before the first
    statement of the setup's block that logs with loguru, or right after the setup. Every
    logging call stays as it is. An `add` whose result is kept, or one the guard cannot
    hold alone, is reported (DDP307)."""
    loguru_calls = sorted((call for qualified, calls in facts.calls_named.items()
                           if qualified.startswith("loguru.logger.") for call in calls), key=facts.start_of)
    if not loguru_calls or setup.library:
        return
    for call in facts.calls_named.get("loguru.logger.add", ()):
        statement = facts.statement_of(call)
        if statement in edits.guarded or _on_guarded_path(facts, edits, statement):
            continue
        if isinstance(facts.parents.get(call), cst.Expr) and isinstance(statement, cst.SimpleStatementLine) \
                and len(statement.body) == 1:
            _guard(facts, edits, setup, statement, "DDP302")
        else:
            edits.report("DDP307", call)
    body: Sequence[BlockItem] = setup.block.body
    chosen: Optional[BlockItem] = None
    after_setup = _setup_index(facts, setup)
    # (Not before the block's own import of loguru: the name would not exist yet.)
    imported_at = max((index for index, item in enumerate(body) if isinstance(item, cst.SimpleStatementLine)
                       and "loguru" in edits.code(item) and any(
                           isinstance(small, (cst.Import, cst.ImportFrom)) for small in item.body)), default=-1)
    for index, item in enumerate(body):
        if index <= imported_at or isinstance(item, (cst.FunctionDef, cst.ClassDef)) \
                or isinstance(item, cst.SimpleStatementLine) \
                and all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in item.body):
            continue
        if any(call in loguru_calls for call in calls_within(item)) \
                or after_setup is not None and index > after_setup:
            chosen = item
            break
    if chosen is None:
        edits.report("DDP307", loguru_calls[0])
        return
    first = loguru_calls[0].func
    logger = edits.code(first.value) if isinstance(first, cst.Attribute) else "logger"
    code = LOGURU_REMOVE_CODE.format(guard=setup.guard_for(facts, chosen), logger=logger)
    edits.before.setdefault(chosen, []).append(Insertion(edits.statements(code), takes_comments=True))
    edits.report("DDP301", chosen)


def _lower_log_level(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rank 0 logs as before; the other ranks keep only errors. Lowering the level once leaves
    every logging call of the script as it was.

    Rule: the level is lowered after the logging is configured (a `basicConfig` in the
    setup's block, or a call of this file's function that makes it: basicConfig would set the
    level back), before the first statement of the block that logs, and at the latest right
    after the setup: a statement after it (`trainer.fit()`, `main()` under
    `if __name__ == "__main__":`) may log through functions and methods ddpify does not
    follow, once per rank on a real multi-GPU run."""
    configs = facts.calls_named.get(names.LOGGING_BASIC_CONFIG, [])
    if not configs:
        return
    body: Sequence[BlockItem] = setup.block.body
    first_allowed = max((body.index(statement) for statement in _configuring_statements(facts, setup, configs)),
                        default=-1)
    after_setup = _setup_index(facts, setup)
    if after_setup is None and setup.anchor is None and first_allowed >= 0:
        # No device choice here (a Trainer of another module chooses it and logs): the setup
        # opens the block, so the level is lowered right after the logging is configured.
        after_setup = first_allowed
    loggers = logger_names(facts)
    for index, statement in enumerate(body):
        if index <= first_allowed or isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        if _logs(statement, loggers) or after_setup is not None and index > after_setup:
            guard = setup.guard_for(facts, statement)
            code = LOWER_LOG_LEVEL_CODE.format(guard=guard)
            edits.before.setdefault(statement, []).append(
                Insertion(edits.statements(code), takes_comments=True)
            )
            edits.report("DDP304", configs[0])
            return


def _setup_index(facts: Facts, setup: Plan) -> Optional[int]:
    """Where in its block the setup ends: the index of the device choice it follows (None when
    the setup is not at a device choice of that block)."""
    anchor = facts.ancestor_in(setup.anchor, setup.block) if setup.anchor is not None else None
    body: Sequence[BlockItem] = setup.block.body
    return body.index(anchor) if anchor in body else None


def _configuring_statements(facts: Facts, setup: Plan, configs: Sequence[cst.Call]) -> Iterator[BlockItem]:
    """The statements of the setup's block that configure logging: a `basicConfig(...)` there,
    or a call of the function of this file that holds one (`setup_logging(args)`)."""
    for call in configs:
        statement = facts.ancestor_in(call, setup.block)
        if statement is not None:
            yield statement
            continue
        function = facts.function_of(call)
        if function is None:
            continue
        for caller in facts.calls_by_callee.get(function.name.value, ()):
            statement = facts.ancestor_in(caller, setup.block)
            if statement is not None:
                yield statement


def _logger_levels_on_rank0(facts: Facts, edits: Edits, setup: Plan) -> None:
    """`logger = logging.getLogger(name); logger.setLevel(logging.INFO)` with a handler of its
    own (a `get_logger()` helper adding a StreamHandler): that logger logs on every rank, and
    lowering the root logger's level does not reach it. The level it is given becomes rank
    0's; the other ranks keep errors only (`logging.INFO if is_main else logging.ERROR`), as
    for basicConfig (_lower_log_level). Every logging call stays as it is."""
    for call in _set_level_calls(facts):
        statement = facts.statement_of(call)
        positional = [arg for arg in call.args if not arg.star]
        if len(positional) != 1 or statement in edits.guarded or _on_guarded_path(facts, edits, statement):
            continue
        level = positional[0].value
        edits.expressions[level] = replacement(
            edits, f"{edits.code(level)} if {setup.guard_for(facts, call)} else logging.ERROR")
        edits.imports.add("logging")
        edits.report("DDP304", call)


def _set_level_calls(facts: Facts) -> list[cst.Call]:
    """`X.setLevel(...)` on a name given `logging.getLogger(...)`, or on that call itself."""
    found = [call for name in sorted(logger_names(facts) - {"logging"})
             for call in facts.calls_by_callee.get(f"{name}.setLevel", ())]
    for made in facts.calls_named.get(names.GET_LOGGER, ()):
        attribute = facts.parents.get(made)
        call = facts.parents.get(attribute) if isinstance(attribute, cst.Attribute) else None
        if isinstance(attribute, cst.Attribute) and attribute.attr.value == "setLevel" \
                and isinstance(call, cst.Call) and call.func is attribute:
            found.append(call)
    return sorted(set(found), key=facts.start_of)


def _on_guarded_path(facts: Facts, edits: Edits, statement: cst.CSTNode) -> bool:
    """Inside a statement that rank 0 alone runs."""
    current = facts.parents.get(statement)
    while current is not None:
        if current in edits.guarded:
            return True
        current = facts.parents.get(current)
    return False


def logger_names(facts: Facts) -> set[str]:
    """`logging` and the names given `logging.getLogger(...)`."""
    loggers = {"logging"}
    for call in facts.calls_named.get(names.GET_LOGGER, ()):
        assign = facts.parents.get(call)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            target = dotted_name(assign.targets[0].target)
            if target:
                loggers.add(target)
    return loggers


def _logs(statement: cst.CSTNode, loggers: set[str]) -> bool:
    levels = {"debug", "info", "warning", "error", "exception", "critical", "log"}
    return any(
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value in levels
        and dotted_name(call.func.value) in loggers
        for call in calls_within(statement)
    )


def _guard_object(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str,
                  report_failure: bool = True) -> bool:
    """`writer = SummaryWriter(...)`: the assignment and every statement that uses `writer`
    run on rank 0 only, unless a use is part of a larger statement (DDP307, or False when
    the caller has another way)."""
    held = _held_object(facts, call)
    if held is None:
        if report_failure:
            edits.report("DDP307", call)
        return False
    handed = _handed_to_functions(facts, edits, held)
    if handed is not None:
        name, creation, references = held
        arguments, inside = handed
        uses = _guardable_uses(facts, edits, (name, creation, [r for r in references if r not in arguments]),
                               report_failure)
        if uses is None:
            return False
        # Made on rank 0 only, None elsewhere: the calls that hand it on still run everywhere.
        guard = setup.guard_for(facts, call)
        edits.expressions[call] = replacement(edits, f"{edits.code(call)} if {guard} else None")
        for statement in uses + inside:
            _guard(facts, edits, setup, statement, None)
        edits.report(code, creation)
        return True
    uses = _guardable_uses(facts, edits, held, report_failure)
    if uses is None:
        return False
    for statement in [held[1]] + uses:
        _guard(facts, edits, setup, statement, None)
    edits.report(code, held[1])
    return True


def _handed_to_functions(facts: Facts, edits: Edits, held: tuple[str, Statement, list[cst.BaseExpression]]
                         ) -> Optional[tuple[list[cst.BaseExpression], list[Statement]]]:
    """Rule: `train(loader, model, optimizer, writer)` or `test(..., writer=writer)`, where the
    function is this file's and only uses the parameter it receives (`writer.add_scalar(...)`
    statements, nothing that hands it on or rebinds it): the references passed so, and the
    statements in the functions that use it, which run on rank 0 alone while the object is
    made there only (None on the other ranks). None when no reference is such an argument,
    or when one argument cannot be followed so (the caller reports, DDP307)."""
    name, creation, references = held
    arguments: list[cst.BaseExpression] = []
    inside: list[Statement] = []
    for reference in references:
        arg = facts.parents.get(reference)
        if not isinstance(arg, cst.Arg) or arg.value is not reference or arg.star:
            continue
        call = facts.parents.get(arg)
        if not isinstance(call, cst.Call):
            continue
        callee = facts.functions.get(dotted_name(call.func) or "") or facts.method_called(call)
        if callee is None:
            return None
        positional = positional_parameters(callee)
        if facts.class_of(callee) is not None and positional[:1] == [receiver_of(facts, callee)] and not (
                isinstance(call.func, cst.Name)):
            positional = positional[1:]
        parameter = next((p for p in sorted(parameter_names(callee))
                          if argument_among(call, p, positional) is reference), None)
        if parameter is None or any(value is not None and facts.function_of(value) is callee
                                    for value in facts.assigned_values.get(parameter, ())):
            return None
        reads = [read for read in _references(facts, parameter, callee)
                 if not isinstance(facts.parents.get(read), cst.Param)]
        uses = _guardable_uses(facts, edits, (parameter, creation, list(reads)), report_failure=False)
        if uses is None:
            return None
        arguments.append(reference)
        inside.extend(statement for statement in uses if statement not in inside)
    return (arguments, inside) if arguments else None


def _guardable_uses(facts: Facts, edits: Edits, held: tuple[str, Statement, list[cst.BaseExpression]],
                    report_failure: bool = True) -> Optional[list[Statement]]:
    """The statements that use the object held by `name`, other than the one that makes it,
    when each of them only uses it (a guard around it skips nothing else); None otherwise
    (reported, DDP307 or DDP308, where `report_failure`)."""
    name, creation, references = held
    uses: list[Statement] = []
    for reference in references:
        statement = facts.statement_of(reference)
        if statement is creation:
            continue
        if not _only_uses(statement, name):
            if report_failure:
                edits.report("DDP307", reference)
            return None
        uses.append(statement)
    model_names = {model.name for model in facts.models}
    for statement in uses:
        # `writer.add_scalar("acc", evaluate(model, val_loader), epoch)`: the evaluation (its
        # forward, the gather of a sharded evaluation) runs on every rank, before the guard.
        if isinstance(statement, (cst.With, cst.For)):
            # (A model run inside the writer's block or the loop over the writers cannot be
            # hoisted out of it: reported.)
            if any(_runs_model(facts, small.value, model_names) or _runs_the_model(facts, small.value, model_names)
                   for line in statement.body.body if isinstance(line, cst.SimpleStatementLine)
                   for small in line.body if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
                if report_failure:
                    edits.report("DDP308", statement)
                return None
            continue
        expression = _single_expression(statement)
        if expression is not None and _runs_model(facts, expression.value, model_names) and not _hoist_model_runs(
                facts, edits, statement, expression.value, model_names):
            if report_failure:
                edits.report("DDP308", statement)
            return None
    return uses


def _made_by_a_helper(facts: Facts, edits: Edits, setup: Plan, call: cst.Call) -> bool:
    """Rule: `def make_writer(log_dir): ...; return SummaryWriter(log_dir)`, called as `writer
    = make_writer(args.log_dir)`: the helper makes the writer on rank 0 only (`return
    SummaryWriter(log_dir) if is_main_process() else None`), and every use of what each
    caller holds runs on rank 0 only, as for a writer made in place (_guard_object). False
    (nothing done) unless the function of this module returns the call itself and every call
    of it is so held, with uses that a guard can take. The writer held in a local first and
    returned by name (`writer = SummaryWriter(log_dir); return writer`) is the same: made on
    rank 0 only, None elsewhere, its other uses in the helper guarded. So is a writer returned
    as one item of a tuple (`return writer, log_dir`, `return log_dir, SummaryWriter(log_dir)`)
    that every caller unpacks into names (`writer, log_dir = make_writer()`): the name at the
    writer's place holds it, None on the other ranks, and its uses are guarded."""
    function = facts.function_of(call)
    if function is None or facts.parents.get(function) is not facts.module:
        return False
    inner: list[Statement] = []
    slot = _returned_slot(facts, call)
    if slot is None:
        local = _returned_local(facts, call, function)
        if local is None:
            return False
        held, slot = local
        found = _guardable_uses(facts, edits, held, report_failure=False)
        if found is None:
            return False
        inner = found
    elif slot != WHOLE_VALUE and not _same_slot_in_every_return(facts, function, slot):
        return False
    # (Called only from other modules of the project: they guard what they hold, or say why not.)
    callers = facts.calls_of(function)
    helds = [_held_object(facts, caller, slot) for caller in callers]
    if any(held is None for held in helds):
        return False
    uses = [_guardable_uses(facts, edits, held, report_failure=False) for held in helds if held is not None]
    if any(found is None for found in uses):
        return False
    guard = setup.guard_for(facts, call)
    edits.expressions[call] = replacement(edits, f"{edits.code(call)} if {guard} else None")
    for statement in inner + [statement for found in uses for statement in found or ()]:
        _guard(facts, edits, setup, statement, None)
    edits.report("DDP306", call)
    return True


def _returned_slot(facts: Facts, value: cst.BaseExpression) -> Optional[Slot]:
    """`return value` (the whole value) or `return value, log_dir` (its place in the tuple);
    None when `value` is not returned so."""
    parent = facts.parents.get(value)
    if isinstance(parent, cst.Return):
        return WHOLE_VALUE
    returned = facts.parents.get(parent) if isinstance(parent, cst.Element) else None
    if not isinstance(returned, cst.Tuple) or not isinstance(facts.parents.get(returned), cst.Return) \
            or any(isinstance(element, cst.StarredElement) for element in returned.elements):
        return None
    return list(returned.elements).index(cast(cst.Element, parent)), len(returned.elements)


def _same_slot_in_every_return(facts: Facts, function: cst.FunctionDef, slot: Slot) -> bool:
    """Every `return` of the helper hands back a tuple of the same size, so that each caller's
    unpacking puts the writer in the same name (not `return None` on an early exit)."""
    returns = [node for node in find_all(function.body, cst.Return) if facts.function_of(node) is function]
    return all(isinstance(node.value, cst.Tuple) and len(node.value.elements) == slot[1] for node in returns)


def _returned_local(facts: Facts, call: cst.Call, function: cst.FunctionDef
                    ) -> Optional[tuple[tuple[str, Statement, list[cst.BaseExpression]], Slot]]:
    """`writer = SummaryWriter(log_dir)` in `function`, later `return writer` or `return writer,
    log_dir`: the local, the statement that makes it and its reads other than the returns,
    with where the returns hold it; None unless it is a plain name assigned once and returned
    as it is, in the same place of every return."""
    held = _held_object(facts, call)
    assign = facts.parents.get(call)  # (writers made as items of a container: not followed here)
    if held is None or not isinstance(assign, cst.Assign) or not isinstance(assign.targets[0].target, cst.Name):
        return None
    name, creation, references = held
    if len(facts.assigned_values.get(name, ())) != 1 and sum(
            facts.function_of(value) is function for value in facts.assigned_values.get(name, ())) != 1:
        return None
    slots = {reference: _returned_slot(facts, reference) for reference in references}
    found = {slot for slot in slots.values() if slot is not None}
    if len(found) != 1:
        return None
    slot = found.pop()
    if slot != WHOLE_VALUE and not _same_slot_in_every_return(facts, function, slot):
        return None
    return (name, creation, [reference for reference, where in slots.items() if where is None]), slot


def _guard_uses_of_a_helper_writer(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, slot: Slot) -> None:
    """`writer = make_writer(log_dir)` (`writer, log_dir = make_run(root)`), where `make_writer`
    in another module of the project returns the SummaryWriter it makes, on rank 0 only
    (_made_by_a_helper, there): every use of `writer` runs on rank 0 only (DDP306), or DDP307
    where a use is part of a larger statement."""
    held = _held_object(facts, call, slot)
    uses = _guardable_uses(facts, edits, held) if held is not None else None
    if held is None:
        edits.report("DDP307", call)
    if uses is None:
        return
    for statement in uses:
        _guard(facts, edits, setup, statement, None)
    edits.report("DDP306", call)


def _guard_uses_of_an_inherited_writer(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: `class Trainer(BaseTrainer)`, whose base class in another module of the project
    makes `self.writer = SummaryWriter(log_dir)` on rank 0 only (_attribute_references,
    there): every statement of the subclass's methods that uses `self.writer` runs on rank 0
    only too (DDP306), or DDP307 where a use is part of a larger statement or the subclass
    sets the attribute itself (the other ranks find no `self.writer`: an AttributeError)."""
    classes = {statement.name.value: statement for statement in facts.module.body
               if isinstance(statement, cst.ClassDef)}
    for class_name, attributes in sorted(facts.inherited_trackers.items()):
        owner = classes.get(class_name)
        for name in sorted(attributes):
            references: list[cst.BaseExpression] = [
                node for node in facts.nodes_of(cst.Attribute) if dotted_name(node) == name
                and facts.class_of(facts.function_of(node)) is owner]
            if not references:
                continue
            assigned = next((node for node in references if isinstance(
                facts.parents.get(node), (cst.AssignTarget, cst.AugAssign, cst.AnnAssign))), None)
            if assigned is not None:
                edits.report("DDP307", assigned)
                continue
            uses = _guardable_uses(facts, edits, (name, cast(Statement, owner), references))
            if uses is None:
                continue
            for statement in uses:
                _guard(facts, edits, setup, statement, None)
            edits.report("DDP306", references[0])


def _held_object(facts: Facts, call: cst.Call, slot: Slot = WHOLE_VALUE
                 ) -> Optional[tuple[str, Statement, list[cst.BaseExpression]]]:
    """The name that holds what `call` makes (`writer`, `self.writer`; with a slot of a returned
    tuple, the name unpacked at that place: `writer, log_dir = make_writer()`), the statement
    that assigns it, and every read of the name; None when it is not held so."""
    assign = facts.parents.get(call)
    if slot == WHOLE_VALUE:
        assign = _container_assignment(facts, call) or assign
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
        return None
    target: cst.BaseExpression = assign.targets[0].target
    if slot != WHOLE_VALUE:
        if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != slot[1] or any(
                isinstance(element, cst.StarredElement) for element in target.elements):
            return None
        target = target.elements[slot[0]].value
    references: Optional[list[cst.BaseExpression]] = None
    if isinstance(target, cst.Name):
        name = target.value
        references = list(_references(facts, name, facts.function_of(call)))
    elif isinstance(target, cst.Attribute):
        name = dotted_name(target) or ""
        references = _attribute_references(facts, name, facts.function_of(call))
    return None if references is None else (name, facts.statement_of(assign), references)


def _container_assignment(facts: Facts, call: cst.Call) -> Optional[cst.Assign]:
    """Rule: `writers = [SummaryWriter(d) for d in dirs]`, `writers = {"train": SummaryWriter(a),
    "val": SummaryWriter(b)}`, `writers = {s: SummaryWriter(d / s) for s in splits}`: writers
    made as the items of a list or dict (literal or comprehension) assigned whole to one name
    are held by that name, as one writer is: the assignment and each use
    (`writers["train"].add_scalar(...)`, `for w in writers.values(): w.close()`) run on rank 0
    only. None when the call is not such an item (the iterable of a comprehension, a key)."""
    node: cst.CSTNode = call
    parent = facts.parents.get(node)
    while True:
        if isinstance(parent, cst.Element) and parent.value is node \
                or isinstance(parent, cst.DictElement) and parent.value is node:
            container = facts.parents.get(parent)
        elif isinstance(parent, (cst.ListComp, cst.SetComp)) and parent.elt is node \
                or isinstance(parent, cst.DictComp) and parent.value is node:
            container = parent
        else:
            return None
        if not isinstance(container, (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)):
            return None
        node, parent = container, facts.parents.get(container)
        if isinstance(parent, cst.Assign):
            return parent if parent.value is node else None


def _attribute_references(facts: Facts, name: str, function: Optional[cst.FunctionDef]
                          ) -> Optional[list[cst.BaseExpression]]:
    """`self.writer = SummaryWriter(log_dir)` in a Trainer's __init__, used in its methods as
    `self.writer.add_scalar(...)`: every read of `self.writer` in the class, so that the
    creation and each use run on rank 0 only, as for a writer held in a variable. None (not
    followed) when the attribute is not `self.X` of a method, or an object's `.X` is read
    anywhere else (`trainer.writer.close()` here or in another module of
    the project, a subclass's method or a mixin's of another module): there the other ranks
    would find no such attribute."""
    if name.count(".") == 1 and not name.startswith("self."):
        return _config_attribute_references(facts, name)
    owner = facts.class_of(function)
    if owner is None or not name.startswith("self.") or name.count(".") != 1 or (
            name in facts.read_by_derived_classes and not _tracker_kept_by(facts, owner, name)
            or name in facts.read_by_mixins or name.split(".", 1)[1] in facts.read_on_objects_elsewhere):
        return None  # (read by a subclass in another module, whose uses this module cannot guard)
    attribute = name.split(".", 1)[1]
    found: list[cst.BaseExpression] = []
    for node in facts.nodes_of(cst.Attribute):
        if node.attr.value != attribute:
            continue
        if dotted_name(node) != name or facts.class_of(facts.function_of(node)) is not owner:
            return None
        found.append(node)
    return found


def _tracker_kept_by(facts: Facts, owner: cst.ClassDef, name: str) -> bool:
    """`self.writer = SummaryWriter(log_dir)` in a method of `owner`: the subclasses of other
    modules guard their own uses of it (_guard_uses_of_an_inherited_writer, there)."""
    return any(isinstance(assign := facts.parents.get(call), cst.Assign) and len(assign.targets) == 1
               and dotted_name(assign.targets[0].target) == name and facts.class_of(facts.function_of(call)) is owner
               for qualified in names.SUMMARY_WRITER | names.VISDOM for call in facts.calls_named.get(qualified, ()))


def _config_attribute_references(facts: Facts, name: str) -> Optional[list[cst.BaseExpression]]:
    """Rule: `args.writer = SummaryWriter(args.logdir)`, a writer kept on the options or a
    config object and used as `args.writer.add_scalar(...)`, here or in this file's
    functions that are handed the object under the same name (`train(args, model)`): every
    read of `.writer` in the file, when each is spelled `args.writer`, so that the creation
    and each use run on rank 0 only (None on the others), as for a writer held in a variable.
    None (not followed, DDP307) when `.writer` is read on another object, or when a function
    that reads it or makes it hands the object to a function of another module, whose uses
    this module cannot guard."""
    base, attribute = name.split(".")
    found: list[cst.BaseExpression] = []
    for node in facts.nodes_of(cst.Attribute):
        if node.attr.value != attribute:
            continue
        if dotted_name(node) != name:
            return None
        found.append(node)
    functions = {facts.function_of(node) for node in found}
    for call in facts.nodes_of(cst.Call):
        if facts.function_of(call) in functions and any(
                isinstance(arg.value, cst.Name) and arg.value.value == base for arg in call.args) and not (
                facts.functions.get(dotted_name(call.func) or "") or facts.method_called(call)):
            return None
    return found


def _references(facts: Facts, name: str, function: Optional[cst.FunctionDef]) -> list[cst.Name]:
    found: list[cst.Name] = []
    root = function if function is not None else facts.module

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            parent = facts.parents.get(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                return
            if isinstance(parent, cst.Arg) and parent.keyword is node:
                return
            # `global step, writer`: a declaration, which neither reads nor uses the object.
            if isinstance(parent, cst.NameItem):
                return
            if node.value != name:
                return
            where = facts.function_of(node)
            # A module-level object is also read by the functions that do not bind the name
            # (`writer.add_scalar(...)` in a train() the script defines).
            if where is function or function is None and not facts.binds_locally(where, name):
                found.append(node)

    traversal.visit(root, _Names())
    return found


def _only_uses(statement: cst.BaseStatement, name: str) -> bool:
    """`writer.add_scalar(...)`, `run.summary["x"] = y`, `f.close()`: the statement does nothing
    but use the object, so skipping it on other ranks skips nothing else."""
    if isinstance(statement, cst.With):
        return _writes_within_the_writer(statement, name)
    if isinstance(statement, cst.For):
        return _loop_only_over_the_writers(statement, name)
    if isinstance(statement, cst.If):
        # `if step % 10 == 0: writer.add_scalar(...)` on one line, whose test only reads.
        expression = _single_expression(statement)
        return expression is not None and isinstance(expression.value, cst.Call) \
            and _rooted_at(expression.value.func, name) and dotted_name(expression.value.func) != name
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return _rooted_at(small.value.func, name) and dotted_name(small.value.func) != name
    if isinstance(small, cst.Assign):
        return all(_rooted_at(target.target, name) and dotted_name(target.target) != name
                   for target in small.targets)
    return False


def _loop_only_over_the_writers(statement: cst.For, name: str) -> bool:
    """`for w in writers.values(): w.close()`, `for writer in writers: writer.flush()`: a loop
    over the writers held by `name` whose body only uses the one it names, with no `else`,
    so skipping the loop on other ranks skips nothing else."""
    loop_over = statement.iter
    iterable: cst.BaseExpression = loop_over
    paired = False
    if isinstance(loop_over, cst.Call) and not loop_over.args and isinstance(loop_over.func, cst.Attribute) \
            and loop_over.func.attr.value in ("values", "items"):
        iterable, paired = loop_over.func.value, loop_over.func.attr.value == "items"
    elif isinstance(loop_over, cst.Call) and dotted_name(loop_over.func) == "enumerate" and len(loop_over.args) == 1:
        iterable, paired = loop_over.args[0].value, True
    if dotted_name(iterable) != name or statement.orelse is not None:
        return False
    target: cst.BaseExpression = statement.target
    if paired:  # `for split, w in writers.items():`, `for i, w in enumerate(writers):`
        if not isinstance(target, cst.Tuple) or len(target.elements) != 2:
            return False
        target = target.elements[1].value
    if not isinstance(target, cst.Name) or not isinstance(statement.body, cst.IndentedBlock):
        return False
    return all(_only_uses(line, target.value) for line in statement.body.body)


def _writes_within_the_writer(statement: cst.With, name: str) -> bool:
    """`with writer.as_default(): tf.summary.scalar("loss", value, step=epoch)`: TensorFlow's
    writer made current for the block, whose lines only call (no assignment, no control flow),
    so skipping the block on other ranks skips nothing but the writes. (Whether a call in the
    block runs the model is asked by the caller, as for any use.)"""
    if not statement.items or not all(
            isinstance(item.item, cst.Call) and _rooted_at(item.item.func, name) and item.asname is None
            for item in statement.items):
        return False
    body = statement.body.body
    return all(isinstance(line, cst.SimpleStatementLine)
               and all(isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in line.body)
               for line in body)


def _rooted_at(node: cst.BaseExpression, name: str) -> bool:
    """`writer.add_scalar`, `self.writer.flush`: reached from `name` (a dotted name too)."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        if dotted_name(node) == name:
            return True
        node = node.value
    return isinstance(node, cst.Name) and node.value == name


def guard_writing_call(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str) -> bool:
    """For deferred_writes.py: the statement that is `call` guarded, or the object it makes
    (`writer = Thread(target=torch.save, ...)`) with every use of it; False when neither fits."""
    return _guard_statement_call(facts, edits, setup, call, code) or _guard_chained_line(
        facts, edits, setup, call, code) or (
        isinstance(facts.parents.get(call), cst.Assign)
        and (_guard_result_tested_for_none(facts, edits, setup, call, code)
             or _guard_object(facts, edits, setup, call, code, report_failure=False)))


def _guard_chained_line(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str) -> bool:
    """`Thread(target=torch.save, args=(state, path)).start()`: a line that is nothing but a
    chain of calls on what `call` makes, with nothing every rank must run in it."""
    statement = facts.statement_of(call)
    expression = _single_expression(statement)
    node: cst.CSTNode = call
    while expression is not None and node is not expression.value:
        parent = facts.parents.get(node)
        if not (isinstance(parent, cst.Attribute) and parent.value is node or isinstance(
                parent, cst.Call) and parent.func is node):
            return False
        node = parent
    if expression is None or runs_shared_work(facts, cast(cst.Call, expression.value)):
        return False
    _guard(facts, edits, setup, statement, code)
    return statement in edits.guarded


def _guard_result_tested_for_none(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str) -> bool:
    """Rule: `save_future = pool.submit(torch.save, state, path)` where `save_future` is None
    until then and every read of it is under `if save_future is not None:` (a background save
    that waits for the one before): only rank 0 submits; on the other ranks it stays None,
    and the tests skip their waits."""
    held = _held_object(facts, call)
    if held is None or "." in held[0]:
        return False
    name, creation, references = held
    starts_none = any(isinstance(value, cst.Name) and value.value == "None"
                      for value in facts.assigned_values.get(name, []))
    reads = [reference for reference in references if not isinstance(facts.parents.get(reference), cst.AssignTarget)]
    if not starts_none or not reads or not all(_under_not_none_test(facts, read, name) for read in reads):
        return False
    _guard(facts, edits, setup, creation, code)
    return creation in edits.guarded


def _under_not_none_test(facts: Facts, node: cst.CSTNode, name: str) -> bool:
    """`name` in `if name is not None:`, or inside the body of such an `if`."""
    child: cst.CSTNode = node
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, cst.If) and _is_not_none_test(parent.test, name) and (
                child is parent.test or child is parent.body):
            return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _is_not_none_test(test: cst.BaseExpression, name: str) -> bool:
    return isinstance(test, cst.Comparison) and dotted_name(test.left) == name and len(test.comparisons) == 1 \
        and isinstance(test.comparisons[0].operator, cst.IsNot) and isinstance(test.comparisons[0].comparator,
                                                                              cst.Name) \
        and test.comparisons[0].comparator.value == "None"


def _guard_statement_call(facts: Facts, edits: Edits, setup: Plan, call: cst.Call,
                          code: str) -> bool:
    parent = facts.parents.get(call)
    if not isinstance(parent, cst.Expr):
        return _guard_discarded_expression(facts, edits, setup, call, code) or _guard_returned_write(
            facts, edits, setup, call, code)
    statement = facts.statement_of(parent)
    if code == "DDP302" and (_saves_to_memory(facts, call) or _inside_a_download(facts, statement)):
        return False
    if not _is_single_call_line(statement):
        return _guard_in_one_line_suite(facts, edits, setup, parent, statement, code)
    _guard(facts, edits, setup, statement, code)
    return True


def _inside_a_download(facts: Facts, statement: cst.CSTNode) -> bool:
    """A write in the body of a statement that downloads a file (`with open(dest, "w") as f:
    json.dump(response.json(), f)`) is part of that download: local rank 0 of each machine
    makes it while the others wait (downloads.py), not global rank 0 alone."""
    downloading = facts.download_statements
    if not downloading:
        return False
    node: Optional[cst.CSTNode] = facts.parents.get(statement)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
        if node in downloading:
            return True
        node = facts.parents.get(node)
    return False


def enclosing_lambda(facts: Facts, node: cst.CSTNode) -> Optional[cst.Lambda]:
    """The lambda whose body holds node, within its statement."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement)):
        if isinstance(parent, cst.Lambda):
            return parent
        parent = facts.parents.get(parent)
    return None


def _in_a_guarded_lambda(facts: Facts, edits: Edits, node: cst.CSTNode) -> bool:
    """Inside a lambda whose body runs on rank 0 only (deferred_writes.py, which plans
    first): an `open(path, "w")` there needs no os.devnull of its own."""
    lambda_node = enclosing_lambda(facts, node)
    return lambda_node is not None and lambda_node.body in edits.expressions


def _guard_returned_write(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str) -> bool:
    """Rule: `return torch.save(state, path)` as the last line of a function (a callback
    handed on by name): the line is rank 0's; the other ranks fall off the end and return
    None, which is what the write returns too."""
    returned = facts.parents.get(call)
    line = facts.statement_of(call)
    body = facts.parents.get(line)
    function = facts.parents.get(body) if isinstance(body, cst.IndentedBlock) else None
    if not (isinstance(returned, cst.Return) and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
            and isinstance(function, cst.FunctionDef) and isinstance(body, cst.IndentedBlock) and body.body[-1] is line
            and _qualified_names(facts, call) & names.WRITERS_RETURNING_NONE):
        return False
    _guard(facts, edits, setup, line, code)
    return line in edits.guarded


def _qualified_names(facts: Facts, call: cst.Call) -> set[str]:
    return {qualified for qualified in names.WRITERS_RETURNING_NONE
            if any(each is call for each in facts.calls_named.get(qualified, ()))}


# Expressions a line may hold whole, its value unused, that call what they hold: `[save_image(x,
# p) for ...]`, `torch.save(...) if best else None`, `ok and json.dump(...)`.
_DISCARDED_EXPRESSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.IfExp, cst.BooleanOperation)


def _guard_discarded_expression(facts: Facts, edits: Edits, setup: Plan, call: cst.Call, code: str) -> bool:
    """Rule: a line that is a comprehension or a conditional expression whose value nothing
    reads, with a write inside (`[save_image(g, f"{i}.png") for i, g in enumerate(grids)]`):
    the whole line is rank 0's, as the same write on a line of its own is (a model run or a
    call of this file's inside it keeps it on every rank: _guard's check)."""
    statement = facts.statement_of(call)
    expression = _single_expression(statement)
    if expression is None or not isinstance(expression.value, _DISCARDED_EXPRESSIONS):
        return False
    if code == "DDP302" and _saves_to_memory(facts, call) or runs_shared_work(facts, call) or any(
            (dotted_name(inner.func) or "") in facts.functions or facts.method_called(inner) is not None
            for inner in calls_within(expression.value)):
        return False
    _guard(facts, edits, setup, statement, code)
    return statement in edits.guarded


def _guard_in_one_line_suite(facts: Facts, edits: Edits, setup: Plan, expression: cst.Expr,
                             statement: cst.BaseStatement, code: str) -> bool:
    """`except ImportError: HAS_TB = False; print("no tensorboard")`, `except Exception as e:
    print(e); continue`: output in a one-line suite is output like any other, guarded as the
    same code over several lines is (the suite becomes a block, the rest of it runs on every
    rank). A print at import time too: every rank would repeat it. So is output in a line of
    several statements (`value = loss.item(); print(value)`, `plt.title(t); plt.show()`): the
    line becomes one line per statement, the output under its guard."""
    holder = facts.parents.get(expression)
    if not (isinstance(holder, cst.SimpleStatementSuite) or isinstance(holder, cst.SimpleStatementLine)
            and len(holder.body) > 1) or _in_dataset_class(facts, statement):
        return False
    if _runs_model(facts, expression.value, {model.name for model in facts.models}):
        return False  # its model run must stay on every rank, and a suite has no line to hoist it to
    edits.guarded_in_suites[expression] = setup.guard_for(facts, statement)
    edits.report(code, expression)
    return True


def _guard(facts: Facts, edits: Edits, setup: Plan, statement: cst.BaseStatement,
           code: Optional[str]) -> None:
    if statement not in edits.guarded and not _in_dataset_class(facts, statement):
        if not _model_runs_kept_on_every_rank(facts, edits, statement):
            return
        edits.guarded[statement] = setup.guard_for(facts, statement)
        if code is not None:
            edits.report(code, statement)




def _is_single_call_line(statement: cst.BaseStatement) -> bool:
    return _single_expression(statement) is not None


def _single_expression(statement: cst.BaseStatement) -> Optional[cst.Expr]:
    """The expression of a line that holds nothing else (`print(x)`), or of a one-line `if`
    that holds nothing else and whose test only reads (`if args.verbose: print(x)`,
    `if not os.path.exists(d): os.makedirs(d)`): rank 0 alone can run the whole `if`, the
    test included, and the other ranks skip nothing else. None otherwise."""
    if isinstance(statement, cst.If) and statement.orelse is None \
            and isinstance(statement.body, cst.SimpleStatementSuite) and _only_reads(statement.test):
        body = statement.body.body
    elif isinstance(statement, cst.SimpleStatementLine):
        body = statement.body
    else:
        return None
    if len(body) != 1:
        return None
    small = body[0]
    return small if isinstance(small, cst.Expr) else None


# Calls a test of a one-line `if` may make and still only read: the file system, lengths.
READING_CALLS = frozenset({
    "os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.join", "len", "isinstance",
    "hasattr", "getattr", "int", "float", "str", "bool",
})


def _only_reads(test: cst.BaseExpression) -> bool:
    """A test with no call but those of READING_CALLS (by their written name) and no `:=`:
    running it on rank 0 alone changes nothing any rank sees."""
    return not find_all(test, cst.NamedExpr) and all(
        dotted_name(call.func) in READING_CALLS for call in find_all(test, cst.Call))


def _in_dataset_class(facts: Facts, node: cst.CSTNode) -> bool:
    """A Dataset's own code (downloading, caching) runs wherever the dataset is built: one
    process per machine downloads while the others wait at a barrier (downloads.py), and on
    a second machine that process is not rank 0, so a rank-0 guard would leave it no files."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.ClassDef):
        parent = facts.parents.get(parent)
    return parent is not None and parent.name.value in facts.dataset_classes
_TENSORBOARD = TRAINING.replace("import torch\n",
                               "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n", 1)
_CHECKPOINT = TRAINING + 'torch.save(model.state_dict(), "model.pt")\n'

_OPTIONS_WRITER = (_TENSORBOARD.replace("    print(epoch, loss.item())\n",
                                        '    cfg.writer.add_scalar("loss", loss.item(), epoch)\n')
                   .replace("for epoch", "import types\ncfg = types.SimpleNamespace()\ncfg.writer = SummaryWriter()\n"
                            "for epoch"))

CASES = (
    Emits(TRAINING, "DDP301", ("    if is_main:\n        print(epoch, loss.item())",)),
    Silent(TRAINING.replace("    print(epoch, loss.item())\n", ""), "DDP301"),
    Emits(_CHECKPOINT, "DDP302", ("if is_main:\n    torch.save(",)),
    Silent(TRAINING + 'with open("labels.txt") as f:\n    labels = f.read().split()\n', "DDP302"),
    # A shell command with a redirection writes a file; one ddpify cannot read as a write stays;
    # one whose result is used cannot be guarded and is reported.
    Emits("import os\n" + TRAINING + 'os.system("nvidia-smi > gpu.txt")\n', "DDP302",
          ('if is_main:\n    os.system("nvidia-smi > gpu.txt")',)),
    Silent("import os\n" + TRAINING + 'os.system("nvidia-smi")\n', "DDP302"),
    # A command built with `+`, `%` or `.format` is read with its values unknown.
    Emits("import os\n" + TRAINING + 'os.system("cp train.py " + OUT + "/train.py.backup")\n', "DDP302",
          ('if is_main:\n    os.system("cp train.py " + OUT',)),
    Emits("import os\n" + TRAINING + 'os.system("git diff > %s/patch.diff" % OUT)\n', "DDP302",
          ('if is_main:\n    os.system("git diff',)),
    Emits("import subprocess\n" + TRAINING + 'subprocess.run("cp {} {}".format(A, B), shell=True)\n', "DDP302",
          ("if is_main:\n    subprocess.run(",)),
    Silent("import os\n" + TRAINING + 'os.system("echo %d%% done > /dev/null" % 5)\n', "DDP302"),
    Emits("import subprocess\n" + TRAINING + 'code = subprocess.call(["cp", "a.txt", "b.txt"])\n', "DDP307"),
    Emits("import logging\n"
          + TRAINING.replace("    print(epoch, loss.item())\n", '    logging.info("loss %f", loss.item())\n')
          .replace("device = torch", "logging.basicConfig(level=logging.INFO)\ndevice = torch"),
          "DDP304", ("logging.ERROR",)),
    Emits("from loguru import logger\n" + TRAINING.replace("device = torch", 'logger.add("train.log")\ndevice = torch')
          .replace("print(epoch, loss.item())", "logger.info(loss.item())"), "DDP302",
          ('if is_main:\n    logger.add("train.log")',
           "if not is_main:  # rank 0 logs as configured; loguru's sinks are removed on the other ranks\n"
           "    logger.remove()")),
    Emits("from tqdm import tqdm\n" + TRAINING.replace("in loader:", "in tqdm(loader):"), "DDP305",
          ("disable=not is_main",)),
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n", '    writer.add_scalar("loss", loss.item(), epoch)\n')
          .replace("for epoch", "writer = SummaryWriter()\nfor epoch"),
          "DDP306", ("if is_main:\n    writer = SummaryWriter()",)),
    # Handed to a function of the script that only logs with it: made on rank 0 alone (None
    # elsewhere, so the call still runs everywhere), its uses in there guarded.
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n", "    log(writer, loss.item())\n")
          .replace("for epoch", "writer = SummaryWriter()\n\n\ndef log(writer, value):\n"
                   '    writer.add_scalar("loss", value)\n\n\nfor epoch'), "DDP306",
          ("writer = SummaryWriter() if is_main else None",
           '    if is_main:\n        writer.add_scalar("loss", value)')),
    # ...but one that does more with it than log cannot be guarded around it.
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n", "    log(writer, loss.item())\n")
          .replace("for epoch", "writer = SummaryWriter()\n\n\ndef log(writer, value):\n"
                   '    print(writer.log_dir, value)\n\n\nfor epoch'), "DDP307"),
    # A module-level writer a function of the script reads as a global: guarded there too,
    # or the other ranks would read a name they never bound.
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n", "    log(loss.item())\n")
          .replace("for epoch", "writer = SummaryWriter()\n\n\ndef log(value):\n"
                   '    writer.add_scalar("loss", value)\n\n\nfor epoch'),
          "DDP306", ('def log(value):\n    if is_main:\n        writer.add_scalar("loss", value)',)),
    # A helper handing back the writer with its folder: made on rank 0, None elsewhere, and
    # what the caller unpacks at its place is used on rank 0 only.
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n", '    writer.add_scalar("loss", loss.item(), epoch)\n')
          .replace("for epoch", "def make_writer(path):\n    writer = SummaryWriter(path)\n"
                   '    return writer, path\n\n\nwriter, log_dir = make_writer("runs")\nfor epoch'),
          "DDP306", ("    writer = SummaryWriter(path) if is_main else None\n",
                     '    if is_main:\n        writer.add_scalar("loss", loss.item(), epoch)')),
    # Kept on an options object (`cfg.writer`), used through it: made and used on rank 0...
    Emits(_OPTIONS_WRITER, "DDP306", ("if is_main:\n    cfg.writer = SummaryWriter()",
                                      '    if is_main:\n        cfg.writer.add_scalar("loss", loss.item(), epoch)')),
    # ...but not when another object's `.writer` is read too: which one is which is unknown.
    Emits(_OPTIONS_WRITER.replace("for epoch", "other = types.SimpleNamespace(writer=cfg.writer)\n"
                                  "other.writer.flush()\nfor epoch"), "DDP307"),
    Emits(TRAINING + "print(model(torch.zeros(1, 4).to(device)).item())\n", "DDP308"),
    # A tracker's call that runs the model: the run on every rank, the call on rank 0.
    Emits(_TENSORBOARD.replace("    print(epoch, loss.item())\n",
                               '    writer.add_scalar("out", model(torch.zeros(1, 4).to(device)).item(), epoch)\n')
          .replace("for epoch", "writer = SummaryWriter()\nfor epoch"),
          "DDP308", ("    model_value = model(torch.zeros(1, 4).to(device))\n    if is_main:\n",)),
    # A torchmetrics object's compute() gathers from every rank: it runs on every rank, first.
    Emits("import torchmetrics\n" + TRAINING.replace("for epoch", "mean = torchmetrics.MeanMetric()\nfor epoch")
          .replace("    print(epoch, loss.item())", "    mean.update(loss)\n    print(epoch, mean.compute().item())"),
          "DDP411", ("    mean_value = mean.compute()\n    if is_main:\n        print(epoch, mean_value.item())",)),
    # ...and one left on the CPU gathers CPU tensors, which NCCL refuses: reported.
    Emits("import torchmetrics\n" + TRAINING.replace("for epoch", "mean = torchmetrics.MeanMetric()\nfor epoch")
          .replace("    print(epoch, loss.item())",
                   "    mean.update(loss.cpu())\n    print(epoch, mean.compute().item())"),
          "DDP412"),
    Emits(TRAINING.replace("print(epoch, loss.item())", 'print(epoch, loss.item(), file=log)')
          .replace("for epoch", 'log = open("log.txt", "a")\nfor epoch'), "DDP302",
          ('log = open("log.txt" if is_main else os.devnull, "a")',)),
    Emits("def stop(trace_func=print):\n    trace_func('stop')\n\n\n" + TRAINING, "DDP301",
          ("def stop(trace_func=print_on_rank0):",)),
    # A named logger with a level and a handler of its own: rank 0 keeps the level.
    Emits("import logging\n" + TRAINING.replace("device = torch", 'log = logging.getLogger("run")\n'
          'log.setLevel(logging.INFO)\nlog.addHandler(logging.StreamHandler())\ndevice = torch')
          .replace("    print(epoch, loss.item())", '    log.info("%d %f", epoch, loss.item())'),
          "DDP304", ("log.setLevel(logging.INFO if is_main else logging.ERROR)",)),
)
