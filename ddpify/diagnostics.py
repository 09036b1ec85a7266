"""The rule registry and how diagnostics are filtered and printed.

Codes are stable and never reused: DDP0xx setup and devices, DDP1xx model, DDP2xx data,
DDP3xx rank-0 side effects, DDP4xx numerics and performance, DDP9xx needs a person or
informs about the whole file.
"""
from dataclasses import dataclass
from enum import Enum
from typing import Sequence


class Severity(str, Enum):
    # A rewrite ddpify made; listed in --format json, not printed by default.
    EDIT = "edit"
    # Worth knowing, nothing to do: does not change the exit code.
    INFO = "info"
    # Needs a person: ddpify could not migrate this safely; exit code 1.
    WARNING = "warning"


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    summary: str
    why: str
    fix: str
    # Never reported any more; listed so that the code is never reused.
    retired: bool = False


@dataclass(frozen=True)
class Diagnostic:
    code: str
    line: int
    column: int
    message: str
    end_line: int = 0

    @property
    def severity(self) -> Severity:
        return RULES[self.code].severity

    def format(self, path: str) -> str:
        return f"{path}:{self.line}:{self.column}: {self.code} {self.message}"


_RULE_LIST = [
    Rule("DDP001", Severity.EDIT, "process-group setup inserted where the device is chosen",
         "Each torchrun process must join the process group and pin itself to LOCAL_RANK "
         "before it touches a GPU; under plain `python` nothing is initialised.",
         "Nothing to do."),
    Rule("DDP002", Severity.EDIT, "device move rewritten to this rank's device",
         "`.cuda()`, `\"cuda:0\"` and integer devices all point at GPU 0, so every rank "
         "would pile onto one GPU and a CPU-only machine would crash.",
         "Nothing to do."),
    Rule("DDP003", Severity.WARNING, "device chosen where the rank's device is not in scope",
         "The code moves data to a fixed GPU in a place that cannot see the `device` the "
         "setup block defines.",
         "Pass `device` into this function and use `.to(device)`."),
    Rule("DDP004", Severity.WARNING, "CUDA_VISIBLE_DEVICES set from inside the script",
         "torchrun gives each process its LOCAL_RANK; hiding GPUs from inside the script "
         "makes every rank see the same device.",
         "Remove the assignment and choose GPUs with CUDA_VISIBLE_DEVICES on the command line."),
    Rule("DDP005", Severity.EDIT, "process group torn down at exit",
         "A process group left open can hang the launcher at exit and leaks NCCL resources.",
         "Nothing to do."),
    Rule("DDP006", Severity.WARNING, "torch.accelerator device choice became CUDA-or-CPU (retired: the choice is kept)",
         "Retired: never reported. ddpify once replaced a torch.accelerator device choice "
         "with CUDA-or-CPU (an XPU, MPS or HPU would then run on the CPU) and warned so; it "
         "now keeps the script's choice and takes that device type at index LOCAL_RANK. The "
         "code stays listed because codes are never reused.",
         "Nothing to do; a `# ddpify: ignore[DDP006]` comment is reported as unused.",
         retired=True),
    Rule("DDP008", Severity.EDIT, "comparison of the device with a string keeps its meaning",
         "Under torchrun the device becomes this rank's torch.device (cuda:1), which never "
         "equals the string \"cuda\": cuDNN flags and pin_memory keyed on it would be lost.",
         "Nothing to do."),
    Rule("DDP009", Severity.EDIT, "setup in a function called more than once: the group is created once",
         "The device is chosen in a function that runs several times (a get_device() helper); "
         "a second init_process_group would raise.",
         "Nothing to do."),
    Rule("DDP101", Severity.EDIT, "model wrapped in DistributedDataParallel",
         "DDP all-reduces gradients during backward so that every rank applies the same update.",
         "Nothing to do."),
    Rule("DDP102", Severity.EDIT, "nn.DataParallel replaced by DistributedDataParallel",
         "DataParallel runs one process that scatters to all GPUs; under torchrun each "
         "process owns one GPU, so DataParallel would replicate onto GPUs other ranks own.",
         "Nothing to do."),
    Rule("DDP103", Severity.EDIT, "raw model reached through `.module`",
         "A DDP wrapper prefixes every state_dict key with `module.`; checkpoints must hold "
         "the unwrapped model so that they load without DDP.",
         "Nothing to do."),
    Rule("DDP104", Severity.INFO, "BatchNorm statistics are per rank",
         "Each rank normalises over its own shard of the batch; with small per-GPU batches "
         "this hurts accuracy.",
         "Run ddpify with --sync-batchnorm to convert to SyncBatchNorm before wrapping."),
    Rule("DDP105", Severity.INFO, "submodule unused in forward: DDP told to expect unused parameters",
         "DDP waits for a gradient for every parameter; one that never receives a gradient "
         "makes the next iteration fail, so the wrap passes find_unused_parameters=True, "
         "which costs an extra pass over the autograd graph each step.",
         "Remove the unused submodule, then drop find_unused_parameters=True."),
    Rule("DDP106", Severity.EDIT, "device move of the wrapped model dropped",
         "Moving a DDP model (`.cpu()` to save a checkpoint, then `.to(device)` back) gives it "
         "new parameters that DDP's gradient hooks do not watch: gradients stop being "
         "synchronised without an error. The model stays on its device.",
         "Nothing to do; load the checkpoint with map_location."),
    Rule("DDP201", Severity.EDIT, "DistributedSampler carries the loader's shuffle",
         "Without a DistributedSampler every rank trains on the whole dataset, so an epoch "
         "does N times the work and the ranks see the same batches.",
         "Nothing to do."),
    Rule("DDP202", Severity.EDIT, "sampler.set_epoch(epoch) at the top of the epoch loop",
         "DistributedSampler seeds its shuffle with the epoch; without set_epoch every epoch "
         "repeats the same order.",
         "Nothing to do."),
    Rule("DDP203", Severity.INFO, "evaluation loader left unsharded: every rank evaluates the full set",
         "ddpify shards an evaluation only when it can gather everything the loop leaves "
         "behind (sums of numbers, batch counts, per-batch lists) and the loop runs without "
         "gradients; the message says what stopped it. Whole, the figures stay exact but "
         "every rank does the whole evaluation.",
         "Fine as is; to shard it, keep the figures as sums (or use a metric that syncs "
         "across ranks)."),
    Rule("DDP204", Severity.WARNING, "batch_sampler= cannot be sharded automatically",
         "A custom batch sampler decides which samples each batch holds; ddpify cannot "
         "split it between ranks without changing its meaning.",
         "Make the batch sampler rank-aware (take rank and world size) or use sampler=."),
    Rule("DDP205", Severity.WARNING, "IterableDataset is not sharded by DistributedSampler",
         "Samplers do not apply to iterable datasets; every rank would stream the same data.",
         "Shard inside __iter__ with torch.distributed.get_rank() and get_world_size()."),
    Rule("DDP206", Severity.INFO, "global batch size grows with the world size",
         "Each rank draws batch_size samples, so one step consumes batch_size x world_size "
         "samples; the learning rate may need scaling.",
         "Scale the learning rate, or run ddpify with --keep-global-batch."),
    Rule("DDP207", Severity.WARNING, "existing sampler= left as is",
         "A custom sampler decides the order on every rank; ddpify cannot shard it safely.",
         "Wrap the sampler's indices with DistributedSampler or make it rank-aware."),
    Rule("DDP208", Severity.WARNING, "batches sliced by hand: every rank trains on the full data",
         "The loop cuts batches out of tensors itself, so no sampler can shard it; each rank "
         "would train on every sample and an epoch would do N times the work.",
         "Use a DataLoader over a TensorDataset, or shard the tensors by rank so that every "
         "rank runs the same number of batches (e.g. keep len(x) // world_size * world_size "
         "samples, then x[rank::world_size])."),
    Rule("DDP209", Severity.EDIT, "one process per machine downloads the dataset; the others wait",
         "Every rank would download into the same directory at once and could read a "
         "half-written file.",
         "Nothing to do."),
    Rule("DDP210", Severity.WARNING, "training loader not sharded: add a DistributedSampler by hand",
         "ddpify could not rewrite this loader safely (its dataset, sampler or arguments are "
         "built where the distributed setup is not in scope, or in a form it cannot read), so "
         "every rank would train on the whole dataset.",
         "Pass `sampler=DistributedSampler(dataset)` when distributed (and drop shuffle=), "
         "and call sampler.set_epoch(epoch) at the top of each epoch."),
    Rule("DDP211", Severity.WARNING, "no epoch loop found for set_epoch",
         "DistributedSampler shuffles with a seed derived from the epoch; without "
         "set_epoch(epoch) every epoch repeats the same order.",
         "Call sampler.set_epoch(epoch) at the start of every epoch."),
    Rule("DDP212", Severity.WARNING, "dataset download may race between ranks",
         "Every rank downloads into the same directory at once; ddpify could not add the "
         "barrier because the distributed setup is not in scope here.",
         "Download on local rank 0 first: `if local_rank != 0: dist.barrier()` before, and "
         "`if local_rank == 0: dist.barrier()` after."),
    Rule("DDP213", Severity.WARNING, "a loader built for training is also used for evaluation",
         "The same loader (or the function that builds it) feeds training and an evaluation "
         "loop; its DistributedSampler shards both, so each rank evaluates 1/N of the data "
         "and the figures rank 0 prints are its shard's only.",
         "Build the evaluation loader without the sampler, or all-reduce the evaluation sums "
         "and counts before printing them."),
    Rule("DDP214", Severity.EDIT, "random_split drawn alike on every rank",
         "The script never seeds torch, so each rank would draw its own train/validation "
         "split: the ranks' shards would overlap and validation samples would leak into "
         "training. Under torchrun the split uses a generator seeded the same on every rank.",
         "Nothing to do; seed it yourself (generator=torch.Generator().manual_seed(s)) to "
         "choose the split."),
    Rule("DDP215", Severity.EDIT, "evaluation loader sharded: whole batches in turn, none padded",
         "Every rank evaluating the whole set wastes (N-1)/N of the evaluation; "
         "DistributedSampler would pad the last round with repeated samples, so counts and "
         "accuracies would drift. Each rank takes the one-process batches r, r + N, ..., so "
         "every sample is seen once and each batch is the batch one process sees.",
         "Nothing to do; run ddpify with --no-shard-eval to keep the whole set on every rank."),
    Rule("DDP216", Severity.EDIT, "evaluation figures gathered from every rank after the loop",
         "Each rank summed its own batches; the sums, batch counts and per-batch lists are "
         "gathered once, right after the loop, so every rank prints, compares and saves the "
         "figures one process would (best checkpoint, early stopping, LR on plateau agree).",
         "Nothing to do."),
    Rule("DDP217", Severity.EDIT, "batches cut by hand: each rank takes every N-th batch",
         "The loop slices its batches out of tensors itself, so no sampler can shard it; its "
         "range of batch starts is split instead (rank_share), with the same number of "
         "batches on every rank so that no rank waits for a step the others skip. Every rank "
         "must hold the same data in the same order: a shuffle comes from a seeded generator.",
         "Nothing to do."),
    Rule("DDP219", Severity.EDIT, "random batches drawn by hand: each rank seeds its own draws",
         "The training loop draws its batches at random (torch.randint in a get_batch()), so "
         "no sampler can shard it, and with one seed every rank would draw the same batches. "
         "Right before training each rank moves torch's generator to the script's seed plus "
         "its rank, so the ranks draw different batches and together see N times the data of "
         "one process per step. As a group of one nothing changes.",
         "Nothing to do. Scale the number of steps (or the learning rate) for the larger "
         "global batch if you want the original's schedule."),
    Rule("DDP218", Severity.WARNING, "DataLoader built inside a dict or list: not sharded",
         "`{split: DataLoader(...) for split in ...}` gives the training loop a loader that "
         "has no name of its own, so ddpify cannot give it a DistributedSampler (nor tell "
         "the training split from the validation one).",
         "Build each loader by name (train_loader = DataLoader(..., sampler=train_sampler)), "
         "or pass sampler=DistributedSampler(...) for the training split by hand."),
    Rule("DDP301", Severity.EDIT, "output only on rank 0",
         "Every rank runs the same code, so each print, log line and progress bar would "
         "appear once per process.",
         "Nothing to do."),
    Rule("DDP302", Severity.EDIT, "files written only on rank 0",
         "Ranks writing the same file race and can leave a corrupt checkpoint.",
         "Nothing to do."),
    Rule("DDP303", Severity.EDIT, "torch.load maps tensors to this rank's device",
         "A checkpoint saved from GPU 0 loads onto GPU 0 on every rank unless map_location "
         "says otherwise.",
         "Nothing to do."),
    Rule("DDP304", Severity.EDIT, "other ranks log errors only",
         "Every rank logs the same lines, warnings included; raising the level once on the "
         "other ranks to ERROR keeps the errors, which may be specific to one rank, and leaves "
         "every logging call as it was.",
         "Nothing to do; lower ERROR to WARNING if your warnings differ per rank."),
    Rule("DDP305", Severity.EDIT, "progress bar shown only on rank 0",
         "Each rank would draw its own bar over the same terminal line.",
         "Nothing to do."),
    Rule("DDP306", Severity.EDIT, "experiment tracker created and used only on rank 0",
         "A TensorBoard writer or wandb run per rank logs every figure N times into N runs.",
         "Nothing to do."),
    Rule("DDP307", Severity.WARNING, "rank-0-only writer used where its guard cannot follow",
         "ddpify guards the statements that create and use a file, TensorBoard writer or wandb "
         "run; this use is part of a larger statement (an argument to a function, say), so "
         "guarding it would skip other work and leaving it would fail on ranks without the "
         "object. The object is left on every rank.",
         "Create it only on rank 0 (`writer = SummaryWriter() if is_main else None`) and "
         "skip its uses when it is None."),
    Rule("DDP308", Severity.EDIT, "the model's run moved out of a print only rank 0 makes",
         "Guarding the print as it stands would run the model (or an evaluation that gathers "
         "its figures) on rank 0 alone, and a DDP forward or a gather on one rank waits "
         "forever for the others. The call runs on every rank, into a name, before the "
         "print; where it cannot be moved (inside a comprehension) the print stays on every "
         "rank and this is a warning.",
         "Nothing to do."),
    Rule("DDP309", Severity.EDIT, "barrier before reading a file rank 0 wrote",
         "Only rank 0 saves; the other ranks would read the checkpoint before it exists, or "
         "while it is half written.",
         "Nothing to do."),
    Rule("DDP310", Severity.EDIT, "folder named from the clock or a temporary folder chosen by rank 0",
         "Each rank would name its own folder (datetime.now(), uuid4(), mkdtemp(), "
         "TemporaryDirectory()): rank 0 writes into its folder and a rank that reads from the "
         "folder it named finds nothing there. Rank 0's name is broadcast to the others where "
         "it is made, and a temporary folder is left only when every rank is done with it. "
         "Across machines the folder must be on a file system every rank sees.",
         "Nothing to do on one machine; on several, keep run folders on shared storage."),
    Rule("DDP311", Severity.WARNING, "prints or writes on every rank: the helper does more than that",
         "This function of the project's own modules prints or writes files, but it also "
         "does work every rank must do (it runs the model, or calls something ddpify cannot "
         "see into), so the call stays on every rank, and so does its output: every rank "
         "prints, and every rank writes the same file. ddpify does not rewrite the "
         "project's other modules.",
         "In the helper, print only on rank 0: `if not dist.is_initialized() or "
         "dist.get_rank() == 0: print(...)`."),
    Rule("DDP401", Severity.EDIT, "gradient accumulation skips the all-reduce on micro-batches",
         "Without no_sync() DDP all-reduces gradients on every micro-batch, not only before "
         "the optimizer step.",
         "Nothing to do."),
    Rule("DDP402", Severity.EDIT, "epoch figures summed across ranks before they are used",
         "Each rank trains on its own shard, so its running loss and counts cover 1/N of the "
         "epoch; one all-reduce per epoch gives the figures the original printed.",
         "Nothing to do."),
    Rule("DDP403", Severity.EDIT, "per-process batch size divided by the world size",
         "With --keep-global-batch each rank draws batch_size // world_size samples, so one "
         "step still consumes the original batch (rounded down to a multiple of the world "
         "size) and the learning rate needs no change.",
         "Nothing to do; make batch_size a multiple of the world size to keep it exact."),
    Rule("DDP404", Severity.WARNING, "gradient accumulation not wrapped in no_sync()",
         "ddpify found an optimizer step under a condition but could not tell which forward "
         "and backward passes belong to the micro-batches, so every micro-batch all-reduces.",
         "Wrap forward and backward of the micro-batches that do not step in `model.no_sync()`."),
    Rule("DDP900", Severity.INFO, "already distributed: left unchanged",
         "The script already initialises a process group or wraps a model in DDP.",
         "Nothing to do."),
    Rule("DDP901", Severity.INFO, "no training code found: left unchanged",
         "ddpify found no optimizer step, backward pass or DataLoader to migrate.",
         "Nothing to do."),
    Rule("DDP902", Severity.WARNING, "rank-divergent control flow may hang a collective",
         "A break or return decided on a value only one rank has leaves the other ranks "
         "waiting in the next all-reduce.",
         "Decide on a value all ranks share (all-reduce it first), or decide on every rank."),
    Rule("DDP903", Severity.WARNING, "could not find where the model reaches its device",
         "DDP must wrap the model after it is on its device and before training; ddpify "
         "could not tell where that is.",
         "Wrap the model yourself: `model = DDP(model, device_ids=[local_rank])`."),
    Rule("DDP904", Severity.WARNING, "no DataLoader that ddpify can shard feeds the training: left single-process",
         "Every training step takes data the script slices or builds itself (or the whole "
         "data set at once, or from loaders kept in a dict), so no DistributedSampler can be "
         "added to it. Wrapping the model in "
         "DDP would only make every rank repeat the same work; full-batch training gains "
         "nothing from DDP at all.",
         "Shard the data by rank yourself (x[rank::world_size], the same number of steps on "
         "every rank) and wrap the model in DDP, or keep this script on one process."),
    Rule("DDP905", Severity.WARNING, "training code that runs only when another file calls it: left unchanged",
         "Nothing in this module runs it: a script elsewhere imports it (a Trainer class, an "
         "engine's train_one_epoch). Its prints, saves and loaders would run on every rank, "
         "and the model it trains may never be wrapped.",
         "Migrate the script that runs the training, then guard this module's output with "
         "`if not dist.is_initialized() or dist.get_rank() == 0:` and give its training loader "
         "a DistributedSampler (with set_epoch) by hand."),
    Rule("DDP910", Severity.WARNING, "self-check: a device move of the original is missing from the output",
         "After migrating, ddpify re-reads its output (safe mode) and counts the device moves "
         "(`.cuda()`, `.to(...)`, `.cpu()`, `.half()`) of each name in the original and in the "
         "output. Fewer in the output means a statement of yours was deleted: a model wrapped "
         "before it reaches its GPU makes DDP raise on the first GPU, and a tensor left behind "
         "fails where it is used.",
         "Put the move back where it was and move the `DDP(...)` wrap below it."),
    Rule("DDP911", Severity.WARNING, "self-check: the wrap does not follow every assignment and move of the model",
         "DDP must wrap the model after it reaches its device and before it trains, on every "
         "path: a move after the wrap gives the model parameters DDP's hooks do not watch, and a "
         "wrap inside one branch (a fresh model) leaves the other (a model resumed from a "
         "checkpoint) unwrapped.",
         "Move `if distributed: model = DDP(model, ...)` below the last assignment and move of "
         "the model, after the branches merge, and above the training loop."),
    Rule("DDP912", Severity.WARNING, "self-check: a loader is neither sharded nor reported",
         "Without a DistributedSampler every rank goes through the whole dataset, and a "
         "DistributedSampler that shuffles repeats one order every epoch unless set_epoch is "
         "called; the output has a loader with neither a distributed sampler nor a diagnostic "
         "that explains it, or such a sampler without set_epoch.",
         "Pass `sampler=DistributedSampler(dataset) if distributed else None` (and "
         "`shuffle=sampler is None`), and call `sampler.set_epoch(epoch)` at the top of each epoch."),
    Rule("DDP913", Severity.WARNING, "self-check: output written on every rank",
         "Once the process group is joined every rank runs the same code; a print, save or "
         "file write that no rank-0 guard encloses (nor guards every call of its function) "
         "runs once per process, and ranks writing one file race.",
         "Put the statement under `if is_main:`, or call the function that holds it only there."),
    Rule("DDP914", Severity.WARNING, "self-check: importing the module joins a process group",
         "The original kept its work under `if __name__ == \"__main__\":`, so importing it was "
         "free; in the output the process group is created at import time.",
         "Move the setup block into the `__main__` block or into the function it calls."),
    Rule("DDP915", Severity.WARNING, "self-check: a string device became a torch.device",
         "The original holds its device as a string; code that reads it as one "
         "(`torch.autocast(device_type=device)`, `device.startswith(\"cuda\")`) raises once it "
         "is a torch.device.",
         "Keep the string: `device = f\"cuda:{local_rank}\"` (or give the torch.device another name)."),
    Rule("DDP920", Severity.WARNING, "unused suppression comment",
         "A `# ddpify: ignore[CODE]` comment silences a diagnostic on its line or its "
         "statement; once the code changes (or ddpify learns to migrate the line) the comment "
         "silences nothing and would hide a future diagnostic there. Reported by --check only, "
         "like ruff's RUF100, so that writing a script never fails on a stale comment.",
         "Remove the comment, or the codes in it that the message names."),
]

RULES = {rule.code: rule for rule in _RULE_LIST}


def is_selected(code: str, select: Sequence[str], ignore: Sequence[str]) -> bool:
    """`--select` and `--ignore` take full codes or prefixes such as DDP2."""
    if select and not any(code.startswith(prefix) for prefix in select):
        return False
    return not any(code.startswith(prefix) for prefix in ignore)


def unknown_codes(codes) -> tuple:
    """Codes or prefixes that select no rule: a typo (DDP2O4) would silently hide warnings."""
    return tuple(code for code in codes if not any(known.startswith(code) for known in RULES))


def explain(code: str) -> str:
    rule = RULES[code]
    silence = (f"To keep it on one line you have checked: `# ddpify: ignore[{rule.code}]` on "
               "that line or on the first line of its statement (or a bare `# ddpify: ignore` "
               "for every code there); --check reports a comment that silences nothing "
               "(DDP920).\n" if rule.severity is not Severity.EDIT and not rule.retired else "")
    return (
        f"{rule.code} ({rule.severity.value}): {rule.summary}\n\n"
        f"Why: {rule.why}\n\nFix: {rule.fix}\n"
        + (f"\n{silence}" if silence else "")
    )
