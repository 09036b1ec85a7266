"""The code ddpify writes for the FSDP2 target (`--strategy fsdp2`): the shard, and the full
state dicts that checkpoints hold.

The setup block, the sampler, rank-0 output and teardown are the DDP target's (ddp.py): only
what differs lives here. References: the FSDP2 tutorial and pytorch/examples
distributed/FSDP2 (fully_shard per block, then the root; the optimizer built afterwards;
full state dicts through torch.distributed.checkpoint.state_dict).
"""

from ddpify.emit.layout import fits

SHARD_COMMENT = "# FSDP2: each block's parameters, gradients and optimizer state are split across the ranks."
SHARD_ROOT_COMMENT = "# FSDP2: the model's parameters, gradients and optimizer state are split across the ranks."

# Each repeated block is a unit of its own (gathered for its forward, freed after it), then
# the root takes what is left (embeddings, head). As a group of one nothing is sharded.
SHARD_BLOCKS_CODE = """\
if {condition}:
{policy_line}    for {block} in {model}.{blocks}:
{compile_line}        fully_shard({block}{policy})
    fully_shard({model}{policy})
"""

# `model = torch.compile(model)` in the script: under torchrun each block is compiled before
# its shard, as torchtitan's parallelize does (apply_compile, then apply_fsdp; the root is
# not compiled): the compiled graphs are the blocks', repeated, and FSDP2's hooks around
# them stay outside. As a group of one the script compiles the whole model as it did.
COMPILE_BLOCK_LINE = "        {block}.compile({arguments})  # each block compiled before its shard\n"
ROOT_COMPILE_CONDITION = "not {condition}"
ROOT_COMPILE_COMMENT = "# as a group of one; under torchrun each block was compiled"

SHARD_ROOT_CODE = """\
if {condition}:
{policy_line}    fully_shard({model}{policy})
"""

# Gradient accumulation: the micro-batches that do not step keep their gradients unreduced
# (FSDP2's counterpart of DDP's no_sync()).
GRADIENT_SYNC_CODE = """\
# FSDP2 reduce-scatters gradients only on the micro-batch that steps the optimizer.
{sync} = {condition}
if distributed:
    {model}.set_requires_gradient_sync({sync})
"""

# bf16 autocast in the script: FSDP2 casts the gathered parameters itself and reduces
# gradients in float32.
MIXED_PRECISION_CODE = (
    "    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
)
POLICY_ARGUMENT = ", mp_policy=mp_policy"

# A full (unsharded) state dict on the CPU: a collective every rank joins; the file it goes to
# loads into the single-GPU model unchanged.
FULL_STATE_OPTIONS = "StateDictOptions(full_state_dict=True, cpu_offload=True)"
GATHERED_COMMENT = "# Every rank gathers the full state dict (a collective); only rank 0 writes it."
MODEL_STATE_CODE = "get_model_state_dict({model}, options=" + FULL_STATE_OPTIONS + ")"
OPTIMIZER_STATE_CODE = "get_optimizer_state_dict({model}, {optimizer}, options=" + FULL_STATE_OPTIONS + ")"

# Loading a full state dict into the sharded model: every rank has read the whole file (after
# the barrier), and keeps its shard of it. No broadcast from rank 0: that goes through
# broadcast_object_list, which needs numpy, and every rank holds the full copy anyway.
LOAD_OPTIONS_COMMENT = "# Each rank read the full state dict and keeps its own shard of it."
LOAD_OPTIONS_CODE = "{name} = StateDictOptions(full_state_dict=True)"
LOAD_MODEL_CODE = "set_model_state_dict({model}, {state}, options={options})"
LOAD_OPTIMIZER_CODE = "set_optimizer_state_dict({model}, {optimizer}, {state}, options={options})"

# --checkpoint dcp: a Distributed Checkpoint (torch.distributed.checkpoint) instead of one
# file. Each rank writes and reads only its own shards, into and from a folder at the path
# the script saved to (so that `os.path.exists(path)` still says whether to resume); dcp.save
# and dcp.load are collectives every rank joins, with no rank-0 guard and no barrier. The
# state dicts are the sharded ones (no full_state_dict, nothing gathered).
DCP_SAVE_COMMENT = "# Every rank saves its own shards: dcp.save is a collective."
DCP_LOAD_COMMENT = "# Every rank reads its own shards into these: dcp.load fills them in place."
DCP_MODEL_STATE_CODE = "get_model_state_dict({model})"
DCP_OPTIMIZER_STATE_CODE = "get_optimizer_state_dict({model}, {optimizer})"
DCP_SAVE_CALL = "dcp.save"
DCP_CHECKPOINT_KEYWORD = "checkpoint_id"
DCP_LOAD_CODE = "dcp.load({state}, checkpoint_id={path})"
DCP_LOAD_MODEL_CODE = "set_model_state_dict({model}, {state})"
DCP_LOAD_OPTIMIZER_CODE = "set_optimizer_state_dict({model}, {optimizer}, {state})"


def fitted_assignment(assignment: str, indent: int) -> str:
    """`name = call(args)` on one line, or split the way black splits it."""
    if fits(indent, assignment):
        return assignment + "\n"
    head, _, arguments = assignment.partition("(")
    return f"{head}(\n    {arguments[:-1]}\n)\n"


def fitted_dict(name: str, entries: list[tuple[str, str]], indent: int) -> str:
    """`name = {"key": value, ...}` on one line, or one entry a line the way black writes it."""
    one_line = f"{name} = {{" + ", ".join(f"{key}: {value}" for key, value in entries) + "}"
    if fits(indent, one_line):
        return one_line + "\n"
    return f"{name} = {{\n" + "".join(f"    {key}: {value},\n" for key, value in entries) + "}\n"


# The process group is bound to this rank's accelerator from the start (FSDP2 tutorial):
# collectives need not guess the device. The CPU takes no device_id.
BOUND_TO_DEVICE = {
    '    dist.init_process_group("nccl" if {use_gpu} else "gloo")\n': (
        "    dist.init_process_group(\n"
        '        "nccl" if {use_gpu} else "gloo",\n'
        "        device_id={device} if {use_gpu} else None,\n"
        "    )\n"),
    "    dist.init_process_group(dist.get_default_backend_for_device({device}))\n": (
        "    dist.init_process_group(\n"
        "        dist.get_default_backend_for_device({device}),\n"
        '        device_id={device} if {device}.type != "cpu" else None,\n'
        "    )\n"),
}
# A device kept as a string ("cuda") names no index: the group gets the rank's own. Read
# through torch.device(), as it may also be a torch.device handed in (`cfg.device`).
BOUND_TO_STRING_DEVICE = {
    "    dist.init_process_group(dist.get_default_backend_for_device({device}))\n": (
        "    dist.init_process_group(\n"
        "        dist.get_default_backend_for_device({device}),\n"
        "        device_id=(\n"
        "            torch.device(torch.device({device}).type, local_rank)\n"
        '            if torch.device({device}).type != "cpu"\n'
        "            else None\n"
        "        ),\n"
        "    )\n"),
}


def bound_to_device(template: str, replacements: dict[str, str] = BOUND_TO_DEVICE) -> str:
    """A setup template of the DDP target whose init_process_group passes device_id."""
    for line, bound in replacements.items():
        template = template.replace(line, bound)
    return template
