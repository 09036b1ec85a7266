"""Every switch that changes what ddpify writes, in one frozen place."""
from dataclasses import dataclass


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
