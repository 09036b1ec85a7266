"""The plan: the typed record of decisions the rules share (DESIGN.md §3).

Facts flow from analysis to the rules, the rules write their decisions here and their
edits into emit.Edits; nothing flows back. A rule that needs another's decision reads it
from this plan, never from that rule's edits or diagnostics.
"""
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst

from ddpify.analysis.control import Facts
from ddpify.analysis.facts import BlockItem, DeviceAssignment, Loader, LoaderDict, Statement
from ddpify.diagnostics import Diagnostic


@dataclass
class Plan:
    """Every decision one rule takes that another relies on.

    Rules write their own fields, in the order of rules.CONCERNS, and read those of rules
    that ran before; no rule reads another's edits or diagnostics. Each field says who
    writes it. The setup rule (rules/setup.py `choose`) makes the plan first.
    """

    function: Optional[cst.FunctionDef]
    # The block the setup goes into: a function body, the module, or the body of
    # `if __name__ == "__main__":`.
    block: Union[cst.Module, cst.BaseSuite]
    device: str
    # A CUDA-or-CPU choice in one statement, which the setup block replaces.
    device_assignment: Optional[DeviceAssignment]
    # Any other device choice stays as written; the setup follows this statement of `block`
    # (the whole if/else that chooses), so that it runs on every path.
    choice_statement: Optional[BlockItem] = None
    # `device = torch.accelerator.current_accelerator()` outside any branch: None on a CPU.
    bare_accelerator: bool = False
    # The script never chooses a device: it trains on the CPU.
    cpu_only: bool = False
    # The script trains through another module of the project, which chooses the device.
    device_elsewhere: bool = False
    # Moves to a device ddpify cannot follow (`model.to(get_device())` of another module):
    # planned as device_elsewhere, and reported (DDP007).
    unfollowed_device_moves: list[cst.Call] = field(default_factory=list)
    # The device is a string ("cuda" if ... else "cpu"), and stays one.
    device_is_string: bool = False
    # The device replaced is a GPU index (`device = 0`): it stays an int, this rank's index.
    device_is_index: bool = False
    # The device comes in with a parameter of the training function (`cfg.device` of a
    # `train(cfg)`): the setup opens that function, refining what the caller chose.
    device_from_parameter: bool = False
    # The device is a config entry or a name for one (`device = cfg.device`): a string or a
    # torch.device, so its type is read through torch.device(...).type.
    device_kind_unknown: bool = False
    # That string names a GPU by index (`f"cuda:{local_rank}"`), so it is not its own type.
    device_string_indexed: bool = False
    # The device string is given at run time (`--device cuda:1`, a config entry), not chosen
    # by the script from literals: it may name one GPU, which each rank replaces by its own.
    device_given: bool = False
    # Models wrapped in the setup's scope, and how many of them the script never moves off
    # the CPU: when none is moved, the process group uses Gloo whatever the machine has.
    wrapped_models: int = 0
    models_on_cpu: int = 0
    # The setup's function runs more than once (a get_device() helper called by train and
    # test, or inside a loop): the process group is created on the first call only.
    called_repeatedly: bool = False
    guards_used: set[str] = field(default_factory=set)
    # Statements that shard a loader before the setup's function has run (data.py): the
    # group is joined above the first of them in each block (setup.place), and the setup
    # joins it only when that has not happened.
    early_joins: list[Statement] = field(default_factory=list)
    # Instances of a DataLoader class that picks its DistributedSampler itself when the group
    # exists (data.py, `if dist.is_initialized():` in its __init__): the setup goes above the
    # first of them in its block, or their loaders would stay whole under torchrun.
    built_sharding_themselves: list[cst.Call] = field(default_factory=list)
    # A helper module of a project (facts.library): no setup block here; the script that
    # imports it joins the group, and its code asks dist.is_initialized() at run time.
    library: bool = False
    # Nodes whose edits need only the rank-0 guard, not the process group.
    guard_nodes: set[cst.CSTNode] = field(default_factory=set)
    # Dicts of loaders whose training entries got a DistributedSampler (loader_dicts.py).
    sharded_loader_dicts: list[LoaderDict] = field(default_factory=list)
    # Loaders built by name and kept in such a dict (`{"train": train_loader}`): loader_dicts.py
    # shards or keeps them whole, and data.py leaves them alone.
    loaders_in_dicts: list[Loader] = field(default_factory=list)
    # Passes that are a shard only under a test, in the loop's scope, that says so: a pass
    # over a dict of loaders for some keys (`phase == "train"`), or a pass over a loader
    # another module builds and shards by look (`isinstance(getattr(train_dl, "sampler",
    # None), DistributedSampler)`). training.py sums their epoch figures across ranks under
    # it, and leaves the passes over whole loaders as they are.
    partly_sharded_loops: dict[cst.For, str] = field(default_factory=dict)
    # Every pass over a dict of loaders that loader_dicts.py sharded or reported, so that
    # hand_batches.py does not report it again.
    loader_dict_loops: set[cst.For] = field(default_factory=set)
    # `try: import torch ... except ImportError:` at the top of the script: the setup reads
    # torch, so it comes after that statement, and code in it cannot read the setup's names.
    torch_imported_in: Optional[cst.BaseCompoundStatement] = None
    # Loops over batches cut by hand that each rank now takes its share of (hand_batches.py).
    sharded_loops: list[cst.For] = field(default_factory=list)
    # Training loops whose random batches each rank now draws with a seed of its own
    # (random_batches.py).
    reseeded_loops: list[cst.For] = field(default_factory=list)
    # Loaders no loop trains over (data.py), for evaluation.py to shard or leave whole.
    evaluation_loaders: list[Loader] = field(default_factory=list)
    # Statements that run on rank 0 only, once side_effects.py has guarded output (its
    # guards folded): checkpoints.py makes the other ranks wait before reading what they wrote.
    rank0_statements: set[cst.CSTNode] = field(default_factory=set)
    # Where each model is wrapped (model.py): the wrap follows this statement, by model name;
    # a rule that places code relative to the wrap (torch.compile, say) reads it here.
    wrap_points: dict[str, BlockItem] = field(default_factory=dict)
    # FSDP2 with --checkpoint dcp (rules/dcp.py, run from model.py): torch.save calls that
    # became dcp.save, a collective every rank makes (side_effects.py leaves them unguarded),
    # and torch.load calls that became dcp.load (checkpoints.py adds no map_location or barrier).
    collective_saves: set[cst.Call] = field(default_factory=set)
    collective_loads: set[cst.Call] = field(default_factory=set)
    # Loaders given a sampler that shards them (data.py, DDP201), whatever its kind: a
    # DistributedSampler, or one over the script's own RandomSampler or WeightedRandomSampler
    # (DistributedSamplerWrapper). The figures of their epochs are summed across ranks (training.py).
    loaders_given_a_sampler: list[Loader] = field(default_factory=list)
    # Training loops fed by batches built by hand or by loaders kept in a dict, reported as
    # such (hand_batches.py, DDP208/DDP218): with no sampler anywhere, the file stays
    # single-process (api.py, DDP904).
    hand_made_batches: list[Diagnostic] = field(default_factory=list)
    # Batch loops whose epoch sums are all-reduced after the epoch (training.py): their
    # figures no longer differ per rank (report_only.py).
    reduced_epoch_loops: set[cst.For] = field(default_factory=set)
    # Evaluation loops whose figures evaluation.py gathers from every rank after them (DDP216):
    # each rank that runs one must reach the gather (report_only.py).
    gathered_evaluations: set[cst.For] = field(default_factory=set)
    # A training loader that loops which do not train also go over (`accuracy(model,
    # train_loader)` beside `accuracy(model, val_loader)`), with those loops (data.py): once
    # evaluation.py has planned, each is reported as gathered (DDP228) when every such loop's
    # figures are gathered from every rank, else as evaluated on one rank's share (DDP213).
    training_loaders_evaluated: list[tuple[Loader, list[cst.For]]] = field(default_factory=list)
    # Values each rank computed on its own that now hold rank 0's value (rank0_values.py,
    # DDP415): what report_only.py derives from them is the same on every rank.
    rank0_values: set[cst.BaseExpression] = field(default_factory=set)
    # Per such loop, the meters (`losses = AverageMeter()`) whose sum and count it reduces.
    reduced_meters: dict[cst.For, set[str]] = field(default_factory=dict)
    # Set when --keep-global-batch divides a batch size by `world_size`.
    needs_world_size: bool = False
    # When the script uses the GPU: devices.py keeps the script's own condition (`use_cuda`
    # from a --no-cuda flag) so that the migrated script still honours it.
    use_gpu: str = "torch.cuda.is_available()"
    # `use_cuda = torch.device(args.device).type == "cuda"`: the statement that names use_gpu.
    gpu_condition_code: str = ""

    @property
    def device_type(self) -> str:
        """An expression for the type of this rank's device ("cuda", "cpu", ...)."""
        # A string choice is "cuda" or "cpu" (analysis._is_string_choice): the string is its type.
        if self.device_is_string and not self.device_string_indexed and not self.device_kind_unknown:
            return self.device
        if self.device_is_string or self.device_is_index:  # torch.device(0) is cuda:0
            return f"torch.device({self.device}).type"
        return f"{self.device}.type"

    def sees_setup(self, facts: Facts, node: cst.CSTNode) -> bool:
        """Whether code at node can read the names the setup block defines."""
        if self.library:
            return False
        if self.function is not None:
            return facts.function_of(node) is self.function
        if self.block is facts.module:
            # (Not inside the `try: import torch` block: the setup comes after it.)
            return self.torch_imported_in is None or facts.ancestor_in(node, facts.module) is not self.torch_imported_in
        # Under `if __name__ == "__main__":` only that block sees the names: the module's
        # functions may be imported and called from elsewhere.
        return facts.function_of(node) is None and facts.ancestor_in(node, self.block) is not None

    @property
    def anchor(self) -> Optional[cst.CSTNode]:
        """The device choice the setup replaces or follows (its assignment where there is
        one): the group is joined and `is_main` exists from there on."""
        return self.device_assignment.statement if self.device_assignment is not None else self.choice_statement

    def guard_for(self, facts: Facts, node: cst.CSTNode) -> str:
        guard = "is_main" if self.sees_setup(facts, node) else "is_main_process()"
        self.guards_used.add(guard)
        self.guard_nodes.add(node)
        return guard
