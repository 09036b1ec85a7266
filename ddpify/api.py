"""migrate_source: source text in, migrated text and diagnostics out. No I/O here."""
import ast
from collections.abc import Iterable
from dataclasses import dataclass, replace

import libcst as cst
from libcst.codemod import (
    CodemodCommand,
    CodemodContext,
    SkipFile,
    TransformExit,
    TransformFailure,
    transform_module,
)
from libcst.metadata import MetadataWrapper

from ddpify import ast_walk, selfcheck, suppressions, syntax
from ddpify.analysis import ast_twin, inert, memo, names
from ddpify.analysis.ast_names import dotted_ast
from ddpify.analysis.control import Facts
from ddpify.analysis.nodes import dotted_name, find_all
from ddpify.analysis.reading import analyse
from ddpify.analysis.unfollowed_objects import batches_to_an_unfollowed_object
from ddpify.diagnostics import Diagnostic, is_selected
from ddpify.emit.edits import ApplyEdits, Edits
from ddpify.emit.imports import add_imports, remove_unused_imports
from ddpify.options import Options
from ddpify.plan import Plan
from ddpify.project import Project
from ddpify.rules import (
    CONCERNS,
    frameworks,
    gpu_placement,
    hand_batches,
    import_time_devices,
    set_order,
    setup,
    splits,
)
from ddpify.rules.registry import RULES
from ddpify.selfcheck.placed_factories import placed_factories_check
from ddpify.selfcheck.placed_parts import placed_parts_check


@dataclass(frozen=True)
class Result:
    code: str
    diagnostics: tuple[Diagnostic, ...]
    # `# ddpify: ignore` comments that silenced nothing (DDP920): --check reports them, so
    # that writing a script never fails on a stale comment.
    unused_suppressions: tuple[Diagnostic, ...] = ()

    @property
    def needs_a_person(self) -> bool:
        return any(d.severity.value == "warning" for d in self.diagnostics)


class MigrationError(Exception):
    """The source cannot be migrated at all (a syntax error, or a bug in ddpify)."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


NO_TRAINING = Diagnostic("DDP901", 1, 1, "no training code found: left unchanged")


def migrate_source(code: str, options: Options = Options(),  # noqa: B008 (frozen)
                   project: Project = Project()) -> Result:  # noqa: B008 (reads nothing)
    """Migrate one script; `project` says what the helper modules it imports do
    (project.read). Raises MigrationError when the source does not parse."""
    try:
        return _migrate_source(code, options, project)
    finally:
        memo.clear()


def _migrate_source(code: str, options: Options, project: Project) -> Result:
    try:
        tree = syntax.checked_tree(code, parsed=project.parsed_tree(code))
    except syntax.Rejected as rejected:
        raise MigrationError(rejected.message, rejected.line, rejected.column) from None
    other_framework = frameworks.already_distributed(tree, code)
    if other_framework is not None:
        return _result(code, code, (other_framework, *selfcheck.check_distributed(code, tree)), options)
    if "torch" not in code and not project.used_elsewhere and not project.reads_modules:
        # Nothing to migrate, and no reason to pay for libcst's parse.
        return _result(code, code, (NO_TRAINING, *_modules_loaded_by_name(tree)), options)
    if inert.nothing_to_migrate(tree, project.inert_definition, project.package):
        # What the full reading concludes on such a module, for a fraction of its cost: a
        # helper whose definitions other modules use has nothing to change or report.
        return _result(code, code, (*(() if _defines_any(tree, project.used_elsewhere) else (NO_TRAINING,)),
                                    *_modules_loaded_by_name(tree)), options)
    new_code, diagnostics = _transform(code, tree, options, project)
    if any(d.code == "DDP011" for d in diagnostics):
        new_code, diagnostics = gpu_placed(code, tree, options, project, new_code, diagnostics)
    return _result(code, new_code, diagnostics, options)


def _transform(code: str, tree: ast.Module, options: Options, project: Project) -> tuple[str, list[Diagnostic]]:
    codemod = _MigrateCommand(CodemodContext(), options, project, tree)
    outcome = transform_module(codemod, code)
    if isinstance(outcome, TransformExit):
        # libcst turns Ctrl-C into a result; the unmigrated code must not pass for one.
        raise KeyboardInterrupt
    if isinstance(outcome, TransformFailure):
        error = outcome.error
        if isinstance(error, cst.ParserSyntaxError):
            raise MigrationError(f"syntax error: {error.message}", error.raw_line, error.raw_column + 1)
        if isinstance(error, RecursionError):
            raise MigrationError("nested too deeply for ddpify to migrate (Python's recursion limit)")
        raise MigrationError(f"internal error: {error!r}\n{outcome.traceback_str}")
    new_code = getattr(outcome, "code", code)
    diagnostics = codemod.diagnostics
    if new_code != code:
        diagnostics = sorted([*diagnostics, *_self_check(code, new_code, diagnostics, tree)],
                             key=lambda d: (d.line, d.column, d.code, d.message))
    return new_code, list(diagnostics)


# What the self-check finds in a placed output: reported with it (exit 1), not a reason to keep the CPU one.
SELF_CHECKS_OF_THE_PLACEMENT = ("DDP949", "DDP954")


def gpu_placed(code: str, tree: ast.Module, options: Options, project: Project, cpu_code: str,
               cpu_diagnostics: list[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """A script that chose no device, migrated once more with its tensors placed on the device
    (rules/gpu_placement.py). The placed migration is taken when it reports nothing the CPU one
    did not and the self-check finds no tensor made without a device on its path (DDP949) and no
    `.to` of a batch part made of strings or a list (DDP954);
    otherwise the CPU migration stays, its DDP011 naming what stopped the placement."""
    placement = gpu_placement.place(code, tree, project.local_modules)
    if isinstance(placement, gpu_placement.Uncertain):
        reason = f"line {placement.line}: {placement.reason}"
        return cpu_code, [_naming(d, reason) for d in cpu_diagnostics]
    memo.clear()  # the caches of the first reading name nodes of another tree
    try:
        new_code, found = _transform(placement.code, syntax.checked_tree(placement.code), options, project)
    except (MigrationError, syntax.Rejected) as error:
        reason = f"placing it on the GPU failed ({getattr(error, 'message', error)})"
        return cpu_code, [_naming(d, reason) for d in cpu_diagnostics]
    found += placed_factories_check(placement.code, new_code) + placed_parts_check(placement.code, new_code)
    found = [replace(d, line=placement.to_original(d.line)) for d in found] + placement.notes
    warnings_before = {d.code for d in cpu_diagnostics if d.severity.value == "warning"}
    added = sorted((d for d in found if d.severity.value == "warning" and d.code not in warnings_before),
                   key=lambda d: (d.line, d.code))
    if any(d.code == "DDP011" for d in found) or (added and added[0].code not in SELF_CHECKS_OF_THE_PLACEMENT):
        reason = (f"placed on the GPU, line {added[0].line} would need a person ({added[0].code})" if added
                  else "ddpify could not place it")
        return cpu_code, [_naming(d, reason) for d in cpu_diagnostics]
    return new_code, sorted(found, key=lambda d: (d.line, d.column, d.code, d.message))


def _naming(diagnostic: Diagnostic, reason: str) -> Diagnostic:
    """DDP011 with what kept the script on the CPU."""
    if diagnostic.code != "DDP011":
        return diagnostic
    return replace(diagnostic, message=f"{diagnostic.message}; {reason}")


def _reads_torch(tree: cst.Module) -> bool:
    """Whether the migrated module names `torch` anywhere (asked only of a module that binds
    it under another name, or not at all)."""
    imports = [*find_all(tree, cst.Import), *find_all(tree, cst.ImportFrom)]
    in_imports = {id(name) for statement in imports for name in find_all(statement, cst.Name)}
    return any(name.value == "torch" and id(name) not in in_imports for name in find_all(tree, cst.Name))


def _defines_any(tree: ast.Module, used: frozenset[str]) -> bool:
    """The module defines a function or class other modules import (analysis.reading: a
    helper module whose imported definitions run when the program does)."""
    return any(isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.name in used
               for statement in tree.body)


def _modules_loaded_by_name(tree: ast.Module) -> list[Diagnostic]:
    """DDP909 for each module this one imports by a computed name (`__import__(name)`,
    `importlib.import_module(f"{__name__}.{py}")`): a package's `__init__.py` that loads its
    agents or solvers from its folder names no torch, yet what it loads may train, and stays
    as it was."""
    return [Diagnostic("DDP909", node.lineno, node.col_offset + 1, RULES["DDP909"].summary, node.end_lineno or 0)
            for node in ast_walk.walk(tree) if isinstance(node, ast.Call) and node.args
            and (dotted_ast(node.func) or "").rpartition(".")[2] in ("__import__", "import_module")
            and not isinstance(node.args[0], ast.Constant)]


def _self_check(code: str, new_code: str, diagnostics: list[Diagnostic], tree) -> list[Diagnostic]:
    """Safe mode (DESIGN.md §2.10): a second, independent reading of the output."""
    try:
        return selfcheck.check(code, new_code, diagnostics, tree)
    except SyntaxError as error:
        raise MigrationError(f"internal error: the migrated code does not parse: {error}") from None


def _result(source: str, new_code: str, diagnostics: Iterable[Diagnostic], options: Options) -> Result:
    """Suppression comments first, then --select/--ignore: a comment is used whatever the
    run selects, so that a narrower selection never calls it stale."""
    filtered = suppressions.apply(source, tuple(diagnostics))
    return Result(new_code, _selected(filtered.kept, options), _selected(filtered.unused, options))


def _selected(diagnostics: Iterable[Diagnostic], options: Options) -> tuple[Diagnostic, ...]:
    return tuple(d for d in diagnostics if is_selected(d.code, options.select, options.ignore))


class _MigrateCommand(CodemodCommand):
    """analysis -> plan (one module per concern) -> one applying pass -> imports."""

    DESCRIPTION = "Migrate a single-GPU PyTorch training script to DistributedDataParallel."

    def __init__(self, context: CodemodContext, options: Options, project: Project, source_tree: ast.Module) -> None:
        super().__init__(context)
        self.options = options
        self.project = project
        # The stdlib's tree of the same source (syntax.checked_tree), for the rules that read it.
        self.source_tree = source_tree
        self.diagnostics: list[Diagnostic] = []

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """libcst's Codemod deep-copies the tree into a MetadataWrapper before the impl runs;
        ours builds its own wrapper on this tree, which transform_module parsed for this call
        alone. Skipping the copy saves a full pass (and a RecursionError on deep nesting)."""
        return self.transform_module_impl(tree)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # The tree was parsed for us alone, so the wrapper may use it without a deep copy.
        wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
        ast_twin.remember(tree, self.source_tree)
        facts = analyse(wrapper, self.project)
        if facts.already_distributed is not None:
            position = facts.positions[facts.already_distributed].start
            self.diagnostics.append(Diagnostic("DDP900", position.line, position.column + 1,
                                               "already distributed: left unchanged"))
            raise SkipFile("already distributed")
        if not facts.trains:
            return self._helper_without_training(facts, tree, wrapper)
        edits = Edits(facts, tree.config_for_parsing, self.options)
        plan = setup.choose(facts)
        plan.torch_imported_in = setup.compound_importing_torch(facts)
        plan.library = facts.library
        if facts.unseen_callers and facts.training_calls:
            edits.report("DDP918", facts.training_calls[0])
        for call in facts.partly_followed_training:
            edits.report("DDP921", call)
        for concern in CONCERNS:
            concern.plan(facts, edits, plan)
        if hand_batches.only_hand_made_batches(facts, plan):
            self._leave_single_process(plan, edits)
        if not plan.library:
            setup.place(facts, edits, plan)
            setup.teardown(facts, edits, plan)
        setup.add_guard_helper(edits, plan)
        self.diagnostics = sorted(edits.diagnostics, key=lambda d: (d.line, d.column, d.code, d.message))
        if not (edits.changes_anything or edits.imports or edits.unused_imports):
            # The tree prints as the source it was parsed from: no pass, no print.
            raise SkipFile("nothing to change")
        new_tree = wrapper.module.visit(ApplyEdits(edits))
        if not setup.torch_bound_by_import(facts) and _reads_torch(new_tree):
            # `import torch as t` alone: the emitted code names torch itself (torch.device, ...).
            edits.imports.add("torch")
        new_tree = add_imports(new_tree, [names.EMITTED_IMPORTS[key] for key in sorted(edits.imports)])
        if edits.unused_imports:
            new_tree = remove_unused_imports(
                new_tree, sorted(edits.unused_imports, key=lambda spec: tuple(part or "" for part in spec)))
        return new_tree

    def _helper_without_training(self, facts: Facts, tree: cst.Module, wrapper: MetadataWrapper) -> cst.Module:
        if not facts.used_elsewhere:
            self._note_no_training(facts)
            raise SkipFile("no training code")
        # A helper module that does not train still builds what the training reads (a
        # vocabulary, the class names): a set's order there is reported too, and the GPU its
        # import places tensors on becomes this rank's (DDP012).
        edits = Edits(facts, tree.config_for_parsing, self.options)
        set_order.report_in_helper(facts, edits)
        splits.plan_in_helper(facts, edits)  # a split drawn at import, or by a data module's function
        import_time_devices.plan_import_time_placements(facts, edits)
        if not edits.changes_anything:
            self._note_no_training(facts)
            self.diagnostics += edits.diagnostics
            raise SkipFile("no training code")
        self.diagnostics += sorted(edits.diagnostics, key=lambda d: (d.line, d.column, d.code, d.message))
        new_tree = wrapper.module.visit(ApplyEdits(edits))
        return add_imports(new_tree, [names.EMITTED_IMPORTS[key] for key in sorted(edits.imports)])

    def _leave_single_process(self, plan: Plan, edits: Edits) -> None:
        hand_made = list(plan.hand_made_batches)
        first = min(hand_made, key=lambda d: (d.line, d.column))
        # An import ddpify cannot follow (DDP909) often says where the batches really come from.
        unfollowed = [d for d in edits.diagnostics if d.code == "DDP909"]
        self.diagnostics = sorted(
            hand_made + unfollowed + [Diagnostic("DDP904", first.line, first.column, RULES["DDP904"].summary)],
            key=lambda d: (d.line, d.column, d.code, d.message))
        raise SkipFile("training data built by hand")

    def _note_no_training(self, facts: Facts) -> None:
        """A module of training code that nothing in it runs (a Trainer class, an engine's
        train_one_epoch) is part of a training program that ddpify cannot see whole."""
        if facts.partly_followed_training:
            # The training runs through an object ddpify reads on one path only: an entry
            # left as it is would run its migrated modules without a process group (DDP921).
            call = facts.partly_followed_training[0]
            self.diagnostics.append(Diagnostic(
                "DDP921", facts.line_of(call), facts.column_of(call), RULES["DDP921"].summary))
            return
        if facts.training_calls:
            call = facts.training_calls[0]
            self.diagnostics.append(Diagnostic(
                "DDP905", facts.line_of(call), facts.column_of(call), RULES["DDP905"].summary))
            return
        unfollowed = batches_to_an_unfollowed_object(facts)
        if unfollowed is not None:
            call, loader, made_by = unfollowed
            self.diagnostics.append(Diagnostic(
                "DDP937", facts.line_of(call), facts.column_of(call),
                f"{RULES['DDP937'].summary} (`{loader}` hands its batches to `{dotted_name(call.func)}()` of "
                f"the object `{made_by}()` makes, whose class ddpify cannot read: the training steps may run "
                "in there)"))
            return
        self.diagnostics.append(NO_TRAINING)
        # Rule: a module whose training ddpify cannot find is not known to have none when
        # it imports modules through a sys.path entry ddpify does not follow (HRNet's
        # `import _init_paths`, `sys.path.append('.')` in tools/): the training may be
        # there, left single-process (DDP909, a warning: not exit 0).
        self.diagnostics.extend(
            Diagnostic("DDP909", facts.line_of(node), facts.column_of(node), RULES["DDP909"].summary)
            for node in facts.dynamic_imports)
