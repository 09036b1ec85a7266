"""The code ddpify writes for the DDP target: the setup block, the wrap, the teardown.

Kept apart from the rules that place them, so that a second target (FSDP2) brings its own
templates and the placement rules stay as they are.
"""


SETUP_COMMENT = "# Distributed setup: one process per device under torchrun; plain `python` runs as before."


# This rank's device: a torch.device, or, where the script named its GPU by an index
# (`device = 0`), that index stays an int, this rank's own.
RANK_DEVICE = 'torch.device("cuda", local_rank)'
RANK_INDEX = "local_rank"

SETUP_CODE = """\
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if {use_gpu}:
    torch.cuda.set_device(local_rank)
{device} = {rank_device} if {use_gpu} else torch.device("cpu")
if distributed:
    dist.init_process_group("nccl" if {use_gpu} else "gloo")
"""


# After a device choice kept as the script wrote it (an accelerator, MPS, a --no-accel
# flag): under torchrun the chosen device type is kept and only its index becomes the
# rank's own; the backend follows the device (NCCL for CUDA, Gloo for the CPU, ...).
ENVIRONMENT_CODE = """\
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", 0))
"""


REFINE_CODE = """\
if distributed:
    {device} = torch.device({chosen})
    if {device}.type != "cpu":  # this process's own accelerator
        {device} = torch.device({device}.type, local_rank)
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(dist.get_default_backend_for_device({device}))
"""


# A device chosen as a string ("cuda" or "cpu") stays that string, so that autocast's
# device_type, `device.startswith(...)` and f-strings keep working: "cuda" means the current
# GPU, and this process's own GPU is made current.
REFINE_STRING_CODE = """\
if distributed:
    if {device} != "cpu":  # the device type now means this process's own accelerator
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(dist.get_default_backend_for_device({device}))
"""


# The same for a string given at run time (`--device cuda:1`): one GPU named for a one-GPU
# run would put every rank on it (NCCL refuses two ranks on one GPU); each rank keeps the
# device type and takes its own GPU, the current one, as "cuda" without an index.
REFINE_GIVEN_STRING_CODE = """\
if distributed:
    if {device} != "cpu":  # the device type now means this process's own accelerator
        {device} = {device}.split(":")[0]  # "cuda:1" too: each rank on its own GPU
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(dist.get_default_backend_for_device({device}))
"""


# A device from elsewhere (a config module): a string or a torch.device, so its type is
# read through torch.device, which takes both.
REFINE_ANY_CODE = """\
if distributed:
    if torch.device({device}).type != "cpu":  # "cuda" now means this process's own GPU
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(dist.get_default_backend_for_device({device}))
"""


# The same for a device given at run time or handed in (`device = args.device`, a parameter
# of the training function, `cfg.device` of a config it is handed): it may name one GPU
# (`--device cuda:1`, `torch.device(f"cuda:{args.gpu}")`), as for REFINE_GIVEN_STRING_CODE:
# each rank keeps the device type, on its own GPU, and a string stays a string.
REFINE_ANY_GIVEN_CODE = """\
if distributed:
    if torch.device({device}).type != "cpu":  # "cuda" now means this process's own GPU
        torch.accelerator.set_device_index(local_rank)
        if isinstance({device}, str):
            {device} = {device}.split(":")[0]  # "cuda:1" too: each rank on its own GPU
        elif isinstance({device}, int):  # a GPU index stays one: this rank's
            {device} = local_rank
        else:
            {device} = torch.device(torch.device({device}).type, local_rank)
    dist.init_process_group(dist.get_default_backend_for_device({device}))
"""


# The same after EARLY_GROUP_CODE, which already made the accelerator current and the group.
REFINE_AFTER_EARLY_GROUP_CODE = "".join(
    line for line in REFINE_CODE.splitlines(keepends=True)
    if "set_device_index" not in line and "init_process_group" not in line
)


# The process group needed before the script chooses its device (a download barrier, a
# sampler): CPU tensors go through Gloo and CUDA tensors through NCCL, whichever device the
# script then trains on, and the rank's accelerator is current before any collective runs.
# Not `init_process_group()`: with no backend named, torch (2.6 and later) joins only the
# accelerator's backend, and a model the script keeps on the CPU then fails its wrap on a GPU
# machine ("No backend type associated with device type cpu"), which a CPU run never shows.
EARLY_BACKENDS = '"cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"'

EARLY_GROUP_CODE = f"""\
if distributed:
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(local_rank)
    dist.init_process_group({EARLY_BACKENDS})
"""


# Code that shards a loader before the setup's function runs (loaders made in the
# `__main__` block, then handed to a Trainer whose __init__ holds the setup) joins the group
# there, so that its `dist.is_initialized()` is true under torchrun; the setup then finds
# the group made. Plain `python` skips it.
EARLY_JOIN_COMMENT = "# Distributed setup: join torchrun's process group before the loaders below are sharded."

EARLY_JOIN_CODE = f"""\
if {{running}}"WORLD_SIZE" in os.environ and not dist.is_initialized():
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group({EARLY_BACKENDS})
"""


# A script that never chooses a device trains on the CPU: so does every rank.
CPU_ONLY_CODE = """\
if distributed:
    dist.init_process_group("gloo")
"""


IS_MAIN_CODE = "is_main = not distributed or dist.get_rank() == 0\n"


# Before the process group exists (a print above the device choice), torchrun's RANK tells.
IS_MAIN_FROM_ENVIRONMENT_CODE = 'is_main = int(os.environ.get("RANK", 0)) == 0\n'


WORLD_SIZE_CODE = 'world_size = int(os.environ.get("WORLD_SIZE", 1))\n'


IS_MAIN_HELPER = '''\


def is_main_process():
    """True in the process that prints and writes files: rank 0, or the only process."""
    if not dist.is_initialized():  # before the group exists, torchrun's RANK tells
        return int(os.environ.get("RANK", 0)) == 0
    return dist.get_rank() == 0
'''


TEARDOWN_CODE = "\nif distributed:\n    dist.destroy_process_group()\n"

# Lines ddpify writes into a script it migrates, as a pattern: a distributed script with none
# of them was distributed by its author (ddpify.project_jobs leaves its helper modules alone).
OWN_OUTPUT = (
    r"# Distributed setup:"
    r"|if (dist\.is_initialized\(\)|distributed):\s*\n\s*dist\.destroy_process_group\(\)"
    r"|True in the process that prints and writes files"
)


TEARDOWN_IF_INITIALIZED = "if dist.is_initialized():\n    dist.destroy_process_group()\n"


RUN_NOT_IMPORTED = (
    'distributed = "WORLD_SIZE" in os.environ and __name__ == "__main__"'
    "  # not when imported\n"
)


WRAP_CODE = """\
if distributed:
    {model} = DDP({model}, device_ids=[local_rank] if {device_type} == "cuda" else None{extra})
"""


# SyncBatchNorm runs on GPUs only, so on a CPU (Gloo) run the layers stay as they are.
SYNC_BATCHNORM_CODE = """\
if distributed:
    if {device_type} == "cuda":
        {model} = torch.nn.SyncBatchNorm.convert_sync_batchnorm({model})
    {model} = DDP({model}, device_ids=[local_rank] if {device_type} == "cuda" else None{extra})
"""


# The same, split the way black splits a call that does not fit in 88 columns.
WRAP_CODE_SPLIT = """\
if distributed:
    {model} = DDP(
        {model}, device_ids=[local_rank] if {device_type} == "cuda" else None{extra}
    )
"""


# And one argument a line when even that does not fit.
WRAP_CODE_EXPLODED = """\
if distributed:
    {model} = DDP(
        {model},
        device_ids=[local_rank] if {device_type} == "cuda" else None,{extra}
    )
"""


# A script that chooses no device trains on the CPU, where DDP takes no device_ids.
WRAP_ON_CPU_CODE = """\
if distributed:
    {model} = DDP({model}{extra})
"""


WRAP_OUT_OF_SETUP_CODE = """\
if dist.is_initialized():
    {model} = DDP({model})
"""


# DDP raises on a module none of whose parameters requires a gradient (a frozen encoder).
ONLY_IF_TRAINABLE_COMMENT = "# A module with nothing to train (frozen) stays unwrapped: DDP refuses it."
