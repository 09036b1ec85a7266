"""The script's own modules: what the functions it imports from them do (ddpify/analysis/effects.py).

`python train.py` puts the script's folder first on sys.path, so `import utils` there means
utils.py or utils/__init__.py beside the script; only such files are read, never anything
installed. What ddpify learns is handed to the migration as a `Project`: a call of a helper
that only prints is guarded like a print, one that writes files like a `torch.save`.
"""
import ast
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Optional, Union, cast

from ddpify import ast_walk, folder_listing
from ddpify.analysis import freezing, inert
from ddpify.analysis.ast_names import dotted_ast, main_guarded
from ddpify.analysis.dataset_reads import class_methods, dataset_reads
from ddpify.analysis.effects import OPAQUE, WRITES, FunctionEffects, absolute_module
from ddpify.analysis.facts import OutputParts, Slot
from ddpify.analysis.names import DATA_PARALLEL, DATA_PARALLEL_SUBCLASS_NAMES, qualify

# Folders of installed packages: a script there is not part of a project being migrated.
INSTALLED = frozenset({"site-packages", "dist-packages"})
# How far `from .misc import bar` re-exports are followed, and how many modules one script
# may pull in: a project is a handful of files, not a site-packages.
MAX_REEXPORTS = 4
MAX_MODULES = 64
# Files read to learn who imports what.
MAX_SCANNED = 400
SKIPPED_DIRECTORIES = frozenset({
    "__pycache__", "venv", "env", "build", "dist", "node_modules", "site-packages",
})


class Project:
    """The effect of calling a function of the project's own modules (effects.PURE, SPEAKS,
    WRITES or MIXED; None for anything else), by the name the script's calls resolve to:
    "utils.progress_bar", or the bare name after `from utils import *`. Modules are read
    when a call asks for them."""

    def __init__(self, modules: Optional["_Modules"] = None, imported: Iterable[str] = (),
                 star_names: Optional[Mapping[str, str]] = None, used_elsewhere: Iterable[str] = (),
                 in_project_folder: bool = False, rewritten: Iterable[Path] = (),
                 folder: Optional["_Modules"] = None) -> None:
        self._modules = modules
        # The project's modules, also for a script that imports none of them by name: those it
        # loads by a computed name are looked up there (modules_named_from).
        self._folder = folder or modules
        # The project's files this run migrates as well, where the program will import them
        # from (in place, or into the same migrated copy of the tree): a helper there guards
        # its own output (DDP301, DDP302 in its module), so its callers need not.
        self._rewritten = frozenset(rewritten)
        # The module sits in a folder of the user's project, among other modules of it (not
        # in an installed package, not alone): a training helper there that nothing imports
        # has callers ddpify cannot see (a notebook), and is migrated for them (DDP918).
        self.in_project_folder = in_project_folder or modules is not None
        self._imported = frozenset(imported)
        self._star_names = dict(star_names or {})
        # The top-level functions and classes of this module that other modules of the
        # project import: what runs of it when the program runs, though nothing here calls it.
        self.used_elsewhere = frozenset(used_elsewhere)
        # This module's own dotted name in the project ("trainer.trainer"), and the package
        # its relative imports start from ("trainer").
        self.module = ""
        self.package = ""
        # The module's own tree and folder, where its sys.path edits are read from.
        self._tree: Optional[ast.Module] = None
        self._script_folder: Optional[Path] = None
        # The text read() was given and its tree, which the migration of that text takes
        # rather than parse it again (parsed_tree).
        self._parsed: Optional[tuple[str, ast.Module]] = None

        # Per name the script calls: (effect or None, whether it trains). Every call of the
        # script asks, so each name is resolved once.
        self._known: dict[str, tuple[Optional[str], bool]] = {}
        self._kept_copies: dict[str, Optional[str]] = {}

    def inert_definition(self, qualified: str) -> bool:
        """`qualified` ("layers.Block") is a function or class of one of the project's modules
        with nothing to migrate (analysis/inert.py): calling it only computes or builds."""
        return self._folder is not None and self._folder.inert_definition(qualified)

    def parsed_tree(self, source: str) -> Optional[ast.Module]:
        """The stdlib's tree of `source`, when it is the text this project was read for."""
        if self._parsed is not None and self._parsed[0] == source:
            return self._parsed[1]
        return None

    @property
    def local_modules(self) -> frozenset[str]:
        """The names of the project's own modules the script imports."""
        return self._imported

    @property
    def reads_modules(self) -> bool:
        """The script's own modules are read: a script that never names torch may still
        train through them (`from core import train_src`)."""
        return self._modules is not None

    def effect(self, qualified: str) -> Optional[str]:
        return self._facts_of(qualified)[0]

    def guards_own_output(self, qualified: str) -> bool:
        """`qualified` is defined in a module this run migrates too, which puts each of its
        prints and writes on rank 0 itself (effects.guards_itself): a second guard around the
        call would only repeat it."""
        definition = self._definition(qualified) if self._rewritten else None
        if definition is None or self._modules is None:
            return False
        path = self._modules.file_of(definition[0])
        if path is None or path not in self._rewritten or not definition[0].guards_itself(definition[1]):
            return False
        # The helper's own migration guards only what its project view sees used by other
        # modules (api.migrate_source leaves a module nobody imports as it is, DDP901): the
        # same index, from the helper's side, so both ends agree on who guards.
        root = project_root(path)
        return definition[1].partition(".")[0] in names_used_elsewhere(root, module_name(path, root))

    def wraps_in_data_parallel(self) -> bool:
        """A module of the project wraps something in DataParallel, which the migration
        removes: a `.module` read in any module may have read through it."""
        return self._modules is not None and self._modules.wraps_in_data_parallel()

    def split_loader_facts(self) -> Optional[tuple[tuple[tuple[str, int], ...], frozenset[tuple[str, str]]]]:
        """For the project's modules: (file, line) of every read of a `.dataset` that may be a
        DataLoader's, and (class, method) of every method defined (analysis/dataset_reads.py);
        None where there is no project to read."""
        if self._folder is None:
            return None
        return _split_loader_facts(str(self._folder.root), _tree_stamp(self._folder.root))

    def freezes_parameters(self) -> bool:
        """A module of the project sets requires_grad to something other than True
        (`encoder.fine_tune(cfg.fine_tune_encoder)` in a model factory, a Trainer that freezes
        its backbone): a model built there and wrapped in another module may reach its wrap
        with nothing to train, where DDP raises (freezing_changes_in)."""
        return self._modules is not None and self._modules.freezes_parameters()

    def class_never_freezing(self, qualified: str) -> bool:
        """`qualified` is a class of a project module that sets requires_grad nowhere: an
        object built from it has all its parameters trainable unless the caller freezes them."""
        definition = self._definition(qualified)
        return definition is not None and definition[1] in definition[0].classes \
            and not definition[0].freezes_parameters()

    def trains(self, qualified: str) -> bool:
        """Calling `qualified` takes training steps (`engine.train_one_epoch(...)`)."""
        return self._facts_of(qualified)[1]

    def attribute_readers(self, qualified: str, wrapper_attributes: frozenset[str]) -> set[int]:
        """Which positional arguments of `qualified` it reads attributes of (effects.py)."""
        definition = self._definition(qualified)
        return set() if definition is None else definition[0].attribute_readers(definition[1], wrapper_attributes)

    def attribute_only_readers(self, qualified: str, wrapper_attributes: frozenset[str]) -> set[int]:
        """Which positional arguments of `qualified` it only reads attributes of (effects.py)."""
        definition = self._definition(qualified)
        return set() if definition is None else definition[0].attribute_only_readers(
            definition[1], wrapper_attributes)

    def parameters_run_in_part(self, qualified: str) -> tuple[list[str], dict[str, tuple[int, str]]]:
        """For a function: its positional parameters and those a part of which it runs, each
        with the line and the function of the first run (effects.py)."""
        definition = self._definition(qualified)
        if definition is None or self._modules is None:
            return [], {}
        # What the project's classes keep that trains nothing (a loss module, a frozen teacher),
        # from the modules read so far: the model's class is read where the script builds it.
        frozen = frozenset().union(*(effects.untrained_parts() for effects in self._modules.read_modules()))
        return definition[0].parameters_run_in_part(definition[1], frozen)

    def moved_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """For a function, or a class (its __init__): its positional parameters and those it
        moves to a device (effects.py)."""
        definition = self._callable_definition(qualified)
        if definition is None:
            return self._base_init_moved_parameters(qualified)
        positional, moved = definition[0].moved_parameters(definition[1])
        return positional, moved | self._moved_by_the_base_init(definition)

    def _moved_by_the_base_init(self, definition: tuple[FunctionEffects, str]) -> set[str]:
        """Rule: `class Trainer(BaseTrainer)` whose `__init__` hands its model on to
        `super().__init__(model, ...)`, where BaseTrainer (here or in another module of the
        project) moves the model it is handed (`self.model = model` ... `self.model.to(self.device)`):
        Trainer moves it too, and the wrap follows that move in BaseTrainer, not the caller's
        hand-off (before, the caller's script found no model it could name, DDP903)."""
        effects, name = definition
        handed = effects.handed_to_base_init(name)
        if not handed or self._modules is None:
            return set()
        for base, base_name in self._base_classes(effects, name.rpartition(".")[0]):
            init = f"{base_name}.__init__"
            if init in base.functions:
                positional, moved = base.moved_parameters(init)
                return {own for position, keyword, own in handed
                        if (keyword if keyword is not None else
                            positional[position] if position is not None and position < len(positional) else None)
                        in moved}
        return set()

    def _base_init_moved_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """A class with no `__init__` of its own runs its first project base's: the parameters
        that one moves (`class Trainer(BaseTrainer)` with only `_train_epoch` of its own)."""
        found = self._local(qualified) if self._modules is not None else None
        definition = self._modules.definition(found) if found is not None and self._modules is not None else None
        if definition is None or definition[1] not in definition[0].classes:
            return [], set()
        for base, base_name in self._base_classes(definition[0], definition[1]):
            if f"{base_name}.__init__" in base.functions:
                return base.moved_parameters(f"{base_name}.__init__")
        return [], set()

    def element_moved_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """Its positional parameters and those whose every element it moves (effects.py)."""
        definition = self._callable_definition(qualified)
        return ([], set()) if definition is None else definition[0].element_moved_parameters(definition[1])

    def state_loaded_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """For a function, or a class (its __init__): its positional parameters and those it
        loads a state dict into (effects.py)."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].state_loaded_parameters(definition[1])

    def grad_changed_parameters(self, qualified: str) -> tuple[list[str], dict[str, bool]]:
        """For a function or method: its positional parameters and those whose requires_grad
        it changes, each with whether only part of it (effects.py)."""
        definition = self._definition(qualified)
        return ([], {}) if definition is None else definition[0].grad_changed_parameters(definition[1])

    def moves_own_model(self, qualified: str) -> bool:
        """For a class (its __init__) or a function: it moves a module it keeps on the object
        to a device (`self.model = Net().to(device)`), and so wraps it there (effects.py)."""
        definition = self._callable_definition(qualified)
        return definition is not None and definition[0].moves_own_model(definition[1])

    def returned_tracker(self, qualified: str) -> Optional[Slot]:
        """Where what `qualified` returns holds a SummaryWriter it makes (`make_writer(log_dir)`,
        effects.py); None when it returns none."""
        definition = self._definition(qualified)
        return None if definition is None else definition[0].returned_tracker(definition[1])

    def moves_returned(self, qualified: str) -> bool:
        """`qualified` returns what it moved to a device (`get_network(args)`, effects.py)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].moves_returned(definition[1])

    def returns_data_parallel(self, qualified: str) -> bool:
        """`qualified` returns a model it wrapped in DataParallel (effects.py)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].returns_data_parallel(definition[1])

    def optimizer_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """`qualified`'s positional parameters and those the optimizer it builds trains."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].optimizer_parameters(definition[1])

    def optimizer_over_self(self, qualified: str) -> bool:
        """`qualified` is a method that builds an optimizer over its object's parameters."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].optimizer_over_self(definition[1])

    def builds_optimizer(self, qualified: str) -> bool:
        """The function or class `qualified` builds an optimizer itself (effects.py), or
        through a function of the project that does (`optimizer = get_optimizer(config,
        model.parameters())` in `Runner.train`, get_optimizer in another package)."""
        definition = self._definition(qualified)
        if definition is None or self._modules is None:
            return False
        if definition[0].builds_optimizer(definition[1]):
            return True
        modules = self._modules
        return any(found is not None and found[0].builds_optimizer(found[1])
                   for found in map(modules.definition, sorted(definition[0].callees(definition[1]))))

    def module_attributes(self, own_module: str, class_name: str) -> set[str]:
        """`self.X` attributes that class `class_name` of `own_module`, or a class of the
        project derived from it, uses as a torch module (`self.model.train()` in a Trainer
        derived from this BaseTrainer)."""
        if self._modules is None:
            return set()
        found: set[str] = set()
        for module, name in self._modules.classes_derived_from(own_module, class_name):
            effects = self._modules.effects(module)
            if effects is not None:
                found |= effects.module_attributes(name)
        return found

    def moved_self_attributes(self) -> set[str]:
        """`X` for every `self.X` that a class of any module of the project moves to a device,
        and so wraps there (`self.model = model.to(device)` in a Trainer): what another module
        handed that object (`on_epoch_end(self, trainer)`) finds as `trainer.X` may be the
        DDP wrapper."""
        if self._modules is None:
            return set()
        found: set[str] = set()
        for file in self._modules.files():
            effects = self._modules.effects(module_name(file, self._modules.root))
            if effects is not None:
                found |= effects.moved_self_attributes()
        return found

    def attributes_read_in_derived(self, own_module: str, class_name: str) -> set[str]:
        """`self.X` that classes of other modules of the project derived from `class_name`
        read (a Trainer's `self.writer.add_scalar(...)` on the writer its BaseTrainer makes)."""
        if self._modules is None:
            return set()
        found: set[str] = set()
        for module, name in self._modules.classes_derived_from(own_module, class_name):
            effects = self._modules.effects(module)
            if module != own_module and effects is not None:
                found |= effects.self_attributes_read(name)
        return found

    def inherited_tracker_attributes(self, own_module: str, class_name: str) -> set[str]:
        """`self.X` that a class of another module of the project, which `class_name` of
        `own_module` derives from, sets to a SummaryWriter it makes (`self.writer =
        SummaryWriter(log_dir)` in BaseTrainer.__init__): made on rank 0 only there, so that
        this class's uses of `self.X` (`self.writer.add_scalar(...)`) run on rank 0 only too."""
        return self._from_bases(own_module, class_name, FunctionEffects.tracker_attributes, other_modules_only=True)

    def attributes_read_by_mixins(self, own_module: str, class_name: str) -> set[str]:
        """`self.X` that the other base classes of `class_name` and of the classes derived
        from it read (`class Trainer(BaseTrainer, LoggingMixin)`, whose mixin's
        `self.writer.add_text(...)` reads the writer BaseTrainer makes): their methods run on
        the same object, but nothing derives them from `class_name`, so no module guards
        those reads for it."""
        if self._modules is None:
            return set()
        family = self._modules.classes_derived_from(own_module, class_name)
        members = {(id(self._modules.effects(module)), name) for module, name in family}
        found: set[str] = set()
        for module, name in family:
            effects = self._modules.effects(module)
            if effects is None:
                continue
            for base, base_name in self._base_classes(effects, name):
                if (id(base), base_name) not in members:
                    found |= base.self_attributes_read(base_name)
        return found

    def attributes_read_on_objects(self, own_module: str) -> set[str]:
        """`X` of every `obj.X` that the project's other modules read on something other than
        `self` (`trainer.writer.close()` in train.py, effects.py)."""
        if self._modules is None:
            return set()
        found: set[str] = set()
        for file in self._modules.files():
            module = module_name(file, self._modules.root)
            effects = self._modules.effects(module) if module != own_module else None
            if effects is not None:
                found |= effects.attributes_read_on_objects()
        return found

    def inherited_attributes_from_parameters(self, own_module: str, class_name: str) -> set[str]:
        """`self.X` that the project's classes which `class_name` of `own_module` derives from
        set from their __init__'s parameters (`BaseTrainer.__init__(self, model, train_loader,
        ...)` in another module: `self.train_loader = train_loader`)."""
        return self._from_bases(own_module, class_name, FunctionEffects.attributes_from_parameters)

    def attributes_trained_in_derived(self, own_module: str, class_name: str) -> set[str]:
        """`X` for every `self.X` of class `class_name` of `own_module` that a class derived
        from it in another module of the project trains without moving it itself
        (`Exp_Main(Exp_Basic)` builds its optimizer over `self.model.parameters()`, moved in
        `Exp_Basic.__init__`): this module moves it, and so wraps it
        (base_moved_attributes, from the other side)."""
        if self._modules is None:
            return set()
        found: set[str] = set()
        for module, name in self._modules.classes_derived_from(own_module, class_name):
            effects = self._modules.effects(module)
            if module != own_module and effects is not None:
                found |= effects.optimized_self_attributes(name) - effects.own_moved_self_attributes(name)
        return found

    def base_moved_attributes(self, own_module: str, class_name: str) -> set[str]:
        """`X` for every `self.X` that a class of another module of the project, which
        `class_name` of `own_module` derives from, moves to a device (`self.model =
        self._build_model().to(self.device)` in `Exp_Basic.__init__`), and that this class
        does not move itself: that module wraps it where it moves it
        (attributes_trained_in_derived), and here it may be the DDP wrapper."""
        found = self._from_bases(own_module, class_name, FunctionEffects.own_moved_self_attributes,
                                 other_modules_only=True)
        effects = self._modules.effects(own_module) if found and self._modules is not None else None
        return found - effects.own_moved_self_attributes(class_name) if effects is not None else found

    def _from_bases(self, own_module: str, class_name: str, ask: Callable[[FunctionEffects, str], set[str]],
                    other_modules_only: bool = False) -> set[str]:
        """What `ask(module, class)` gives for the project classes that `class_name` of
        `own_module` derives from (only those of other modules, where asked), together."""
        if self._modules is None:
            return set()
        effects = self._modules.effects(own_module)
        if effects is None:
            return set()
        return set().union(*(ask(base, name) for base, name in self._base_classes(effects, class_name)
                             if not (other_modules_only and base is effects)))

    def _base_classes(self, effects: FunctionEffects, class_name: str) -> Iterator[tuple[FunctionEffects, str]]:
        """The project classes `class_name` of the module `effects` derives from, directly or
        through other bases (eight at most: a hierarchy is read, not a cycle), each as the
        module that defines it and its name there."""
        assert self._modules is not None
        pending = list(effects.bases.get(class_name, ()))
        seen: set[str] = set()
        while pending and len(seen) < 8:
            base = pending.pop()
            if base in seen:
                continue
            seen.add(base)
            definition = self._modules.definition(base)
            if definition is None or definition[1] not in definition[0].classes:
                continue
            yield definition
            pending.extend(definition[0].bases.get(definition[1], ()))

    def names_fixed_gpu(self, qualified: str) -> bool:
        """Whether `qualified` (config.DEVICE) is a global of a module of the project that
        names a GPU by index (`DEVICE = "cuda:0"`, `torch.device("cuda:0" if ... )`)."""
        local = self._local(qualified) if self._modules is not None else None
        module, _, name = (local or "").rpartition(".")
        if self._modules is None or not module:
            return False
        found = _module_file(self._modules.root, module)
        tree = _parsed(str(found[0]), *_stamp(found[0])) if found is not None else None
        if tree is None:
            return False
        for statement in tree.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else [])
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                value = cast(Union[ast.Assign, ast.AnnAssign], statement).value
                return value is not None and any(isinstance(node, ast.Constant) and isinstance(node.value, str)
                           and re.fullmatch(r"cuda:\d+", node.value) is not None for node in ast_walk.walk(value))
        return False

    def names_device_type(self, qualified: str) -> bool:
        """Whether `qualified` (config.device) is a global of a module of the project set, once,
        to a device type only: "cuda" or "cpu", as a string or `torch.device(...)`, chosen by a
        conditional or not (`device = torch.device("cuda" if torch.cuda.is_available() else
        "cpu")`). Under the setup, which makes this rank's GPU the current one before the
        project's modules run, "cuda" is that GPU."""
        value = self._global_value(qualified)
        return value is not None and _device_type_value(value)

    def _global_value(self, qualified: str) -> Optional[ast.expr]:
        """The value of the one top-level assignment of a global of a project module."""
        local = self._local(qualified) if self._modules is not None else None
        module, _, name = (local or "").rpartition(".")
        if self._modules is None or not module:
            return None
        found = _module_file(self._modules.root, module)
        tree = _parsed(str(found[0]), *_stamp(found[0])) if found is not None else None
        if tree is None:
            return None
        values = [statement.value for statement in ast_walk.statements(tree) if isinstance(statement, ast.Assign)
                  and any(isinstance(target, ast.Name) and target.id == name for target in statement.targets)]
        top = [statement.value for statement in tree.body if isinstance(statement, ast.Assign)
               and any(isinstance(target, ast.Name) and target.id == name for target in statement.targets)]
        return top[0] if len(values) == 1 and len(top) == 1 else None

    def star_exports(self, module: str) -> dict[str, str]:
        """What `from module import *` binds beside the module's own functions and classes:
        the public names it imported itself (`AdamW` -> "torch.optim.AdamW"), also through
        its own star imports. Empty when the module is not one of the project's files."""
        effects = self._modules.effects(module) if self._modules is not None else None
        if effects is None:
            return {}
        return {name: qualified for name, qualified in effects.imports.items() if not name.startswith("_")}

    def follows_path_edit(self, line: int) -> bool:
        """The sys.path edit at `line` of this module adds a folder of the project that
        path_folders reads, so the modules imported from there are followed (no DDP909)."""
        if self._modules is None or self._tree is None or self._script_folder is None:
            return False
        followed = path_folders(self._modules.root)
        return any(at == line and folder is not None and folder in followed
                   for at, folder in script_path_edits(self._tree, self._script_folder, self._modules.root))

    def edits_path_out_of_view(self, module: str) -> bool:
        """`module` is one of the project's files (`_init_paths.py`, imported for its effect)
        that adds to sys.path a folder ddpify does not follow: the modules imported after it
        are not the project's files ddpify migrates."""
        if self._modules is None:
            return False
        found = _module_file(self._modules.root, module)
        tree = _parsed(str(found[0]), *_stamp(found[0])) if found is not None else None
        if found is None or tree is None:
            return False
        followed = path_folders(self._modules.root)
        return any(folder is None or folder not in followed
                   for _, folder in script_path_edits(tree, found[0].parent, self._modules.root))

    def has_module(self, module: str) -> bool:
        """`module` ("utils", "models.resnet") is one of the project's own files."""
        return self._modules is not None and self._modules.effects(module) is not None

    def modules_named_from(self, prefix: str) -> Optional[list[str]]:
        """The project's modules a name beginning with `prefix` ("models.") can load: the
        modules of that package, in its own folder; None when no package of the project has
        that name."""
        package = prefix.removesuffix(".")
        if self._folder is None or not prefix.endswith(".") or not package:
            return None
        found = _module_file(self._folder.root, package)
        if found is None or not found[1]:
            folder = self._folder.root.joinpath(*package.split("."))
            if not folder.is_dir():
                return None
        else:
            folder = found[0].parent
        return [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]

    def names_a_file_or_folder(self, name: str) -> Optional[bool]:
        """Some file (`name.py`) or folder (`name/`) anywhere in the project carries this name:
        a folder put on sys.path could make `import name` load it. None without a project."""
        if self._folder is None:
            return None
        return any(path.stem == name or name in path.relative_to(self._folder.root).parts[:-1]
                   for path in self._folder.files())

    def module_is_definitions(self, module: str) -> bool:
        """The module is one of the project's and none of its functions or methods trains or
        writes a file: a model's definition, which runs the same on every rank."""
        found = _module_file(self._folder.root, module) if self._folder is not None else None
        tree = _parsed(str(found[0]), *_stamp(found[0])) if found is not None else None
        if tree is None:
            return False
        # Read on its own, not through the project's bounded cache: a registry of forty models
        # must not crowd out the modules the migration asks about next.
        effects = FunctionEffects(tree, module if cast(tuple[Path, bool], found)[1] else module.rpartition(".")[0])
        return not any(effects.trains(name) or effects.of(name) == WRITES for name in effects.functions)

    def makes_loader(self, qualified: str) -> bool:
        """Calling `qualified` returns a DataLoader it builds (`utils.get_loaders(cfg)`)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].returns_loader(definition[1])

    def loader_attributes(self, qualified: str) -> frozenset[str]:
        """For a class of another module of the project: the attributes its methods set to a
        DataLoader they build (effects.loader_attributes)."""
        definition = self._definition(qualified)
        if definition is None or definition[1] not in definition[0].classes:
            return frozenset()
        return definition[0].loader_attributes(definition[1])

    def draws_from_own_loaders(self, qualified: str) -> bool:
        """`qualified` is a method that hands out a batch drawn from DataLoaders its class
        builds (effects.draws_from_own_loaders): `x, y = batches.get_batch()`."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].draws_from_own_loaders(definition[1])

    def hands_out_own_parameters(self, qualified: str) -> bool:
        """`qualified` is a method that hands out parameters of its object (`model.get_1x_lr_params()`)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].hands_out_own_parameters(definition[1])

    def returns_optimizer_class(self, qualified: str) -> bool:
        """Calling `qualified` returns a class of torch.optim (`optimizer_cls = get_optimizer(cfg)`)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].returns_optimizer_class(definition[1])

    def hands_out_batches(self, qualified: str) -> bool:
        """Calling `qualified` gives batches made by hand, certainly no DataLoader: a generator,
        or an iterator class of the project's own (`utils.build_iterator(data, config)`)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].hands_out_batches(definition[1])

    def loader_subclass(self, qualified: str) -> Optional[bool]:
        """A DataLoader subclass of another module of the project (`data.AudioDataLoader`):
        whether it forwards `sampler=`; None when `qualified` is no such class."""
        definition = self._definition(qualified)
        return None if definition is None else definition[0].loader_subclass(definition[1])

    def batch_sampler_by_rank(self, qualified: str) -> bool:
        """A class of another module of the project that shards by rank itself and has
        set_epoch (effects.batch_sampler_by_rank)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].batch_sampler_by_rank(definition[1])

    def loads_checkpoint(self, qualified: str) -> bool:
        """Calling `qualified` reads a file with torch.load (effects.loads_checkpoint)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].loads_checkpoint(definition[1])

    def kept_and_trained_parameters(self, qualified: str) -> tuple[list[str], dict[str, str]]:
        """For a class of the project: the models handed to it that it trains without moving
        them (effects.kept_and_trained_parameters)."""
        definition = self._definition(qualified)
        return ([], {}) if definition is None else definition[0].kept_and_trained_parameters(definition[1])

    def writes_files(self, qualified: str) -> bool:
        """Calling `qualified` writes a file somewhere inside (effects.writes_files)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].writes_files(definition[1])

    def downloads(self, qualified: str) -> bool:
        """Calling `qualified` downloads or unpacks data somewhere inside (effects.downloads)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].downloads(definition[1])

    def iterated_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """For a function or a class: its positional parameters and those it iterates
        (effects.iterated_parameters)."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].iterated_parameters(definition[1])

    def evaluated_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """For a function that takes no training step: its positional parameters and those it
        loops over, itself or through functions of its module (effects.evaluated_parameters)."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].evaluated_parameters(definition[1])

    def walked_parameters(self, qualified: str) -> tuple[list[str], set[str]]:
        """For a function: its positional parameters and those whose parameters or submodules
        it walks (effects.walked_parameters)."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].walked_parameters(definition[1])

    def names_from_clock(self, qualified: str) -> Optional[tuple[int, str]]:
        """The line where `qualified`, a function or class of another module, names a folder
        or run from the clock (effects.names_from_clock)."""
        definition = self._definition(qualified)
        return definition[0].names_from_clock(definition[1]) if definition is not None else None

    def iterated_entries(self, qualified: str) -> tuple[list[str], set[tuple[str, str]]]:
        """For a function or a class: its positional parameters and the (parameter, key)
        entries of a dict handed in that it iterates (effects.iterated_entries)."""
        definition = self._definition(qualified)
        return ([], set()) if definition is None else definition[0].iterated_entries(definition[1])

    def loader_dict(self, qualified: str) -> Optional[dict[str, bool]]:
        """Calling `qualified` returns a dict of DataLoaders it builds: key -> whether its
        module shards the entry (`data.get_dataloaders(cfg)`, returned_loaders.py)."""
        definition = self._definition(qualified)
        return None if definition is None else definition[0].returned_loader_dict(definition[1])

    def lazy_layer(self, qualified: str) -> Optional[str]:
        """For a class of the project: the lazy layer its __init__ builds (effects.lazy_layer)."""
        definition = self._definition(qualified)
        if definition is None or definition[1] not in definition[0].classes:
            return None
        return definition[0].lazy_layer(definition[1])

    def kept_copy(self, qualified: str) -> Optional[str]:
        """For a function or class of the project handed a module: where what it returns keeps
        a deep copy of it (effects.kept_copy), answered once per name: every call site asks."""
        if qualified not in self._kept_copies:
            definition = self._definition(qualified)
            self._kept_copies[qualified] = None if definition is None else definition[0].kept_copy(definition[1])
        return self._kept_copies[qualified]

    def gradless_submodules(self, qualified: str) -> list[str]:
        """For a class of the project: the submodules it builds that run with no gradients
        (effects.gradless_submodules)."""
        definition = self._definition(qualified)
        if definition is None or definition[1] not in definition[0].classes:
            return []
        return definition[0].gradless_submodules(definition[1])

    def forward_output_parts(self, qualified: str) -> OutputParts:
        """For a class of the project whose forward returns several outputs, the submodules
        each is computed from (analysis.forward_outputs)."""
        definition = self._definition(qualified)
        if definition is None or definition[1] not in definition[0].classes:
            return {}
        return definition[0].forward_output_parts(definition[1])

    def running_mean_kind(self, qualified: str) -> Optional[str]:
        """For a class of the project whose objects keep a running mean that summing `sum` and
        `count` across ranks makes the whole run's, how its average follows (meters.py)."""
        definition = self._definition(qualified)
        return None if definition is None else definition[0].running_mean_kind(definition[1])

    def returns_python_numbers(self, qualified: str) -> bool:
        """A function of the project that returns a Python number on every return
        (effects.returns_python_numbers)."""
        definition = self._definition(qualified)
        return definition is not None and definition[0].returns_python_numbers(definition[1])

    def picked_from_own_batches(self, qualified: str) -> set[Optional[int]]:
        """For a training function of the project: where its return holds a value picked from
        its own batches, per rank under DDP (effects.picked_from_own_batches)."""
        definition = self._definition(qualified)
        return set() if definition is None else definition[0].picked_from_own_batches(definition[1])

    def data_parallel_class(self, qualified: str, depth: int = 0) -> Optional[bool]:
        """`qualified` is a class of the project's own modules that derives from DataParallel
        (directly, through another such class, or from a known subclass of a vendored package):
        True when its constructor takes the module first, as DataParallel's does, False when
        not; None for anything else."""
        definition = self._definition(qualified)
        if definition is None or definition[1] not in definition[0].classes or depth > MAX_REEXPORTS:
            return None
        effects, name = definition
        kinds = [True if _is_data_parallel(base) else self.data_parallel_class(base, depth + 1)
                 for base in effects.bases.get(name, ())]
        if not any(kind is not None for kind in kinds):
            return None
        own = effects.init_takes_module_first(name)
        return any(kinds) if own is None else own

    def defines(self, qualified: str) -> bool:
        """`qualified` is a function or class of one of the project's own modules."""
        return self._definition(qualified) is not None

    def _facts_of(self, qualified: str) -> tuple[Optional[str], bool]:
        if self._modules is None:
            return None, False
        if qualified not in self._known:
            found = self._local(qualified)
            definition = self._modules.definition(found) if found is not None else None
            if definition is None and found is not None and found.endswith(".__call__"):
                # `learner(x, y)` on an nn.Module of the project runs its forward.
                found = found.removesuffix("__call__") + "forward"
                definition = self._modules.definition(found)
            if definition is None:
                self._known[qualified] = (None, False)
            else:
                effects, name = definition
                effect = effects.of(name)
                owner, _, method = cast(str, found).rpartition(".")
                trains = effects.trains(name) or effects.class_of(name) is not None and self._modules.method_trains(
                    owner, method)
                self._known[qualified] = (None if effect == OPAQUE else effect, trains)
        return self._known[qualified]

    def _definition(self, qualified: str) -> Optional[tuple[FunctionEffects, str]]:
        """Where a project module defines what `qualified` names (`_Modules.definition`)."""
        found = self._local(qualified) if self._modules is not None else None
        return self._modules.definition(found) if found is not None and self._modules is not None else None

    def _callable_definition(self, qualified: str) -> Optional[tuple[FunctionEffects, str]]:
        """What runs when `qualified` is called: a function, or a class's __init__."""
        found = self._local(qualified) if self._modules is not None else None
        if found is None or self._modules is None:
            return None
        definition = self._modules.definition(found)
        if definition is not None and definition[1] in definition[0].classes:
            return self._modules.definition(f"{found}.__init__")
        return definition

    def _local(self, qualified: str) -> Optional[str]:
        """The full name, when it names something in one of the project's imported modules."""
        head, dot, rest = qualified.partition(".")
        qualified = self._star_names.get(head, head) + dot + rest
        module = qualified.rpartition(".")[0]
        if not any(module == name or module.startswith(name + ".") for name in self._imported):
            return None
        return qualified


def read(script: str, source: str, rewritten: Iterable[str] = ()) -> Project:
    """The project around `script`, whose text is `source`; `rewritten` names the files this
    run migrates along with it, in place or into the same copy of the tree (Project). A
    script that does not parse is not ddpify's to judge here: the migration itself reports it."""
    path = Path(script).resolve()
    if INSTALLED.intersection(path.parent.parts):
        return Project()  # installed code: its imports are other packages, not its project
    root = project_root(path)
    if root == path.parent and not _modules_beside(str(root)) - {path.stem} and not _namespace_folders(str(root)):
        return Project()  # a script alone in its folder: nothing to read, not even the script
    tree = _tree_of(path, source)
    if tree is None:
        return Project()
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    stamp = _tree_stamp(root)
    modules = _modules_of(str(root), stamp)
    imported: set[str] = set()
    star_names: dict[str, str] = {}
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names if modules.effects(alias.name) is not None}
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, package)
            effects = modules.effects(module) if module is not None else None
            if module is None or effects is None:
                continue
            imported.add(module)
            if any(alias.name == "*" for alias in node.names):
                star_names.update((name, f"{module}.{name}") for name in effects.functions + effects.classes
                                  if not name.startswith("_") and "." not in name)
    used = _import_index(str(root), stamp).get(name, frozenset())
    if not imported and not used:
        alone = Project(in_project_folder=True, folder=modules)
        alone.module, alone.package = name, package
        alone._parsed = (source, tree)
        return alone
    found = Project(modules, imported, star_names, used,
                    rewritten={Path(file).resolve() for file in rewritten})
    found.module = name
    found.package = package
    found._tree, found._script_folder = tree, path.parent
    found._parsed = (source, tree)
    return found


def _tree_of(path: Path, source: str) -> Optional[ast.Module]:
    """The script's tree: the one the walk over the project read, when the file holds this
    source (ASCII text reads the same under any declared encoding), else its own."""
    if source.isascii():
        try:
            stamp = _stamp(path)
            with open(path, "rb") as handle:
                same = handle.read() == source.encode("ascii")
        except OSError:
            same = False
        if same:
            return _parsed(str(path), *stamp)
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def import_statements(tree: ast.Module) -> list[Union[ast.Import, ast.ImportFrom]]:
    """The tree's imports, in the order `ast.walk` finds them. Statements sit only in the
    statement lists of statements (and of except handlers and match cases), so the walk
    goes through those alone, breadth first as ast.walk does, and never into expressions."""
    found: list[Union[ast.Import, ast.ImportFrom]] = []
    waiting: deque[ast.AST] = deque([tree])
    while waiting:
        node = waiting.popleft()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                waiting.extend(item for item in value if isinstance(item, _HOLDS_STATEMENTS))
    return found


_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler) + tuple(
    getattr(ast, name) for name in ("match_case",) if hasattr(ast, name))


def project_root(path: Path) -> Path:
    """The folder the program's imports resolve from: the script's own folder, or above the
    packages it sits in (`trainer/trainer.py` belongs to the project beside `trainer/`)."""
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder and (
            (folder.parent / "__init__.py").is_file() or used_as_package(folder)):
        folder = folder.parent
    if folder.parent == folder:
        return folder
    if folder != path.parent:
        return _above_the_folder_put_on_path(folder) or folder
    # A folder without __init__.py that the scripts beside it import from (a namespace
    # package: `import data_loader.data_loaders as module_data`), or a folder of scripts
    # that import a package beside it (`scripts/train.py` with `from mel2wav.dataset import`).
    if _imported_from_parent(folder) or _imports_a_package_beside(path, folder):
        return folder.parent
    # `core/raft.py`, after a script of the folder above runs `sys.path.append('core')`;
    # `tools/train.py`, whose `_init_paths.py` beside it puts `../lib` on sys.path.
    if _puts_a_folder_beside_on_path(folder):
        return folder.parent
    return _above_the_folder_put_on_path(folder) or folder


def _above_the_folder_put_on_path(folder: Path) -> Optional[Path]:
    """The folder above the one, `folder` or a package it sits in, that a script of the
    project puts on sys.path: `core/raft.py` after `sys.path.append('core')`,
    `lib/core/function.py` after `tools/_init_paths.py` puts `lib` there."""
    candidate = folder
    for _ in range(4):
        if candidate.parent == candidate:
            return None
        if candidate.resolve() in path_folders(candidate.parent.resolve()):
            return candidate.parent
        if not (candidate / "__init__.py").is_file():
            return None
        candidate = candidate.parent
    return None


def _puts_a_folder_beside_on_path(folder: Path) -> bool:
    """A script of a folder of scripts (no `__init__.py`) puts a folder beside it on sys.path
    (`osp.join(this_dir, '..', 'lib')`): the project is the folder above, whose modules
    under that folder the scripts import by their bare names."""
    if (folder / "__init__.py").is_file() or INSTALLED.intersection(folder.parts):
        return False
    scripts = folder_listing.python_files(str(folder))
    inside = folder.resolve()
    return any(inside not in found.parents and found != inside
               for script in scripts for found in _folders_put_on_path(Path(script), folder.parent.resolve()))


def _imports_a_package_beside(path: Path, folder: Path) -> bool:
    """A script in a folder of scripts (`scripts/`, `tools/`, `utils/`, no `__init__.py`)
    whose absolute imports name a package of the folder above, one its own folder does not
    offer: it runs as `PYTHONPATH=. python scripts/train.py` (or after `pip install -e .`),
    and that package is the project's own code, which ddpify follows and migrates."""
    if (folder / "__init__.py").is_file() or INSTALLED.intersection(folder.parts):
        return False
    try:
        tree = _parsed(str(path), *_stamp(path))
    except OSError:
        return False
    if tree is None:
        return False
    beside = _modules_beside(str(folder))
    above: Optional[frozenset[str]] = None  # the folder above's modules, listed when first needed
    for node in import_statements(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            continue
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for module in modules:
            top = module.partition(".")[0]
            if not top or top in beside or not (folder.parent / top / "__init__.py").is_file():
                continue
            # (A stat per imported package first: the folder above may hold a great many entries.)
            above = _modules_beside(str(folder.parent)) if above is None else above
            if top in above:
                return True
    return False


def used_as_package(folder: Path) -> bool:
    """A top-level folder with an `__init__.py` (its parent has none) is a package of the
    project above it only when something imports it as one: its name in an absolute import (`from repo.models import
    x`, in its own files or a script beside it) or a relative import that reaches it
    (`from ..utils import x` in `repo/models/net.py`). A cloned repository often carries an
    `__init__.py` at its top, yet `python train.py` runs it from its own folder, with
    `import utils`: the repository is the project, not the folder it was cloned into (whose
    other repositories `-o OUT_DIR/` would copy)."""
    if not folder.name.isidentifier():
        return False  # `fasterrcnn-pytorch-training-pipeline` cannot be imported by name
    try:
        stamp = _tree_stamp(folder)
    except OSError:
        return True
    return _imports_itself(str(folder), stamp) or _imported_from_parent(folder)


@lru_cache(maxsize=64)
def _imports_itself(folder: str, stamp: tuple[tuple[str, int, int], ...]) -> bool:
    name = os.path.basename(folder)
    for file, mtime, size in stamp:
        tree = _parsed(file, mtime, size)
        if tree is None:
            continue
        depth = len(Path(file).relative_to(folder).parts) - 1  # 0 for a module of the folder itself
        for node in import_statements(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                if node.level > depth:
                    return True
                continue
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(module == name or module.startswith(name + ".") for module in modules):
                return True
    return False


# A repository's top holds a few folders (the package, scripts/, tools/, configs/, data/).
MAX_SCRIPT_FOLDERS = 40


def _imported_from_parent(folder: Path) -> bool:
    """A script beside the folder imports it by name, or one in a folder of scripts beside
    it (`tools/train.py` with `from segkit.io import x`, no `__init__.py` in tools/): the
    same scripts for which project_root climbs above their own folder, so that the
    package's modules see the entry that imports them (and a helper that guards its own
    output is known to, in both directions)."""
    parent = str(folder.parent)
    listed = folder_listing.listing(parent)
    scripts = [os.path.join(parent, name) for name in listed.named_py]
    # Only for a package (a folder without __init__.py is a namespace package only to
    # the scripts right beside it), and only a few sibling folders: the folder above a
    # repository (~/projects) holds other repositories, which must not make it the root.
    is_package = (folder / "__init__.py").is_file()
    siblings = [os.path.join(parent, name) for name in listed.folders if name != folder.name] if is_package else []
    if is_package and len(listed.entries) <= MAX_SCRIPT_FOLDERS:
        for sibling in siblings:
            name = os.path.basename(sibling)
            if name not in SKIPPED_DIRECTORIES and not name.startswith(".") and not os.path.isfile(
                    os.path.join(sibling, "__init__.py")):
                scripts.extend(os.path.join(sibling, inner) for inner in folder_listing.listing(sibling).named_py)
    packages = [Path(sibling) for sibling in siblings if os.path.basename(sibling).isidentifier()
                and os.path.basename(sibling) not in SKIPPED_DIRECTORIES
                and os.path.isfile(os.path.join(sibling, "__init__.py"))]
    stamps = _stamps(scripts[:MAX_MODULES])
    if _scripts_import(folder.name, stamps):
        return True
    # Rule: a package that the top's scripts import belongs to their project, and so does a
    # package its modules import (`main.py` imports `runners.diffusion`, which imports
    # `functions`): each is a package of the folder above, whose root is that folder.
    for package in packages:
        if not _scripts_import(package.name, stamps):
            continue
        try:
            modules = sorted(package.rglob("*.py"))[:MAX_MODULES]
        except OSError:
            continue
        if _scripts_import(folder.name, _stamps(modules)):
            return True
    return False


def _stamps(scripts: Iterable[Union[str, Path]]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of each file that can be read, as strings: a cache key per state."""
    stamps = []
    for script in scripts:
        try:
            stamps.append((str(script), *_stamp(script)))
        except OSError:
            continue
    return tuple(stamps)


@lru_cache(maxsize=64)
def _scripts_import(package: str, scripts: tuple[tuple[str, int, int], ...]) -> bool:
    """Whether one of these scripts imports from `package`; read once per state of the
    folder, not once per module of the project that asks."""
    prefixes = (f"import {package}.", f"from {package}.", f"from {package} import")
    for script, _mtime, _size in scripts:
        try:
            text = Path(script).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(prefix in text for prefix in prefixes):
            return True
    return False


def _device_type_value(value: ast.expr) -> bool:
    """"cuda" or "cpu", a conditional choosing one, or torch.device of one of these; also this
    rank's GPU as the migration names it where the module's import places tensors on it
    (`"cuda:" + os.environ.get("LOCAL_RANK", "0")`, DDP012)."""
    if isinstance(value, ast.Constant):
        return value.value in ("cuda", "cpu")
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and isinstance(value.left, ast.Constant) \
            and value.left.value == "cuda:":
        return any(isinstance(node, ast.Constant) and node.value == "LOCAL_RANK" for node in ast.walk(value.right))
    if isinstance(value, ast.IfExp):
        return _device_type_value(value.body) and _device_type_value(value.orelse)
    if isinstance(value, ast.Call) and dotted_ast(value.func) == "torch.device" and len(value.args) == 1 \
            and not value.keywords:
        return _device_type_value(value.args[0])
    return False


def module_name(path: Path, root: Path) -> str:
    """`trainer/trainer.py` under root -> "trainer.trainer"; a package's `__init__.py` -> its name.
    Under a folder a script puts on sys.path (path_folders), the name it is imported by from
    there: `core/raft.py` -> "raft" after `sys.path.append('core')`."""
    base = max((folder for folder in path_folders(root) if folder in path.resolve().parents),
               key=lambda folder: len(folder.parts), default=None)
    parts = list(path.resolve().relative_to(base).with_suffix("").parts if base is not None
                 else path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_elsewhere(script: str) -> bool:
    """Another module of the project imports something of this file."""
    path = Path(script).resolve()
    if INSTALLED.intersection(path.parent.parts):
        return False
    root = project_root(path)
    return bool(names_used_elsewhere(root, module_name(path, root)))


def names_used_elsewhere(root: Path, name: str) -> frozenset[str]:
    """The top-level names of module `name` that the project's other modules import."""
    return _import_index(str(root), _tree_stamp(root)).get(name, frozenset())


@lru_cache(maxsize=4)
def _modules_of(root: str, _stamp: tuple[tuple[str, int, int], ...]) -> "_Modules":
    """One reading of the project's modules per state of its files, shared by the migration
    of each of them: what one module's migration learns of a helper (its effects, its
    classes' parts) the next one's asks again."""
    return _Modules(Path(root))


class _Modules:
    """The project's modules under one folder, read once each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, Optional[FunctionEffects]] = {}
        self._files: Optional[list[Path]] = None
        self._data_parallel: Optional[bool] = None
        self._freezes: Optional[bool] = None
        # Per module read: its name and the package its relative imports start from, by the
        # id of its effects (definition() answers with those).
        self._read_as: dict[int, tuple[str, str]] = {}
        self._inert: dict[str, bool] = {}

    def read_modules(self) -> list[FunctionEffects]:
        """The modules read so far."""
        return [effects for effects in self._read.values() if effects is not None]

    def wraps_in_data_parallel(self) -> bool:
        if self._data_parallel is None:
            self._data_parallel = any(_calls_data_parallel(path) for path in self.files())
        return self._data_parallel

    def freezes_parameters(self) -> bool:
        """A module of the project freezes parameters, not counting another program of it:
        a script that nothing imports and that runs under its own `__main__` guard
        (finetune.py beside train.py) freezes its own models, in its own process."""
        if self._freezes is None:
            imported = _import_index(str(self.root), _tree_stamp(self.root))
            self._freezes = any(
                _freezes_parameters(path) and not _another_program(path, module_name(path, self.root), imported)
                for path in self.files())
        return self._freezes

    def files(self) -> list[Path]:
        if self._files is None:
            self._files = _project_files(self.root)[:MAX_MODULES]
        return self._files

    def effects(self, module: str) -> Optional[FunctionEffects]:
        """The module's functions, or None when it is not one of the project's files."""
        if module not in self._read:
            # (One reading serves every module's migration of the project, _modules_of: the
            # bound is the project's, not one module's imports.)
            if len(self._read) >= MAX_SCANNED:
                return None
            self._read[module] = None  # an import cycle reads it once
            found = _module_file(self.root, module)
            if found is not None:
                path, is_package = found
                tree = _parsed(str(path), *_stamp(path))
                if tree is not None:
                    package = module if is_package else module.rpartition(".")[0]
                    effects = FunctionEffects(tree, package, self.effect_of)
                    self._read[module] = effects
                    self._read_as[id(effects)] = (module, package)
                    # `from config import *` also binds what config imported (`AdamW`,
                    # `DataLoader`, `nn`): Python's star import takes every public name.
                    for star in effects.star_modules:
                        exported = self.effects(star)
                        for name, qualified in (exported.imports.items() if exported is not None else ()):
                            if not name.startswith("_"):
                                effects.imports.setdefault(name, qualified)
        return self._read[module]

    def inert_definition(self, qualified: str) -> bool:
        """Project.inert_definition: a top-level function or class (not a method), found
        through re-exports, whose whole module is inert."""
        found = self.definition(qualified)
        if found is None or "." in found[1]:
            return False
        effects = found[0]
        module, package = self._read_as[id(effects)]
        if module not in self._inert:
            self._inert[module] = False  # modules that call each other are not followed round
            self._inert[module] = inert.nothing_to_migrate(effects.tree, self.inert_definition, package)
        return self._inert[module]

    def effect_of(self, qualified: str) -> str:
        """The effect of calling `qualified` (module.function), followed through re-exports."""
        definition = self.definition(qualified)
        return OPAQUE if definition is None else definition[0].of(definition[1])

    def definition(self, qualified: str, depth: int = 0) -> Optional[tuple[FunctionEffects, str]]:
        """The module that defines `qualified` and the function's name in it ("Class.method"
        for a method), followed through re-exports; None when no project file defines it."""
        module, _, name = qualified.rpartition(".")
        effects = self.effects(module) if module else None
        if effects is None and module.count(".") >= 1:
            # "utils.ProgressMeter.display": a method of a class of module utils.
            module, _, owner = module.rpartition(".")
            effects, name = self.effects(module), f"{owner}.{name}"
        if effects is None or depth > MAX_REEXPORTS:
            return None
        if name in effects.functions or name in effects.classes:
            return effects, name
        head, dot, rest = name.partition(".")
        if head in effects.imports:  # re-exported: `from .meters import ProgressMeter`
            return self.definition(effects.imports[head] + dot + rest, depth + 1)
        # A method the class inherits (`Trainer.train` from BaseTrainer), or a name that a
        # package's `from .trainer import *` brings in.
        for elsewhere in [f"{base}.{rest}" for base in effects.bases.get(head, ()) if rest] + [
                f"{star}.{name}" for star in effects.star_modules]:
            found = self.definition(elsewhere, depth + 1)
            if found is not None:
                return found
        return None

    def classes_derived_from(self, module: str, class_name: str) -> list[tuple[str, str]]:
        """(module, class) for the class itself and every class of the project's files that
        derives from it, directly or not."""
        target = self._canonical(f"{module}.{class_name}")
        found = [(module, class_name)]
        for file in self.files():
            other = module_name(file, self.root)
            effects = self.effects(other)
            if effects is None:
                continue
            for name, bases in effects.bases.items():
                if any(self._derives(base, target) for base in bases) and (other, name) not in found:
                    found.append((other, name))
        return found

    def _derives(self, base: str, target: str, depth: int = 0) -> bool:
        canonical = self._canonical(base)
        if canonical == target:
            return True
        definition = self.definition(base)
        if definition is None or depth > MAX_REEXPORTS:
            return False
        effects, name = definition
        module = self._module_of(effects)
        return module is not None and any(self._derives(further, target, depth + 1)
                                          for further in effects.bases.get(name, ()))

    def _canonical(self, qualified: str) -> str:
        """The module and name where `qualified` is defined, through re-exports."""
        definition = self.definition(qualified)
        if definition is None:
            return qualified
        module = self._module_of(definition[0])
        return f"{module}.{definition[1]}" if module is not None else qualified

    def _module_of(self, effects: FunctionEffects) -> Optional[str]:
        return next((name for name, read in self._read.items() if read is effects), None)

    def file_of(self, effects: FunctionEffects) -> Optional[Path]:
        """The file a module read here comes from, resolved."""
        module = self._module_of(effects)
        found = _module_file(self.root, module) if module is not None else None
        return found[0].resolve() if found is not None else None

    def method_trains(self, owner: str, method: str) -> bool:
        """`owner` (a class's qualified name) trains when `method` is called: the method
        itself, or a method of the class it calls on itself, looked up from the class
        down (a BaseTrainer.train() that calls the subclass's _train_epoch)."""
        definition = self.definition(f"{owner}.{method}")
        if definition is None:
            return False
        effects, name = definition
        if effects.trains(name):
            return True
        return any(self._own_method_trains(owner, called) for called in effects.self_calls(name) - {method})

    def _own_method_trains(self, owner: str, method: str) -> bool:
        definition = self.definition(f"{owner}.{method}")
        return definition is not None and definition[0].trains(definition[1])


def _calls_data_parallel(path: Path) -> bool:
    return _file_calls_data_parallel(str(path), *_stamp(path))


@lru_cache(maxsize=256)
def _file_calls_data_parallel(path: str, mtime: int, size: int) -> bool:
    """The file calls DataParallel, or a known subclass of it (under any import of it). Kept
    per file: each module's migration asks it of every module of its project."""
    tree = _parsed(path, mtime, size)
    if tree is None:
        return False
    if not any(isinstance(node, (ast.Name, ast.Attribute)) and getattr(node, "id", getattr(node, "attr", None))
               in DATA_PARALLEL_NAMES for node in ast_walk.walk(tree)):
        return False  # (the cheap look first: most files never name it)
    imports = FunctionEffects(tree).imports
    return any(isinstance(node, ast.Call) and _is_data_parallel(qualify(dotted_ast(node.func) or "", imports))
               for node in ast_walk.walk(tree))


DATA_PARALLEL_NAMES = DATA_PARALLEL_SUBCLASS_NAMES | {"DataParallel"}


def _another_program(path: Path, module: str, imported: Mapping[str, frozenset[str]]) -> bool:
    """A script of its own: guarded by `if __name__ == "__main__":` and imported by none of
    the project's modules."""
    tree = _parsed(str(path), *_stamp(path))
    return tree is not None and main_guarded(tree) and module not in imported


def _freezes_parameters(path: Path) -> bool:
    return _file_freezes_parameters(str(path), *_stamp(path))


@lru_cache(maxsize=256)
def _file_freezes_parameters(path: str, mtime: int, size: int) -> bool:
    """The file sets requires_grad to a value that may be False (freezing.tree_freezes). Kept
    per file: each module's migration asks it of every module of its project."""
    tree = _parsed(path, mtime, size)
    return tree is not None and freezing.tree_freezes(tree)


def _is_data_parallel(qualified: str) -> bool:
    return qualified in DATA_PARALLEL or qualified.rpartition(".")[2] in DATA_PARALLEL_SUBCLASS_NAMES


def _modules_beside(root: str) -> frozenset[str]:
    """The top-level module names a folder offers: its .py files and packages."""
    return frozenset(
        entry.name[:-3] if entry.name.endswith(".py") else entry.name
        for entry in folder_listing.listing(root).entries
        if entry.name.endswith(".py") and entry.is_file
        or entry.is_dir and os.path.isfile(os.path.join(root, entry.name, "__init__.py")))


def _namespace_folders(root: str) -> bool:
    """The folder holds a folder of Python modules without `__init__.py`: a namespace package
    (PEP 420) that `from utils.config import x` imports all the same."""
    folders = [os.path.join(root, name) for name in folder_listing.listing(root).folders
               if not name.startswith(".") and name.isidentifier() and name not in SKIPPED_DIRECTORIES]
    return any(_holds_python(folder) for folder in folders[:MAX_SCRIPT_FOLDERS])


def _holds_python(folder: str) -> bool:
    return bool(folder_listing.python_files(folder))


def _module_file(root: Path, module: str) -> Optional[tuple[Path, bool]]:
    """The module's file under `root`, or under a folder of the project that a script at
    `root` puts on sys.path (path_folders: RAFT's `sys.path.append('core')`)."""
    found = _module_file_in(root, module)
    if found is None:
        for folder in path_folders(root):
            found = _module_file_in(folder, module)
            if found is not None:
                break
    return found


def _module_file_in(base_folder: Path, module: str) -> Optional[tuple[Path, bool]]:
    base = base_folder.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def path_folders(root: Path) -> tuple[Path, ...]:
    """The folders inside `root` that the scripts directly in it add to sys.path with a
    literal: `sys.path.append('core')`, `sys.path.insert(0, os.path.join(os.path.dirname(
    __file__), 'lib'))`, `sys.path.insert(0, str(Path(__file__).parent / 'lib'))`. Their
    modules are the project's own, imported by their bare names (`from raft import RAFT`)."""
    try:
        stamp = root.stat().st_mtime_ns
    except OSError:
        return ()
    return _path_folders(str(root), stamp)


_PATH_EDITS = frozenset({"sys.path.append", "sys.path.insert", "sys.path.extend"})


@lru_cache(maxsize=64)
def _path_folders(root: str, _stamp_ns: int) -> tuple[Path, ...]:
    folders: dict[Path, None] = {}
    for script_folder in (Path(root), *_script_folders(Path(root))):
        for script in folder_listing.python_files(str(script_folder)):
            for folder in _folders_put_on_path(Path(script), Path(root)):
                folders[folder] = None
    return tuple(folders)


def _script_folders(root: Path) -> list[Path]:
    """The folders of scripts right under `root` (`tools/`, `scripts/`: no `__init__.py`), whose
    scripts may put a folder beside them on sys.path (`osp.join(this_dir, '..', 'lib')`)."""
    found: list[Path] = []
    for name in folder_listing.listing(str(root)).folders:
        if name not in SKIPPED_DIRECTORIES and not name.startswith(".") and not (root / name / "__init__.py").is_file():
            found.append(root / name)
            if len(found) == MAX_SCRIPT_FOLDERS:
                break
    return found


def _folders_put_on_path(script: Path, within: Path) -> list[Path]:
    """The folders inside `within` that `script` puts on sys.path (path_edit_folder)."""
    try:
        stamp = _stamp(script)
    except OSError:
        return []
    if not _mentions_sys_path(str(script), *stamp):
        return []
    tree = _parsed(str(script), *stamp)
    if tree is None:
        return []
    return [folder for _, folder in script_path_edits(tree, script.parent, within) if folder is not None]


@lru_cache(maxsize=256)
def _mentions_sys_path(script: str, _mtime: int, _size: int) -> bool:
    """Read once per file and stamp: every module of a project asks it of the scripts beside it."""
    try:
        with open(script, "rb") as handle:
            return b"sys.path" in handle.read()
    except OSError:
        return False


def script_path_edits(tree: ast.Module, script_folder: Path,
                      within: Optional[Path] = None) -> list[tuple[int, Optional[Path]]]:
    """Each sys.path edit of a module, by line, with the folder it adds (None when ddpify
    cannot tell, or it is not a folder inside `within`). Names are read through the module's
    own assignments and imports (`this_dir = osp.dirname(__file__)`, `import os.path as
    osp`), and an edit made by a function of the module from its parameter is made once per
    call of it at module level (the `add_path(lib_path)` of `_init_paths.py`)."""
    context = _PathContext(tree)
    parameters = {id(node): [arg.arg for arg in function.args.args] + [function.name]
                  for function in tree.body if isinstance(function, ast.FunctionDef)
                  for node in ast_walk.walk(function)}
    edits: list[tuple[int, Optional[Path]]] = []
    for node in ast_walk.walk(tree):
        if not (isinstance(node, ast.Call) and context.canonical(dotted_ast(node.func)) in _PATH_EDITS):
            continue
        value = _edited_value(node)
        *params, function = parameters.get(id(node), [""])
        if isinstance(value, ast.Name) and value.id in params:
            for given in context.arguments_of(function, params.index(value.id)):
                edits.append((node.lineno, _edit_folder(given, script_folder, within, context)))
            continue
        edits.append((node.lineno, _edit_folder(value, script_folder, within, context)))
    return edits


class _PathContext:
    """What a module's names stand for, for reading the folders it puts on sys.path."""

    def __init__(self, tree: Optional[ast.Module] = None) -> None:
        self.aliases: dict[str, str] = {}
        self.values: dict[str, ast.expr] = {}
        self.calls: dict[str, list[ast.Call]] = {}
        if tree is None:
            return
        for statement in tree.body:
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
            elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    self.aliases[alias.asname or alias.name] = f"{statement.module}.{alias.name}"
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name):
                # A name bound twice stands for nothing ddpify can tell.
                name = statement.targets[0].id
                self.values[name] = statement.value if name not in self.values else ast.Constant(None)
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
                    and isinstance(statement.value.func, ast.Name):
                self.calls.setdefault(statement.value.func.id, []).append(statement.value)

    def canonical(self, dotted: Optional[str]) -> Optional[str]:
        if dotted is None:
            return None
        head, dot, rest = dotted.partition(".")
        return self.aliases.get(head, head) + dot + rest

    def arguments_of(self, function: str, position: int) -> list[ast.expr]:
        return [call.args[position] for call in self.calls.get(function, ()) if len(call.args) > position]

    def value_of(self, node: ast.expr) -> ast.expr:
        for _ in range(8):
            if not (isinstance(node, ast.Name) and node.id in self.values):
                break
            node = self.values[node.id]
        return node


_EMPTY_CONTEXT = _PathContext()


def _edited_value(call: ast.Call) -> Optional[ast.expr]:
    callee = dotted_ast(call.func) or ""
    if callee.endswith(".append") and len(call.args) == 1:
        return call.args[0]
    if callee.endswith(".insert") and len(call.args) == 2:
        return call.args[1]
    return None


def path_edit_folder(call: ast.Call, script_folder: Path) -> Optional[Path]:
    """The folder a `sys.path.append(X)` / `sys.path.insert(i, X)` of a script in
    `script_folder` adds, when X is a literal folder of the project: a string (taken from the
    script's folder, where it is run from) or the script's folder joined with strings. None
    for anything else, a folder outside `script_folder`, or one that does not exist."""
    if dotted_ast(call.func) not in _PATH_EDITS:
        return None
    return _edit_folder(_edited_value(call), script_folder, None, _EMPTY_CONTEXT)


def _edit_folder(value: Optional[ast.expr], script_folder: Path, within: Optional[Path],
                 context: "_PathContext") -> Optional[Path]:
    parts = _literal_parts_below_the_script(value, context) if value is not None else None
    if not parts:
        return None
    folder = script_folder.joinpath(*parts).resolve()
    inside = (within or script_folder).resolve() in folder.parents
    return folder if inside and folder.is_dir() else None


def _literal_parts_below_the_script(value: ast.expr, context: "_PathContext") -> Optional[list[str]]:
    """`'core'`, `os.path.join(os.path.dirname(__file__), 'lib')` (abspath/realpath of
    __file__ too, `os.pardir` or '..' among the parts), `str(Path(__file__).parent / 'lib')`:
    the path parts from the script's folder."""
    value = context.value_of(value)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return [value.value]
    if isinstance(value, ast.Call) and dotted_ast(value.func) == "str" and len(value.args) == 1:
        value = context.value_of(value.args[0])
    if isinstance(value, ast.Call) and context.canonical(dotted_ast(value.func)) in (
            "os.path.abspath", "os.path.realpath", "os.path.normpath") and len(value.args) == 1:
        value = context.value_of(value.args[0])
    if isinstance(value, ast.Call) and context.canonical(dotted_ast(value.func)) == "os.path.join" and value.args \
            and _the_scripts_folder(context.value_of(value.args[0]), context):
        strings = [_path_part(context.value_of(arg), context) for arg in value.args[1:]]
        return [part for part in strings if part is not None] if None not in strings else None
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div) and isinstance(value.right, ast.Constant) \
            and isinstance(value.right.value, str):
        if _the_scripts_folder(context.value_of(value.left), context):
            return [value.right.value]
        left = _literal_parts_below_the_script(value.left, context)
        return [*left, value.right.value] if left and not isinstance(value.left, ast.Constant) else None
    return None


def _path_part(value: ast.expr, context: "_PathContext") -> Optional[str]:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return ".." if context.canonical(dotted_ast(value)) == "os.pardir" else None


def _the_scripts_folder(value: ast.expr, context: "_PathContext" = _EMPTY_CONTEXT) -> bool:
    """`os.path.dirname(__file__)` (of its abspath or realpath), `Path(__file__).parent`
    (of its resolve() or absolute())."""
    if isinstance(value, ast.Call) and context.canonical(dotted_ast(value.func)) == "os.path.dirname" \
            and len(value.args) == 1:
        inner = context.value_of(value.args[0])
        if isinstance(inner, ast.Call) and context.canonical(dotted_ast(inner.func)) in (
                "os.path.abspath", "os.path.realpath") and len(inner.args) == 1:
            inner = inner.args[0]
        return isinstance(inner, ast.Name) and inner.id == "__file__"
    if isinstance(value, ast.Attribute) and value.attr == "parent":
        inner = value.value
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                and inner.func.attr in ("resolve", "absolute") and not inner.args:
            inner = inner.func.value
        return isinstance(inner, ast.Call) and context.canonical(dotted_ast(inner.func)) in ("Path", "pathlib.Path") \
            and len(inner.args) == 1 and isinstance(inner.args[0], ast.Name) and inner.args[0].id == "__file__"
    return False


def _stamp(path: Union[str, Path]) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=256)
def _parsed(path: str, _mtime: int, _size: int) -> Optional[ast.Module]:
    """A walk over many scripts of one project reads each helper module once."""
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), filename=os.fspath(path))
    except (OSError, SyntaxError, ValueError):
        return None


def clear_caches() -> None:
    """Forget every file read: a benchmark round then costs what a fresh `ddpify` run does."""
    for cache in (_parsed, _import_index, _scripts_import, _split_loader_facts, _file_calls_data_parallel,
                  _file_freezes_parameters, _path_folders, _mentions_sys_path, _starts_like_a_python_script,
                  _modules_of):
        cache.cache_clear()
    folder_listing.clear()


def _project_files(root: Path) -> list[Path]:
    """The Python files of the project, bounded: a project is a few dozen modules."""
    return [Path(file) for file in _python_files(root)]


def _python_files(root: Path) -> list[str]:
    """The Python files under root, in the order of a top-down `os.walk` with its folders
    sorted (links to folders listed, never entered), skipped folders left out; bounded."""
    found: list[str] = []
    _add_python_files(str(root), found)
    return found[:MAX_SCANNED]


def _add_python_files(folder: str, found: list[str]) -> None:
    entries = folder_listing.listing(folder).entries
    found.extend(os.path.join(folder, entry.name) for entry in entries if not entry.is_dir and (
        entry.name.endswith(".py") or "." not in entry.name and _python_script(os.path.join(folder, entry.name))))
    for entry in entries:
        if len(found) > MAX_SCANNED:
            return
        if entry.is_dir and not entry.is_link and entry.name not in SKIPPED_DIRECTORIES \
                and not entry.name.startswith("."):
            _add_python_files(os.path.join(folder, entry.name), found)


def _python_script(path: str) -> bool:
    """A script without `.py` that runs by its `#!/usr/bin/env python` line (`./train`): its
    imports of the project's modules count as any entry script's do."""
    try:
        return _starts_like_a_python_script(path, *_stamp(path))
    except OSError:
        return False


@lru_cache(maxsize=256)
def _starts_like_a_python_script(path: str, _mtime: int, _size: int) -> bool:
    try:
        with open(path, "rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _tree_stamp(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Every reading of a script asks: as strings, without a Path per file."""
    return _stamps(_python_files(root))


@lru_cache(maxsize=16)
def _split_loader_facts(root: str, stamp: tuple[tuple[str, int, int], ...]
                        ) -> tuple[tuple[tuple[str, int], ...], frozenset[tuple[str, str]]]:
    """Computed once per project state, for all of its modules."""
    reads: list[tuple[str, int]] = []
    methods: set[tuple[str, str]] = set()
    for file, mtime, size in stamp:
        tree = _parsed(file, mtime, size)
        if tree is not None:
            reads.extend((os.path.relpath(file, root), line) for line in dataset_reads(tree))
            methods |= class_methods(tree)
    return tuple(reads), frozenset(methods)


@lru_cache(maxsize=16)
def _import_index(root: str, stamp: tuple[tuple[str, int, int], ...]) -> dict[str, frozenset[str]]:
    """For each module of the project, the names other modules import from it: by
    `from m import f`, `from m import *` (its public names), or `import m` / `from pkg import m`
    followed by `m.f`. Computed once per project state, for all of its modules."""
    base = Path(root)
    used: dict[str, set[str]] = {}
    for file, mtime, size in stamp:
        path = Path(file)
        tree = _parsed(file, mtime, size)
        if tree is None:
            continue
        own = module_name(path, base)
        package = own if path.name == "__init__.py" else own.rpartition(".")[0]
        for importer, names in _imports_of(tree, package, base):
            if importer != own:
                used.setdefault(importer, set()).update(names)
    return {module: frozenset(names) for module, names in used.items()}


def _imports_of(tree: ast.Module, package: str, root: Path) -> list[tuple[str, set[str]]]:
    """(module, names) for each project module this tree imports names from."""
    found: list[tuple[str, set[str]]] = []
    bound: dict[str, str] = {}  # local name -> the project module it stands for
    for statement in import_statements(tree):
        if isinstance(statement, ast.ImportFrom):
            found.extend(_names_from(statement, package, root, bound))
        else:
            bound.update((alias.asname or alias.name, alias.name) for alias in statement.names
                         if _module_file(root, alias.name) is not None)
    if bound:
        attribute_owners = set()
        for node in ast_walk.walk(tree):
            if isinstance(node, ast.Attribute) and dotted_ast(node.value) in bound:
                found.append((bound[cast(str, dotted_ast(node.value))], {node.attr}))
                attribute_owners.add(id(node.value))
        # A module handed on whole (`config.init_obj("arch", module_arch)`): any of its
        # public names may be used.
        for node in ast_walk.walk(tree):
            if isinstance(node, ast.Name) and node.id in bound and id(node) not in attribute_owners and isinstance(
                    node.ctx, ast.Load):
                found.append((bound[node.id], _public_names(root, bound[node.id])))
    return found


def _names_from(node: ast.ImportFrom, package: str, root: Path,
                bound: dict[str, str]) -> list[tuple[str, set[str]]]:
    """`from m import f` names f of m; `from pkg import m` binds module m (its attributes
    are read later); `from m import *` names m's public definitions."""
    module = absolute_module(node, package)
    if module is None:
        return []
    found: list[tuple[str, set[str]]] = []
    for alias in node.names:
        if alias.name == "*":
            found.append((module, _public_names(root, module)))
        elif _module_file(root, f"{module}.{alias.name}") is not None:
            bound[alias.asname or alias.name] = f"{module}.{alias.name}"
        else:
            found.append((module, {alias.name}))
    return found


def _public_names(root: Path, module: str) -> set[str]:
    located = _module_file(root, module)
    tree = _parsed(str(located[0]), *_stamp(located[0])) if located is not None else None
    if tree is None:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and not node.name.startswith("_")}
