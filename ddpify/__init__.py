"""ddpify: migrate single-GPU PyTorch training scripts to DistributedDataParallel."""

__version__ = "0.1.0"
