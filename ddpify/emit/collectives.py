"""The one object collective the emitted code uses: every rank's value, without numpy.

`dist.all_gather_object` and `dist.broadcast_object_list` turn their byte tensors back into
objects through `tensor.numpy()`, and torch does not install numpy: a migrated script would
crash in its first gather on a machine without it. This helper pickles into a uint8 tensor
on the device the process group's backend reads (the CPU for Gloo, the rank's accelerator
for NCCL) and back through `.tolist()`.

Rule: a tensor in the value (`running_loss += loss`, a CUDA tensor, summed across ranks) must
come back on this rank's device. Pickle restores a CUDA tensor on the device it left: rank 1's
share would land on `cuda:1` in rank 0's process, and `sum(shares)` would then fail on a real
GPU machine (two devices in one sum) while a CPU run under Gloo passes. So the value travels
as torch.save writes it, and torch.load puts each tensor that was on an accelerator on this
rank's own (CPU tensors stay on the CPU).
"""
from ddpify.emit.edits import Edits

NAME = "every_rank"
HELPER = '''\


def every_rank(value):
    """`value` from every rank, in rank order (dist.all_gather_object needs numpy)."""
    # Gloo reads the CPU; NCCL (and the other accelerator backends) the rank's own device.
    on_cpu = "gloo" in dist.get_backend()
    device = torch.device("cpu") if on_cpu else torch.accelerator.current_accelerator()
    sent = io.BytesIO()
    torch.save(value, sent)
    data = torch.frombuffer(bytearray(sent.getvalue()), dtype=torch.uint8).to(device)
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], device=device))
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    chunks = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(chunks, padded)

    def here(storage, location):  # a tensor another rank sent lands on this rank's device
        return storage if location == "cpu" else storage.to(device=device)

    return [torch.load(io.BytesIO(bytes(chunk[: int(size)].tolist())), map_location=here,
                       weights_only=False)
            for chunk, size in zip(chunks, sizes)]
'''


def use(edits: Edits) -> str:
    """Add the helper (once) and its imports; the name to call."""
    edits.add_helper(NAME, HELPER, "dist", "io", "torch")
    return NAME
