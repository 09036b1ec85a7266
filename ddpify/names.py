"""Qualified names of the torch APIs ddpify recognises, in one place.

Matching goes through libcst's QualifiedNameProvider, so `DL`, `data.DataLoader` and
`torch.utils.data.DataLoader` all resolve to the same name below.
"""

DATALOADER = "torch.utils.data.DataLoader"
DATALOADER_ALIASES = frozenset({DATALOADER, "torch.utils.data.dataloader.DataLoader"})
ITERABLE_DATASET = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
DISTRIBUTED_SAMPLER = "torch.utils.data.distributed.DistributedSampler"

TORCH_DEVICE = "torch.device"
TORCH_SAVE = "torch.save"
TORCH_LOAD = "torch.load"
TORCH_COMPILE = "torch.compile"
CUDA_IS_AVAILABLE = "torch.cuda.is_available"
CUDA_SET_DEVICE = "torch.cuda.set_device"
CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"

DATA_PARALLEL = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
     "torch.nn.parallel.data_parallel.DataParallel"}
)
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {"torch.nn.parallel.DistributedDataParallel",
     "torch.nn.parallel.distributed.DistributedDataParallel"}
)
INIT_PROCESS_GROUP = frozenset(
    {"torch.distributed.init_process_group",
     "torch.distributed.distributed_c10d.init_process_group"}
)
SYNC_BATCHNORM_CONVERT = "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
BATCHNORM = frozenset(
    {"torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d"}
)

OPTIMIZER_PREFIX = "torch.optim."
LR_SCHEDULER_PREFIX = "torch.optim.lr_scheduler."
CLIP_GRAD = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_"})
AUTOCAST = frozenset(
    {"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast",
     "torch.cpu.amp.autocast"}
)
GRAD_SCALER = frozenset({"torch.cuda.amp.GradScaler", "torch.amp.GradScaler"})

# Names the emitted script relies on; the module path is what AddImportsVisitor needs.
EMITTED_IMPORTS = {
    "os": ("os", None, None),
    "dist": ("torch.distributed", None, "dist"),
    "DDP": ("torch.nn.parallel", "DistributedDataParallel", "DDP"),
    "DistributedSampler": ("torch.utils.data.distributed", "DistributedSampler", None),
}
