"""Every switch that changes what ddpify writes, in one frozen place."""
from dataclasses import dataclass
from typing import Optional

STRATEGIES = ("ddp", "fsdp2")
# How an FSDP2 script checkpoints: one full state dict file (loads into the single-GPU
# script unchanged), or a Distributed Checkpoint folder of shards (torch.distributed.checkpoint).
CHECKPOINT_FORMATS = ("full", "dcp")


@dataclass(frozen=True)
class Options:
    # Convert BatchNorm layers with SyncBatchNorm.convert_sync_batchnorm before wrapping.
    sync_batchnorm: bool = False
    # Divide the per-process batch size by the world size so the global batch stays the same.
    keep_global_batch: bool = False
    # Shard evaluation loaders and gather their figures (--no-shard-eval keeps every rank
    # evaluating the whole set).
    shard_evaluation: bool = True
    # Rule codes or prefixes to report (empty = all) and to silence.
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    # The target: "ddp" (DistributedDataParallel, a full copy per rank) or "fsdp2"
    # (torch.distributed.fsdp.fully_shard: parameters, gradients and optimizer state sharded).
    strategy: str = "ddp"
    # FSDP2: the attribute of the model holding its repeated blocks, when ddpify finds none.
    fsdp_blocks: Optional[str] = None
    # FSDP2: "full" state dicts gathered into one file, or "dcp" (each rank saves its shards).
    checkpoint: str = "full"

    @property
    def fsdp2(self) -> bool:
        return self.strategy == "fsdp2"

    @property
    def dcp(self) -> bool:
        return self.fsdp2 and self.checkpoint == "dcp"
