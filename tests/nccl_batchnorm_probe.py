"""Does DDP's buffer broadcast break a BatchNorm model run twice before one backward? (DDP115)

ddpify passes `broadcast_buffers=False` when a step runs a BatchNorm model's forward twice
(real and fake batches of a GAN discriminator) before a single backward: DDP's default
broadcasts rank 0's buffers in place at the start of each forward, and on GPUs the second
broadcast bumps the version of running statistics that the first forward's cuDNN BatchNorm
saved for its backward ("one of the variables needed for gradient computation has been
modified by an inplace operation", pytorch/pytorch#22095). The CPU kernels pass either way, so
this premise can only be measured on a GPU:

    python tests/nccl_batchnorm_probe.py

runs the step in worlds of one (NCCL) and two (Gloo over CUDA tensors, both ranks on GPU 0,
since one GPU cannot hold two NCCL ranks), with the default and with broadcast_buffers=False,
and prints one line per case: ok, or the error.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from nccl_runs import free_port
from torch.nn.parallel import DistributedDataParallel as DDP


def step(rank: int, world: int, backend: str, broadcast: bool, device_name: str, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device(device_name)
    torch.manual_seed(rank)
    discriminator = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                                  nn.LazyLinear(1)).to(device)
    discriminator(torch.randn(2, 3, 8, 8, device=device))  # materialise the lazy layer before the wrap
    ids = [device.index] if device.type == "cuda" else None
    discriminator = DDP(discriminator, device_ids=ids, broadcast_buffers=broadcast)
    criterion = nn.BCEWithLogitsLoss()
    try:
        for _ in range(3):
            real, fake = torch.randn(4, 3, 8, 8, device=device), torch.randn(4, 3, 8, 8, device=device)
            loss = criterion(discriminator(real), torch.ones(4, 1, device=device))
            loss = loss + criterion(discriminator(fake), torch.zeros(4, 1, device=device))
            loss.backward()
        results[rank] = "ok"
    except RuntimeError as error:
        results[rank] = str(error).splitlines()[0][:160]
    dist.destroy_process_group()


def probe(world: int, backend: str, broadcast: bool, device_name: str) -> str:
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(step, args=(world, backend, broadcast, device_name, free_port(), results), nprocs=world)
        return "; ".join(f"rank {rank}: {results.get(rank)}" for rank in range(world))


def main() -> int:
    device_name = "cuda:0" if torch.cuda.is_available() else "cpu"
    cases = [(1, "nccl" if device_name != "cpu" else "gloo"), (2, "gloo")]
    for world, backend in cases:
        for broadcast in (True, False):
            print(f"world {world} {backend} on {device_name}, broadcast_buffers={broadcast}: "
                  f"{probe(world, backend, broadcast, device_name)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
