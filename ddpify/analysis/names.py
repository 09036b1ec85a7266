"""Qualified names of the torch APIs ddpify recognises, in one place.

Matching goes through the import table analysis.py builds, so `DL`, `data.DataLoader` and
`torch.utils.data.DataLoader` all resolve to the same name below.
"""
import builtins
import functools
from collections.abc import Mapping
from typing import Optional

DATALOADER = "torch.utils.data.DataLoader"
# PyTorch Geometric's graph loaders are DataLoader subclasses that only set collate_fn and
# hand sampler=, shuffle= and the rest to DataLoader: a DistributedSampler shards them as it
# shards DataLoader (PyG's own multi-GPU examples do so).
GRAPH_DATALOADERS = frozenset({
    "torch_geometric.loader.DataLoader", "torch_geometric.loader.dataloader.DataLoader",
    "torch_geometric.data.DataLoader", "torch_geometric.loader.DenseDataLoader",
    "torch_geometric.loader.dense_data_loader.DenseDataLoader", "torch_geometric.data.DenseDataLoader",
})
DATALOADER_ALIASES = frozenset({DATALOADER, "torch.utils.data.dataloader.DataLoader"}) | GRAPH_DATALOADERS
DATASET = frozenset({"torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset"})
ITERABLE_DATASET = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
DISTRIBUTED_SAMPLER = "torch.utils.data.distributed.DistributedSampler"
# Words in a loader's name (or its dict key, or its dataset's name) that say it evaluates.
EVALUATION_WORDS = ("val", "test", "eval", "dev")


def has_role_word(words: str) -> bool:
    """A training or an evaluation word in a name: what trains_by_look reads first."""
    words = words.lower()
    return "train" in words or any(word in words for word in EVALUATION_WORDS)


def trains_by_look(words: str, shuffles: bool) -> bool:
    """A loader whose loops are out of sight (another module iterates it): `train` in its
    name, key or dataset's name says it trains, an evaluation word says it does not, and
    otherwise a shuffle on says it trains."""
    words = words.lower()
    if "train" in words:
        return True
    if any(word in words for word in EVALUATION_WORDS):
        return False
    return shuffles
# random_split where it is defined too (`from torch.utils.data.dataset import random_split`, as
# pytorch/tutorials' text classification imports it).
RANDOM_SPLITS = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})
# Containers of submodules a forward may pick one entry of (`self.heads[task]`).
MODULE_CONTAINERS = frozenset({"torch.nn.ModuleDict", "torch.nn.ModuleList"})
# Data fetched or unpacked by hand: like `download=True`, once per machine before the rest.
FETCH_OR_UNPACK = frozenset({
    "urllib.request.urlretrieve", "torch.hub.download_url_to_file", "shutil.unpack_archive",
    "tarfile.open", "zipfile.ZipFile", "torchvision.datasets.utils.download_and_extract_archive",
    "torchvision.datasets.utils.download_url", "torchvision.datasets.utils.extract_archive",
})
# Reads from the network: a function that calls one and opens a file for writing downloads
# that file (`with urlopen(url) as response, open(dest, "wb") as out: ...` over the chunks).
NETWORK_READS = frozenset({
    "urllib.request.urlopen", "requests.get", "requests.request", "httpx.get", "httpx.stream",
})
MANUAL_SEEDS = frozenset({"torch.manual_seed", "torch.random.manual_seed"})
RANDOM_SAMPLER = frozenset(
    {"torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler"}
)
# torch's samplers that draw through their `generator` attribute: seeded alike, every rank
# draws the same indices (rules/data.py shards what they draw).
SAMPLERS_WITH_GENERATOR = frozenset(
    f"torch.utils.data.{module}{name}"
    for module in ("", "sampler.")
    for name in ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "SequentialSampler")
)

TORCH_DEVICE = "torch.device"
TORCH_SAVE = "torch.save"
TORCH_LOAD = "torch.load"
TORCH_COMPILE = "torch.compile"
CUDA_IS_AVAILABLE = "torch.cuda.is_available"
CUDA_SET_DEVICE = "torch.cuda.set_device"
# `with torch.cuda.device(i):` makes GPU i the current one while its block runs.
CUDA_DEVICE_CONTEXT = "torch.cuda.device"
CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"

DATA_PARALLEL = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
     "torch.nn.parallel.data_parallel.DataParallel"}
)
# The functional form, `data_parallel(module, inputs)`: a DataParallel forward in one call,
# over every visible GPU unless device_ids says otherwise.
DATA_PARALLEL_FUNCTION = frozenset(
    {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}
)
# DataParallel subclasses of packages that projects vendor under many paths, known by their
# class name: the synchronized-BatchNorm package's `DataParallelWithCallback` (`from
# sync_batchnorm import DataParallelWithCallback`, `from lib.nn import ...`), which takes the
# module first as DataParallel does and only adds a hook to its replicas.
DATA_PARALLEL_SUBCLASS_NAMES = frozenset({"DataParallelWithCallback"})
# Helpers that take a DataParallel and assert it is one: SynchronizedBatchNorm's
# `patch_replication_callback(model)` (it hooks DataParallel's replicate; DDP has no replicas).
DATA_PARALLEL_ONLY_HELPERS = frozenset({"patch_replication_callback"})
# That package's BatchNorm layers, synchronized across DataParallel's replicas only: under
# DDP they normalise per rank, as nn.BatchNorm does (their base is torch's _BatchNorm).
SYNCHRONIZED_BATCHNORM_NAMES = frozenset({"SynchronizedBatchNorm1d", "SynchronizedBatchNorm2d",
                                          "SynchronizedBatchNorm3d"})
# The imports that bring DataParallel in by name; removed once nothing uses them.
DATA_PARALLEL_IMPORTS = (
    ("torch.nn", "DataParallel", None),
    ("torch.nn.parallel", "DataParallel", None),
    ("torch.nn.parallel", "data_parallel", None),
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


# Optimizer libraries whose classes step a model's parameters as torch.optim's do
# (`from transformers import AdamW`, `bnb.optim.AdamW8bit`, `timm.optim.Lamb`,
# `apex.optimizers.FusedAdam`, `torch_optimizer.RAdam`, `lion_pytorch.Lion`): a capitalized
# name directly in one of these modules is an optimizer class. Their schedulers are functions
# (`get_linear_schedule_with_warmup`), and `transformers.Trainer` or `timm.optim.Lookahead`
# style wrappers are not listed by name below.
OTHER_OPTIMIZER_MODULES = (
    "transformers.optimization.", "timm.optim.", "apex.optimizers.", "bitsandbytes.optim.",
    "torch_optimizer.", "lion_pytorch.", "deepspeed.ops.adam.", "deepspeed.ops.lamb.",
)
OTHER_OPTIMIZER_CLASSES = frozenset({"transformers.AdamW", "transformers.Adafactor"})
NOT_OPTIMIZER_CLASSES = frozenset({"timm.optim.Lookahead", "transformers.optimization.AdafactorSchedule"})


# (A pure function of the name and the tables above: asked of every callee the analysis meets.)
@functools.lru_cache(maxsize=4096)
def is_optimizer_class(qualified: str) -> bool:
    """`torch.optim.SGD`: a class torch.optim itself names (not a scheduler, nor a class of
    one of its modules, such as `torch.optim.swa_utils.AveragedModel`); or an optimizer class
    of one of the optimizer libraries above (`transformers.AdamW`, `timm.optim.Lamb`)."""
    if qualified.startswith(OPTIMIZER_PREFIX):
        return not qualified.startswith(LR_SCHEDULER_PREFIX) and qualified[len(OPTIMIZER_PREFIX):][:1].isupper()
    if qualified in OTHER_OPTIMIZER_CLASSES:
        return True
    if qualified in NOT_OPTIMIZER_CLASSES:
        return False
    return any(qualified.startswith(prefix) and "." not in qualified[len(prefix):]
               and qualified[len(prefix):][:1].isupper() for prefix in OTHER_OPTIMIZER_MODULES)


def is_optimizer_module(qualified: str) -> bool:
    """`torch.optim` itself: `getattr(torch.optim, name)` picks one of its classes."""
    return qualified == OPTIMIZER_PREFIX[:-1]
CLIP_GRAD = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_"})
AUTOCAST = frozenset(
    {"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast",
     "torch.cpu.amp.autocast"}
)
GRAD_SCALER = frozenset({"torch.cuda.amp.GradScaler", "torch.amp.GradScaler"})

# Output and files that only rank 0 should produce (rules/side_effects.py).
PROGRESS_BARS = frozenset(
    {f"tqdm.{module}{name}" for module in ("", "auto.", "autonotebook.", "notebook.", "std.", "rich.")
     for name in ("tqdm", "trange")}
)
PROGRESS_WRITE = frozenset(f"{bar}.write" for bar in PROGRESS_BARS if bar.endswith("tqdm"))
OPEN = frozenset({"builtins.open", "io.open"})
# Printing by another name: a progress line written to stdout (`sys.stdout.write('\r...')`).
STDOUT_WRITES = frozenset({"sys.stdout.write", "sys.stdout.flush", "pprint.pprint"})
# Methods of a module (or of a part of it) that do not run its forward: reading or setting it up.
NOT_FORWARD = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules", "children",
    "named_children", "state_dict", "load_state_dict", "train", "eval", "to", "cuda", "cpu", "zero_grad",
    "apply", "requires_grad_", "half", "float", "double", "bfloat16", "register_buffer", "add_module", "get_submodule",
})
# A plot shown in a window: one window per rank (each blocking its rank until closed) where
# the original showed one; rank 0 alone shows it, as it alone prints.
SHOWN_ON_SCREEN = frozenset({"matplotlib.pyplot.show", "matplotlib.pyplot.pause"})
MAKE_DIRECTORIES = frozenset({"os.makedirs", "os.mkdir"})
# Files of a format opened as `open` opens them, with a mode ("w", "a", "x", "r+"), which
# write when it says so: HDF5 and archives. Unlike a text file, the other ranks cannot open
# os.devnull in their place.
FORMAT_OPENERS = frozenset({"h5py.File", "zipfile.ZipFile", "tarfile.open"})
# pathlib's methods that write: a path (`Path(d, "cfg.json")`, `run_dir / "log.txt"`, a
# parameter holding one) writes, makes or removes its file, on every rank unless rank 0 alone.
PATH_WRITING_METHODS = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir",
                                  "symlink_to", "hardlink_to"})
DUMP_TO_FILE = frozenset(
    {"json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump", "numpy.save", "numpy.savez",
     "numpy.savetxt", "numpy.savez_compressed", "shutil.copy", "shutil.copyfile",
     "shutil.copytree", "shutil.rmtree", "torchvision.utils.save_image",
     # Files copied, moved, renamed or removed: on every rank, the second rank finds the
     # file gone (FileNotFoundError) or a half-copied one.
     "shutil.copy2", "shutil.move", "os.rename", "os.replace", "os.remove", "os.unlink",
     "matplotlib.pyplot.savefig", "matplotlib.pyplot.imsave", "torch.onnx.export",
     "torch.jit.save", "torch.export.save"}
) | frozenset(  # other serialisers: joblib, MATLAB files, an OmegaConf (Hydra) config, an archive
     {"joblib.dump", "scipy.io.savemat", "omegaconf.OmegaConf.save", "shutil.make_archive"}
) | frozenset(  # weights written by safetensors (a state dict, a whole module, numpy arrays)
     {"safetensors.torch.save_file", "safetensors.torch.save_model", "safetensors.numpy.save_file",
      "safetensors.flax.save_file"}
) | frozenset(  # image files, through the imaging libraries samples are written with
     {"imageio.imwrite", "imageio.imsave", "imageio.mimwrite", "imageio.mimsave", "imageio.v2.imwrite",
      "imageio.v2.mimsave", "imageio.v3.imwrite", "cv2.imwrite", "scipy.misc.imsave", "skimage.io.imsave"}
) | frozenset(  # audio and video files: generated samples of a vocoder or a video model
     {"scipy.io.wavfile.write", "soundfile.write", "torchaudio.save", "librosa.output.write_wav",
      "torchvision.io.write_video", "torchvision.io.write_png", "torchvision.io.write_jpeg",
      "torchvision.io.write_file"}
)
# Calls that compile or export a module they are handed: a DDP wrapper is not scriptable
# (its forward takes *inputs), and the exported file should hold the model, not the wrapper.
MODEL_EXPORTERS = frozenset(
    {"torch.jit.trace", "torch.jit.script", "torch.jit.trace_module", "torch.onnx.export",
     "torch.export.export", "safetensors.torch.save_model", "mlflow.pytorch.log_model",
     "mlflow.pytorch.save_model"}
)
# Calls that run a model's forward to show it: a layer table, its FLOPs, a TensorBoard graph
# (`writer.add_graph(model, x)`, by method name: INSPECTING_METHODS). Handed the DDP wrapper,
# they would show the wrapper, and on rank 0 alone its forward would join collectives (the
# buffer broadcast) that no other rank makes: they are handed the module itself.
MODEL_INSPECTORS = frozenset({
    "torchinfo.summary", "torchsummary.summary", "torchsummaryX.summary", "thop.profile",
    "ptflops.get_model_complexity_info", "fvcore.nn.FlopCountAnalysis",
})
INSPECTING_METHODS = frozenset({"add_graph"})
# Of those, the ones that print their table: output, made by rank 0 alone.
PRINTING_INSPECTORS = frozenset({"torchinfo.summary", "torchsummary.summary", "torchsummaryX.summary"})
# Exporters whose result saves itself (`traced.save(path)`): a file write.
SELF_SAVING_EXPORTS = frozenset({"torch.jit.trace", "torch.jit.script", "torch.jit.trace_module"})
# Calls that make a Pillow image, which writes itself to a file with `.save(path)`
# (`Image.fromarray(array).save(path)`, `to_pil_image(tensor).save(path)`); ToPILImage makes
# the transform that makes one.
IMAGE_MAKERS = frozenset({
    "PIL.Image.fromarray", "PIL.Image.new", "PIL.Image.open", "PIL.Image.frombytes",
    "PIL.Image.frombuffer", "PIL.Image.merge", "PIL.Image.blend", "PIL.Image.composite",
    "torchvision.transforms.functional.to_pil_image",
})
IMAGE_TRANSFORM_MAKERS = frozenset({"torchvision.transforms.ToPILImage", "torchvision.transforms.v2.ToPILImage"})
# A value that differs between ranks run at once: a folder named from it must be rank 0's
# (rules/shared_names.py).
CLOCK_OR_CHANCE = frozenset(
    {"datetime.datetime.now", "datetime.datetime.today", "datetime.datetime.utcnow",
     "time.strftime", "time.time", "time.time_ns", "uuid.uuid1", "uuid.uuid4",
     "tempfile.mkdtemp", "secrets.token_hex"}
)
# Listings of a folder: their count (`len(glob.glob("runs/exp-*"))`) numbers the next run's
# folder, and differs between ranks that look while rank 0 is creating that folder.
FOLDER_LISTINGS = frozenset({"glob.glob", "glob.iglob", "os.listdir", "os.scandir"})
TEMPORARY_DIRECTORY = "tempfile.TemporaryDirectory"
SUMMARY_WRITER = frozenset(
    {"torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
     "tensorboardX.SummaryWriter", "tensorboard_logger.Logger",
     # The writers of event files under their other names: tensorboardX's and PyTorch's
     # low-level FileWriter, and TensorFlow's (TF1 `FileWriter`, TF2 `create_file_writer`,
     # used as `with writer.as_default(): tf.summary.scalar(...)`), which PyTorch scripts
     # keep in a Logger class of their own.
     "tensorboardX.FileWriter", "torch.utils.tensorboard.writer.FileWriter",
     "tensorflow.summary.FileWriter", "tensorflow.compat.v1.summary.FileWriter",
     "tensorflow.summary.create_file_writer", "tensorflow.compat.v2.summary.create_file_writer"}
)
# A visdom client draws into windows of a server all ranks share: one rank draws, as with a
# TensorBoard writer, or each rank's lines overwrite the others'.
VISDOM = frozenset({"visdom.Visdom"})
# tensorboard_logger's module functions: `configure(logdir)` opens an event file and
# `log_value(...)` writes to it; both on rank 0 only, like the statements of a SummaryWriter
# (a rank that never configured must not log either: the library raises then).
TENSORBOARD_LOGGER_CALLS = frozenset(
    f"tensorboard_logger.{name}" for name in ("configure", "log_value", "log_histogram", "log_images")
)
# MLflow's tracking functions: each rank would log into a run of its own (or the same run N
# times); rank 0 alone tracks, as with a TensorBoard writer.
MLFLOW_CALLS = frozenset(f"mlflow.{name}" for name in (
    "log_metric", "log_metrics", "log_param", "log_params", "log_artifact", "log_artifacts", "log_dict",
    "log_figure", "log_text", "log_image", "log_table", "log_input", "set_tag", "set_tags", "set_experiment",
    "start_run", "end_run", "pytorch.log_model", "pytorch.save_model"))
# Calls whose arguments name files or folders.
FILE_PATH_CALLS = OPEN | MAKE_DIRECTORIES | DUMP_TO_FILE | SUMMARY_WRITER | frozenset(
    {"torch.save", "torch.load", "os.path.join", "pathlib.Path", "os.listdir", "os.path.exists"}
)
WANDB_PREFIX = "wandb."
WANDB_INIT = "wandb.init"
LOGGING_BASIC_CONFIG = "logging.basicConfig"
GET_LOGGER = "logging.getLogger"
# Functions that write a file, called later where they are handed on as a value (a thread's
# target, a pool's task): torch.save and the writers above.
WRITERS_AS_VALUES = DUMP_TO_FILE | MAKE_DIRECTORIES | {TORCH_SAVE}
# Methods that write the path they are given, handed on bound (`Thread(target=model.save_pretrained,
# args=(folder,))`): a writer as well.
WRITING_METHODS_AS_VALUES = frozenset({"save_pretrained", "savefig", "to_csv", "to_json", "to_parquet"})
# Of those, the ones whose own value is None: on the other ranks, `None` in the write's place
# is what the write gave (a copy returns the path it wrote: not among them).
WRITERS_RETURNING_NONE = WRITERS_AS_VALUES - frozenset({
    "shutil.copy", "shutil.copyfile", "shutil.copy2", "shutil.copytree", "shutil.move",
    "shutil.make_archive", "torch.onnx.export"})

# Names the emitted script relies on; the module path is what AddImportsVisitor needs.
# What a DDP wrapper answers itself: reading anything else of a wrapped model needs `.module`.
# (Not `children()` or `modules()`: on the wrapper they hold the wrapper and its one child,
# so `list(net.children())[-1]` would be the whole model.)
WRAPPER_ATTRIBUTES = frozenset({
    "train", "eval", "parameters", "to", "cuda", "cpu", "zero_grad",
    "buffers", "requires_grad_", "apply", "half", "float", "double", "bfloat16", "forward",
    "no_sync", "module", "training", "type", "share_memory", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook",
})


# Calls that load a module, or change where imports look, only when the script runs.
DYNAMIC_IMPORTS = frozenset({
    "importlib.import_module", "builtins.__import__", "importlib.util.spec_from_file_location",
    "sys.path.insert", "sys.path.append", "sys.path.extend",
})

EMITTED_IMPORTS = {
    "os": ("os", None, None),
    "logging": ("logging", None, None),
    "torch": ("torch", None, None),
    "dist": ("torch.distributed", None, "dist"),
    "DDP": ("torch.nn.parallel", "DistributedDataParallel", "DDP"),
    "DistributedSampler": ("torch.utils.data.distributed", "DistributedSampler", None),
    "Subset": ("torch.utils.data", "Subset", None),
    "contextlib": ("contextlib", None, None),
    "itertools": ("itertools", None, None),
    "pickle": ("pickle", None, None),
    "io": ("io", None, None),
    "fully_shard": ("torch.distributed.fsdp", "fully_shard", None),
    "MixedPrecisionPolicy": ("torch.distributed.fsdp", "MixedPrecisionPolicy", None),
    "StateDictOptions": ("torch.distributed.checkpoint.state_dict", "StateDictOptions", None),
    "get_model_state_dict": ("torch.distributed.checkpoint.state_dict", "get_model_state_dict", None),
    "get_optimizer_state_dict": ("torch.distributed.checkpoint.state_dict", "get_optimizer_state_dict", None),
    "set_model_state_dict": ("torch.distributed.checkpoint.state_dict", "set_model_state_dict", None),
    "set_optimizer_state_dict": ("torch.distributed.checkpoint.state_dict", "set_optimizer_state_dict", None),
    "dcp": ("torch.distributed.checkpoint", None, "dcp"),
}


# --- the import table ----------------------------------------------------------------------
# One resolver for the three readers of imports: the analysis of the script (libcst), the
# effects of the project's other modules and the check for other frameworks (ast).
# `aliases` maps each name an import binds to what it stands for.
_BUILTINS = frozenset(dir(builtins))


def add_import(aliases: dict[str, str], module: str, asname: Optional[str]) -> None:
    """`import a.b` binds `a`; `import a.b as c` binds `c` to `a.b`."""
    if asname:
        aliases[asname] = module
    else:
        head = module.split(".")[0]
        aliases[head] = head


# What `from <library> import *` binds, of the names ddpify reads (each library's `__all__`):
# `from tqdm import *` then `pbar = tqdm(loader)` is the progress bar over the loader.
_DATA = ("DataLoader", "Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split",
         "Sampler", "BatchSampler", "RandomSampler", "SequentialSampler", "SubsetRandomSampler",
         "WeightedRandomSampler", "DistributedSampler", "get_worker_info", "default_collate")
_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "ASGD", "LBFGS", "NAdam", "RAdam", "RMSprop",
               "Rprop", "SparseAdam", "Optimizer", "lr_scheduler")
LIBRARY_STAR_EXPORTS: Mapping[str, tuple[str, ...]] = {
    "tqdm": ("tqdm", "trange"), "tqdm.auto": ("tqdm", "trange"), "tqdm.notebook": ("tqdm", "trange"),
    "torch.utils.data": _DATA, "torch.optim": _OPTIMIZERS,
}


def add_star_import(aliases: dict[str, str], module: str) -> None:
    """`from tqdm import *`: the names a library's `__all__` binds (LIBRARY_STAR_EXPORTS)."""
    for name in LIBRARY_STAR_EXPORTS.get(module, ()):
        aliases[name] = f"{module}.{name}"


def add_import_from(aliases: dict[str, str], module: str, name: str, asname: Optional[str]) -> None:
    """`from a import b as c` binds `c` (or `b`) to `a.b`."""
    aliases[asname or name] = f"{module}.{name}"


def qualify(dotted: str, aliases: Mapping[str, str]) -> str:
    """The full name of a dotted name: through the imports, else a builtin, else itself."""
    head, _, rest = dotted.partition(".")
    if head in aliases:
        return aliases[head] + ("." + rest if rest else "")
    if head in _BUILTINS:
        return "builtins." + dotted
    return dotted

# Layers that hold no parameters: one that forward never runs leaves no gradient missing,
# so it needs no find_unused_parameters (which costs a graph walk every step).
PARAMETERLESS_LAYERS = frozenset(f"torch.nn.{layer}" for layer in (
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Hardswish", "Hardsigmoid",
    "Hardtanh", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Softmin", "Softplus", "Softsign", "Tanhshrink",
    "Threshold", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "Flatten", "Unflatten", "Identity", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
))
