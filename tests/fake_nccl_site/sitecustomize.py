"""A fake NCCL for a CPU run under torchrun (tests/test_fake_nccl.py), loaded by `site` at start-up.

Inert unless DDPIFY_FAKE_NCCL names a log file. On the CPU machines where the tests run, a
migrated script takes its Gloo branch, where a collective takes any CPU tensor; on a GPU
machine the same script joins NCCL, which takes only tensors on the rank's own GPU ("No
backend type associated with device type cpu"). This shim makes a CPU run fail where the GPU
run would:

* Each tensor is marked as being where it would be on a GPU machine: on the host (made by a
  factory without `device=`, by `.cpu()`, or `device="cpu"` written as a literal), or on the
  device (made with `device=<the script's device>`, moved by `.to(device)` / `.cuda()`, or
  computed from such a tensor: a model's output, its parameters once the model is moved).
  The marks are carried by a TorchFunctionMode through every torch operation.
* `init_process_group` is read as the GPU machine would run it: `"nccl" if cuda else
  "gloo"` and `get_default_backend_for_device(device)` join NCCL alone; `"cpu:gloo,cuda:nccl"`
  joins both (CPU tensors go through Gloo). `dist.get_backend()` then answers that backend to
  the script, and `torch.accelerator.current_accelerator()` answers the script's own device,
  so that the emitted helpers take the branch they take on the GPU machine.
* In a group with NCCL alone, a collective (all_reduce, broadcast, all_gather, reduce,
  gather, scatter, reduce_scatter, all_to_all, send/recv) handed a tensor marked as on the
  host raises, as NCCL does. A DistributedDataParallel built around a module with a parameter
  on the host (DDP over NCCL cannot reduce CPU gradients) is logged as "cpu wrap", not raised:
  a script that moves its model only `if use_cuda:` leaves it on the CPU in this run alone.
* An operation that mixes a host tensor with elements and a device tensor (which raises
  "Expected all tensors to be on the same device" there) is logged as "mixed", once a line:
  an audit's lead, not a test's verdict (a move under `if use_cuda:` is skipped here alone).
* `torch.load` called from the script's own files without map_location (by keyword or as
  its second argument) raises: on the GPU machine every rank would restore what was saved
  on `cuda:0` onto `cuda:0`.

Each finding is also appended to the log as a JSON line, so a test reads what was found even
where the script caught the exception.
"""
import json
import linecache
import os
import sys

LOG_VAR = "DDPIFY_FAKE_NCCL"
MARK = "_ddpify_on"
HOST, DEVICE = "host", "device"
TENSOR_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
                      "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
                      "all_to_all_single", "send", "recv", "isend", "irecv")


def _script_frame(depth: int = 2):
    """The first frame outside torch and this file: the script's own line."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if "torch" not in name.split(os.sep) and name != __file__ and not name.startswith("<"):
            return frame
        frame = frame.f_back
    return None


def _call_text(frame) -> str:
    """The source text of the call the frame is making (all its lines: black splits calls)."""
    if frame is None:
        return ""
    try:
        start, end, _, _ = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (IndexError, ValueError):
        start = end = None
    start = start or frame.f_lineno
    lines = linecache.getlines(frame.f_code.co_filename)
    return "".join(lines[start - 1:(end or start)])


def _where(frame) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"


# The run's state: the log, the backend the GPU machine would join (None: Gloo alone).
STATE: dict = {"log": None, "backend": None}
# Operations that take tensors of two devices on a GPU machine: copies between them, CPU
# indices into a GPU tensor, the attribute plumbing of `param.data = ...`.
CROSS_DEVICE = frozenset({"copy_", "__getitem__", "__setitem__", "index_put_", "__get__", "__set__", "set_",
                          "_has_compatible_shallow_copy_type", "to", "cpu", "cuda", "type_as", "data_ptr"})
MIXED_SEEN: set = set()


def _log(kind: str, message: str, frame) -> None:
    record = {"kind": kind, "where": _where(frame), "rank": os.environ.get("RANK", "-"), "message": message}
    with open(STATE["log"], "a") as out:
        out.write(json.dumps(record) + "\n")


def _find(kind: str, message: str, frame) -> None:
    _log(kind, message, frame)
    raise RuntimeError(f"fake NCCL ({_where(frame)}): {message}")


def _tensors(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _place_of_device(device) -> str:
    """Where `device=X` / `.to(X)` puts a tensor on the GPU machine: the script's own device (a
    variable, whatever it holds on this CPU run), unless "cpu" is written in the call."""
    import torch
    kind = device.type if isinstance(device, torch.device) else device
    if isinstance(kind, str) and kind.split(":")[0] == "cpu":
        text = _call_text(_script_frame(1))
        if '"cpu"' in text or "'cpu'" in text:
            return HOST
    return DEVICE


def _placed_by_to(args, kwargs, inputs):
    """`.to(...)`: a device (or a tensor's place) given moves it; a dtype alone keeps it."""
    import torch
    for value in [*args[1:], kwargs.get("device"), kwargs.get("other")]:
        if isinstance(value, torch.Tensor):
            return getattr(value, MARK, None)
        if isinstance(value, (str, torch.device, int)) and not isinstance(value, bool):
            return _place_of_device(value)
    return getattr(inputs[0], MARK, None) if inputs else None


def _place_of_result(func, args, kwargs):
    """A moved tensor's new place; else the device if any input is there (a model's output),
    the place `device=` names for a factory, the host for a factory without one."""
    name = getattr(func, "__name__", "")
    inputs = _tensors((args, kwargs))
    if name in ("cpu", "cuda"):
        return HOST if name == "cpu" else DEVICE
    if name == "to":
        return _placed_by_to(args, kwargs, inputs)
    marks = {getattr(tensor, MARK, None) for tensor in inputs}
    if DEVICE in marks:
        if HOST in marks and name not in CROSS_DEVICE:
            _log_mixed(name, inputs)
        return DEVICE
    if kwargs.get("device") is not None:
        return _place_of_device(kwargs["device"])
    return HOST if HOST in marks or not inputs else None


def _log_mixed(name: str, inputs: list) -> None:
    """An operation on the device handed a host tensor with elements (a CPU scalar is allowed):
    "Expected all tensors to be on the same device" on the GPU machine. Logged, once a line."""
    if not any(getattr(tensor, MARK, None) == HOST and tensor.dim() > 0 for tensor in inputs):
        return
    frame = _script_frame(2)
    key = (name, _where(frame))
    if key not in MIXED_SEEN:
        MIXED_SEEN.add(key)
        _log("mixed", f"{name} mixes a CPU tensor with tensors on the device", frame)


def _mark(result, place) -> None:
    if place is None:
        return
    for tensor in _tensors(result):
        try:
            setattr(tensor, MARK, place)
        except (AttributeError, RuntimeError):
            continue  # a tensor that takes no attribute (rare) stays unmarked: never a finding


def _watch_placement() -> None:
    from torch.overrides import TorchFunctionMode

    class Placement(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            _mark(result, _place_of_result(func, args, kwargs))
            return result

    Placement().__enter__()  # for the whole run: every operation of the script carries marks


def _watch_the_group() -> None:
    """The backend as the GPU machine joins it; the script's questions answered for it."""
    import torch
    import torch.distributed as dist
    original_init, original_backend = dist.init_process_group, dist.get_backend
    original_accelerator = torch.accelerator.current_accelerator

    def init_process_group(*args, **kwargs):
        frame = _script_frame()
        text = _call_text(frame)
        if "cpu:gloo" in text:
            STATE["backend"] = "cpu:gloo,cuda:nccl"
        elif "nccl" in text or "get_default_backend_for_device" in text:
            STATE["backend"] = "nccl"
        _log("group", STATE["backend"] or "gloo", frame)  # not a finding: the shim ran, and read this
        return original_init(*args, **kwargs)

    def get_backend(group=None):
        return STATE["backend"] or original_backend(group)

    def current_accelerator(*args, **kwargs):
        if STATE["backend"] == "nccl" and "torch" not in sys._getframe(1).f_code.co_filename.split(os.sep):
            return torch.device("cpu")  # the script's own device here, marked as the GPU
        return original_accelerator(*args, **kwargs)

    dist.init_process_group, dist.get_backend = init_process_group, get_backend
    torch.accelerator.current_accelerator = current_accelerator


def _watch_collective(name: str) -> None:
    import torch.distributed as dist
    original = getattr(dist, name)

    def collective(*args, **kwargs):
        if STATE["backend"] == "nccl" and any(getattr(t, MARK, None) == HOST for t in _tensors((args, kwargs))):
            _find("host tensor", f"dist.{name} handed a CPU tensor in an NCCL group "
                  "(No backend type associated with device type cpu)", _script_frame())
        return original(*args, **kwargs)

    setattr(dist, name, collective)


def _watch_wraps() -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel
    original = DistributedDataParallel.__init__
    original_parameter = torch.nn.Parameter.__new__

    def parameter(cls, data=None, requires_grad=True):
        # A Parameter is a new tensor object around its data: it is where its data is.
        made = original_parameter(cls, data, requires_grad)
        _mark(made, HOST if data is None else getattr(data, MARK, None))
        return made

    torch.nn.Parameter.__new__ = parameter

    def init(self, module, *args, **kwargs):
        if STATE["backend"] == "nccl" and any(getattr(p, MARK, None) == HOST for p in module.parameters()):
            # Logged, not raised: a script that moves its model only `if use_cuda:` leaves it on
            # the CPU here and moves it on the GPU machine, which this run cannot tell apart.
            _log("cpu wrap", "DistributedDataParallel wraps a module with parameters on the CPU "
                 "in an NCCL group", _script_frame())
        original(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = init


def _watch_loads() -> None:
    import torch
    original = torch.load
    own_files = os.getcwd() + os.sep

    def load(f, *args, **kwargs):
        frame = sys._getframe(1)
        if frame.f_code.co_filename.startswith(own_files) and not args and "map_location" not in kwargs:
            _find("load", "torch.load without map_location: every rank restores onto the GPU it was saved "
                  "from (cuda:0)", frame)
        return original(f, *args, **kwargs)

    torch.load = load


def _install(log_path: str) -> None:
    STATE["log"] = log_path
    _watch_placement()
    _watch_the_group()
    for name in TENSOR_COLLECTIVES:
        _watch_collective(name)
    _watch_wraps()
    _watch_loads()


if os.environ.get(LOG_VAR):
    _install(os.environ[LOG_VAR])
