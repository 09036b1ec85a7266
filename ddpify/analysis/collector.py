"""The one traversal of a module that records its facts (see facts.FactRecord)."""
import ast
import dataclasses
import re
import textwrap
from collections.abc import Set as AbstractSet
from typing import Any, Callable, NamedTuple, Optional, Union, cast

import libcst as cst

from ddpify.analysis import effects, forward_outputs, names, shell, traversal
from ddpify.analysis.conditional_parts import conditional_parts
from ddpify.analysis.containers import (
    Entry,
    gathered_elements,
    iterated_elements,
    iterated_module,
    iterated_view,
    keyed_loop,
    literal_elements,
)
from ddpify.analysis.control import Facts
from ddpify.analysis.devices import DeviceValues, moves_itself
from ddpify.analysis.facts import DeviceAssignment, ExternalLoader, ExternalLoaderDict, Loader, Model, Statement
from ddpify.analysis.freezing import models_frozen_in_part, walked_modules
from ddpify.analysis.import_names import LoadedNames
from ddpify.analysis.navigation import ancestors_up_to
from ddpify.analysis.nodes import (
    argument_among,
    argument_for,
    assignment_pairs,
    calls_within,
    dotted_name,
    find_all,
    init_takes_sampler,
    is_false,
    is_fixed_gpu,
    is_string_choice,
    is_true,
    keyword_args,
    made_one_each,
    names_a_values_device,
    names_in,
    names_within,
    opens_for_writing,
    parameter_names,
    positional_args,
    positional_parameters,
    returned_name,
    self_attributes,
    self_reads,
    slices_batches,
    string_value,
    within,
)
from ddpify.project import Project

# Calls whose result yields the items of their first argument.
ITERATION_WRAPPERS = names.PROGRESS_BARS | {"builtins.enumerate", "builtins.iter", "builtins.zip", "itertools.cycle"}
# In-place draws of a tensor's values from the global generator (`m.weight.normal_(0, 0.02)`),
# and a layer's own fresh draw of its weights (`m.reset_parameters()`).
WEIGHT_DRAWS = frozenset({"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "cauchy_",
                          "log_normal_", "geometric_", "reset_parameters"})
_RETURNS_MODULE = frozenset({"to", "cpu", "cuda", "train", "eval", "float", "double", "half",
                             "bfloat16", "requires_grad_"})


FIXED_GPU = re.compile(r"cuda:\d+")
# The calls that walk a module's parts or parameters (`for name, m in model.named_modules()`).
MODULE_WALKS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children"})


def qualified_is_path_edit(qualified: set[str]) -> bool:
    return any(name.startswith("sys.path.") for name in qualified)


def _constructed(value: cst.BaseExpression) -> cst.BaseExpression:
    """`Trainer(net).cuda()`, `Solver(cfg).to(device).train()`: the object the constructor
    made, moved or put in a mode by calls that return it."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and (
            value.func.attr.value in _RETURNS_MODULE) and isinstance(value.func.value, cst.Call):
        value = value.func.value
    return value


# Methods that return the module they are called on: `net.to(device).train()` is `net`.
_SAME_MODULE_METHODS = frozenset({"to", "cuda", "train", "eval", "half", "float", "double", "bfloat16"})

class Collector(cst.CSTVisitor):
    def __init__(self, facts: Facts, project: Project) -> None:
        super().__init__()
        self.facts = facts
        self.project = project
        self.helper_calls: dict[cst.Call, tuple[str, Optional[Statement]]] = {}
        # Functions of the file by name: the parameter a class factory picks its class from
        # (class_factory_parameters), once per function.
        self._class_factories: dict[str, Optional[tuple[str, int]]] = {}
        self._function_stack: list[cst.FunctionDef] = []
        # Parents are recorded on the way down: cheaper than a ParentNodeProvider pass,
        # and a node's ancestors are always known by the time it is visited.
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._ancestors: list[cst.CSTNode] = []
        # Every node in visit order, where each one's subtree ends in it, and the order's
        # index of each ancestor: nodes.remember_module_order makes find_all a slice.
        self.order: list[cst.CSTNode] = []
        self.subtree_ends: list[int] = []
        self._ancestor_indices: list[int] = []
        # What each imported name stands for: `nn` -> "torch.nn", `DL` ->
        # "torch.utils.data.DataLoader". A table of the file's imports answers what libcst's
        # QualifiedNameProvider would, for a fraction of its cost (its scope analysis was
        # half of ddpify's time); rebinding an imported name to something else is not seen.
        self._aliases: dict[str, str] = {}
        # _qualified_name's answers under the imports seen so far (emptied by each import).
        self._qualified_names: dict[int, tuple[cst.BaseExpression, Optional[str]]] = {}
        # The top-level statement being visited, the names each one mentions, and those
        # that hold training code: to tell whether running the file trains anything.
        self._top: Optional[cst.CSTNode] = None
        self.names_in_top: dict[cst.CSTNode, set[str]] = {}
        self.training_tops: set[cst.CSTNode] = set()
        # `Trainer(model, ...)` of a project class whose methods train (note_helper_methods).
        self.training_constructors = self.facts.training_constructors
        # `Trainer(model, ...).fit(loader)`: a method called on an object made in place.
        self.chained_calls: list[cst.Call] = []
        # Methods of this file that build an optimizer over their own object's parameters.
        self.self_optimizer_methods: set[str] = set()
        self.training_calls: list[cst.Call] = []
        self.input_gradient_scopes: dict[cst.CSTNode, bool] = {}
        # (function, name) -> the names of the iterable a progress bar or enumerate() held
        # in that name goes over.
        self.iteration_wrappers: dict[tuple[Optional[cst.FunctionDef], str], list[str]] = {}
        self.next_calls: list[cst.Call] = []
        # DataLoader calls with no name: (call, function, the loop iterating it, or the call
        # it is handed to).
        self.built_in_place: list[tuple[cst.Call, Optional[cst.FunctionDef], Optional[cst.For],
                                        Optional[cst.Call]]] = []
        # DataLoader calls with no name that a comprehension or generator goes over where they
        # are built (`torch.cat([x for x, _ in DataLoader(ds)])`), with their function.
        self.built_for_comprehension: list[tuple[cst.Call, Optional[cst.FunctionDef]]] = []
        # For loops over `X.parameters()` or `X.named_parameters()`, for parameter groups.
        self._loops_over_parameters: list[cst.For] = []
        # Functions of this file that move each element of a positional parameter.
        self._element_movers: dict[str, list[tuple[int, cst.Call]]] = {}
        # What a list was extended with after it was made (`params += list(fine.parameters())`,
        # `params.extend(head.parameters())`), for the models an optimizer over it trains.
        self._values_added: dict[str, list[cst.BaseExpression]] = {}
        self._devices = DeviceValues(facts.module, self._calls)
        # DataParallel subclasses this file defines, and those of the project's other modules
        # (by full name): whether their constructor takes the module first.
        self._data_parallel_classes: dict[str, bool] = {}
        self._class_bases: dict[str, list[str]] = {}  # each class of the file: its bases' full names
        # Optimizers built, with the top-level statement each is built in.
        self._optimizers_made: list[tuple[cst.Call, cst.CSTNode]] = []
        self._project_data_parallel: dict[str, Optional[bool]] = {}

    def _note_training(self) -> None:
        # Training calls sit inside a top-level statement: _top is set by then.
        if self._top is not None:
            self.training_tops.add(self._top)

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        self.facts.nodes_by_type.setdefault(kind, []).append(node)
        hooks = _HOOKS.get(kind) or _hooks(kind)
        if hooks.statement:
            self.facts.statements_by_function.setdefault((self._function(), kind), []).append(node)
        if self._ancestors:
            parent = self._ancestors[-1]
            self.parents[node] = parent
            if type(parent) is cst.Module:
                self._top = node
        self._ancestors.append(node)
        self._ancestor_indices.append(len(self.order))
        self.order.append(node)
        self.subtree_ends.append(0)
        # CSTVisitor.on_visit, with the method looked up once per node class.
        return hooks.visit is None or hooks.visit(self, node) is not False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        hooks = _HOOKS[type(original_node)]
        if hooks.leave is not None:
            hooks.leave(self, original_node)
        self._ancestors.pop()
        self.subtree_ends[self._ancestor_indices.pop()] = len(self.order)

    # --- helpers ---------------------------------------------------------------------------
    def _qualified(self, node: cst.BaseExpression) -> set[str]:
        qualified = self._qualified_name(node)
        return set() if qualified is None else {qualified}

    def _qualified_name(self, node: cst.BaseExpression) -> Optional[str]:
        """The full name of a name or attribute chain through the imports seen so far, read
        once per node until the next import (visit_Call asks it of one callee a score of
        times). A call on a call (`model(x).sum`) resolves to misleading names: only plain
        names and attribute chains are trusted."""
        # Keyed by id, the node kept beside its answer: the id cannot be reused while it is here.
        known = self._qualified_names.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        dotted = dotted_name(node)
        qualified = None if dotted is None else names.qualify(dotted, self._aliases)
        self._qualified_names[id(node)] = (node, qualified)
        return qualified

    def _is_project_module(self, name: Optional[str]) -> bool:
        """`utils.cuda(x)` after `import utils`: a function of a module of the project that
        happens to be called `cuda` (or `to`), whose arguments are its own, not a device."""
        return name is not None and name in self._aliases and self.project.has_module(self._aliases[name])

    def _calls(self, call: cst.Call, wanted: Union[str, AbstractSet[str]]) -> bool:
        qualified = self._qualified_name(call.func)
        if qualified is None:
            return False
        if isinstance(wanted, str):
            return wanted == qualified
        return qualified in wanted

    def _function(self) -> Optional[cst.FunctionDef]:
        return self._function_stack[-1] if self._function_stack else None

    def _statement(self, node: cst.CSTNode) -> Statement:
        parent = node
        while not isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            parent = self.parents[parent]
        return parent

    def _touch(self, name: str, node: cst.CSTNode) -> None:
        self.facts.statements_touching.setdefault(name, []).append(self._statement(node))

    def _note_weights_drawn(self, node: cst.Call) -> None:
        """`nn.init.kaiming_normal_(model[0].weight)` or `model.fc.weight.normal_(0, 0.01)` as a
        statement: the model's weights are drawn afresh, so its wrap must come after the draw
        (DDP broadcasts rank 0's weights when it wraps; a draw after it gives each rank other
        weights, which the averaged gradients never bring together again)."""
        if not self._is_statement_call(node) or not node.args and not isinstance(node.func, cst.Attribute):
            return
        if any(name.startswith("torch.nn.init.") for name in self._qualified(node.func)) and node.args:
            self._touch_model_of_part(node.args[0].value, node)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in WEIGHT_DRAWS:
            self._touch_model_of_part(node.func.value, node)

    def _touch_model_of_part(self, part: cst.BaseExpression, node: cst.CSTNode) -> None:
        """`model.backbone.requires_grad_(False)`, `model[0].weight.requires_grad = False`: a
        freeze of part of `model` works on the model, and its wrap must come after it (DDP
        registers the parameters that require grad when it wraps), as for a loop over
        `model.backbone.parameters()` (visit_For)."""
        root = part
        while isinstance(root, (cst.Subscript, cst.Attribute)):
            root = root.value
        if isinstance(root, cst.Name) and root is not part:
            self._touch(root.value, node)

    # --- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self._qualified_names.clear()
        for alias in node.names:
            module = dotted_name(alias.name)
            if module is None:
                continue
            asname = alias.asname.name if alias.asname is not None else None
            names.add_import(self._aliases, module, asname.value if isinstance(asname, cst.Name) else None)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._qualified_names.clear()
        if isinstance(node.names, cst.ImportStar):
            # `from funcs import *` of a project module: the names funcs imported come along.
            star = self._imported_module(node)
            if star is not None:
                names.add_star_import(self._aliases, star)  # (a library's: `from tqdm import *`)
                self._aliases.update(self.project.star_exports(star))
            return
        module = self._imported_module(node)
        for alias in node.names:
            name = dotted_name(alias.name)
            # libcst types AsName.name for `except`/`with` targets too; in an import it is a Name.
            bound = cast(cst.Name, alias.asname.name).value if alias.asname is not None else name
            if module and name and isinstance(bound, str):
                names.add_import_from(self._aliases, module, name, bound)

    def _imported_module(self, node: cst.ImportFrom) -> Optional[str]:
        """The module a `from ... import` reads: `from .util import AverageMeter` in the
        package `helper` reads `helper.util`, as its absolute spelling would (a relative
        import outside a project of ddpify's reading names nothing it can follow)."""
        module = dotted_name(node.module) if node.module is not None else None
        if not node.relative:
            return module
        package = self.project.package
        parts = package.split(".") if package else []
        if not package or len(node.relative) - 1 > len(parts):
            return None
        return ".".join(parts[: len(parts) - (len(node.relative) - 1)] + ([module] if module else [])) or None

    # --- scopes ------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._function_stack.append(node)
        self.facts.bound_names.add(node.name.value)
        is_method = isinstance(self.parents.get(node), cst.IndentedBlock) and any(
            p.name.value == "self" for p in node.params.params[:1]
        )
        self.facts.functions.setdefault(("self." if is_method else "") + node.name.value, node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._function_stack.pop()

    def _record_unused_submodules(self, node: cst.ClassDef) -> None:
        """Submodules __init__ creates that no method runs with gradients: never read, or
        read only under `torch.no_grad()` (a frozen feature extractor whose parameters still
        ask for gradients): none comes to their parameters, and DDP must be told (DDP105)."""
        created: dict[str, cst.Assign] = {}
        used: set[str] = set()
        for method in node.body.body:
            if not isinstance(method, cst.FunctionDef):
                continue
            if method.name.value == "__init__":
                for attribute, assign in self_attributes(method):
                    if assign is not None and self._creates_a_submodule(assign, created):
                        created[attribute] = assign
            if self._decorated_without_grad(method):
                continue  # `@torch.no_grad() def update_target(self):`: nothing it reads gets a gradient
            without_grad = {id(inner) for with_ in find_all(method.body, cst.With) if self._without_grad(with_)
                            for inner in find_all(with_.body, cst.Attribute)}
            without_grad |= _detached_calls(method)
            used |= {attribute for attribute, read in self_reads(method) if id(read) not in without_grad}
        unused = [assign for attribute, assign in created.items() if attribute not in used]
        has_forward = any(isinstance(m, cst.FunctionDef) and m.name.value == "forward"
                          for m in node.body.body)
        if unused and has_forward:
            self.facts.unused_submodules[node.name.value] = unused
        forward = next((m for m in node.body.body if isinstance(m, cst.FunctionDef) and m.name.value == "forward"),
                       None)
        if forward is not None:
            containers = {attribute for attribute, assign in created.items() if isinstance(assign.value, cst.Call)
                          and self._qualified(assign.value.func) & names.MODULE_CONTAINERS}
            methods = {m.name.value: m for m in node.body.body if isinstance(m, cst.FunctionDef)}
            parts = conditional_parts(forward, set(created) & used, containers, self._qualified, methods)
            if parts:
                self.facts.conditional_submodules[node.name.value] = (forward, parts)
            if _returns_several_outputs(forward):
                self._record_output_parts(node, set(created) | self._built_from_other_classes(node))

    def _built_from_other_classes(self, node: cst.ClassDef) -> set[str]:
        """`self.encoder = Encoder(...)`: attributes built by a call of a class that is not
        torch's own (one of the file's, or one imported), which may hold parameters."""
        init = next((m for m in node.body.body if isinstance(m, cst.FunctionDef) and m.name.value == "__init__"), None)
        if init is None:
            return set()
        return {attribute for attribute, assign in self_attributes(init) if assign is not None
                and isinstance(assign.value, cst.Call) and isinstance(assign.value.func, (cst.Name, cst.Attribute))
                and not any(q.startswith(("torch.", "builtins.")) for q in self._qualified(assign.value.func))}

    def _record_output_parts(self, node: cst.ClassDef, parts: set[str]) -> None:
        """The submodules each output of forward comes from (analysis.forward_outputs),
        read with `ast` from the class's own source, for the few classes whose forward
        returns several outputs."""
        try:
            tree = ast.parse(textwrap.dedent(self.facts.module.code_for_node(node)))
        except SyntaxError:
            return
        classes = [statement for statement in tree.body if isinstance(statement, ast.ClassDef)]
        outputs = forward_outputs.output_parts(classes[0], parts) if classes else {}
        if outputs:
            self.facts.forward_output_parts[node.name.value] = outputs

    def _frozen_receiver(self, value: cst.BaseExpression) -> Optional[str]:
        """The module whose parameters a requires_grad change works on: `teacher` for
        `teacher.requires_grad_(False)`, and for `p` in `for p in teacher.parameters():` (or
        `for name, p in teacher.named_parameters():`); None for another loop variable or a
        parameter of the function it is in, whose module this reading does not follow."""
        name = dotted_name(value)
        if name is None:
            return None
        root = name.split(".", 1)[0]
        function = self._function_stack[-1] if self._function_stack else None
        if function is not None and root in {param.name.value for param in function.params.params}:
            return None
        for ancestor in reversed(self._ancestors):
            if not isinstance(ancestor, cst.For) or root not in names_within(ancestor.target):
                continue
            iterated = ancestor.iter
            if "." not in name and isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute) \
                    and iterated.func.attr.value in ("parameters", "named_parameters"):
                return dotted_name(iterated.func.value)
            return None
        return name

    def _creates_a_submodule(self, assign: cst.Assign, created: dict[str, cst.Assign]) -> bool:
        """`self.fc = nn.Linear(...)` (a torch.nn layer with parameters), or a copy of one made
        before it (`self.target = copy.deepcopy(self.online)`: an EMA or target network that
        the module keeps beside the one it trains)."""
        if not isinstance(assign.value, cst.Call):
            return False
        qualified = self._qualified(assign.value.func)
        if any(q.startswith("torch.nn.") for q in qualified):
            return not qualified & names.PARAMETERLESS_LAYERS
        if not qualified & {"copy.deepcopy", "torch.optim.swa_utils.AveragedModel"} or not assign.value.args:
            return False
        copied = assign.value.args[0].value
        return isinstance(copied, cst.Attribute) and isinstance(copied.value, cst.Name) \
            and copied.value.value == "self" and copied.attr.value in created

    def _decorated_without_grad(self, method: cst.FunctionDef) -> bool:
        """`@torch.no_grad()`, `@torch.no_grad`, `@torch.inference_mode()` on the method."""
        for decorator in method.decorators:
            called = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if self._qualified(called) & {"torch.no_grad", "torch.inference_mode"}:
                return True
        return False

    def _without_grad(self, node: cst.With) -> bool:
        """`with torch.no_grad():`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`."""
        for item in node.items:
            call = item.item
            if not isinstance(call, cst.Call):
                continue
            qualified = self._qualified(call.func)
            if qualified & {"torch.no_grad", "torch.inference_mode"}:
                return True
            if "torch.set_grad_enabled" in qualified and call.args and is_false(call.args[0].value):
                return True
        return False

    def visit_If(self, node: cst.If) -> None:
        test = node.test
        if (
            self._function() is None
            and isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and test.left.value == "__name__"
        ):
            self.facts.main_guard = node

    def visit_Name(self, node: cst.Name) -> None:
        parent = self.parents.get(node)
        # `loader.dataset` and `DataLoader(sampler=...)` name no variable: a `dataset` or
        # `sampler` ddpify makes cannot clash with them.
        if not (isinstance(parent, cst.Attribute) and parent.attr is node
                or isinstance(parent, cst.Arg) and parent.keyword is node):
            self.facts.bound_names.add(node.value)
        if node.value == "print":
            parent = self.parents.get(node)
            if not (isinstance(parent, cst.Call) and parent.func is node) and self._qualified(node) == {
                    "builtins.print"} and not isinstance(parent, (cst.Attribute, cst.ImportAlias)):
                self.facts.print_values.append(node)
        if self._top is not None:  # every Name sits in a top-level statement
            self.names_in_top.setdefault(self._top, set()).add(node.value)
        self._note_data_parallel(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._note_data_parallel(node)
        receiver = dotted_name(node.value)
        if receiver is None or self._in_import(node):
            return
        if node.attr.value == "module":
            self.facts.module_accesses.setdefault(receiver, []).append(node)
        elif not isinstance(self.parents.get(node), cst.AssignTarget):
            self.facts.attribute_reads.setdefault(receiver, []).append(node)
        else:
            self.facts.attribute_writes.setdefault(receiver, []).append(node)

    def _in_import(self, node: cst.Attribute) -> bool:
        """`import model.model as arch` names a module, not an attribute of a value `model`."""
        top: cst.CSTNode = node
        while isinstance(self.parents.get(top), cst.Attribute):
            top = self.parents[top]
        return isinstance(self.parents.get(top), (cst.ImportAlias, cst.ImportFrom))

    def _note_data_parallel(self, node: cst.BaseExpression) -> None:
        parent = self.parents.get(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return  # only the whole dotted name counts
        if isinstance(parent, (cst.ImportAlias, cst.ImportFrom, cst.AsName)):
            self._note_data_parallel_import(node, parent)
            return
        kind = self._data_parallel_kind(node)
        if kind is None or self._in_data_parallel_class(node):
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            if kind:
                self.facts.data_parallel_calls.append(parent)
            else:
                self.facts.unreadable_data_parallel_calls.append(parent)
        elif kind:
            self.facts.data_parallel_references.append(node)

    def _calls_synchronized_batchnorm(self, node: cst.Call) -> bool:
        """`SynchronizedBatchNorm2d(64)` of the vendored synchronized-BatchNorm package, imported
        under any path: a BatchNorm like torch's once DataParallel's replicas are gone."""
        dotted = dotted_name(node.func)
        return dotted is not None and dotted.partition(".")[0] in self._aliases and names.qualify(
            dotted, self._aliases).rpartition(".")[2] in names.SYNCHRONIZED_BATCHNORM_NAMES

    def _note_data_parallel_import(self, node: cst.BaseExpression, parent: cst.CSTNode) -> None:
        """`from torch.nn import DataParallel as DP`, `from sync_batchnorm import
        DataParallelWithCallback`: an import the migration may leave unused (never a name to
        rewrite: `as DP` would become `as DDP`, and shadow the wrap)."""
        statement = self.parents.get(parent)
        if not (isinstance(parent, cst.ImportAlias) and parent.name is node and isinstance(statement, cst.ImportFrom)
                and statement.module is not None and isinstance(node, cst.Name)):
            return
        bound = parent.asname.name if parent.asname is not None else node
        if isinstance(bound, cst.Name) and self._data_parallel_kind(bound):
            asname = bound.value if parent.asname is not None else None
            self.facts.data_parallel_imports.append((dotted_name(statement.module) or "", node.value, asname))

    def _data_parallel_kind(self, node: cst.BaseExpression) -> Optional[bool]:
        """Rule: DataParallel, or a subclass of it: one this file defines (`class
        MyDataParallel(nn.DataParallel)`), one another module of the project defines, or a
        known one of a vendored package (names.DATA_PARALLEL_SUBCLASS_NAMES), under any import
        or alias. True when its constructor takes the module first, as DataParallel's does (it
        defines no `__init__`, or one whose first parameter is `module` or `*args`); False for
        a subclass ddpify cannot read so; None for anything else."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        if dotted in self._data_parallel_classes:
            return self._data_parallel_classes[dotted]
        head = dotted.partition(".")[0]
        if head not in self._aliases:
            return None
        qualified = names.qualify(dotted, self._aliases)
        if qualified in names.DATA_PARALLEL or qualified.rpartition(".")[2] in names.DATA_PARALLEL_SUBCLASS_NAMES:
            return True
        if qualified.startswith("torch."):
            return None
        if qualified not in self._project_data_parallel:
            self._project_data_parallel[qualified] = self.project.data_parallel_class(qualified)
        return self._project_data_parallel[qualified]

    def _in_data_parallel_class(self, node: cst.BaseExpression) -> bool:
        """A base of a DataParallel subclass, or a name inside its body (`super(
        DataParallelWithCallback, self)`), or inside a helper that hooks DataParallel's replicas
        (`def patch_replication_callback(data_parallel): assert isinstance(data_parallel,
        DataParallel)`): DataParallel's own code, which stays as it is."""
        return any(isinstance(ancestor, cst.ClassDef) and ancestor.name.value in self._data_parallel_classes
                   or isinstance(ancestor, cst.FunctionDef)
                   and ancestor.name.value in names.DATA_PARALLEL_ONLY_HELPERS for ancestor in self._ancestors)

    # --- assignments ---------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad"
               for t in node.targets):
            if not (is_true(node.value) and all(
                    isinstance(t.target, cst.Attribute) and self._made_as_a_tensor(t.target.value)
                    for t in node.targets)):
                self.facts.freezes_parameters = True
                self.facts.frozen_receivers.extend(
                    self._frozen_receiver(t.target.value) if isinstance(t.target, cst.Attribute) else None
                    for t in node.targets)
            for t in node.targets:
                if isinstance(t.target, cst.Attribute):
                    self._touch_model_of_part(t.target.value, node)
        if len(node.targets) != 1:
            return
        self._note_values_from_other_modules(node)
        pairs = assignment_pairs(node.targets[0].target, node.value)
        if len(pairs) == 1:
            self._note_assigned(node, *pairs[0])
            self._note_unpacked_onto_self(node)
            return
        # Several names bound at once: only the batches a loop goes over are read from it
        # (`total_loss, total_num, train_bar = 0.0, 0, tqdm(loader)`); a loader, model or
        # device made among them stays unread, so that no edit rewrites one element of the
        # tuple. A value handed on as it is (`self.model, self.loader = model, loader` in a
        # Trainer's __init__) is followed, as `self.loader = loader` is: nothing in the
        # statement needs rewriting for it.
        for target_node, value in pairs:
            target = dotted_name(target_node)
            if target is not None and isinstance(value, cst.Name) and target.startswith("self."):
                self._touch(target, node)
                self.facts.assigned_values.setdefault(target, []).append(value)
                function = self._function()
                if function is not None and target.count(".") == 1:
                    self.facts.self_assignments.setdefault(function, {}).setdefault(target, []).append(value)
            if target is not None and isinstance(value, cst.Call) and self._qualified(value.func) & ITERATION_WRAPPERS:
                self._touch(target, node)
                self.facts.assigned_values.setdefault(target, []).append(value)
                wrapped = [name for arg in positional_args(value)[:1] for name in names_within(arg)]
                self.iteration_wrappers[(self._function(), target)] = wrapped

    def _note_unpacked_onto_self(self, node: cst.Assign) -> None:
        """Rule: `self.train_loader, self.val_loader = loaders` in a Solver's __init__, where
        `loaders` is a parameter: each attribute holds an element of what the caller hands in
        (a tuple of its loaders), so a loop over `self.train_loader` goes over the caller's
        DataLoader, as after `self.train_loader = train_loader` (control.handed_in)."""
        target, value, function = node.targets[0].target, node.value, self._function()
        if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(value, cst.Name) or function is None \
                or value.value not in parameter_names(function):
            return
        for element in target.elements:
            name = dotted_name(element.value) if not isinstance(element, cst.StarredElement) else None
            if name is not None and name.startswith("self.") and name.count(".") == 1:
                self._touch(name, node)
                self.facts.self_assignments.setdefault(function, {}).setdefault(name, []).append(value)

    def _note_assigned(self, node: cst.Assign, target_node: cst.BaseExpression, value: cst.BaseExpression) -> None:
        target = dotted_name(target_node)
        if target is None:
            return
        self._touch(target, node)
        self.facts.assigned_values.setdefault(target, []).append(value)
        function = self._function()
        if isinstance(value, cst.Call) and self._qualified(value.func) & ITERATION_WRAPPERS:
            wrapped = [name for arg in positional_args(value)[:1] for name in names_within(arg)]
            self.iteration_wrappers[(function, target)] = wrapped
        if function is not None and target.startswith("self.") and target.count(".") == 1:
            self.facts.self_assignments.setdefault(function, {}).setdefault(target, []).append(value)
        if isinstance(value, cst.Call) and self._is_loader_class(value.func):
            self.facts.loaders.append(self._loader(target, value, node))
        elif self._devices.is_device_value(value, target) and not self._in_class_body(node):
            # (`class Config: device = "cuda:0"` is a config attribute, read as `cfg.device`.)
            self.facts.device_assignments.append(
                DeviceAssignment(target, self._statement(node), self._function(),
                                 self._devices.gpu_condition(value), self._devices.is_accelerator(value),
                                 self._devices.cuda_or_cpu(value),
                                 is_string_choice(value), self._devices.names_cpu(value),
                                 isinstance(value, cst.Integer))
            )

    def _in_class_body(self, node: cst.CSTNode) -> bool:
        """Whether the statement runs in a class body, not in a function or the module."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            parent = self.parents.get(parent)
        return isinstance(parent, cst.ClassDef)

    def _note_values_from_other_modules(self, node: cst.Assign) -> None:
        """`train_dl, val_dl = utils.get_loaders(cfg)`: names made by a function of another
        module of the project (migrated in its own module)."""
        if isinstance(node.value, (cst.Tuple, cst.List, cst.ListComp, cst.GeneratorExp)):
            self._note_objects_made_pairwise(node, node.value)
        if not isinstance(node.value, cst.Call):
            return
        made_by = next((q for q in sorted(self._qualified(node.value.func)) if self.project.defines(q)), None)
        if made_by is not None:
            self._note_made_by(node, made_by, self._function(), self._statement(node))

    def _note_made_by(self, node: cst.Assign, made_by: str, function: Optional[cst.FunctionDef],
                      statement: Statement) -> None:
        """The names `node` binds to what `made_by`, a function or method of another module
        of the project, returns: a DataLoader, or a dict of them, which that module shards."""
        call = cast(cst.Call, node.value)
        kind = self.project.running_mean_kind(made_by)
        if kind is not None:
            self.facts.running_mean_makers[made_by] = kind
        for name in _bound_names(node.targets[0].target):
            self.facts.made_in_other_modules[name] = made_by
            if self.project.hands_out_batches(made_by):
                self.facts.batches_made_in_other_modules[name] = made_by
            if self.project.makes_loader(made_by):
                self.facts.external_loaders.append(ExternalLoader(name, function, statement, call, made_by))
        sharded = self.project.loader_dict(made_by)
        # (`self.loaders = data.get_dataloaders(cfg)` too: a Trainer's methods loop over it.)
        held = dotted_name(node.targets[0].target) if len(node.targets) == 1 else None
        if sharded is not None and held is not None:
            self.facts.external_loader_dicts.append(ExternalLoaderDict(
                held, function, statement, call, made_by, sharded))

    def _note_objects_made_pairwise(self, node: cst.Assign, values: cst.BaseExpression) -> None:
        """`losses, top1 = AverageMeter(), AverageMeter()` (or `= [AverageMeter() for _ in
        range(2)]`) with the class from another module of the project: each name is made by
        the call beside it, as if assigned alone (a running-mean class read there, meters.py).
        Rule: a tuple of calls unpacked into as many names pairs them by position, a
        comprehension of one call gives each name one object; any other shape is not guessed
        at."""
        target = node.targets[0].target if len(node.targets) == 1 else None
        if not isinstance(target, (cst.Tuple, cst.List)):
            return
        for bound, made in made_one_each(target, values):
            if not isinstance(bound, cst.Name) or not isinstance(made, cst.Call):
                continue
            made_by = next((q for q in sorted(self._qualified(made.func)) if self.project.defines(q)), None)
            kind = self.project.running_mean_kind(made_by) if made_by is not None else None
            if made_by is not None and kind is not None:
                self.facts.running_mean_makers[made_by] = kind
                self.facts.made_in_other_modules[bound.value] = made_by

    def note_loaders_from_methods(self) -> None:
        """`train_loader = dm.train_dataloader()` where every `dm = ToyDataModule(...)` makes
        an object of a class of the project's modules: what that method returns, like a
        function of another module (`_note_values_from_other_modules`)."""
        for assign in self.facts.nodes_of(cst.Assign):
            value = assign.value
            if len(assign.targets) != 1 or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
                continue
            methods = self._methods_of_project_objects(dotted_name(value.func) or "")
            made_by = methods[0] if methods and len(set(methods)) == 1 and self.project.defines(methods[0]) else None
            if made_by is not None:
                self._note_made_by(assign, made_by, self.facts.function_of(assign), self.facts.statement_of(assign))

    def note_loaders_held_by_project_objects(self) -> None:
        """`for batch in dataset.train` where every `dataset = Cifar(...)` makes an object of a
        class of another module of the project that sets `self.train = DataLoader(...)`: a
        loader that module builds (and shards), held on the object (loader_attributes)."""
        for assign in self.facts.nodes_of(cst.Assign):
            owner = dotted_name(assign.targets[0].target) if len(assign.targets) == 1 else None
            if owner is None or not isinstance(assign.value, cst.Call):
                continue
            values = self._objects_made_for(owner)
            classes = {q for value in values if isinstance(value, cst.Call)
                       for q in self._qualified(value.func) if self.project.loader_attributes(q)}
            if len(classes) != 1 or len(values) != 1:
                continue
            made_by = classes.pop()
            for attribute in sorted(self.project.loader_attributes(made_by)):
                held = f"{owner}.{attribute}"
                if held in self.facts.loops_over:
                    self.facts.external_loaders.append(ExternalLoader(
                        held, self.facts.function_of(assign), self.facts.statement_of(assign), assign.value,
                        f"{made_by}.{attribute}"))

    def note_batches_drawn_by_project_objects(self) -> None:
        """`x, y = batches.get_batch()` where every `batches = MixedBatches(...)` makes an object
        of a class of another module of the project whose method draws with next() from the
        DataLoaders the class builds (and shards there)."""
        for call in self.facts.nodes_of(cst.Call):
            if not isinstance(call.func, cst.Attribute):
                continue
            made = self._methods_of_project_objects(dotted_name(call.func) or "")
            if made and all(self.project.draws_from_own_loaders(each) for each in made):
                self.facts.batches_from_project_loaders.add(call)

    def note_loaders_made_in_place(self) -> None:
        """`for x, y in data.get_loader("train", bs)`, `for batch in tqdm(dm.train_dataloader())`:
        a pass over a DataLoader that a function or method of another module of the project
        makes right there (and shards, by look)."""
        for loop in self.facts.nodes_of(cst.For):
            iterated = loop.iter
            while isinstance(iterated, cst.Call) and iterated.args and not iterated.args[0].star \
                    and self._qualified(iterated.func) & (ITERATION_WRAPPERS - {"builtins.zip"}):
                iterated = iterated.args[0].value
            if not isinstance(iterated, cst.Call):
                continue
            dotted = dotted_name(iterated.func) or ""
            made = [q for q in self._qualified(iterated.func) if self.project.defines(q)] \
                or self._methods_of_project_objects(dotted)
            if made and len(set(made)) == 1 and self.project.makes_loader(made[0]):
                self.facts.external_inline_loaders[loop] = ExternalLoader(
                    dotted, self.facts.function_of(loop), loop, iterated, made[0])

    def _objects_made_for(self, owner: str) -> list[cst.BaseExpression]:
        """The values assigned to `owner`, as their constructors made them. `model = None`
        before the branches that make the object is left out: a method called on None
        raises, so a call that runs is on one of the objects made."""
        return [_constructed(value) for value in self.facts.assigned_values.get(owner, [])
                if not (isinstance(value, cst.Name) and value.value == "None")]

    def _methods_of_project_objects(self, callee: str) -> list[str]:
        """`progress.display` where every `progress = ProgressMeter(...)` constructs a class
        of another module of the project: "utils.ProgressMeter.display", once per value
        (`progress(i)`: "utils.ProgressMeter.__call__")."""
        owner, _, method = callee.rpartition(".")
        if not owner:
            # `saver(model, epoch)` where `saver = Saver(out_dir)`: the object is called.
            owner, method = callee, "__call__"
        values = self._objects_made_for(owner)
        if not values or not all(isinstance(value, cst.Call) for value in values):
            return []
        return [f"{qualified}.{method}"
                for value in values for qualified in self._classes_constructed(cast(cst.Call, value).func)]

    def _classes_constructed(self, func: cst.BaseExpression) -> set[str]:
        """Rule: `Exp = Exp_Informer` (or one class per branch: `if args.task_name ==
        "long_term_forecast": Exp = Exp_Long_Term_Forecast`), then `exp = Exp(args)`: the
        object is made by one of the classes the name is bound to, each a plain name or
        attribute of a class of the project. Otherwise the name the call resolves to."""
        qualified = self._qualified(func)
        bound = self.facts.assigned_values.get(func.value, []) if isinstance(func, cst.Name) else []
        if not bound or any(self.project.defines(name) for name in qualified) or not all(
                isinstance(value, (cst.Name, cst.Attribute)) for value in bound):
            return qualified
        classes = {name for value in bound for name in self._qualified(value)}
        return classes if all(self.project.defines(name) for name in classes) else qualified

    def visit_Return(self, node: cst.Return) -> None:
        value = node.value
        function = self._function()
        if function is not None and isinstance(value, cst.Call) and self._is_loader_class(value.func):
            self.facts.loaders.append(self._loader(returned_name(function), value, node, True))

    def _loader(self, name: str, call: cst.Call, node: cst.CSTNode, returned: bool = False) -> Loader:
        positional = positional_args(call)
        keywords = keyword_args(call)
        dataset = keywords["dataset"].value if "dataset" in keywords else (
            positional[0] if positional else None
        )
        star = [arg.value for arg in call.args if arg.star == "**"]
        return Loader(name, call, self._statement(node), self._function(), dataset, keywords,
                      dotted_name(star[0]) if len(star) == 1 else None, returned)

    def _note_loader_built_in_place(self, call: cst.Call) -> None:
        """`for x, y in DataLoader(...)` (also inside enumerate(), zip() or a progress bar)
        and `fit(model, DataLoader(...))`: a loader with no name, which the loop or the
        callee's parameter is the only holder of. Kept for note_loaders_built_in_place."""
        child: cst.CSTNode = call
        parent = self.parents.get(call)
        while isinstance(parent, cst.Arg) and not parent.star:
            outer = self.parents.get(parent)
            if not isinstance(outer, cst.Call) or outer.func is child:
                return
            if not self._qualified(outer.func) & (ITERATION_WRAPPERS - {"builtins.iter"}):
                if child is call:  # handed to a function as it is
                    self.built_in_place.append((call, self._function(), None, outer))
                return
            if not (outer.args[0] is parent or self._calls(outer, "builtins.zip")):
                return
            child, parent = outer, self.parents.get(outer)
        if isinstance(parent, cst.For) and parent.iter is child:
            self.built_in_place.append((call, self._function(), parent, None))
        elif isinstance(parent, cst.CompFor) and parent.iter is child:
            self.built_for_comprehension.append((call, self._function()))

    def note_loaders_built_in_place(self) -> None:
        """The loaders _note_loader_built_in_place kept, once every function is known: one
        iterated where it is built is held by its loop; one handed to a function, method or
        class of this file is held by that parameter (and named after it); one handed to a
        function of elsewhere is named after that function (its epochs are out of sight,
        DDP211). One handed to a builtin (`iter(DataLoader(...))`) is no loader ddpify can
        follow (DDP210 where it feeds training)."""
        facts = self.facts
        for index, (call, function, loop, receiver) in enumerate(self.built_in_place):
            name = f"<loader built in place {index + 1}>"
            facts.inline_loader_names[call] = name
            used_as = "loader"
            if loop is not None:
                facts.loops_over.setdefault(name, []).append(loop)
            elif receiver is not None:
                parameters = facts.parameters_given(name, function, receiver)
                callee = dotted_name(receiver.func)
                if parameters:
                    used_as = parameters[0]
                elif any(qualified.startswith("builtins.") for qualified in self._qualified(receiver.func)):
                    del facts.inline_loader_names[call]
                    continue
                elif callee is not None:  # `fine_tune(model, DataLoader(...))`: fine_tune_sampler
                    used_as = callee.rsplit(".", 1)[-1] + "_loader"
            loader = self._loader(name, call, call)
            facts.loaders.append(dataclasses.replace(loader, function=function, inline=used_as))
        # Rule: a loader a comprehension goes over where it is built is read in that one pass
        # and by nothing else (the pass over the data that computes its mean and std). It has
        # no loop for a sampler's epoch, and no figure ddpify could gather: it stays whole on
        # every rank, which then computes the same values (evaluation.py says so, DDP203).
        for index, (call, function) in enumerate(self.built_for_comprehension):
            name = f"<loader built for a comprehension {index + 1}>"
            loader = self._loader(name, call, call)
            facts.loaders.append(dataclasses.replace(loader, function=function, inline="loader",
                                                     comprehension=True))

    def _is_loader_class(self, func: cst.BaseExpression) -> bool:
        if isinstance(func, cst.Name) and func.value in self.facts.loader_classes:
            return True
        if isinstance(func, cst.Name):
            # `from data import AudioDataLoader`: a DataLoader subclass another module of the
            # project defines builds a DataLoader, as one defined here does.
            for qualified in sorted(self._qualified(func)):
                takes_sampler = self.project.loader_subclass(qualified)
                if takes_sampler is not None:
                    self.facts.loader_classes[func.value] = takes_sampler
                    return True
        return bool(self._qualified(func) & names.DATALOADER_ALIASES)

    # --- data classes ----------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._record_unused_submodules(node)
        self._class_bases[node.name.value] = [names.qualify(dotted, self._aliases) for base in node.bases
                                              if (dotted := dotted_name(base.value)) is not None]
        kinds = [self._data_parallel_kind(base.value) for base in node.bases if base.keyword is None]
        if any(kind is not None for kind in kinds):
            self._data_parallel_classes[node.name.value] = any(kinds) and _takes_module_first(node)
        self.facts.classes[node.name.value] = node
        self.facts.class_inits[node.name.value] = next(
            (statement for statement in node.body.body
             if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__"),
            None,
        )
        bases = [base.value for base in node.bases if base.keyword is None]
        if any(self._qualified(base) & names.DATASET
               or (isinstance(base, cst.Name) and base.value in self.facts.dataset_classes)
               for base in bases):
            self.facts.dataset_classes.add(node.name.value)
        if any("torch.nn.Module" in self._qualified(base)
               or (isinstance(base, cst.Name) and base.value in self.facts.module_classes)
               for base in bases):
            self.facts.module_classes.add(node.name.value)
        if any(self._is_loader_class(base) for base in bases):
            self.facts.loader_classes[node.name.value] = init_takes_sampler(node)
        if any(
            self._qualified(base) & names.ITERABLE_DATASET
            or (isinstance(base, cst.Name) and base.value in self.facts.iterable_dataset_classes)
            for base in bases
        ):
            self.facts.iterable_dataset_classes.add(node.name.value)

    # --- calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        facts = self.facts
        if self._calls(node, names.INIT_PROCESS_GROUP) or self._calls(
            node, names.DISTRIBUTED_DATA_PARALLEL
        ):
            facts.already_distributed = facts.already_distributed or node
        self._note_output_and_devices(node)
        self._note_writers_handed_on(node)
        if isinstance(node.func, cst.Attribute):
            self._visit_method_call(node, node.func)
            value = node.func.value
            if node.func.attr.value == "__init__" and isinstance(value, cst.Call) and isinstance(
                    value.func, cst.Name) and value.func.value == "super":
                facts.super_init_calls.append(node)
        self._note_data_calls(node)
        self._note_visible_devices_set(node)
        if self._calls(node, names.BATCHNORM) or self._calls_synchronized_batchnorm(node):
            facts.batchnorm_calls.append(node)
        if self._calls(node, names.TORCH_COMPILE) and node.args:
            compiled = dotted_name(node.args[0].value)
            if compiled:
                facts.compile_statements.setdefault(compiled, []).append(self._statement(node))
        callee = dotted_name(node.func)
        if callee is not None:
            self.facts.calls_by_callee.setdefault(callee, []).append(node)
            if callee == "map" and len(node.args) > 1 and self._calls(node, "builtins.map"):
                self._note_mapped_pass(node)
        self._note_weights_drawn(node)
        for qualified in self._qualified(node.func):
            facts.calls_named.setdefault(qualified, []).append(node)
            self._note_helper(node, qualified)
            if self.project.batch_sampler_by_rank(qualified):
                facts.rank_aware_batch_samplers.add(node)

    def _note_writers_handed_on(self, node: cst.Call) -> None:
        """`pool.submit(torch.save, state, path)`: a writer handed to a call that calls it later."""
        for arg in node.args:
            if isinstance(arg.value, (cst.Name, cst.Attribute)) and (
                    self._qualified(arg.value) & names.WRITERS_AS_VALUES) or isinstance(
                    arg.value, cst.Attribute) and arg.value.attr.value in names.WRITING_METHODS_AS_VALUES:
                self.facts.writers_handed_on.append(arg.value)

    def _note_output_and_devices(self, node: cst.Call) -> None:
        """print and torch.save (output), torch.load, set_device, fixed GPUs, optimizers:
        one kind each, checked in this order."""
        facts = self.facts
        func = node.func
        if (isinstance(func, cst.Name) and func.value == "print"
                or self._calls(node, names.STDOUT_WRITES | names.SHOWN_ON_SCREEN | names.PRINTING_INSPECTORS)) \
                and self._is_statement_call(node):
            facts.output_statements.append(self._statement(node))
            self._note_output_in_suite(node)
        elif self._calls(node, names.TORCH_SAVE):
            facts.save_calls.append(node)
            if self._is_statement_call(node):
                facts.output_statements.append(self._statement(node))
                self._note_output_in_suite(node)
        elif self._calls(node, names.TORCH_LOAD):
            facts.load_calls.append(node)
        elif self._calls(node, names.CUDA_SET_DEVICE) and self._is_statement_call(node):
            facts.set_device_statements.append(self._statement(node))
        elif self._calls(node, names.CUDA_DEVICE_CONTEXT) and isinstance(self.parents.get(node), cst.WithItem):
            facts.device_contexts.append(node)
        elif self._calls(node, names.TORCH_DEVICE) and node.args and is_fixed_gpu(node.args[0].value):
            facts.fixed_device_values.append(node)
        elif self._is_optimizer(node):
            self._record_optimizer(node)

    def _note_output_in_suite(self, node: cst.Call) -> None:
        """A print or save that is one small statement of a one-line suite
        (`except ImportError: ok = False; print(msg)`) or of a line of several
        (`value = loss.item(); print(value)`)."""
        expression = self.parents.get(node)
        holder = self.parents.get(expression) if expression is not None else None
        if isinstance(holder, cst.SimpleStatementSuite) or isinstance(
                holder, cst.SimpleStatementLine) and len(holder.body) > 1:
            self.facts.output_calls_in_suites.append(node)

    def _note_data_calls(self, node: cst.Call) -> None:
        """Loaders, next() on an iterator, random samplers, downloads."""
        facts = self.facts
        if self._is_loader_class(node.func):
            facts.loader_calls.append(node)
            self._note_loader_built_in_place(node)
        if self._calls(node, "builtins.next") and node.args or (
                isinstance(node.func, cst.Attribute) and node.func.attr.value == "__next__" and not node.args):
            self.next_calls.append(node)
        if self._calls(node, names.RANDOM_SAMPLER):
            facts.random_sampler_calls.add(node)
        if any(
            arg.keyword is not None and arg.keyword.value == "download" and not is_false(arg.value)
            for arg in node.args
        ) or self._calls(node, names.FETCH_OR_UNPACK) or any(
                self._calls(node, runner) and shell.call_fetches(node, runner) for runner in shell.RUNNERS):
            statement = self._statement(node)
            if statement not in facts.download_statements:
                facts.download_statements.append(statement)

    def note_network_reads_written_to_files(self) -> None:
        """Rule: a function that reads from the network (urlopen, requests.get) and opens a
        file for writing downloads that file, as urlretrieve does: the writing statement is a
        download statement (local rank 0 of each machine first while the others wait), not a
        write for rank 0 alone, which would leave every other machine without the file. Only
        where the barriers around it pair on every path: a statement of the function's own body
        (the outermost `with` around the write: `with tqdm(...) as bar: with open(dest, "wb")`),
        with no way out above it but an early return on a file test (`if os.path.exists(dest):
        return dest`, which downloads.py puts inside the barriers) or on a test that calls
        nothing (`if offline: return`: a flag every rank reads alike, above the barriers);
        elsewhere it stays a write rank 0 makes, read after a barrier (DDP309)."""
        facts = self.facts
        reads = [call for qualified in sorted(names.NETWORK_READS) for call in facts.calls_named.get(qualified, ())]
        fetching = {facts.function_of(call) for call in reads}
        for qualified in sorted(names.OPEN):
            for call in facts.calls_named.get(qualified, ()):
                function = facts.function_of(call)
                if function is None or function not in fetching or not opens_for_writing(call):
                    continue
                statement = self._statement(call)
                top = self._outside_file_tests(statement)
                body = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
                if top in body and top not in facts.download_statements and not any(
                        find_all(above, cst.Return) and not self._tests_files(above)
                        and not self._exits_on_a_flag(above)
                        for above in body[:body.index(top)]):
                    facts.download_statements.append(top if isinstance(top, cst.With) else statement)

    def _outside_file_tests(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        """The statement, or the outermost `if not os.path.exists(...):` or `with` around it."""
        while True:
            block = self.facts.parents.get(statement)
            owner = self.facts.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
            if not isinstance(owner, cst.With) and not (isinstance(owner, cst.If) and self._tests_files(owner)):
                return statement
            statement = owner

    @staticmethod
    def _exits_on_a_flag(statement: cst.CSTNode) -> bool:
        """`if offline: return`: an `if` without else whose test calls nothing (a flag, a
        comparison of values), which every rank takes alike."""
        return isinstance(statement, cst.If) and statement.orelse is None and not find_all(statement.test, cst.Call)

    def _tests_files(self, statement: Optional[cst.CSTNode]) -> bool:
        """`if not os.path.exists(path):`, alone or with an `else:` that reads what is there
        (`else: text = open(path).read()`): inside the download barriers, the ranks that wait
        find the file local rank 0 fetched and take the `else`. Not with an `elif`, nor an
        `else` that returns (the barrier after it would be skipped)."""
        return isinstance(statement, cst.If) and (statement.orelse is None or (
            isinstance(statement.orelse, cst.Else) and not find_all(statement.orelse, cst.Return))) and any(
            word in self.facts.module.code_for_node(statement.test) for word in ("exists(", "isdir(", "isfile("))

    def note_models_building_their_optimizer(self) -> None:
        """`optimizer = model.configure_optimizers(...)`, a method of the model's class (here,
        or in a module of the project) that builds an optimizer over its own parameters:
        `model` is a model."""
        known = {model.name for model in self.facts.models}
        for callee, calls in self.facts.calls_by_callee.items():
            owner, _, method = callee.rpartition(".")
            if not owner or owner == "self" or owner in known:
                continue
            here = method in self.self_optimizer_methods
            elsewhere = any(self.project.optimizer_over_self(f"{qualified}.{method}")
                            for value in self.facts.assigned_values.get(owner, ()) if isinstance(value, cst.Call)
                            for qualified in self._qualified(value.func))
            if here or elsewhere:
                known.add(owner)
                call = calls[0]
                self.facts.models.append(Model(owner, self.facts.statement_of(call), self.facts.function_of(call)))

    def note_optimizers_that_train(self) -> None:
        """Rule: an optimizer is training code, unless all that is done with it is driving a
        learning-rate scheduler: handed to a scheduler (torch's, or a class of this file
        derived from one) and its `param_groups` read (`if __name__ == "__main__":` of a
        scheduler module that plots its schedule, with no backward and no step). Such a
        file trains nothing (DDP901)."""
        for node, top in self._optimizers_made:
            if top not in self.training_tops and not self._only_drives_a_scheduler(node):
                self.training_tops.add(top)

    def _only_drives_a_scheduler(self, node: cst.Call) -> bool:
        assign = self.parents.get(node)
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.value is node
                and isinstance(assign.targets[0].target, cst.Name)):
            return False
        name = assign.targets[0].target.value
        schedulers = {cls for cls, bases in self._class_bases.items()
                      if any(base.rsplit(".", 1)[-1] in ("_LRScheduler", "LRScheduler") for base in bases)}
        scope = self.facts.function_of(node)
        uses = [each for each in self.facts.nodes_of(cst.Name) if each.value == name
                and each is not assign.targets[0].target and self.facts.function_of(each) is scope]
        for use in uses:
            parent = self.parents.get(use)
            if isinstance(parent, cst.Attribute) and parent.value is use and parent.attr.value == "param_groups":
                continue
            call = self.parents.get(parent) if isinstance(parent, cst.Arg) else None
            if isinstance(call, cst.Call) and (self._makes_scheduler(call, schedulers) or all(
                    isinstance(value, cst.Call) and self._makes_scheduler(value, schedulers)
                    for value in self.facts.assigned_values.get(dotted_name(call.func) or "", [None]))):
                continue  # `OneCycle(optimizer, ...)`, or such a scheduler called (`scheduler(optimizer, i)`)
            return False
        return True

    def _makes_scheduler(self, call: cst.Call, schedulers: set[str]) -> bool:
        return any(q.startswith(names.LR_SCHEDULER_PREFIX) for q in self._qualified(call.func)) or dotted_name(
            call.func) in schedulers

    def note_parts_trained_through_their_model(self) -> None:
        """Rule: an optimizer over a part of a model (`Adam(model.head.parameters())`, the
        backbone frozen), where the part itself is never moved but the model holding it is
        (`model = model.to(device)`), trains that model: the forward runs through `model`,
        so `model` is what DDP wraps, after its move. The frozen parameters stay out of
        DDP's buckets; `model.head` then reads through `.module` like any attribute. A part
        called on its own while its holder never is (`self.nets.G(z)` of `self.nets =
        nn.ModuleDict(...).to(device)`) would train outside a wrap of the holder: reported
        (DDP903, facts.parts_called_apart), never wrapped so."""
        models = self.facts.models
        for model in list(models):
            if model.name.count(".") == 0 or self.facts.device_moves.get(model.name):
                continue
            parts = model.name.split(".")
            holders = [".".join(parts[:end]) for end in range(len(parts) - 1, 0, -1)]
            holder = next((each for each in holders if each != "self" and (
                self.facts.device_moves.get(each) or self._built_on_its_device(each))), None)
            if holder is None:
                continue
            if self.facts.calls_by_callee.get(model.name) and not self.facts.calls_by_callee.get(holder):
                # `self.nets.G(z)`, never `self.nets(...)`: the forward skips a wrap of the holder.
                models.remove(model)
                self.facts.parts_called_apart.append((model, holder))
                continue
            if any(other.name == holder and other.function is model.function for other in models):
                models.remove(model)
            else:
                models[models.index(model)] = Model(holder, model.optimizer_statement, model.function)

    def note_models_trained_through_a_holder(self) -> None:
        """Rule: a model that is neither moved nor called itself but handed to the constructor
        of another module (`trainer = DiffusionLoss(net, betas).to(device)`, the single-GPU
        `DataParallel(trainer)` idiom), where that holder is moved and called in a training
        loop with gradients on (`loss = trainer(x).mean()`), trains through the holder: the
        forward and the device move both go through it, so the holder is what DDP wraps, after
        its move. A wrap of the model itself would sit before the holder's move (DDP built over
        CPU weights, then moved: it fails under NCCL) or, after it, outside the forward (no
        gradient is averaged). The model keeps its name and stays unwrapped: its optimizer,
        EMA copy and state dict read the same parameters as before."""
        models = self.facts.models
        for model in list(models):
            name = model.name
            if (self.facts.device_moves.get(name) or self.facts.moved_by_helpers.get(name)
                    or self._built_on_its_device(name) or self.facts.calls_by_callee.get(name)):
                continue
            holders = self._holders_trained(name, model.function)
            if len(holders) != 1:
                continue
            holder = holders[0]
            if any(other.name == holder and other.function is model.function for other in models):
                models.remove(model)
            else:
                models[models.index(model)] = Model(holder, model.optimizer_statement, model.function)

    def note_models_trained_through_an_alias(self) -> None:
        """Rule: a name bound from the model by the statement that moves it (`model =
        net.to(device)`, `model = torch.compile(net.to(device))`, `model =
        torch.compile(net).to(device)`) and called in a training loop with gradients on, where
        the model's own name is not, is what trains: DDP wraps that name, after that statement.
        Wrapped under the model's own name after the statement, the alias stays bound to the raw
        module and the loop trains outside DDP (no rank averages a gradient); before it, the
        move would come after the wrap. The model's own name stays unwrapped: its optimizer and
        state dict read the same parameters as before."""
        models = self.facts.models
        for model in list(models):
            name = model.name
            if any(self._trains_with_gradients(call) for call in self.facts.calls_by_callee.get(name, ())):
                continue
            aliases = [alias for alias, assigned in self.facts.assigned_values.items()
                       if alias != name and len(assigned) == 1 and (self._moved_alias_of(assigned[0], name, model)
                                                                    or self._alias_moved_later(alias, name, model))]
            if len(aliases) != 1 or not self._called_in_training(aliases[0], model.function):
                continue
            if any(other.name == aliases[0] and other.function is model.function for other in models):
                models.remove(model)
            else:
                models[models.index(model)] = Model(aliases[0], model.optimizer_statement, model.function)

    def _called_in_training(self, name: str, function: Optional[cst.FunctionDef]) -> bool:
        """`name(x)` in a training loop with gradients on, in `function` or in a function of
        this file it is handed to (`train_one_epoch(model, ...)` whose parameter is called so);
        for `self.model`, in any method of the class of `function`."""
        owner = self.facts.class_of(function) if name.startswith("self.") else None
        if any(self._trains_with_gradients(call) and (
                self.facts.function_of(call) is function
                or owner is not None and self.facts.class_of(self.facts.function_of(call)) is owner)
               for call in self.facts.calls_by_callee.get(name, ())):
            return True
        return any(self._trains_with_gradients(call) and self.facts.function_of(call) is callee
                   for callee, parameter, _ in self.facts._calls_passing(name, function)
                   for call in self.facts.calls_by_callee.get(parameter, ()))

    def _moved_alias_of(self, value: cst.BaseExpression, name: str, model: Model) -> bool:
        """`name.to(device)`, `torch.compile(name.to(device))`, `torch.compile(name).cuda()`,
        `name.to(device).train()` or `name.cuda() if use_cuda else name`, in the model's
        function: the same module (or its compiled view), moved on some path."""
        if self.facts.function_of(value) is not model.function:
            return False
        branches = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        found = [self._module_moved_in(branch) for branch in branches]
        return all(module == name for module, _ in found) and any(moved for _, moved in found)

    def _alias_moved_later(self, alias: str, name: str, model: Model) -> bool:
        """`model = net` in the model's function, then `model.to(device)`: the alias is what
        reaches the device (and, where the loop calls it, what trains)."""
        value = self.facts.assigned_values[alias][0]
        return (dotted_name(value) == name and self.facts.function_of(value) is model.function
                and not self.facts.device_moves.get(name)
                and any(self.facts.function_of(move) is model.function
                        for move in self.facts.device_moves.get(alias, ())))

    def _module_moved_in(self, value: cst.BaseExpression) -> tuple[Optional[str], bool]:
        """The name `value` holds the same module as, and whether a device move is on the way."""
        moved = False
        while isinstance(value, cst.Call):
            if isinstance(value.func, cst.Attribute) and value.func.attr.value in _SAME_MODULE_METHODS:
                moved = moved or value.func.attr.value in ("to", "cuda")
                value = value.func.value
            elif "torch.compile" in self._qualified(value.func) and value.args and value.args[0].keyword is None:
                value = value.args[0].value
            else:
                return None, False
        return dotted_name(value), moved

    def _holders_trained(self, name: str, function: Optional[cst.FunctionDef]) -> list[str]:
        """The names assigned once, in `function`, a module built with `name` as an argument
        (`Holder(name, ...)`, optionally `.to(device)` where it is made), which reach their
        device and are called in a training loop outside no_grad. Not torch's own wrappers or
        copies (`DataParallel(model)`, `torch.compile(model)`, `copy.deepcopy(model)`)."""
        found = []
        for holder, assigned in self.facts.assigned_values.items():
            # `if args.parallel: trainer = nn.DataParallel(trainer)` is the holder again.
            values = [value for value in assigned if not self._data_parallel_of(value, holder)]
            if holder == name or len(values) != 1 or not isinstance(values[0], cst.Call):
                continue
            value = values[0]
            built = value.func.value if isinstance(value.func, cst.Attribute) and value.func.attr.value in (
                "to", "cuda") else value
            if not isinstance(built, cst.Call) or self.facts.function_of(value) is not function or not any(
                    dotted_name(argument.value) == name for argument in built.args):
                continue
            if any(q.startswith(("torch.", "copy.")) for q in self._qualified(built.func)):
                continue
            if built is value and not self.facts.device_moves.get(holder):
                continue
            if any(self._trains_with_gradients(call) for call in self.facts.calls_by_callee.get(holder, ())):
                found.append(holder)
        return found

    def _data_parallel_of(self, value: cst.BaseExpression, name: str) -> bool:
        """`nn.DataParallel(name, ...)`."""
        return isinstance(value, cst.Call) and bool(self._qualified(value.func) & names.DATA_PARALLEL) and bool(
            value.args) and dotted_name(value.args[0].value) == name

    def _trains_with_gradients(self, call: cst.Call) -> bool:
        """The call sits in a training loop and no no_grad block around it."""
        if not any(loop in self.facts.training_loops for loop in self.facts.enclosing_loops(call)):
            return False
        parent = self.parents.get(call)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.With) and self._without_grad(parent):
                return False
            parent = self.parents.get(parent)
        return True

    def _built_on_its_device(self, name: str) -> bool:
        """`model = SRCNN().to(device)`: every value of the name is moved where it is made."""
        values = self.facts.assigned_values.get(name, [])
        return bool(values) and all(
            isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("to", "cuda") and isinstance(value.func.value, cst.Call)
            for value in values)

    def _note_optimizer_made_elsewhere(self, node: cst.Call, qualified: str) -> None:
        """`optimizer = util.set_optimizer(opt, model)`: a function of the project builds the
        optimizer over the model it is handed, which is a model here."""
        trained_positional, trained = self.project.optimizer_parameters(qualified)
        names: list[Optional[str]] = []
        for parameter in sorted(trained):
            value = argument_for(node, parameter, trained_positional.index(parameter)
                                 if parameter in trained_positional else None)
            if value is None:
                continue
            value = self._model_of_parameters(value)
            names.append(dotted_name(value))
            if names[-1] is None:
                self._note_model_handed_unnamed(node, qualified, parameter, value)
        # `Trainer(model, loader)` whose __init__ keeps `self.model = model` and builds the
        # optimizer over `self.model.parameters()`: the model is wrapped here, after its move.
        kept_positional, kept = self.project.kept_and_trained_parameters(qualified)
        assign = self.parents.get(node)
        instance = dotted_name(assign.targets[0].target) if isinstance(assign, cst.Assign) and len(
            assign.targets) == 1 and assign.value is node else None
        for parameter, attribute in sorted(kept.items()):
            value = argument_for(node, parameter, kept_positional.index(parameter)
                                 if parameter in kept_positional else None)
            name = dotted_name(value) if value is not None else None
            names.append(name)
            if value is not None and name is None:
                self._note_model_handed_unnamed(node, qualified, parameter, value)
            if name is not None and instance is not None:
                # `trainer.model` outside the class holds the wrapper too.
                self.facts.kept_on_instances.setdefault(name, []).append(f"{instance}.{attribute}")
        for name in names:
            if name is not None and all(model.name != name for model in self.facts.models):
                self._note_training()
                self.facts.models.append(Model(name, self._statement(node), self._function()))

    @staticmethod
    def _model_of_parameters(value: cst.BaseExpression) -> cst.BaseExpression:
        """`model.parameters()`, or `filter(lambda p: p.requires_grad, model.parameters())`,
        handed to a function that builds the optimizer over what it is given: the model."""
        owners = [call.func.value for call in calls_within(value) if isinstance(call.func, cst.Attribute)
                  and call.func.attr.value in ("parameters", "named_parameters") and dotted_name(call.func.value)]
        if isinstance(value, cst.Call) and owners and len({dotted_name(owner) for owner in owners}) == 1:
            return owners[0]
        return value

    def _note_model_handed_unnamed(self, node: cst.Call, qualified: str, parameter: str,
                                   value: cst.BaseExpression) -> None:
        """Rule: `fit(model.to(device), loader)` (or `fit(Net(), ...)`), where `fit`, in another
        module of the project, builds the optimizer over what it is handed and moves none of
        it: the caller wraps a model it names, after its move and before the hand-off; a value
        made or moved inside the call has no statement between the two for the wrap. Not
        wrapping would let every rank train its own copy: reported (DDP903) rather than exit 0."""
        _, moved = self.project.moved_parameters(qualified)
        if parameter in moved or self.project.moves_own_model(qualified):
            return  # moved there, and wrapped there after that move
        self.facts.models_handed_unnamed.append((node, value))

    def _note_files_and_numbers(self, node: cst.Call, qualified: str) -> None:
        """A call of a function of another module of the project that loads a checkpoint,
        writes files, or returns a Python number on every return (wherever it is called:
        `top1.update(accuracy(out, y), n)`, `correct += metrics.count(out, y)`)."""
        if self.project.loads_checkpoint(qualified):
            self.facts.helper_load_calls.append(node)
        if self.project.writes_files(qualified):
            self.facts.helper_write_calls.append(node)
        if self.project.downloads(qualified):
            self.facts.helper_download_calls.append(node)
        if self.project.returns_python_numbers(qualified):
            self.facts.number_functions.add(dotted_name(node.func) or "")

    def _note_helper(self, node: cst.Call, qualified: str) -> None:
        if self.project.defines(qualified):
            self.facts.project_calls.add(node)
            picked_there = self.project.picked_from_own_batches(qualified)
            if picked_there:
                self.facts.calls_returning_picked[node] = picked_there
            self._note_class_parts(node, qualified)
            if self.project.moves_returned(qualified):
                self.facts.calls_returning_moved.add(node)
            if self.project.returns_data_parallel(qualified):
                self.facts.calls_returning_data_parallel.add(node)
            if self.project.class_never_freezing(qualified):
                self.facts.builds_never_frozen.add(node)
            slot = self.project.returned_tracker(qualified)
            if slot is not None:
                self.facts.calls_returning_trackers.append((node, slot))
            if not self.project.trains(qualified):
                self._note_moved_in_place(node, qualified)
                self._note_evaluated_arguments(node, qualified)
            self._note_files_and_numbers(node, qualified)
            positional, run_in_part = self.project.parameters_run_in_part(qualified)
            if run_in_part:
                self.facts.helper_part_runs[node] = (positional, run_in_part)
            self._note_state_handed(node, qualified)
            self._note_grad_changes(node, qualified)
            clock = self.project.names_from_clock(qualified)
            if clock is not None:
                self.facts.clock_named_calls[node] = (qualified, *clock)
        self._note_optimizer_made_elsewhere(node, qualified)
        if self.project.trains(qualified):
            # `engine.train_one_epoch(model, loader, optimizer)`: the steps are in there.
            self.facts.training_helper_calls.append(node)
            self._note_training()
        effect = self.project.effect(qualified)
        if effect is not None:
            self._record_helper(node, qualified, effect)
        else:
            self._note_opaque_attribute_reads(node, qualified)

    def _note_opaque_attribute_reads(self, node: cst.Call, qualified: str) -> None:
        """An effect ddpify cannot tell: a model it only reads attributes of gets the raw module."""
        if self.project.defines(qualified):
            readers = self.project.attribute_only_readers(qualified, names.WRAPPER_ATTRIBUTES)
            if readers:
                self.facts.opaque_attribute_readers[node] = readers

    def _note_class_parts(self, node: cst.Call, qualified: str) -> None:
        """A class of another module built here: its submodules no step gives a gradient,
        and the submodules each output of its forward comes from, by the name it is called by."""
        called = dotted_name(node.func)
        if called is None:
            return
        gradless = self.project.gradless_submodules(qualified)
        if gradless:
            self.facts.gradless_project_classes[called] = gradless
        lazy = self.project.lazy_layer(qualified)
        if lazy is not None:
            self.facts.lazy_project_classes[called] = lazy
        kept = self.project.kept_copy(qualified) if node.args else None
        if kept is not None:
            self.facts.project_copies[called] = kept
        outputs = self.project.forward_output_parts(qualified)
        if outputs:
            self.facts.forward_output_parts[called] = outputs

    def _note_moved_in_place(self, node: cst.Call, qualified: str) -> None:
        """`init_and_move(model, device)` whose body runs `net.to(device)`: a module moves in
        place, so the caller's model is on its device after the call, and the wrap follows it;
        `to_device([enc, dec], device)` whose body moves each element it is handed, the same."""
        positional, moved = self.project.moved_parameters(qualified)
        for parameter in sorted(moved):
            value = argument_among(node, parameter, positional)
            name = dotted_name(value) if value is not None else None
            if name is not None and self._is_statement_call(node):
                self.facts.moved_by_helpers.setdefault(name, []).append(node)
                self._touch(name, node)
        positional, moved = self.project.element_moved_parameters(qualified)
        for parameter in sorted(moved):
            value = argument_among(node, parameter, positional)
            for name in literal_elements(value) if value is not None else []:
                self.facts.moved_by_helpers.setdefault(name, []).append(node)
                self._touch(name, node)

    def _note_state_handed(self, node: cst.Call, qualified: str) -> None:
        """The arguments whose state dict the helper loads or reads (Project.state_loaded_parameters)."""
        positional, loaded = self.project.state_loaded_parameters(qualified)
        for parameter in sorted(loaded):
            value = argument_among(node, parameter, positional)
            if value is not None and value not in self.facts.helper_state_loads.get(node, ()):
                self.facts.helper_state_loads.setdefault(node, []).append(value)

    def _note_grad_changes(self, node: cst.Call, qualified: str) -> None:
        """What a function or method of another module changes requires_grad of, by the
        values this call hands it (the object itself for a method's `self`)."""
        positional, changed = self.project.grad_changed_parameters(qualified)
        for parameter, part_only in sorted(changed.items()):
            if parameter == "self" and isinstance(node.func, cst.Attribute):
                value: Optional[cst.BaseExpression] = node.func.value
            else:
                value = argument_among(node, parameter, positional)
            if value is not None:
                self.facts.helper_grad_changes.setdefault(node, []).append((value, part_only))
                self.facts.freezes_parameters = True
                self.facts.frozen_receivers.append(self._frozen_receiver(value))

    def _record_helper(self, node: cst.Call, qualified: str, effect: str, guarded_there: Optional[bool] = None
                       ) -> None:
        self.facts.helper_effects[node] = effect
        if effect in (effects.SPEAKS, effects.WRITES) and (
                self.project.guards_own_output(qualified) if guarded_there is None else guarded_there):
            self.facts.guarded_in_helper.add(node)
        if effect == effects.MIXED:
            self.facts.helper_attribute_readers[node] = self.project.attribute_readers(
                qualified, names.WRAPPER_ATTRIBUTES)
        statement = self._statement(node) if self._is_statement_call(node) else None
        self.helper_calls[node] = (qualified, statement)

    def note_helper_methods(self) -> None:
        """`progress.display(i)` where every `progress = ProgressMeter(...)` makes an object
        of a class of the project's modules: the effect of ProgressMeter.display."""
        self._note_chained_training_calls()
        for callee, calls in self.facts.calls_by_callee.items():
            methods = self._methods_of_project_objects(callee)
            if any(self.project.writes_files(name) for name in methods):
                self.facts.helper_write_calls.extend(calls)
            values = self._objects_made_for(callee.rpartition(".")[0])
            if methods and any(self.project.trains(name) for name in methods) and all(
                    self.project.trains(name) or self.project.defines(name) for name in methods):
                # `solver.train()` on a Solver of another module: the steps are in there,
                # on what its constructor was handed. (`exp.train(setting)` where one of the
                # classes `Exp` may be inherits a `train` that does nothing, read in the
                # project all the same: the call trains on the other paths, and is followed.)
                signatures = {tuple(self.project.iterated_parameters(name)[0]) for name in methods}
                for call in calls:
                    self.facts.training_helper_calls.append(call)
                    self.training_tops.add(cast(cst.CSTNode, self.facts.ancestor_in(call, self.facts.module)))
                    if len(signatures) == 1:
                        self.facts.method_parameters[call] = list(next(iter(signatures)))
                self.training_constructors.extend(cast(cst.Call, value) for value in values)
                continue
            if any(self.project.trains(name) for name in methods):
                # `trainer = Trainer(...)` on one path, `OtherTrainer(...)` that no module of
                # the project defines on another: whether this call trains depends on the path.
                self.facts.partly_followed_training.extend(calls)
                continue
            self._note_method_calls(callee, calls, methods)

    def _note_method_calls(self, callee: str, calls: list[cst.Call], methods: list[str]) -> None:
        """What calls of a method of a project object (none of which trains) hand over and do:
        state dicts read, requires_grad changed, printing or writing."""
        if len(set(methods)) == 1:
            for call in calls:
                self._note_state_handed(call, methods[0])
        for call in calls:
            for name in sorted(set(methods)):
                self._note_grad_changes(call, name)
        found = {self.project.effect(name) for name in methods}
        if len(found) != 1 or None in found:
            return
        effect = cast(str, found.pop())
        guarded_there = all(self.project.guards_own_output(name) for name in methods)
        for call in calls:
            if call not in self.facts.helper_effects:
                # (An object called by its bare name goes by its method's full name.)
                self._record_helper(call, callee if "." in callee else methods[0], effect, guarded_there)

    def note_models_handed_to_training(self) -> None:
        """`Trainer(model, ...)` or `train(model, loader, ...)` of another module of the
        project, which trains what it is handed and builds no optimizer of its own: the
        model is wrapped here, where it reaches its device. A module is a value whose
        parameters or modes the script reads (`model.parameters()`, `model.train()`)."""
        known = {model.name for model in self.facts.models}
        for call in [*self.training_constructors, *self.facts.training_helper_calls]:
            self._note_iterated_arguments(call)
            self._note_models_moved_by(call)
            if any(self.project.builds_optimizer(q) for q in self._classes_constructed(call.func)):
                self.facts.helpers_build_optimizer = True
                continue
            methods = self._methods_of_project_objects(dotted_name(call.func) or "")
            if methods and any(self.project.builds_optimizer(method) for method in methods):
                self.facts.helpers_build_optimizer = True
                self._note_models_a_method_trains(call, methods, known)
                continue
            for arg in call.args:
                name = dotted_name(arg.value) if not arg.star else None
                if name is None or name in known or not self._is_module(name):
                    continue
                known.add(name)
                self.facts.models.append(Model(name, self.facts.statement_of(call), self.facts.function_of(call)))

    def _note_models_a_method_trains(self, call: cst.Call, methods: list[str], known: set[str]) -> None:
        """Rule: `trainer.fit(model, loader)` where every `trainer` is an object of a class of
        another module of the project whose `fit` builds the optimizer over the `model` it is
        handed (and moves none of it): as for a function of the project
        (_note_optimizer_made_elsewhere), the caller wraps the model it names, after its
        move and before the hand-off; one moved inside the call is reported."""
        for method in sorted(set(methods)):
            positional, trained = self.project.optimizer_parameters(method)
            _, moved = self.project.moved_parameters(method)
            for parameter in sorted(trained - moved):
                value = argument_among(call, parameter, positional)
                if value is None:
                    continue
                name = dotted_name(value)
                if name is None:
                    self._note_model_handed_unnamed(call, method, parameter, value)
                elif name not in known:
                    known.add(name)
                    self.facts.models.append(Model(name, self.facts.statement_of(call), self.facts.function_of(call)))

    def _note_evaluated_arguments(self, call: cst.Call, qualified: str) -> None:
        """The arguments a function of another module of the project evaluates over."""
        positional, evaluated = self.project.evaluated_parameters(qualified)
        for parameter in sorted(evaluated):
            value = argument_among(call, parameter, positional)
            if value is not None:
                self.facts.loaders_evaluated_elsewhere.setdefault(call, []).append(value)

    def _note_iterated_arguments(self, call: cst.Call) -> None:
        """The arguments a training function or Trainer of the project loops over."""
        for qualified in sorted(self._qualified(call.func)):
            positional, iterated = self.project.iterated_parameters(qualified)
            for parameter in sorted(iterated):
                value = argument_among(call, parameter, positional)
                if value is not None:
                    self.facts.iterated_arguments.setdefault(call, []).append(value)
            positional, entries = self.project.iterated_entries(qualified)
            for parameter, key in sorted(entries):
                value = argument_among(call, parameter, positional)
                if value is not None:
                    self.facts.iterated_entries.setdefault(call, []).append((value, key))

    def _note_models_moved_by(self, call: cst.Call) -> None:
        """`SimCLR(model=model, ...)` whose __init__ moves the model to its device: the wrap
        belongs after that move, in that module, not here."""
        for qualified in self._classes_constructed(call.func):
            if self.project.moves_own_model(qualified):
                self.facts.helpers_move_models = True  # `self.model = Net().to(device)`: wrapped there
            positional, moved = self.project.moved_parameters(qualified)
            if not moved:
                continue
            self.facts.helpers_move_models = True
            index = 0
            for arg in call.args:
                if arg.star:
                    continue
                parameter = arg.keyword.value if arg.keyword is not None else (
                    positional[index] if index < len(positional) else None)
                index += arg.keyword is None
                name = dotted_name(arg.value)
                if parameter in moved and name is not None:
                    self.facts.models_moved_elsewhere.add(name)

    def _is_module(self, name: str) -> bool:
        # `model.train()`, not `config.train.lr`: a module's method, called.
        return any(read.attr.value in effects.MODULE_ONLY_METHODS
                   and getattr(self.parents.get(read), "func", None) is read
                   for read in self.facts.attribute_reads.get(name, ()))

    def note_generators_over_loaders(self) -> None:
        """Rule: `batches = endless(loader)` (or `self.data = self.get_infinite_batches(
        loader)`) where the function is a generator of this file that passes over its
        parameter again and again (`while True: for x, _ in loader: yield x`): `batches`
        wraps the loader, as `iter(loader)` would, so the steps that draw from it with next()
        train on the loader; each pass of the generator's own loop is an epoch."""
        for target, values in self.facts.assigned_values.items():
            for value in values:
                if not isinstance(value, cst.Call):
                    continue
                generator = self._generator_called(value)
                if generator is None:
                    continue
                function, parameter, passing = generator
                on_object = isinstance(value.func, cst.Attribute)
                positional = positional_parameters(function)[1 if on_object and self.facts.class_of(function) else 0:]
                argument = argument_among(value, parameter, positional)
                wrapped = dotted_name(argument) if argument is not None else None
                if wrapped is None:
                    continue
                self.iteration_wrappers[(self.facts.function_of(value), target)] = [wrapped]
                self.facts.generator_passes[value] = (passing, parameter)

    def _generator_called(self, call: cst.Call
                          ) -> Optional[tuple[cst.FunctionDef, str, Union[cst.For, cst.SimpleStatementLine]]]:
        """(the function, its parameter, the loop of each pass) for a call of a generator of
        this file whose body yields inside a `for` over one of its parameters, that loop
        inside a `while` (endless: the generator starts a new pass when one ends); or whose
        `while` yields from the parameter (`while True: yield from loader`), that statement
        being each pass."""
        callee = dotted_name(call.func)
        function = self.facts.functions.get(callee) if callee is not None else None
        if function is None and isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == "self":
            function = self.facts.functions.get(f"self.{call.func.attr.value}")
        if function is None:
            return None
        parameters = set(parameter_names(function))
        for loop in find_all(function.body, cst.For, into_functions=False):
            iterated = self._iterated_names(loop.iter)
            if len(iterated) != 1 or iterated[0] not in parameters:
                continue
            if not find_all(loop.body, cst.Yield, into_functions=False):
                continue
            if any(isinstance(outer, cst.While) for outer in ancestors_up_to(self.parents, loop, function)):
                return function, iterated[0], loop
        for line in find_all(function.body, cst.SimpleStatementLine, into_functions=False):
            statement = line.body[0] if len(line.body) == 1 else None
            value = statement.value if isinstance(statement, cst.Expr) else None
            if isinstance(value, cst.Yield) and isinstance(value.value, cst.From) and isinstance(
                    value.value.item, cst.Name) and value.value.item.value in parameters and any(
                    isinstance(outer, cst.While) for outer in ancestors_up_to(self.parents, line, function)):
                return function, value.value.item.value, line
        return None

    def note_dynamic_imports(self) -> None:
        """`importlib.import_module(name)`, `__import__`, `sys.path` edits: a module chosen when
        the script runs. Left out when every name it can take is a string that names no
        module of the project (`for m in ["torch.utils.tensorboard", "tensorboardX"]`)."""
        for qualified in sorted(names.DYNAMIC_IMPORTS):
            for call in self.facts.calls_named.get(qualified, ()):
                if qualified_is_path_edit({qualified}) and self.project.follows_path_edit(self.facts.line_of(call)):
                    continue  # `sys.path.append('core')`: a folder of the project, followed
                if qualified_is_path_edit({qualified}) and self._path_edit_serves_other_packages(call):
                    continue
                loaded = self._strings_loaded_by(call)
                if loaded is None and not qualified_is_path_edit(self._qualified(call.func)) \
                        and self._loads_only_definitions(call):
                    continue
                if loaded is None or any(self.project.has_module(name) for name in loaded):
                    self.facts.dynamic_imports.append(call)
        # `import _init_paths`: a module of the project imported for the folder it puts on
        # sys.path (HRNet's `osp.join(this_dir, '..', 'lib')`), one ddpify does not follow.
        for statement in self.facts.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Import) and any(
                            self.project.edits_path_out_of_view(dotted_name(alias.name) or "")
                            for alias in small.names):
                        self.facts.dynamic_imports.append(small)

    def _path_edit_serves_other_packages(self, call: cst.Call) -> bool:
        """Rule: a folder put on sys.path (`sys.path.append(osp.join(root, COCO_API))`) for the
        imports right after it (`from pycocotools.coco import COCO`), when none of them can
        load a file of the project: no file or folder of the project has their names. The
        folder holds another package, nothing ddpify would migrate. Without imports after it,
        or with one the project could answer, it still needs a person (DDP909)."""
        statement = self.parents.get(self.parents.get(call) or call)
        block = self.parents.get(statement) if isinstance(statement, cst.SimpleStatementLine) else None
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return False
        following = list(block.body)[list(block.body).index(cast(cst.SimpleStatementLine, statement)) + 1:]
        imported = [alias.name for line in following if isinstance(line, cst.SimpleStatementLine)
                    for small in line.body if isinstance(small, cst.Import) for alias in small.names]
        imported += [small.module for line in following if isinstance(line, cst.SimpleStatementLine)
                     for small in line.body if isinstance(small, cst.ImportFrom) and not small.relative
                     and small.module is not None]
        tops = {(dotted_name(name) or "").partition(".")[0] for name in imported}
        return bool(tops) and "" not in tops and all(self.project.names_a_file_or_folder(top) is False for top in tops)

    def _loads_only_definitions(self, call: cst.Call) -> bool:
        """Rule: an import by a name the code builds from a package's name (`"models." +
        args.model`, a table of `f"{models_dir}.{name}"` read by a lazy dict) loads one of that
        package's modules; when each of them only defines (a model class: nothing in it
        trains or writes a file), which one the command line picks changes nothing ddpify
        migrates: the model it builds is wrapped where it reaches its device, whatever its
        class. A registry of trainers or agents still needs a person (DDP909)."""
        names = LoadedNames(self.facts.module, self.parents, self.project.module).loaded_by(call)
        if not names:
            return False
        for name in names:
            modules = self.project.modules_named_from(name.value) if name.open else [name.value]
            if not modules or not all(self.project.module_is_definitions(module) for module in modules):
                return False
        return True

    def _strings_loaded_by(self, call: cst.Call) -> Optional[list[str]]:
        if not call.args or qualified_is_path_edit(self._qualified(call.func)):
            return None
        value = call.args[0].value
        if isinstance(value, cst.SimpleString):
            return [cast(str, value.evaluated_value)]
        name = dotted_name(value)
        parent = self.parents.get(call)
        while name is not None and parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.For) and dotted_name(parent.target) == name and isinstance(
                    parent.iter, (cst.List, cst.Tuple)) and all(
                    isinstance(element.value, cst.SimpleString) for element in parent.iter.elements):
                return [cast(str, cast(cst.SimpleString, element.value).evaluated_value)
                        for element in parent.iter.elements]
            parent = self.parents.get(parent)
        return None

    def _note_chained_training_calls(self) -> None:
        """`Trainer(model, opt).fit(loader)`: the object is made and trained in one line."""
        for call in self.chained_calls:
            func = cast(cst.Attribute, call.func)
            made = cast(cst.Call, func.value)
            methods = [f"{qualified}.{func.attr.value}" for qualified in self._qualified(made.func)]
            if any(self.project.writes_files(name) for name in methods):
                self.facts.helper_write_calls.append(call)
            if methods and all(self.project.trains(name) for name in methods):
                self.facts.training_helper_calls.append(call)
                self.training_tops.add(cast(cst.CSTNode, self.facts.ancestor_in(call, self.facts.module)))
                self.training_constructors.append(made)

    def _is_statement_call(self, node: cst.Call) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, cst.Expr)

    def _is_optimizer(self, node: cst.Call) -> bool:
        return self._optimizer_class(node.func, chosen_before=True) or self._wraps_a_base_optimizer(node) \
            or self._optimizer_built_by_a_factory(node) is not None

    def _optimizer_built_by_a_factory(self, node: cst.Call) -> Optional[cst.BaseExpression]:
        """Rule: `get_instance(torch.optim, "optimizer", config, trainable_params)`, where this
        file defines `def get_instance(module, name, config, *args): return getattr(module,
        config[name]["type"])(*args, **config[name]["args"])` (the pytorch-template family's
        factory, and its copies in Trainers): a call handing torch.optim to the module the
        factory picks its class from builds an optimizer, over the first value the call hands
        on through `*args`. That value; None for any other call (the same factory building a
        model from `models` or a loader from `dataloaders` is no optimizer)."""
        if not isinstance(node.func, cst.Name) or node.func.value not in self.facts.functions:
            return None
        name = node.func.value
        if name not in self._class_factories:
            self._class_factories[name] = class_factory_parameters(self.facts.functions[name])
        picked = self._class_factories[name]
        if picked is None:
            return None
        module, fixed = picked
        handed = argument_among(node, module, positional_parameters(self.facts.functions[name]))
        if handed is None or not any(names.is_optimizer_module(q) for q in self._qualified(handed)):
            return None
        positional = positional_args(node)
        return positional[fixed] if len(positional) > fixed else None

    def _wraps_a_base_optimizer(self, node: cst.Call) -> bool:
        """Rule: a call handed a model's parameters and a torch.optim class to step them with
        (`SAM(model.parameters(), base_optimizer, rho=2.0)` after `base_optimizer =
        torch.optim.SGD`, ASAM, GSAM): an optimizer of its own over that model."""
        first = argument_for(node, "params", 0)
        if first is None or not any(isinstance(call.func, cst.Attribute) and call.func.attr.value in (
                "parameters", "named_parameters") for call in calls_within(first)):
            return False
        return any(arg.value is not first and self._optimizer_class(arg.value, chosen_before=True)
                   for arg in node.args)

    def _optimizer_class(self, value: cst.BaseExpression, chosen_before: bool = False, depth: int = 0) -> bool:
        """A class of torch.optim: named (`optim.Adam`), picked by name (`getattr(torch.optim,
        cfg.name)`), by a test (`SGD if momentum else Adam`), by a function of the project that
        returns one (`get_optimizer(cfg)`, here or in another module), or, for the callee of an
        optimizer call, a name every assignment of which is one of these (`optimizer_cls =
        get_optimizer(cfg)`)."""
        if any(names.is_optimizer_class(q) for q in self._qualified(value)):
            return True
        if isinstance(value, cst.IfExp):
            return self._optimizer_class(value.body, depth=depth) and self._optimizer_class(value.orelse, depth=depth)
        if isinstance(value, cst.Call):
            if isinstance(value.func, cst.Name) and value.func.value == "getattr" and value.args:
                return any(names.is_optimizer_module(q) for q in self._qualified(value.args[0].value))
            own = self.facts.functions.get(value.func.value) if isinstance(value.func, cst.Name) else None
            if own is not None and depth < 2:
                returned = [each.value for each in find_all(own.body, cst.Return, into_functions=False)]
                return bool(returned) and all(each is not None and self._optimizer_class(each, depth=depth + 1)
                                              for each in returned)
            return any(self.project.returns_optimizer_class(q) for q in self._qualified(value.func))
        if chosen_before and isinstance(value, cst.Name):
            if self._parameter_defaulting_to_optimizer(value.value):
                return True
            values = self.facts.assigned_values.get(value.value, [])
            return bool(values) and all(self._optimizer_class(each, depth=depth) for each in values)
        return False

    def _parameter_defaulting_to_optimizer(self, name: str) -> bool:
        """Rule: `def fit(epochs, lr, model, ..., opt_func=torch.optim.SGD)` then
        `opt_func(model.parameters(), lr)`: a parameter whose default is a torch.optim class is
        called as one (the "Zero to GANs" course's fit, its Kaggle copies); the call is an
        optimizer whatever class a caller hands (`fit(..., torch.optim.Adam)`)."""
        function = self._function()
        if function is None or self.facts.assigned_values.get(name):
            return False
        params = function.params
        return any(param.name.value == name and param.default is not None
                   and self._optimizer_class(param.default, depth=2)
                   for param in (*params.params, *params.kwonly_params))

    def _model_known(self, name: str) -> bool:
        """Rule: a model of this name is already known here. Two functions that each bind
        their own `model` (`pretrain()` and `finetune()`, each building a network and its
        optimizer) train two objects: each is a model of its own, wrapped where it reaches its
        device. A function reading a module-level model or handed one as a parameter, or the
        same function again, may hold the same model."""
        function = self._function()
        return any(model.name == name and (model.function is function or not (
            self._builds_its_own(function, name) and self._builds_its_own(model.function, name)))
            for model in self.facts.models)

    def _builds_its_own(self, function: Optional[cst.FunctionDef], name: str) -> bool:
        """The function assigns `name` itself: not a parameter, which may be handed the
        caller's model, nor a module-level name it reads."""
        return function is not None and self.facts.binds_locally(function, name) \
            and name not in parameter_names(function)

    def _record_optimizer(self, node: cst.Call) -> None:
        if self._top is not None:
            self._optimizers_made.append((node, self._top))
        assign = self.parents.get(node)
        if isinstance(assign, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            self.facts.optimizer_names.update(name for name in map(dotted_name, targets) if name is not None)
        positional = positional_args(node)
        params = keyword_args(node).get("params")
        first = params.value if params is not None else (positional[0] if positional else None)
        first = self._optimizer_built_by_a_factory(node) or first
        # `Adam(model.parameters())` names the model; parameter groups and filters are
        # searched for the same `X.parameters()` call inside them, also through the names
        # they were built in (`params = [p for n, p in model.named_parameters() if ...]`).
        named = False
        values = self._values_of(first)
        for call in calls_within(first) + self._calls_in_values_of(first) + self._parameters_collected_in(first):
            if isinstance(call.func, cst.Attribute) and (call.func.attr.value in ("parameters", "named_parameters")
                                                         or self._hands_out_parameters(call)):
                model = dotted_name(call.func.value)
                named = named or model is not None
                elements = self._modules_looped_over(call, model, [first, *values]) if model and first else None
                collection = self._loop_collection(call, model, [first, *values]) if model and first else None
                if elements is None and collection is not None and model and not self._bound_by_a_for_statement(model):
                    # `*[c.parameters() for c in criteria[1:]]`, `c` bound by comprehensions
                    # alone: no statement could take a wrap of it, and the collection's modules
                    # cannot be named; rules/model.py reports them. (A `for name, m in
                    # models.items():` loop that moves each takes the wraps: rules/model.py.)
                    self.facts.optimized_collections.append((node, collection))
                    continue
                for each in elements or ([model] if model else []):
                    if each != "self" and not self._model_known(each):
                        self.facts.models.append(Model(each, self._statement(node), self._function()))
            elif (walked := self._module_walked_by_own_function(call)) is not None:
                named = True
                if all(m.name != walked for m in self.facts.models):
                    self.facts.models.append(Model(walked, self._statement(node), self._function()))
        if self._over_own_parameters(node):
            # `def configure_optimizers(self)`: whoever calls it holds the model.
            self.self_optimizer_methods.add(cast(cst.FunctionDef, self._function()).name.value)
        elif not named:
            self.facts.optimizers_without_model.append(node)

    def _module_walked_by_own_function(self, call: cst.Call) -> Optional[str]:
        """Rule: `get_params(model.module, key="1x")`, a function of this file that walks the
        module handed to it (`for name, m in model.named_modules(): ... yield m.weight`), hands
        out that module's parameters: the optimizer trains it (a DataParallel's `.module`,
        `getattr(model, "module", model)`, is the model itself). The module's name, or None."""
        function = self.facts.functions.get(call.func.value) if isinstance(call.func, cst.Name) else None
        if function is None:
            return self._module_walked_by_project_function(call)
        walks = {dotted_name(each.func.value) for each in calls_within(function.body)
                 if isinstance(each.func, cst.Attribute) and each.func.attr.value in MODULE_WALKS}
        for parameter in positional_parameters(function):
            handed = argument_among(call, parameter, positional_parameters(function))
            if parameter in walks and handed is not None:
                return _unwrapped_name(handed)
        return None

    def _module_walked_by_project_function(self, call: cst.Call) -> Optional[str]:
        """Rule: the same for a function of another module of the project
        (`pg = get_params_groups(model, weight_decay=args.wd)` from utils.py, which fills
        decay / no-decay groups from `model.named_parameters()`): the optimizer trains the
        module handed at the walked parameter."""
        for qualified in self._qualified(call.func):
            positional, walked = self.project.walked_parameters(qualified)
            for parameter in positional:
                handed = argument_among(call, parameter, positional)
                if parameter in walked and handed is not None:
                    return _unwrapped_name(handed)
        return None

    def _hands_out_parameters(self, call: cst.Call) -> bool:
        """`model.get_1x_lr_params()` where every `model = DeepLab(...)` makes an object of a
        class of another module of the project whose method hands out its parameters."""
        methods = self._methods_of_project_objects(dotted_name(call.func) or "")
        return bool(methods) and all(self.project.hands_out_own_parameters(method) for method in methods)

    def _over_own_parameters(self, node: cst.Call) -> bool:
        """`configure_optimizers(self)` of a model class: groups built from
        `self.named_parameters()`. The object is the model, wrapped where it is used."""
        function = self._function()
        return function is not None and any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value in ("parameters", "named_parameters")
            and dotted_name(call.func.value) == "self" for call in calls_within(function.body))

    def _parameters_collected_in(self, node: Optional[cst.BaseExpression]) -> list[cst.Call]:
        """`for n, p in model.named_parameters(): decay.append(p)` then `SGD([{"params": decay},
        ...])`: the `X.parameters()` calls of the loops that fill a list the optimizer reads."""
        if node is None:
            return []
        wanted = set(names_within(node))
        found: list[cst.Call] = []
        for loop in self._loops_over_parameters:
            filled = {name for call in calls_within(loop.body)
                      if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("append", "extend")
                      for name in _lists_filled_by(call.func.value)}
            if filled & wanted:
                found.extend(call for call in calls_within(loop.iter) if isinstance(call.func, cst.Attribute)
                             and call.func.attr.value in ("parameters", "named_parameters"))
        return found

    def _values_of(self, node: Optional[cst.BaseExpression], depth: int = 0) -> list[cst.BaseExpression]:
        """What the names read by `node` were assigned so far (two levels)."""
        found: list[cst.BaseExpression] = []
        if node is None or depth > 1:
            return found
        for name in set(names_within(node)):
            for value in [*self.facts.assigned_values.get(name, ()), *self._values_added.get(name, ())]:
                found.append(value)
                found.extend(self._values_of(value, depth + 1))
        return found

    def _modules_looped_over(self, call: cst.Call, name: str, roots: list[cst.BaseExpression]
                             ) -> Optional[list[str]]:
        """Rule: an optimizer over the parameters of each module of a collection
        (`[p for m in models for p in m.parameters()]`, `itertools.chain(*(m.parameters() for
        m in models))`, `sum([list(m.parameters()) for m in (encoder, decoder)], [])`, or a
        loop `for m in models: params += list(m.parameters())`) trains the modules the
        collection holds: `models = [encoder, decoder]` names them. Their wraps may follow
        the optimizer, which holds the same parameter tensors as the wrapped modules. The
        names, or None when `name` is no loop variable over a collection of named modules."""
        for root in roots:
            comprehensions = [found for kind in COMPREHENSIONS for found in find_all(root, kind)]
            for comprehension in comprehensions:
                if call not in calls_within(comprehension):
                    continue
                for_in: Optional[cst.CompFor] = comprehension.for_in
                while for_in is not None:
                    if isinstance(for_in.target, cst.Name) and for_in.target.value == name:
                        return self._named_elements(for_in.iter)
                    for_in = for_in.inner_for_in
        node = self.parents.get(call)
        while node is not None:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and node.target.value == name:
                return self._named_elements(node.iter)
            node = self.parents.get(node)
        return None

    def _bound_by_a_for_statement(self, name: str) -> bool:
        """A `for` statement of this file binds `name` (`for name, module in models.items():`)."""
        return any(name in names_in(loop.target)
                   for loop in find_all(self.facts.module, cst.For))

    def _loop_collection(self, call: cst.Call, name: str, roots: list[cst.BaseExpression]
                         ) -> Optional[cst.BaseExpression]:
        """What `name` loops over, where it is the variable of a comprehension or loop around
        `call` (`[c.parameters() for c in criteria[1:]]` -> `criteria[1:]`); None otherwise."""
        for root in roots:
            for comprehension in (found for kind in COMPREHENSIONS for found in find_all(root, kind)):
                if call not in calls_within(comprehension):
                    continue
                for_in: Optional[cst.CompFor] = comprehension.for_in
                while for_in is not None:
                    if isinstance(for_in.target, cst.Name) and for_in.target.value == name:
                        return for_in.iter
                    for_in = for_in.inner_for_in
        node = self.parents.get(call)
        while node is not None:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and node.target.value == name:
                return node.iter
            node = self.parents.get(node)
        return None

    def _named_elements(self, collection: cst.BaseExpression, depth: int = 0) -> Optional[list[str]]:
        """`[encoder, decoder]`, `(G, D)`, `nets.values()` of `nets = {"G": G, "D": D}`, or a name
        assigned one such literal: the names it holds; None otherwise."""
        if isinstance(collection, (cst.List, cst.Tuple, cst.Set)):
            found = [dotted_name(element.value) for element in collection.elements
                     if isinstance(element, cst.Element)]
            return cast(list[str], found) if found and len(found) == len(collection.elements) and all(found) else None
        if isinstance(collection, cst.Dict):
            values = [dotted_name(element.value) for element in collection.elements
                      if isinstance(element, cst.DictElement)]
            return cast(list[str], values) if values and len(values) == len(collection.elements) and all(
                values) else None
        if isinstance(collection, cst.Call) and isinstance(collection.func, cst.Attribute) \
                and collection.func.attr.value == "values" and not collection.args:
            holder = dotted_name(collection.func.value)
            assigned = self.facts.assigned_values.get(holder or "", [])
            return self._named_elements(assigned[0]) if len(assigned) == 1 and isinstance(
                assigned[0], cst.Dict) and depth < 2 else None
        holder = dotted_name(collection)
        assigned = self.facts.assigned_values.get(holder or "", [])
        if len(assigned) == 1 and isinstance(assigned[0], (cst.List, cst.Tuple)) and depth < 2:
            return self._named_elements(assigned[0], depth + 1)
        return None

    def _calls_in_values_of(self, node: Optional[cst.BaseExpression], depth: int = 0) -> list[cst.Call]:
        """The calls in what the names read by `node` were assigned so far (two levels)."""
        found: list[cst.Call] = []
        if node is None or depth > 1:
            return found
        for name in set(names_within(node)):
            for value in [*self.facts.assigned_values.get(name, ()), *self._values_added.get(name, ())]:
                found.extend(calls_within(value))
                found.extend(self._calls_in_values_of(value, depth + 1))
        return found

    def _made_as_a_tensor(self, node: cst.BaseExpression, depth: int = 0) -> bool:
        """Rule: `delta.requires_grad = True` marks a tensor the script makes (an attack's
        perturbation, an input for a saliency map), no parameter: it freezes and unfreezes no
        model. A tensor made here is arithmetic (`x.detach() + 0.001 * noise`), a torch factory
        (`torch.zeros_like(X)`, `torch.randn(...)`), a copy (`.clone()`, `.detach()`), or one
        of those moved, filled or reshaped (`.uniform_(-e, e)`, `.to(device)`); a name bound
        only to such values (two levels)."""
        if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation)):
            return True
        if isinstance(node, cst.Call):
            if any(name.startswith("torch.") and name.rsplit(".", 1)[-1] in _TENSOR_FACTORIES
                   for name in self._qualified(node.func)):
                return True
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("clone", "detach"):
                return True
            return isinstance(node.func, cst.Attribute) and node.func.attr.value in _TENSOR_METHODS \
                and self._made_as_a_tensor(node.func.value, depth)
        if isinstance(node, cst.Name) and depth < 2:
            values = self.facts.assigned_values.get(node.value, [])
            return bool(values) and all(self._made_as_a_tensor(value, depth + 1) for value in values)
        return False

    def _backward_for_input_gradients(self, node: cst.Call) -> bool:
        """Rule: a backward trains only when an update of the parameters can follow. One whose
        outermost loop (or, outside any loop, its function or the module's own statements)
        steps nothing (no `.step(` call) and reads `.grad` only of tensors that its function
        marked as needing gradients (`x.requires_grad_()`, `x.requires_grad = True`,
        `torch.zeros(..., requires_grad=True)`) computes input gradients: an FGSM or PGD
        attack, a saliency map. It is no training step: its loop and loader are an
        evaluation's, and a script that does nothing else does not train."""
        function: cst.CSTNode = self._function() or self.facts.module
        region = function
        parent = self.parents.get(node)
        while parent is not None and parent is not function:
            if isinstance(parent, (cst.For, cst.While)):
                region = parent
            parent = self.parents.get(parent)
        if region not in self.input_gradient_scopes:
            self.input_gradient_scopes[region] = _reads_input_gradients_only(region, function)
        return self.input_gradient_scopes[region]

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        target = dotted_name(node.target)
        if target is not None and isinstance(node.operator, cst.AddAssign):
            self._values_added.setdefault(target, []).append(node.value)

    def _visit_method_call(self, node: cst.Call, func: cst.Attribute) -> None:
        method = func.attr.value
        receiver = dotted_name(func.value)
        if method in ("extend", "append") and receiver is not None and node.args:
            self._values_added.setdefault(receiver, []).append(node.args[0].value)
        if isinstance(func.value, cst.Call):
            self.chained_calls.append(node)
            self.facts.chained_calls.append(node)
        if method in ("backward", "step") and self._backward_for_input_gradients(node):
            pass  # an attack or a saliency map: no parameter is updated
        elif method == "backward" or (method == "step" and receiver and (
                "optim" in receiver or receiver in self.facts.optimizer_names)):
            self._note_training()
            self.training_calls.append(node)
            self._mark_training_loops(node)
        if receiver and self._is_statement_call(node):
            self._touch(receiver, node)
        if method == "requires_grad_" and not (not node.args or is_true(node.args[0].value)):
            self.facts.freezes_parameters = True  # (`requires_grad_()` is `requires_grad_(True)`)
            self.facts.frozen_receivers.append(self._frozen_receiver(func.value))
        if method == "requires_grad_" and self._is_statement_call(node):
            self._touch_model_of_part(func.value, node)
        if (method == "cuda" and not _follows_a_value(node) or (
            method == "to" and node.args and is_fixed_gpu(node.args[0].value)
        )) and not self._is_project_module(receiver):
            self.facts.fixed_device_moves.append(node)
        if method == "to" and node.args and any(self.project.names_fixed_gpu(qualified)
                                                for qualified in self._qualified(node.args[0].value)):
            self.facts.moves_to_imported_fixed_gpu.append(node)
        elif method == "to" and node.args and any(self.project.names_device_type(qualified)
                                                  for qualified in self._qualified(node.args[0].value)):
            self.facts.moves_to_imported_device_type.append(node)
        if method in ("to", "cpu", "cuda"):
            self._note_device_move(node, func)

    def _note_device_move(self, node: cst.Call, func: cst.Attribute) -> None:
        base = func.value
        # Only through calls that return the module itself (`model.eval().cpu()`),
        # never through its output (`model.decode(z).cpu()`); and through a DataParallel
        # wrapper (`nn.DataParallel(model).cuda()`): moving the wrapper moves the parameters
        # of the module it holds, so that branch is one more path on which the model reaches
        # the GPU (the wrapper itself is dropped by the migration, the move stays).
        while isinstance(base, cst.Call):
            if isinstance(base.func, cst.Attribute) and base.func.attr.value in _RETURNS_MODULE:
                base = base.func.value
            elif base.args and base.args[0].keyword is None and self._data_parallel_kind(base.func):
                base = base.args[0].value
            else:
                break
        moved = dotted_name(base)
        if moved is not None:
            self.facts.device_moves.setdefault(moved, []).append(node)
        if isinstance(base, cst.Name):
            self._note_element_moves(node, base.value)
        if isinstance(base, cst.Subscript) and isinstance(base.value, cst.Name) and len(base.slice) == 1 \
                and isinstance(base.slice[0].slice, cst.Index) and isinstance(base.slice[0].slice.value, cst.Name):
            self._note_keyed_moves(node, base.value.value, base.slice[0].slice.value.value)

    def _note_keyed_moves(self, node: cst.Call, container: str, key: str) -> None:
        """`for key in nets: nets[key].to(device)` over a dict built from plain names before the
        loop (`nets["G"] = G`): each of them is moved there."""
        loop = keyed_loop(self.parents, node, container, key)
        entries = gathered_elements(self.parents, loop, container, "values") if loop is not None else None
        for entry in entries or ():
            self._note_entry_move(entry, node)

    def _note_entry_move(self, entry: Entry, node: cst.Call) -> None:
        self.facts.device_moves.setdefault(entry.name, []).append(node)
        if entry.test is not None:
            self.facts.moved_under[(entry.name, node)] = (entry.test, entry.holds)

    def _note_element_moves(self, node: cst.Call, variable: str) -> None:
        """A move of a loop variable over `(G, D)` moves G and D (containers.iterated_elements);
        over a parameter of this function, the elements its callers hand in (note_element_movers)."""
        function = self._function()
        positional = [param.name.value for param in function.params.params] if function is not None else None
        gathered: dict[str, Entry] = {}
        for element in iterated_elements(self.parents, node, variable, positional,
                                         self._one_literal_in(function, gathered)):
            if element.startswith("#"):
                if function is not None and self.parents.get(function) is self.facts.module:
                    self._element_movers.setdefault(function.name.value, []).append((int(element[1:]), node))
            else:
                self._note_entry_move(gathered.get(element, Entry(element)), node)
        module = iterated_module(self.parents, node, variable)
        if module is not None:
            self._note_entry_move(Entry(module), node)

    def note_factories_returning_moved(self) -> None:
        """`G = build_g()` where a function of this file returns what it moved to a device
        (`m = Generator(); return m.cuda()`, `return Net().to(device)`): the model is on its
        device, as for a function of another module (Project.moves_returned), so it is wrapped
        with this rank's device_ids and the group is not the CPU's Gloo."""
        for statement in self.facts.module.body:
            if isinstance(statement, cst.FunctionDef) and self._returns_moved(statement) or isinstance(
                    statement, cst.ClassDef) and moves_itself(statement):
                # (A class whose __init__ moves the object itself, `self.to(device)`: each
                # `Net(device)` is made on its device, as `Net().to(device)` is.)
                self.facts.calls_returning_moved.update(self.facts.calls_by_callee.get(statement.name.value, ()))

    def note_moves_through_lambdas(self) -> None:
        """`move = lambda m: m.to(device)` (or `functools.partial(nn.Module.to, device=device)`)
        then `move(model)`, or `model.apply(lambda m: m.to(device))`: nn.Module.to moves in
        place, so the statement moves the model (the wrap follows it, with this rank's
        device_ids), as a helper function's call does (_note_moved_in_place); and `model =
        move(model)` (or `move(Net())`) is a value on its device, as a factory's is."""
        movers = {name for name, values in self.facts.assigned_values.items()
                  if len(values) == 1 and (_moving_lambda(values[0]) or self._moving_partial(values[0]))}
        for callee, calls in self.facts.calls_by_callee.items():
            for call in calls:
                if callee in movers:
                    self.facts.calls_returning_moved.add(call)
                if not call.args or not isinstance(self.parents.get(call), cst.Expr):
                    continue
                handed = call.args[0].value
                if callee in movers:
                    name = dotted_name(handed)
                elif callee.endswith(".apply") and (_moving_lambda(handed) or dotted_name(handed) in movers):
                    name = callee[: -len(".apply")]
                else:
                    continue
                if name is not None:
                    self.facts.moved_by_helpers.setdefault(name, []).append(call)
                    self._touch(name, call)

    def note_weights_drawn_by_functions(self) -> None:
        """`init_weights(model)` as a statement, where a function of this file draws weights of
        what it is handed (`for m in net.modules(): nn.init.kaiming_normal_(m.weight)`): the
        call draws the model's weights afresh, so its wrap comes after it (_note_weights_drawn)."""
        for statement in self.facts.module.body:
            if not isinstance(statement, cst.FunctionDef) or not any(
                    self._draws_weights(call) for call in calls_within(statement.body)):
                continue
            for call in self.facts.calls_by_callee.get(statement.name.value, ()):
                if self._is_statement_call(call):
                    for argument in call.args:
                        name = dotted_name(argument.value)
                        if name is not None:
                            self._touch(name, call)

    def _moving_partial(self, value: cst.BaseExpression) -> bool:
        """`functools.partial(nn.Module.to, device=device)` (or of `torch.nn.Module.cuda`): a
        callable that moves the module it is handed."""
        if not (isinstance(value, cst.Call) and value.args and value.args[0].keyword is None):
            return False
        bound = self._qualified(value.args[0].value)
        return "functools.partial" in self._qualified(value.func) and bool(
            bound & {"torch.nn.Module.to", "torch.nn.Module.cuda"})

    def _returns_moved(self, function: cst.FunctionDef) -> bool:
        # Names already followed: `t = t.half()` (or `a = b.float()` with `b = a.cpu()`)
        # binds a name to a cast of itself, which would otherwise be followed forever.
        followed: set[str] = set()

        def moved(value: Optional[cst.BaseExpression]) -> bool:
            if isinstance(value, cst.IfExp):
                return moved(value.body) or moved(value.orelse)
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and (
                    value.func.attr.value in _RETURNS_MODULE):
                if value.func.attr.value in ("to", "cuda"):
                    return True
                value = value.func.value
            name = dotted_name(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
            if name is None or name in followed:
                return False
            followed.add(name)
            facts = self.facts
            return any(facts.function_of(call) is function for call in facts.device_moves.get(name, ())) or any(
                facts.function_of(assigned) is function and assigned is not value and moved(assigned)
                for assigned in facts.assigned_values.get(name, ()))

        return any(moved(returned.value) for returned in self.facts.own_statements(function, cst.Return))

    def _one_literal_in(self, function: Optional[cst.FunctionDef], gathered: dict[str, Entry]
                        ) -> Callable[[cst.BaseExpression, cst.CSTNode], Optional[cst.BaseExpression]]:
        """The tuple or list a name is bound to, when that is its only value in `function`, or
        that the statements before the loop build from plain names (containers.gathered_elements,
        whose entries, with the condition each was put in under, go into `gathered`)."""
        def named(iterated: cst.BaseExpression, loop: cst.CSTNode) -> Optional[cst.BaseExpression]:
            name, view = iterated_view(iterated)
            if name is None or view == "keys":
                return None
            # `nets = []`, `nets.append(G)`, `nets += [D]` before the loop: the list it then holds.
            entries = gathered_elements(self.parents, loop, name, view)
            if entries:
                gathered.update((entry.name, entry) for entry in entries)
                return cst.List([cst.Element(cst.parse_expression(entry.name)) for entry in entries])
            if view is not None:
                return None
            values = [value for value in self.facts.assigned_values.get(name, ())
                      if self._enclosing_function(value) is function]
            if len(values) == 1 and isinstance(values[0], (cst.Tuple, cst.List)) and not self.facts.calls_by_callee.get(
                    f"{name}.append"):
                return values[0]
            return None
        return named

    def _enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """During the traversal (facts.function_of needs the finished parent links)."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            parent = self.parents.get(parent)
        return parent

    def note_element_movers(self) -> None:
        """`G, D = to_gpu([G, D])` (or `to_gpu([G, D])` alone), where a function of this file
        moves each element of what it is handed (`return [m.cuda() for m in models]`): G and D
        are moved there, at the call."""
        for callee, moves in self._element_movers.items():
            for call in self.facts.calls_by_callee.get(callee, ()):
                positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
                for position, move in moves:
                    if position < len(positional):
                        for element in literal_elements(positional[position].value):
                            self.facts.device_moves.setdefault(element, []).append(move)
                            self._touch(element, call)

    # --- loops -----------------------------------------------------------------------------------
    def visit_WithItem(self, node: cst.WithItem) -> None:
        """`with tqdm(self.train_loader, desc=...) as pbar: for batch in pbar:`: the progress bar
        the with statement binds goes over the loader, as `pbar = tqdm(loader)` does."""
        value = node.item
        if node.asname is None or not isinstance(value, cst.Call) \
                or not self._qualified(value.func) & ITERATION_WRAPPERS:
            return
        target = dotted_name(node.asname.name)
        if target is not None:
            wrapped = [name for arg in positional_args(value)[:1] for name in names_within(arg)]
            self.iteration_wrappers[(self._function(), target)] = wrapped

    def visit_CompFor(self, node: cst.CompFor) -> None:
        comprehension: cst.CSTNode = node
        while isinstance(comprehension, cst.CompFor):  # up to the ListComp, GeneratorExp, ...
            comprehension = cast(cst.CSTNode, self.parents.get(comprehension))
        for name in self._iterated_names(node.iter):
            self.facts.comprehension_passes.setdefault(name, []).append(comprehension)

    def _note_mapped_pass(self, node: cst.Call) -> None:
        """`map(step, loader)`: a pass over each iterable handed after the function."""
        for arg in node.args[1:]:
            if arg.keyword is None and not arg.star:
                for name in self._iterated_names(arg.value):
                    self.facts.comprehension_passes.setdefault(name, []).append(node)

    def visit_For(self, node: cst.For) -> None:
        for name in self._iterated_names(node.iter):
            self.facts.loops_over.setdefault(name, []).append(node)
            # `loop = tqdm(loader)` ... `for x in loop`: the loop goes over the loader too.
            for wrapped in self.iteration_wrappers.get((self._function(), name), ()):
                self.facts.loops_over.setdefault(wrapped, []).append(node)
        if slices_batches(node):
            self.facts.sliced_batch_loops.append(node)
        parameter_calls = [call for call in calls_within(node.iter) if isinstance(call.func, cst.Attribute)
                           and call.func.attr.value in ("parameters", "named_parameters")]
        if parameter_calls:
            self._loops_over_parameters.append(node)
        touched: list[str] = []
        for call in parameter_calls:
            # `for p in model[0].parameters(): p.requires_grad = False`: the loop works on the
            # model (a freeze), and the wrap must come after it.
            root = cast(cst.Attribute, call.func).value
            while isinstance(root, (cst.Subscript, cst.Attribute)):
                root = root.value
            if isinstance(root, cst.Name) and (root is not cast(cst.Attribute, call.func).value
                                               or _sets_requires_grad(node)):
                # (The whole model too when the loop sets requires_grad: `student =
                # copy.deepcopy(frozen_teacher)`, then `for p in student.parameters():
                # p.requires_grad = True`; a wrap before it would find nothing to train.)
                touched.append(root.value)
        if walked_modules(node):
            # `for m in model.modules(): if isinstance(m, nn.BatchNorm2d): m.weight.requires_grad
            # = False`: a freeze of part of the model through a loop variable, as above.
            touched.extend(models_frozen_in_part(node))
            # `for m in model.modules(): nn.init.kaiming_normal_(m.weight)`: its weights drawn
            # afresh (_note_weights_drawn), so the wrap comes after the loop.
            if any(self._draws_weights(call) for call in calls_within(node.body)):
                touched.extend(walked for module in walked_modules(node)
                               if (walked := dotted_name(module)) is not None)
        for name in dict.fromkeys(touched):
            self.facts.statements_touching.setdefault(name, []).append(node)

    def _draws_weights(self, call: cst.Call) -> bool:
        return any(name.startswith("torch.nn.init.") for name in self._qualified(call.func)) or isinstance(
            call.func, cst.Attribute) and call.func.attr.value in WEIGHT_DRAWS

    def _iterated_names(self, node: cst.BaseExpression) -> list[str]:
        """The names a `for` goes over: through a progress bar, enumerate() or iter(), only its
        iterable (the first positional argument or `iterable=`), not `desc=desc`, `total=n` or
        `tqdm(loader, "train")`'s description; through zip(), each of its iterables."""
        if not isinstance(node, cst.Call) or not self._qualified(node.func) & ITERATION_WRAPPERS:
            return names_within(node)
        positional = [arg.value for arg in node.args if arg.keyword is None]
        if "builtins.zip" in self._qualified(node.func):
            iterated = positional
        else:
            keyword = [arg.value for arg in node.args if arg.keyword is not None and arg.keyword.value == "iterable"]
            iterated = positional[:1] or keyword
        return [name for value in iterated for name in self._iterated_names(value)]

    def _mark_training_loops(self, node: cst.CSTNode) -> None:
        """Every For loop whose body (not header) holds this backward() or step()."""
        child, parent = node, self.parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.For) and child is parent.body:
                self.facts.training_loops.add(parent)
            child, parent = parent, self.parents.get(parent)

    # --- environment ---------------------------------------------------------------------------
    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        # `"cuda:0"` anywhere (a helper module's device choice): read once, here.
        if "cuda:" in node.value and FIXED_GPU.fullmatch(str(node.evaluated_value)) \
                and not self._saved_location(node):
            self.facts.fixed_gpu_strings.append(node)

    def _saved_location(self, node: cst.SimpleString) -> bool:
        """A key of torch.load's map_location dict (`{"cuda:0": ...}`): where the file was
        saved, not a device of this run. Made "cuda", it would match nothing, and what was
        saved on GPU 0 would load there on every rank."""
        element = self.parents.get(node)
        if not isinstance(element, cst.DictElement) or element.key is not node:
            return False
        mapping = self.parents.get(element)
        argument = self.parents.get(mapping) if mapping is not None else None
        if isinstance(argument, cst.Assign) and len(argument.targets) == 1 \
                and isinstance(argument.targets[0].target, cst.Name):
            # `loc = {"cuda:0": f"cuda:{gpu}"}`, then `torch.load(path, map_location=loc)`.
            return argument.targets[0].target.value in self._map_location_names(argument)
        return isinstance(argument, cst.Arg) and argument.keyword is not None \
            and argument.keyword.value == "map_location"

    def _map_location_names(self, node: cst.CSTNode) -> set[str]:
        """The plain names handed as `map_location=` anywhere in the module of `node`."""
        root: cst.CSTNode = node
        while self.parents.get(root) is not None:
            root = cast(cst.CSTNode, self.parents.get(root))
        handed: set[str] = set()

        class _Handed(cst.CSTVisitor):
            def visit_Arg(self, arg: cst.Arg) -> None:
                if arg.keyword is not None and arg.keyword.value == "map_location" and isinstance(arg.value, cst.Name):
                    handed.add(arg.value.value)

        traversal.visit(root, _Handed())
        return handed

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        name = dotted_name(node.expression)
        if name is not None and node.equal is None:  # not `f"{model=}"`, which shows its own text
            self.facts.formatted_values.setdefault(name, []).append(node.expression)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if len(node.comparisons) != 1:
            return
        right = node.comparisons[0].comparator
        if string_value(node.left) is not None or string_value(right) is not None:
            self.facts.string_comparisons.append(node)

    def _note_visible_devices_set(self, node: cst.Call) -> None:
        """`os.environ.setdefault("CUDA_VISIBLE_DEVICES", gpus)`, `os.putenv(...)` (which CUDA
        reads too) and `os.environ.update(CUDA_VISIBLE_DEVICES=...)` or with a dict: the
        same as an assignment to `os.environ["CUDA_VISIBLE_DEVICES"]`."""
        qualified = self._qualified(node.func)
        if not qualified & {"os.environ.setdefault", "os.putenv", "os.environ.update"}:
            return
        named = any(string_value(arg.value) == "CUDA_VISIBLE_DEVICES" for arg in node.args[:1]) or any(
            arg.keyword is not None and arg.keyword.value == "CUDA_VISIBLE_DEVICES" for arg in node.args) or any(
            isinstance(arg.value, cst.Dict) and any(
                isinstance(element, cst.DictElement) and string_value(element.key) == "CUDA_VISIBLE_DEVICES"
                for element in arg.value.elements) for arg in node.args)
        if named:
            self.facts.visible_devices_statements.append(self._statement(node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if dotted_name(node.value) != "os.environ" or len(node.slice) != 1:
            return
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and string_value(index.value) == "CUDA_VISIBLE_DEVICES":
            parent = self.parents.get(node)
            if isinstance(parent, cst.AssignTarget):
                self.facts.visible_devices_statements.append(self._statement(node))


def _unwrapped_name(value: cst.BaseExpression) -> Optional[str]:
    """`model`, `model.module` or `getattr(model, "module", model)`: "model"."""
    if isinstance(value, cst.Call) and dotted_name(value.func) == "getattr" and len(value.args) == 3 \
            and string_value(value.args[1].value) == "module":
        return dotted_name(value.args[0].value)
    name = dotted_name(value)
    return name.removesuffix(".module") if name is not None else None


def _follows_a_value(call: cst.Call) -> bool:
    """`.cuda(img.get_device())`, `.cuda(device=x.device)`: the GPU of another value, kept
    as written (nodes.names_a_values_device); so is this rank's GPU read from torchrun's
    environment (`.cuda(int(os.environ.get("LOCAL_RANK", 0)))`, DDP012)."""
    device = next((arg.value for arg in call.args if not arg.star and (
        arg.keyword is None or arg.keyword.value == "device")), None)
    return device is not None and (names_a_values_device(device) or any(
        isinstance(node, cst.SimpleString) and string_value(node) == "LOCAL_RANK" for node in within(device)))


def _bound_names(target: cst.BaseExpression) -> list[str]:
    """The names an assignment binds, `self.d2` for `self.d2 = ...` (not `self`, which it
    only reads), each element of a tuple or list, in order."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _bound_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    name = dotted_name(target)
    return [name] if name is not None else []


def _reads_input_gradients_only(region: cst.CSTNode, function: cst.CSTNode) -> bool:
    """No `.step(` call in `region`, and every `X.grad` it reads is of a name `function`
    marked as needing gradients (collector._backward_for_input_gradients)."""
    # (At module level, the module's own statements: a function there is a scope of its own.)
    inner = not isinstance(function, cst.Module)
    stepped = any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"
                  for call in find_all(region, cst.Call, into_functions=inner))
    grads = {dotted_name(attribute.value) or "" for attribute in find_all(region, cst.Attribute, into_functions=inner)
             if attribute.attr.value == "grad"}
    marked = {dotted_name(call.func.value) or "" for call in find_all(function, cst.Call, into_functions=inner)
              if isinstance(call.func, cst.Attribute) and call.func.attr.value == "requires_grad_"}
    for node in find_all(function, cst.Assign, into_functions=inner):
        for target in node.targets:
            name = dotted_name(target.target)
            if isinstance(target.target, cst.Attribute) and target.target.attr.value == "requires_grad":
                marked.add(dotted_name(target.target.value) or "")
            elif name is not None and isinstance(node.value, cst.Call) and (any(
                    arg.keyword is not None and arg.keyword.value == "requires_grad" and is_true(arg.value)
                    for arg in node.value.args) or isinstance(node.value.func, cst.Attribute)
                    and node.value.func.attr.value == "requires_grad_"):
                marked.add(name)  # `x = torch.zeros(..., requires_grad=True)`, `x = x.clone().requires_grad_()`
    marked.discard("")
    # `optimizer_delta = optim.SGD([delta], lr=...)`: an optimizer over marked tensors only
    # steps those tensors (TRADES' l2 attack), not the model's parameters.
    own_optimizers: set[str] = set()
    for node in find_all(function, cst.Assign, into_functions=inner):
        name = dotted_name(node.targets[0].target) if len(node.targets) == 1 else None
        first = node.value.args[0].value if isinstance(node.value, cst.Call) and node.value.args else None
        if name is not None and isinstance(first, (cst.List, cst.Tuple)) and first.elements and all(
                (dotted_name(element.value) or "") in marked for element in first.elements):
            own_optimizers.add(name)
    steps = [call for call in find_all(region, cst.Call, into_functions=inner)
             if isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"]
    stepped = any(dotted_name(cast(cst.Attribute, call.func).value) not in own_optimizers
                  for call in steps) if own_optimizers else stepped
    if stepped or not (grads or steps) or not grads <= marked:
        return False
    if isinstance(region, (cst.For, cst.While)) and find_all(region.body, cst.Break, into_functions=False):
        # An attack that stops early (`if len(index[0]) == 0: break`, all examples already
        # fooled) runs a data-dependent number of backwards, each a collective through a DDP
        # model: read as before, so that its rank-divergent exit is reported (DDP902).
        return False
    return not _updated_in_place(region, marked, inner) or _fed_to_a_module(region, marked, inner)


# torch functions that make a new tensor, and tensor methods that keep one a tensor made here.
_TENSOR_FACTORIES = frozenset({"zeros", "ones", "rand", "randn", "randint", "empty", "full", "tensor", "as_tensor",
                               "zeros_like", "ones_like", "rand_like", "randn_like", "empty_like", "full_like",
                               "from_numpy", "arange", "linspace", "clamp", "Tensor", "FloatTensor"})
_TENSOR_METHODS = frozenset({"uniform_", "normal_", "zero_", "fill_", "to", "cuda", "float", "half", "double",
                             "view", "reshape", "contiguous", "clamp", "clamp_"})


# Roots of calls that are functions of a library, not a module of the script's own.
_LIBRARY_ROOTS = frozenset({"torch", "F", "nn", "np", "numpy", "math", "len", "min", "max", "abs", "sum",
                            "float", "int", "print", "range", "Variable"})


def _fed_to_a_module(region: cst.CSTNode, marked: set[str], inner: bool) -> bool:
    """Rule: a marked tensor stepped from its gradient is an INPUT being optimised (an FGSM or
    PGD attack, TRADES' inner maximisation), not a parameter, when it (or a name bound from it
    in the loop, `adv = x + delta`) is handed to a call of a module (`model(X + delta)`,
    `self.net(x_adv)`): a called name, not a function of torch or a builtin. A model of bare
    tensors computes with its tensors directly (`x @ w`, `torch.mm(x, w)`)."""
    fed = set(marked)
    for _ in range(2):
        for assign in find_all(region, cst.Assign, into_functions=inner):
            if set(names_within(assign.value)) & fed:
                fed.update(name for target in assign.targets for name in [dotted_name(target.target)] if name)
    for call in find_all(region, cst.Call, into_functions=inner):
        callee = dotted_name(call.func)
        if callee is None or callee.split(".")[0] in _LIBRARY_ROOTS or callee.split(".")[0] in fed:
            continue
        if any(set(names_within(arg.value)) & fed for arg in call.args):
            return True
    return False


# In-place methods that only clear a gradient or a flag, not a step of the tensor itself.
_NOT_UPDATES = frozenset({"zero_", "requires_grad_", "detach_", "retain_grad"})


def _updated_in_place(region: cst.CSTNode, marked: set[str], inner: bool) -> bool:
    """A marked tensor is stepped like a parameter: `w -= lr * w.grad`, `w.data.sub_(...)`,
    `delta.data = ...`, or bound again from its own gradient (`w = (w - lr * w.grad).detach()`).
    Then the backward may be a hand-written training step (a model of bare tensors), or a
    PGD attack's step on its input; either way it is not read as input gradients alone."""
    def own(node: cst.BaseExpression) -> Optional[str]:
        name = dotted_name(node)
        if name is not None and name.endswith(".data"):
            name = name[: -len(".data")]
        return name if name in marked else None

    for node in find_all(region, cst.AugAssign, into_functions=inner):
        if own(node.target) is not None:
            return True
    for call in find_all(region, cst.Call, into_functions=inner):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value.endswith("_") \
                and call.func.attr.value not in _NOT_UPDATES and own(call.func.value) is not None:
            return True
    for assign in find_all(region, cst.Assign, into_functions=inner):
        for target in assign.targets:
            name = own(target.target)
            if name is None:
                continue
            if (dotted_name(target.target) or "").endswith(".data") or any(
                    dotted_name(read.value) == name and read.attr.value == "grad"
                    for read in find_all(assign.value, cst.Attribute)):
                return True
    return False


COMPREHENSIONS: tuple[type[cst.BaseComp], ...] = (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)


def _takes_module_first(node: cst.ClassDef) -> bool:
    """The class defines no `__init__`, or one that takes the module first as DataParallel's
    does (`def __init__(self, module, ...)`, `def __init__(self, *args, **kwargs)`)."""
    init = next((statement for statement in node.body.body
                 if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__"), None)
    if init is None:
        return True
    params = list(init.params.posonly_params) + list(init.params.params)
    if len(params) >= 2:
        return params[1].name.value == "module"
    return len(params) == 1 and isinstance(init.params.star_arg, cst.Param)


def _detached_calls(method: cst.FunctionDef) -> set[int]:
    """The ids of the called parts in `self.backbone(x).detach()` (or `.detach_()`, `.data`):
    no gradient flows back into a part whose output is cut from the graph where it is made."""
    detached = {id(call.func.value.func) for call in find_all(method.body, cst.Call)
                if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("detach", "detach_")
                and isinstance(call.func.value, cst.Call)}
    return detached | {id(node.value.func) for node in find_all(method.body, cst.Attribute)
                       if node.attr.value == "data" and isinstance(node.value, cst.Call)} | _detached_later(method)


_DETACHING = ("detach", "detach_", "data")


def _detached_later(method: cst.FunctionDef) -> set[int]:
    """The ids of the `self.X` read in `h = self.backbone(x)` whose name is cut from the graph
    by the next statement that mentions it (`h = h.detach()`, `h = h.data`, `h.detach_()`):
    the same cut as `self.backbone(x).detach()`, a line later. Everything the assigned value
    reads reaches the loss only through `h`, so no gradient comes back to those parts (DDP
    then waits for theirs: "Expected to have finished reduction"). Only within one block,
    and only when the next mention rebinds `h` (or detaches it in place), so that no later
    read of `h` can still carry the graph."""
    cut: set[int] = set()
    for block in find_all(method.body, cst.IndentedBlock):
        statements = list(block.body)
        for position, statement in enumerate(statements):
            name, value = _name_bound_to_a_call(statement)
            if name is None or value is None:
                continue
            following = next((later for later in statements[position + 1:]
                              if any(node.value == name for node in find_all(later, cst.Name))), None)
            if following is not None and _cuts_name(following, name):
                cut |= {id(node) for node in find_all(value, cst.Attribute)
                        if isinstance(node.value, cst.Name) and node.value.value == "self"}
    return cut


def _name_bound_to_a_call(statement: cst.BaseStatement) -> tuple[Optional[str], Optional[cst.Call]]:
    """`h = <call>` as a statement of its own: ("h", the call)."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and isinstance(small.value, cst.Call):
        return small.targets[0].target.value, small.value
    return None, None


def _cuts_name(statement: cst.BaseStatement, name: str) -> bool:
    """`name = name.detach()` (or `.data`, or a chain on it: `name.detach().flatten(1)`), or
    `name.detach_()`: every read of `name` there is the receiver of a detach, and the
    statement rebinds it or detaches it in place."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        else None
    if isinstance(small, cst.Assign):
        if not (len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                and small.targets[0].target.value == name):
            return False
        value: cst.BaseExpression = small.value
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
            and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "detach_":
        value = small.value
    else:
        return False
    reads = [node for node in find_all(value, cst.Name) if node.value == name]
    receivers = {id(node.value) for node in find_all(value, cst.Attribute) if node.attr.value in _DETACHING}
    return bool(reads) and all(id(read) in receivers for read in reads)


def _sets_requires_grad(loop: cst.For) -> bool:
    """The loop's body sets requires_grad of its variable (`p.requires_grad = flag`,
    `p.requires_grad_(flag)`)."""
    variable = loop.target.value if isinstance(loop.target, cst.Name) else None
    if variable is None:
        return False
    assigned = any(isinstance(target.target, cst.Attribute) and target.target.attr.value == "requires_grad"
                   and dotted_name(target.target.value) == variable
                   for assign in find_all(loop.body, cst.Assign) for target in assign.targets)
    return assigned or any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "requires_grad_"
                           and dotted_name(call.func.value) == variable for call in find_all(loop.body, cst.Call))


def _moving_lambda(value: cst.BaseExpression) -> bool:
    """`lambda m: m.to(device)` (or `m.cuda()`, `m.float().to(device)`): a lambda that moves
    the module it is handed."""
    if not (isinstance(value, cst.Lambda) and value.params.params):
        return False
    body, moved = value.body, False
    while isinstance(body, cst.Call) and isinstance(body.func, cst.Attribute) \
            and body.func.attr.value in _RETURNS_MODULE:
        moved = moved or body.func.attr.value in ("to", "cuda")
        body = body.func.value
    return moved and isinstance(body, cst.Name) and body.value == value.params.params[0].name.value


def _returns_several_outputs(forward: cst.FunctionDef) -> bool:
    """A `return a, b` or `return {"a": ..., "b": ...}` in forward: worth reading which
    parts each output comes from."""
    for statement in find_all(forward.body, cst.Return):
        value = statement.value
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) > 1 \
                or isinstance(value, cst.Dict) and len(value.elements) > 1:
            return True
    return False


def _lists_filled_by(receiver: cst.BaseExpression) -> set[str]:
    """The lists an `.append(p)` on `receiver` may fill: `decay`, either branch of
    `(no_decay if p.ndim < 2 else decay)`, the dict of lists `groups["decay"]` belongs to."""
    if isinstance(receiver, cst.IfExp):
        return _lists_filled_by(receiver.body) | _lists_filled_by(receiver.orelse)
    if isinstance(receiver, cst.Subscript):
        return _lists_filled_by(receiver.value)
    name = dotted_name(receiver)
    return {name} if name is not None else set()


class _Hooks(NamedTuple):
    """What Collector does for a node class: its visit_X and leave_X (None where it has none),
    and whether the class is a statement's."""

    visit: Optional[Callable[[Collector, Any], Optional[bool]]]
    leave: Optional[Callable[[Collector, Any], None]]
    statement: bool


# By node class: libcst's CSTVisitor builds the method's name and looks it up on every node,
# and its node classes are ABCs, whose isinstance is a Python-level call; the whole module
# is visited once per migration, so both are answered once per class here.
_HOOKS: dict[type, _Hooks] = {}


def _hooks(kind: type) -> _Hooks:
    _HOOKS[kind] = _Hooks(getattr(Collector, f"visit_{kind.__name__}", None),
                          getattr(Collector, f"leave_{kind.__name__}", None),
                          issubclass(kind, (cst.BaseSmallStatement, cst.BaseCompoundStatement)))
    return _HOOKS[kind]


def class_factory_parameters(function: cst.FunctionDef) -> Optional[tuple[str, int]]:
    """`def get_instance(module, name, config, *args): return getattr(module, ...)(*args, ...)`:
    the parameter whose attribute every return builds (`module`), and how many positional
    parameters come before the `*args` each return hands on first; None for any other
    function."""
    star = function.params.star_arg
    if not isinstance(star, cst.Param):
        return None
    returned = [each.value for each in find_all(function.body, cst.Return, into_functions=False)]
    picked: set[str] = set()
    for value in returned:
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Call) \
                or dotted_name(value.func.func) != "getattr" or not value.func.args \
                or not value.args or value.args[0].star != "*" \
                or dotted_name(value.args[0].value) != star.name.value:
            return None
        module = dotted_name(value.func.args[0].value)
        if module is None:
            return None
        picked.add(module)
    positional = [param.name.value for param in function.params.params]
    if len(picked) != 1 or not picked <= set(positional):
        return None
    return picked.pop(), len(positional)
