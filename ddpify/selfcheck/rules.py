"""The self-check's rules (DDP910-DDP917, DDP919, DDP922-DDP929, DDP932, DDP933, DDP935, DDP938,
DDP939, DDP941, DDP943, DDP947, DDP948, DDP949, DDP951-DDP957): what a second reading of ddpify's
own output can find wrong. The detection is in this package (gathers, loaders, models, output,
setup); the rules and their cases live here, beside it, rather than in ddpify/rules/, whose units
plan edits.
"""
from ddpify.diagnostics import Rule, Severity
from ddpify.rules.cases import TRAINING, Flags, Silent

RULES = (
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
         "checkpoint) unwrapped. Over a project (`-o OUT_DIR/`, `-i train.py`), the run also fails where it made "
         "the project join a process group and a module steps an optimizer but no module wraps a "
         "model (each rank trains its own copy): the finding names the optimizer step. Also a wrap "
         "of a module with no trainable parameter (a torch.nn loss or activation, or one frozen with "
         "`requires_grad_(False)` before the wrap): DDP raises when it is built.",
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
    Rule("DDP916", Severity.WARNING, "self-check: work every rank must do runs on rank 0 only",
         "A backward, a collective, a forward of the DDP-wrapped model (it broadcasts the "
         "model's buffers) or a sampler's set_epoch under a rank-0 guard (often a "
         "`with open(log)` block guarded as a whole with the training inside): rank 0 waits "
         "in DDP's all-reduce for ranks that never join it, and on NCCL the job hangs. Also a "
         "draw from a global random generator (a fresh model saved as 'pretrained' weights, "
         "noise written to a file) that only rank 0 makes before the data is drawn from the "
         "same generator: the ranks then build different datasets or splits, with no error.",
         "Guard only the writes: keep the training on every rank, and let the other ranks open "
         "`os.devnull` (`open(path if is_main else os.devnull, \"w\")`). For a draw: make it on "
         "every rank before the guard, or seed the generator again after the guarded block."),
    Rule("DDP915", Severity.WARNING, "self-check: a string device became a torch.device",
         "The original holds its device as a string; code that reads it as one "
         "(`torch.autocast(device_type=device)`, `device.startswith(\"cuda\")`) raises once it "
         "is a torch.device.",
         "Keep the string: `device = f\"cuda:{local_rank}\"` (or give the torch.device another name)."),
    Rule("DDP917", Severity.WARNING, "self-check: a sampler or a wrap asks for the process group before it is joined",
         "`DistributedSampler(dataset) if dist.is_initialized() else None` is None wherever it "
         "runs before init_process_group: loaders built in the `__main__` block before the "
         "Trainer whose __init__ joins the group give every rank the whole dataset. Likewise "
         "`if dist.is_initialized(): model = DDP(model)` wraps nothing there, and each rank "
         "trains its own copy.",
         "Join the group above the loaders (`if \"WORLD_SIZE\" in os.environ: "
         "dist.init_process_group()`), or build them after the setup has run."),
    Rule("DDP949", Severity.WARNING,
         "self-check: a tensor is made without a device in a script ddpify placed on the GPU",
         "Where the script chose no device and ddpify placed it on this rank's GPU (DDP016), the self-check "
         "reads the output again: the loops that move their batch, the functions of the file they call, and "
         "the methods (but __init__) of its Module classes may not make a tensor with a torch factory "
         "(`torch.zeros`, `torch.arange`, `torch.tensor`, ...) without `device=`, unless it becomes a "
         "parameter or a buffer. Such a tensor stays on the CPU and meets the GPU batches: the first GPU "
         "run raises \"Expected all tensors to be on the same device\".",
         "Make the tensor on the batch's device (`device=x.device`, `x.new_zeros(...)`), or register it "
         "as a buffer."),
    Rule("DDP954", Severity.WARNING,
         "self-check: a batch part made of strings or a list is moved with `.to` in a script ddpify placed",
         "Where the script chose no device and ddpify placed it on this rank's GPU (DDP016), the self-check "
         "reads the output again: a part of a loader's batches that the file's collate_fn, or its dataset's "
         "`__getitem__`, returns as a string (a path, a caption) or as a list, tuple or dict is no tensor "
         "once collated, and `.to(device)` of it raises AttributeError on the first batch, on every device.",
         "Leave the part where it is (strings need no device), or collate it into a tensor first."),
    Rule("DDP943", Severity.WARNING, "self-check: figures added up over a sharded loader are not gathered",
         "The self-check reads on its own which passes evaluate: a loop without gradients (no_grad or "
         "inference_mode), stepping nothing, that adds up figures over a loader the output gave a "
         "DistributedSampler (where it is built, or in a function of the file it is handed to), in a "
         "scope where nothing gathers them (no all_reduce or all_gather, no every_rank or "
         "evaluation_share). Its figures are this rank's share, printed by rank 0 as the whole set's.",
         "Evaluate on a loader built without the DistributedSampler, or all-reduce the sums and counts "
         "before they are used."),
    Rule("DDP939", Severity.WARNING, "self-check: a decision every rank must take alike reads a per-rank value",
         "The self-check reads on its own which values differ per rank: what comes from the batches of a "
         "loader with a DistributedSampler (a loss, a running accuracy, `.item()` of either), the clock, an "
         "unseeded global draw, or an assignment under a test of one, unless it went through rank0_value, "
         "an all_reduce or a broadcast. A `break` or `return` out of a loop that trains, a `continue` above "
         "its backward(), a `while` loop that trains, a scheduler's step, a learning rate set or weights "
         "loaded back, decided on such a "
         "value, splits the ranks: one leaves the loop while the others wait in the next all-reduce (a hang "
         "on NCCL), or the replicas train on with different settings.",
         "Decide on a value every rank agrees on: `rank0_value(value)` (rank 0's, one small gather) or an "
         "all-reduced mean, computed where every rank passes alike (once per epoch, after the batch loop)."),
    Rule("DDP941", Severity.WARNING, "self-check: a file rank 0 writes is read or deleted with no barrier between",
         "The self-check reads on its own which files rank 0 writes (under a rank-0 guard: torch.save, "
         "np.save, open for writing) and which every rank reads (torch.load, np.load, open) by the same "
         "path in one loop: without a barrier in that loop between the write and the read (or, for a "
         "read at a pass's start of what the pass before wrote, before the read or after the write), "
         "another rank reads the file while rank 0 is still writing it, or last pass's copy. Likewise "
         "a delete on rank 0 of a file or folder every rank read before it with no barrier between: "
         "the other ranks may still be reading it. On one machine's CPU this passes by luck of timing.",
         "Put `if distributed: dist.barrier()` on every rank (not under the rank-0 guard) between the "
         "write and the read, or between the read and the delete."),
    Rule("DDP952", Severity.WARNING, "self-check: a loop every rank runs ends only by a statement rank 0 alone runs",
         "The self-check reads on its own each `while` loop no rank-0 guard encloses: where every "
         "statement of its body that changes what its test reads sits under a rank-0 guard (`while "
         "len(saved) > keep: if is_main: os.remove(saved.pop(0))`, keeping the last checkpoints), the "
         "other ranks never see the test turn false and loop forever, at 100% CPU, while rank 0 waits for "
         "them in the next collective.",
         "Put the guard around the whole loop (`if is_main: while len(saved) > keep: ...`), or change "
         "the test's names on every rank and guard only the file operation."),
    Rule("DDP947", Severity.WARNING, "self-check: figures gathered over a loop that stops after a count of batches",
         "The self-check reads on its own which evaluation loops stop before their loader ends: "
         "`zip(range(k), loader)`, `islice(loader, k)`, or a `break` under a test of a value the loop "
         "sets (`if i >= num_batches: break`). One process evaluates the first k batches; when such a "
         "loop's figures are gathered from every rank (every_rank, all_reduce), each rank counted k "
         "batches of its own share and the figure covers N times k. A break under a flag "
         "(`if args.dry_run: break`) stops every rank after its first batch: fine where the gather "
         "then keeps rank 0's figures alone (`shares = shares[:1]`).",
         "Evaluate the capped loop on the whole loader on every rank (no DistributedSampler, no "
         "gather), or give each rank its part of the k batches."),
    Rule("DDP953", Severity.WARNING, "self-check: the first batches of a sharded loader are measured per rank",
         "The self-check reads on its own which loops measure a count of batches: `if i >= num_batches: "
         "break` on a value the loop sets, `islice(loader, k)` or `zip(range(k), loader)`, stepping "
         "nothing and adding up or listing figures, over a loader the output gave a DistributedSampler "
         "(where it is built, in a function of its file it is handed to, or in a function of another "
         "module of the project and those it hands it on to), with nothing gathering them. One process "
         "measured the loader's first k batches; each rank now measures k batches of its own share, and "
         "rank 0 prints its share's figure (`calc_loss_loader(train_loader, model, device, num_batches=5)` "
         "over the training loader).",
         "Measure on a loader built without the DistributedSampler (every rank takes the same k batches), "
         "or gather the sums and counts of each rank's part of the k batches."),
    Rule("DDP955", Severity.WARNING, "self-check: a figure gathered from every rank twice over one count",
         "The self-check reads on its own, block by block, which names a statement hands to a gather "
         "(`every_rank(...)`, `dist.all_reduce(...)`) and whether a later statement of the same block "
         "gathers one of them again with nothing counting it anew between (a reset, a loop adding to "
         "it). The first gather made it every rank's sum; the second sums the sums, so a count comes "
         "out N times too large (on 2 ranks, `accuracy 76/40`).",
         "Keep one gather per count: delete the second, or gather after the count is made again."),
    Rule("DDP938", Severity.WARNING, "self-check: an optimizer steps during the pass of a loader left whole",
         "The self-check reads on its own which passes train: a loop over the loader (where it is "
         "built, in a function of the file it is handed to, or unpacked from a returned tuple) that "
         "calls backward(), steps an optimizer, or calls a step function it is handed "
         "(`train(loader, update_fn)` with `update_fn = make_update(model, optimizer)`, "
         "`functools.partial(train_step, ...)`, `trainer.step`). A loader whose pass steps, left "
         "without a DistributedSampler as an evaluation loader (DDP203), gives every rank the whole "
         "dataset to train on: N times the steps, the same batches on every rank, and no error.",
         "Build the loader with `sampler=DistributedSampler(dataset) if distributed else None` "
         "(`shuffle=sampler is None`) and call `sampler.set_epoch(epoch)` at the top of each epoch."),
    Rule("DDP933", Severity.WARNING, "self-check: the process group is joined twice on one path",
         "Two `init_process_group` calls run one after the other (a setup block inserted where "
         "another already joins, a call copied into a helper the setup also runs): torch raises "
         "\"trying to initialize the default process group twice\" on every rank, and only under "
         "torchrun, so a plain `python` run does not show it.",
         "Keep one join, or ask first: `if not dist.is_initialized(): dist.init_process_group(...)`; "
         "report the rewrite as a ddpify bug."),
    Rule("DDP935", Severity.WARNING, "self-check: a training of the model is reached on a path without its wrap",
         "The output is walked path by path (both arms of every `if`, the body and the handlers of "
         "every `try`, loops run zero, one or two times): every path to a statement that trains a "
         "model its scope wraps must pass a wrap of it, and no path may move the model between a "
         "wrap and that training. A wrap in one branch (or in a helper called in one branch: "
         "`if args.resume: model = load(model)` where `load` wraps) leaves the other branch "
         "training the bare model, each rank its own copy, with no error; a move after the wrap "
         "gives the model parameters DDP's hooks do not watch.",
         "Move `if distributed: model = DDP(model, ...)` after the branches join, after the last "
         "move of the model on every path and before the training; report the rewrite as a ddpify bug."),
    Rule("DDP922", Severity.WARNING, "self-check: an exporter or a checkpoint is handed the DDP wrapper",
         "`torch.jit.script`, `torch.jit.trace` and `torch.onnx.export` compile or record the module "
         "they are given: given the DDP wrapper, scripting fails on DDP's forward, and a trace or "
         "an ONNX file records the wrapper, whose names carry `module.` and which the bare model "
         "does not load. Likewise a `state_dict()` of the wrapper that a save writes "
         "(`torch.save(model.state_dict(), path)`, `ckpt = {\"model\": model.state_dict()}` then "
         "`torch.save(ckpt, path)`): every key carries `module.`. The wrapper is followed where it is "
         "handed on: a parameter of the file's function it is passed to (`save_checkpoint(model, path)`, "
         "`train(model, ...)`) and a `self.` attribute an `__init__` stores it in (a Trainer's "
         "`self.model`, seen by every method; the `__call__` of an early-stopping object called with it), "
         "and through names built from the `state_dict()` before the save.",
         "Hand the exporter or the save the bare model: `getattr(model, \"module\", model)`."),
    Rule("DDP919", Severity.WARNING, "self-check: the output reads a name not bound on every path to the read",
         "A rewrite names something of the setup (`device`, `is_main`, a helper) in a scope "
         "where the setup did not define it: the output raises NameError there, on every rank. "
         "Found with Python's own scoping rules (`symtable`); names the original already read "
         "unbound are not counted. Likewise a name the output binds on some paths only and reads "
         "where the others lead (a sampler made in one arm of an `if` and read after it, a name "
         "read above its assignment): UnboundLocalError on the path that skipped it, unless the "
         "original's same scope already read that name so.",
         "Define the name where it is read (pass `device` in, or use `getattr(model, \"module\", "
         "model)`), and report the rewrite as a ddpify bug."),
    Rule("DDP923", Severity.WARNING, "self-check: embeddings gathered from every rank where they feed more "
         "than an in-batch similarity",
         "A gather with gradient (DDP410) is right only just before the similarity of a loss over "
         "in-batch negatives in a training loop, with labels sized by the gathered batch. Anywhere "
         "else it is silently wrong: in evaluation it repeats the batch, labels sized by this rank's "
         "inputs no longer match, and a later per-sample use reads other ranks' rows.",
         "Move the gather to just before the similarity, size the labels by the similarity, and "
         "report the rewrite as a ddpify bug."),
    Rule("DDP927", Severity.WARNING, "self-check: a wrap of an attribute does not follow every move and build of it "
         "in the other methods of its object",
         "The wrap of `self.G` sits in one method (`build_model()`), but another method of the object "
         "calls it and then moves `self.G` (`if self.use_cuda: self.G.cuda()`, or a loop over "
         "`self.nets`, which holds it): DDP registered a CPU module, and on a GPU its gradients never "
         "meet the inputs' device. Or the wrap sits in one branch (`else: self.model = "
         "Net().to(device)`) while the other builds the model anew through a method of the object "
         "(`if args.resume: self.load(path)`, whose body assigns `self.model`): the resumed model "
         "trains unwrapped, each rank on its own copy.",
         "Move `if distributed: self.G = DDP(self.G, ...)` below the last move of `self.G`, after the "
         "branches that build it merge, in the method that calls the others."),
    Rule("DDP926", Severity.WARNING,
         "self-check: a part of the wrapped model runs outside its forward in a training step",
         "After `model = DDP(model, ...)`, `getattr(model, \"module\", model).aux_head(x)` (a part of the raw "
         "module, or one of its other methods) run with gradients on, in a step whose backward it reaches, uses "
         "parameters outside the wrapper's forward: DDP shares no gradient for them when no forward runs, or "
         "fails the step (\"Expected to mark a variable ready only once\") when one does. ddpify leaves such a "
         "call as written and reports it (DDP116); this is the second reading of the output.",
         "Run the part inside the model's forward, or wrap a module whose forward runs it; and report the "
         "rewrite as a ddpify bug."),
    Rule("DDP928", Severity.WARNING, "self-check: requires_grad of the wrapped model changes after its wrap",
         "DDP registers, when it is built, the parameters that require grad. A part of the model "
         "frozen after the wrap (`model.module.backbone.requires_grad_(False)`, a loop over its "
         "parameters, a helper of the file that does it) leaves DDP waiting for gradients that never "
         "come: \"Expected to have finished reduction in the prior iteration\" on the next step. A part "
         "unfrozen after it trains with gradients no rank shares, and the copies drift apart without "
         "an error. The whole model frozen for good after its wrap trains nothing and needs no wrap "
         "(one frozen and unfrozen in turn, a GAN's discriminator, is safe).",
         "Set requires_grad before the wrap (or leave a model frozen for good unwrapped); to change it "
         "mid-training, wrap again after the change (`model = DDP(model.module, ...)`)."),
    Rule("DDP932", Severity.WARNING, "self-check: a module no optimizer trains is wrapped in DDP",
         "DDP is for the module an optimizer steps. A teacher, a target network, an EMA copy or a "
         "perceptual-loss network that no optimizer of the script trains must stay unwrapped: run "
         "with gradients on and its output detached (a teacher's logits), DDP waits for gradients "
         "that never come and the next forward raises (\"Expected to have finished reduction in the "
         "prior iteration\"); frozen, DDP refuses it when it is built. The self-check speaks only "
         "where it can follow every optimizer of the file to the names it steps.",
         "Leave that module unwrapped (moved to the device as it was), wrap the one the optimizer "
         "steps, and report the wrap as a ddpify bug."),
    Rule("DDP948", Severity.WARNING, "self-check: a training loop calls a name bound to the model before its wrap",
         "`model = net.to(device)` (or `torch.compile(net.to(device))`, or `model = net`) binds `model` to the "
         "module itself. Wrapped afterwards as `net = DDP(net)`, `model` still holds the raw module: the loop "
         "that calls `model(x)` runs outside DDP, no rank averages a gradient, and each rank trains its own "
         "copy. Nothing fails, on CPU or GPU; the ranks' weights drift apart and rank 0 saves its own.",
         "Wrap the name the loop calls (`model = DDP(model, ...)` after the line that binds it), and report "
         "the wrap as a ddpify bug."),
    Rule("DDP929", Severity.WARNING, "self-check: weights of the wrapped model are drawn after its wrap",
         "DDP broadcasts rank 0's parameters when it is built, and from then on only averages the "
         "gradients. A random initialisation after the wrap (`for m in model.modules(): "
         "nn.init.kaiming_normal_(m.weight)`, `model.fc.weight.normal_(0, 0.01)`, `model.apply(init)` with a "
         "function that draws) gives each rank other weights; the same averaged steps applied to different "
         "weights never bring them together, and rank 0 saves its own model, with no error anywhere.",
         "Draw the weights before the wrap: move `if distributed: model = DDP(model, ...)` below the "
         "initialisation."),
    Rule("DDP925", Severity.WARNING, "self-check: an attribute of the model is read through the DDP wrapper",
         "After `model = DDP(model, ...)`, `model.hyperparams` (any attribute of the model's own, "
         "not one nn.Module or DDP has) raises AttributeError under torchrun, on every rank, while "
         "plain python, where nothing is wrapped, runs: the kind of line a rewrite copies from "
         "the original (a test repeated before the forward) without its `.module`.",
         "Read it from the model: `getattr(model, \"module\", model).hyperparams`; and report the "
         "rewrite as a ddpify bug."),
    Rule("DDP924", Severity.WARNING, "self-check: a device still names the script's own GPU index",
         "The original picks its GPU by an index (`.cuda(args.gpu)`, `torch.cuda.set_device(args.gpu)`); "
         "under torchrun each rank has its own GPU, but the output still makes a device of that "
         "index (`f\"cuda:{args.gpu}\"`, `device=args.gpu`, `map_location=\"cuda:{}\".format(args.gpu)`), "
         "or a literal one (`.cuda(1)`, `.to(device=1)`, `torch.zeros(3, device=1)`, `torch.device(1)`): "
         "tensors made there meet the rank's batches on another GPU, and checkpoints load onto "
         "one GPU from every rank.",
         "Use the setup's `device` (or `\"cuda\"`, the GPU the setup made current) there."),
    Rule("DDP956", Severity.WARNING, "self-check: a collective is handed a tensor made on the CPU",
         "On a GPU machine the migrated script joins NCCL, which reduces, broadcasts and gathers "
         "only tensors on the rank's own GPU: a sum built as `torch.tensor([running_loss])` (no "
         "`device=`) or `torch.zeros(1)` raises \"No backend type associated with device type cpu\" "
         "on every rank there, while the CPU run under Gloo sums it. Found in a file whose "
         "process group may be NCCL alone (`\"nccl\" if cuda else \"gloo\"`, "
         "`get_default_backend_for_device(device)`, or none joined in that file); a group that "
         "names Gloo for the CPU (`\"cpu:gloo,cuda:nccl\"`) takes CPU tensors.",
         "Make the tensor on the device the model uses (`device=device`; `torch.device(\"cuda\", "
         "local_rank)` under NCCL), and report it as a ddpify bug."),
    Rule("DDP957", Severity.WARNING, "self-check: torch.load without map_location in the output",
         "Without map_location torch.load restores each tensor on the device it was saved from: "
         "on a GPU machine every rank loads rank 0's checkpoint onto cuda:0 (N copies on one GPU, "
         "and a model used as loaded meets its inputs on another GPU). A CPU run never shows it.",
         "Hand it `map_location=device` (the rank's device) or `map_location=\"cpu\"` before "
         "`load_state_dict`, and report it as a ddpify bug."),
    Rule("DDP951", Severity.WARNING, "self-check: a copy of the model made before its wrap keeps this rank's weights",
         "A module whose weights are taken from the model's before `model = DDP(model)` (an EMA or a "
         "teacher made by `copy.deepcopy(model)`, by a helper or a class of the file that deep-copies it, "
         "a target network given `model.state_dict()`) holds this rank's own initial weights: the wrap "
         "broadcasts rank 0's to the model only. In a script that seeds nothing, the output must broadcast "
         "the copy's parameters and buffers from rank 0 after it is made (or make it after the wrap); "
         "otherwise each rank keeps a different EMA, teacher or target network for the whole run.",
         "After the wrap: `for tensor in [*ema.parameters(), *ema.buffers()]: dist.broadcast(tensor.detach(), "
         "src=0)` under `if distributed:`, or make the copy there from `model.module`."),
)


_MOVED = TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)", "model = torch.nn.Linear(4, 1)\nmodel.to(device)")
_MAIN_BLOCK = 'def main():\n    pass\n\n\nif __name__ == "__main__":\n    main()\n'
_SAVE_HELPER = 'def save_checkpoint(net, path):\n    torch.save({"model": net.state_dict()}, path)\n\n\n'
_SAVING_TRAINER = ("class Keeper:\n    def __init__(self, model):\n        self.model = model\n\n"
                   "    def keep(self, path):\n        torch.save(self.model.state_dict(), path)\n\n\n")

_STOPPER = ("class Stopper:\n    def __init__(self, path):\n        self.path = path\n\n"
            "    def __call__(self, loss, net):\n        torch.save(net.state_dict(), self.path)\n\n\n")
_TRAINER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, loader, device):
        self.model = model.to(device)
        self.loader = loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""
_JOINED = TRAINING.replace("device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch')

# A student trained against a teacher that no optimizer steps (run with gradients on, its
# output detached, as many distillation scripts do).
_TEACHING = TRAINING.replace(
    "model = torch.nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "student = torch.nn.Linear(4, 1).to(device)\nteacher = torch.nn.Linear(4, 1).to(device)\n"
    "optimizer = torch.optim.SGD(student.parameters(), lr=0.1)").replace(
    "torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))",
    "torch.nn.functional.mse_loss(student(x.to(device)), teacher(x.to(device)).detach())")
_TEACHING_JOINED = "from torch.nn.parallel import DistributedDataParallel as DDP\n" + _TEACHING.replace(
    "device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch')

# The training loader measured after training, its DistributedSampler kept and nothing gathered.
_MEASURED = TRAINING + """total = 0.0
with torch.no_grad():
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
print(total / len(loader))
"""
_MEASURED_SHARE = "from torch.utils.data.distributed import DistributedSampler\n" + _MEASURED.replace(
    "device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch').replace(
    "batch_size=8, shuffle=True)", "batch_size=8, sampler=DistributedSampler(dataset))")

# TRAINING joined, its loader sharded.
_SHARDED = "from torch.utils.data.distributed import DistributedSampler\n" + _JOINED.replace(
    "batch_size=8, shuffle=True)", "batch_size=8, sampler=DistributedSampler(dataset))")
# An evaluation of the first two batches: gathered from every rank, it covers 2N.
_CAPPED = TRAINING + """dry_run = False
total = 0.0
with torch.no_grad():
    for i, (x, y) in zip(range(2), loader):
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
print(total / 2)
"""
_CAPPED_GATHERED = _CAPPED.replace("print(total", "total = sum(every_rank(total))\nprint(total").replace(
    "import torch\n", "import torch\n\n\ndef every_rank(value):\n    return [value]\n\n\n", 1)


# The training loader's first batches measured by a helper (DDP953 once the loader is sharded).
_FIRST_BATCHES = TRAINING + """

def first_batches_loss(data_loader, num_batches):
    total = 0.0
    for i, (x, y) in enumerate(data_loader):
        if i >= num_batches:
            break
        total += torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
    return total / num_batches


print(first_batches_loss(loader, 2))
"""
_FIRST_BATCHES_SHARDED = "from torch.utils.data.distributed import DistributedSampler\n" + _FIRST_BATCHES.replace(
    "device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch').replace(
    "batch_size=8, shuffle=True)", "batch_size=8, sampler=DistributedSampler(dataset))")


def _drawn(text: str) -> str:
    """The capped evaluation drawing its batches with next() in a loop over range(2)."""
    return text.replace("    for i, (x, y) in zip(range(2), loader):\n",
                        "    batches = iter(loader)\n    for i in range(2):\n        x, y = next(batches)\n")

# The sampler asks for the group before a setup function that joins it is called.
_LATE_GROUP = (
    "import torch.distributed as dist\nfrom torch.utils.data.distributed import DistributedSampler\n\n\n"
    "def setup():\n    dist.init_process_group(\"gloo\")\n\n\n"
    "dataset = list(range(8))\nsampler = DistributedSampler(dataset) if dist.is_initialized() else None\nsetup()\n"
)

# The wrap asks for the group before the function that joins it runs.
_LATE_WRAP = (
    "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
    "def setup():\n    dist.init_process_group(\"gloo\")\n\n\n"
    "model = torch.nn.Linear(4, 1)\nif dist.is_initialized():\n    model = DDP(model)\nsetup()\n"
)

# Two stages, each building and training its own `net`: only the first one's is wrapped.
_STAGES = (
    "import torch\n\n\n"
    "def stage(lr):\n    net = torch.nn.Linear(4, 1)\n    opt = torch.optim.SGD(net.parameters(), lr=lr)\n"
    "    for x in torch.randn(3, 8, 4):\n        loss = net(x).pow(2).mean()\n"
    "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n\n\n"
)
_STAGES_HALF_WRAPPED = (
    "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n\n"
    + _STAGES.split("\n\n\n", 1)[1].replace("def stage(lr):", "def pretrain(lr):").replace(
        "    opt = ", "    if dist.is_initialized():\n        net = DDP(net)\n    opt = ")
    + _STAGES.split("\n\n\n", 1)[1].replace("def stage(lr):", "def finetune(lr):")
    + "dist.init_process_group(\"gloo\")\npretrain(0.1)\nfinetune(0.01)\n"
)

_SAVES_FRESH_WEIGHTS = ('is_main = torch.distributed.get_rank() == 0\nif is_main:\n'
                        '    torch.save(torch.nn.Linear(4, 1).state_dict(), "init.pt")\n')

_CONTRASTIVE = (
    "import torch\nimport torch.nn.functional as F\n\nmodel = torch.nn.Linear(8, 4)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for x in torch.randn(4, 16, 8):\n"
    "    q, k = model(x), model(x + 0.1)\n"
    "    logits = q @ k.T\n"
    "    loss = F.cross_entropy(logits, torch.arange(len(logits)))\n"
    "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
)
_GATHERING = _CONTRASTIVE.replace("import torch\n", "import torch\nimport torch.distributed as dist\n\n\n"
                                  "def gather_with_grad(tensor):\n"
                                  "    from torch.distributed.nn.functional import all_gather\n\n"
                                  "    return torch.cat(all_gather(tensor))\n\n\n", 1)

# A loader per branch; the migration names the sampler differently in each arm, and one
# set_epoch block reads a name the other arm never binds (UnboundLocalError there).
_BRANCH_LOADERS = (
    "from torch.utils.data import DataLoader\n\n\ndef main(small, a, b):\n"
    "    if small:\n        loader = DataLoader(a, batch_size=8, shuffle=True)\n"
    "    else:\n        loader = DataLoader(b, batch_size=8, shuffle=True)\n"
    "    for epoch in range(2):\n        for x in loader:\n            print(x)\n"
)
_BRANCH_SAMPLERS = (
    _BRANCH_LOADERS.replace("DataLoader(a, batch_size=8, shuffle=True)",
                            "DataLoader(a, batch_size=8, sampler=sampler)")
    .replace("        loader = DataLoader(a", "        sampler = DistributedSampler(a)\n        loader = DataLoader(a")
    .replace("DataLoader(b, batch_size=8, shuffle=True)", "DataLoader(b, batch_size=8, sampler=sampler_)")
    .replace("        loader = DataLoader(b", "        sampler_ = DistributedSampler(b)\n        loader = DataLoader(b")
    .replace("    for epoch in range(2):\n", "    for epoch in range(2):\n        sampler.set_epoch(epoch)\n")
)

# A solver whose build_model() makes the net and its optimizer, and whose __init__ moves it.
_SOLVER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Solver:
    def __init__(self, loader, use_cuda):
        self.loader = loader
        self.build_model()
        if use_cuda:
            self.net.cuda()

    def build_model(self):
        self.net = torch.nn.Linear(4, 1)
        self.nets = {"net": self.net}
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
"""
_WRAP_NET = "        if dist.is_initialized():\n            self.net = DDP(self.net)\n"
_SOLVER_WRAPPED_IN_BUILD = _SOLVER.replace("        self.opt = ", _WRAP_NET + "        self.opt = ")
_RUN_SOLVER = """
if __name__ == "__main__":
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
    {made}.train()
"""


def _single_process(source: str) -> str:
    return source.replace("import torch.distributed as dist\n", "").replace(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n", "")


# A trainer that resumes through its own load method, or builds the model afresh.
_RESUMING = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, loader, resume):
        self.loader = loader
        if resume:
            self.load(resume)
        else:
            self.net = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def load(self, path):
        self.net = torch.load(path, weights_only=False)

    def train(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
"""
_RESUMING_WRAPPED_IN_ONE_BRANCH = _RESUMING.replace(
    "            self.net = torch.nn.Linear(4, 1)\n",
    "            self.net = torch.nn.Linear(4, 1)\n            if dist.is_initialized():\n"
    "                self.net = DDP(self.net)\n")

# The model moved on both paths, one of them through a helper that loads and moves it: the
# wrap placed inside that helper runs on the resumed path only (DDP935).
_RESUMED_BY_A_HELPER = TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)\n", """\
def load(net, path):
    net.load_state_dict(torch.load(path))
    net.to(device)
    return net


model = torch.nn.Linear(4, 1)
if os.environ.get("RESUME"):
    model = load(model, os.environ["RESUME"])
else:
    model.to(device)
""").replace("import torch\n", "import os\n\nimport torch\n", 1)
_WRAPPED_IN_THE_HELPER = _RESUMED_BY_A_HELPER.replace(
    "device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch').replace(
    "    net.to(device)\n", "    net.to(device)\n    net = DDP(net)\n").replace(
    "import torch\n", "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n", 1)
_WRAPPED_AFTER_THE_JOIN = _WRAPPED_IN_THE_HELPER.replace("    net = DDP(net)\n", "").replace(
    "    model.to(device)\n", "    model.to(device)\nmodel = DDP(model)\n")
# A wrap under the user's own GPU test: the CPU path trains the bare model.
_WRAPPED_UNDER_A_GPU_TEST = _JOINED.replace("optimizer = torch", "if torch.cuda.is_available():\n"
                                            "    model = DDP(model)\noptimizer = torch")
# Moved at the top of every epoch, wrapped in the first: the second epoch moves the wrapper
# (a move after the wrap that only the loop's path shows; the lines are in order).
_MOVED_AGAIN_IN_THE_LOOP = _JOINED.replace("torch.nn.Linear(4, 1).to(device)", "torch.nn.Linear(4, 1)").replace(
    "    for x, y in loader:\n", "    model.to(device)\n    if epoch == 0:\n"
    "        if torch.distributed.is_initialized():\n            model = DDP(model)\n    for x, y in loader:\n")

_GPU_IN_A_NAME = "gpu = 0\nmodel = torch.nn.Linear(4, 1).to(gpu)"

# `model = net.to(device)` trained in the loop, the optimizer over `net` (a compiled or moved alias).
_ALIASED = TRAINING.replace(
    "model = torch.nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "net = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(net.parameters(), lr=0.1)\nmodel = net.to(device)")
_ALIAS_LEFT_RAW = "from torch.nn.parallel import DistributedDataParallel as DDP\n" + _ALIASED.replace(
    "device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch').replace(
    "model = net.to(device)\n", "model = net.to(device)\nnet = DDP(net)\n")


# Trained, then frozen for good and run only under no_grad (a linear probe on its features).
_TRAINED_THEN_PROBED = TRAINING + (
    "model.requires_grad_(False)\nhead = torch.nn.Linear(1, 1).to(device)\n"
    "head_optimizer = torch.optim.SGD(head.parameters(), lr=0.1)\nfor x, y in loader:\n"
    "    with torch.no_grad():\n        features = model(x.to(device))\n"
    "    loss = torch.nn.functional.mse_loss(head(features), y.to(device))\n"
    "    head_optimizer.zero_grad()\n    loss.backward()\n    head_optimizer.step()\n")


# `self.net = torch.compile(model.to(device))` trained by a method, the optimizer over `model`.
_TRAINER_OF_A_COMPILED_VIEW = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, device):
        self.net = torch.compile(model.to(device), disable=True)
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, loader):
        for epoch in range(2):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
Trainer(torch.nn.Linear(4, 1), "cpu").fit(loader)
"""


_RELOADED_EACH_EPOCH = TRAINING.replace("    for x, y in loader:", '''    if epoch:
        model.load_state_dict(torch.load("last.pt"))
    for x, y in loader:''') + '''    torch.save(model.state_dict(), "last.pt")
'''
_SETUP = '''import torch.distributed as dist
distributed = True
is_main = dist.get_rank() == 0
'''
_GUARDED = _SETUP + _RELOADED_EACH_EPOCH.replace('    torch.save(model.state_dict(), "last.pt")', '''    if is_main:
        torch.save(model.state_dict(), "last.pt")''')
_SCRATCH = _SETUP + TRAINING + '''import os
if is_main:
    torch.save(model.state_dict(), "scratch/best.pt")
if distributed:
    dist.barrier()
model.load_state_dict(torch.load("scratch/best.pt"))
if is_main:
    os.remove("scratch/best.pt")
'''


# Keeps the last two checkpoints, removing the oldest while there are more.
_PRUNED = TRAINING.replace("import torch\n", "import os\n\nimport torch\nsaved = []\n", 1) + \
    """    torch.save(model.state_dict(), f"epoch{epoch}.pt")
    saved.append(f"epoch{epoch}.pt")
    while len(saved) > 2:
        os.remove(saved.pop(0))
"""
_GLOBBED_AWAY = '    for stale in glob.glob("scratch/*.pt"):\n        os.remove(stale)'

# A whole evaluation every rank runs alike, summed in a comprehension, deciding a stop.
_WHOLE_CHECK = """\
    val_batches = list(zip(dataset.tensors[0].split(16), dataset.tensors[1].split(16)))
    val = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in {over})
    if val < 0.01:
        break
"""


_EPOCH_SUMS = TRAINING.replace("for epoch in range(3):\n", "for epoch in range(3):\n    running_loss = 0.0\n").replace(
    "        optimizer.step()\n", "        optimizer.step()\n        running_loss += loss.item()\n").replace(
    "print(epoch, loss.item())", "print(epoch, running_loss / len(loader))")
# Its migration as an emitter that names no device would write it: NCCL refuses the CPU sum.
_NCCL_OR_GLOO = 'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
_SUMMED_ON_THE_CPU = "import torch.distributed as dist\n" + _EPOCH_SUMS.replace(
    "device = torch", _NCCL_OR_GLOO + "device = torch").replace(
    "    print(epoch, running_loss", "    totals = torch.tensor([running_loss], dtype=torch.float64)\n"
    "    dist.all_reduce(totals)\n    running_loss = totals[0].item()\n    print(epoch, running_loss")
_RESUMED_FROM_A_FILE = TRAINING.replace(
    "optimizer = torch", 'model.load_state_dict(torch.load("init.pt"))\noptimizer = torch')


# An EMA copied before the model reaches its device: the output must broadcast it after the wrap.
_EARLY_COPY = """\
import copy
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 1)
{copy}
model.to(device)
ema.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.lerp_(p, 0.1)
"""
_EARLY_COPY_UNSYNCED = _EARLY_COPY.replace("model.to(device)\n", """\
model.to(device)
if distributed:
    model = DDP(model)
""").replace("device = torch", "distributed = True\ndevice = torch")


CASES = (
    Flags(_EPOCH_SUMS, _SUMMED_ON_THE_CPU, "DDP956"),
    # all_gather's outputs made on the CPU, its input on the device.
    Flags(_EPOCH_SUMS, _SUMMED_ON_THE_CPU.replace("float64)", "float64, device=device)").replace(
          "    dist.all_reduce(totals)\n", "    dist.all_reduce(totals)\n"
          "    counts = [torch.zeros(1) for _ in range(dist.get_world_size())]\n"
          "    dist.all_gather(counts, torch.ones(1, device=device))\n"), "DDP956"),
    Silent(_EPOCH_SUMS, "DDP956"),
    Flags(_RESUMED_FROM_A_FILE, "import torch.distributed as dist\n" + _RESUMED_FROM_A_FILE.replace(
        "device = torch", 'dist.init_process_group("gloo")\ndevice = torch'), "DDP957"),
    Silent(_RESUMED_FROM_A_FILE, "DDP957"),
    Flags(_EARLY_COPY.format(copy="ema = copy.deepcopy(model)"),
          _EARLY_COPY_UNSYNCED.format(copy="ema = copy.deepcopy(model)"), "DDP951"),
    Flags(_EARLY_COPY.format(copy="ema = torch.nn.Linear(4, 1)\nema.load_state_dict(model.state_dict())"),
          _EARLY_COPY_UNSYNCED.format(copy="ema = torch.nn.Linear(4, 1)\nema.load_state_dict(model.state_dict())"),
          "DDP951"),
    Flags(_EARLY_COPY.format(copy="ema = copy.deepcopy(model)"), _EARLY_COPY_UNSYNCED.format(
        copy="ema = copy.deepcopy(model)").replace("optimizer = torch", "for t in model.parameters():\n"
                                                   "    dist.broadcast(t.detach(), src=0)\noptimizer = torch"),
          "DDP951"),
    Silent(_EARLY_COPY.format(copy="ema = copy.deepcopy(model)"), "DDP951"),
    Silent(_EARLY_COPY.format(copy="ema = torch.nn.Linear(4, 1)\nema.load_state_dict(model.state_dict())"),
           "DDP951"),
    # Seeded: every rank draws the same initial weights, the copy's included.
    Silent(_EARLY_COPY.format(copy="ema = copy.deepcopy(model)").replace("model = torch.nn", "torch.manual_seed(0)\n"
                                                                        "model = torch.nn"), "DDP951"),
    Silent(_TRAINED_THEN_PROBED, "DDP928"),
    Flags(_ALIASED, _ALIAS_LEFT_RAW, "DDP948"),
    Silent(_ALIASED, "DDP948"),
    Silent(_ALIASED.replace("model = net.to(device)", "model = torch.compile(net.to(device))"), "DDP948"),
    Silent(_ALIASED.replace("model = net.to(device)", "model = net.to(device).train()"), "DDP948"),
    Flags(_TRAINER_OF_A_COMPILED_VIEW, _TRAINER_OF_A_COMPILED_VIEW.replace(
        "        self.opt = ", "        model = DDP(model)\n        self.opt = "), "DDP948"),
    Silent(_TRAINER_OF_A_COMPILED_VIEW, "DDP948"),
    # `model = net` then `model.to(device)`: the wrap of `net` above the alias is moved after it.
    Flags(_ALIASED.replace("model = net.to(device)", "model = net\nmodel.to(device)"),
          _ALIAS_LEFT_RAW.replace("model = net.to(device)\nnet = DDP(net)\n", "net = DDP(net)\nmodel = net\n"
                                  "model.to(device)\n"), "DDP911"),
    Silent(_ALIASED.replace("model = net.to(device)", "model = net\nmodel.to(device)"), "DDP911"),
    Flags(_ALIASED, _ALIAS_LEFT_RAW.replace("model = net.to(device)", "model = net.cuda() if use_cuda else net"),
          "DDP948"),
    # Rank 0 saves at each epoch's end what every rank reloads at the next one's start: a
    # barrier in the loop orders them; before the loop it orders only the first.
    Flags(_RELOADED_EACH_EPOCH, _GUARDED, "DDP941"),
    Flags(_RELOADED_EACH_EPOCH, _GUARDED.replace("for epoch", "if distributed:\n    dist.barrier()\nfor epoch"),
          "DDP941"),
    Silent(_GUARDED.replace("    if epoch:", "    if distributed:\n        dist.barrier()\n    if epoch:"), "DDP941"),
    # Deleted on rank 0 right after every rank read: one rank may still be loading.
    Flags(TRAINING, _SCRATCH, "DDP941"),
    Silent(_SCRATCH.replace('\nif is_main:\n    os.remove',
                            '\nif distributed:\n    dist.barrier()\nif is_main:\n    os.remove'), "DDP941"),
    # The oldest checkpoints popped off a list while it is too long: the pop is rank 0's alone.
    Flags(_PRUNED, _SETUP + _PRUNED.replace("        os.remove(saved.pop(0))",
                                            "        if is_main:\n            os.remove(saved.pop(0))"), "DDP952"),
    Silent(_PRUNED, "DDP952"),
    Silent(_SETUP + _PRUNED.replace("    while len(saved) > 2:\n        os.remove(saved.pop(0))",
                                    "    if is_main:\n        while len(saved) > 2:\n"
                                    "            os.remove(saved.pop(0))"), "DDP952"),
    Silent(_SETUP + _PRUNED.replace("        os.remove(saved.pop(0))",
                                    "        oldest = saved.pop(0)\n        if is_main:\n"
                                    "            os.remove(oldest)"), "DDP952"),
    # The same delete spelled as a loop over a glob that lists the file read.
    Flags(TRAINING, _SCRATCH.replace('    os.remove("scratch/best.pt")', _GLOBBED_AWAY), "DDP941"),
    Silent(_SCRATCH.replace('\nif is_main:\n    os.remove("scratch/best.pt")',
                            '\nif distributed:\n    dist.barrier()\nif is_main:\n' + _GLOBBED_AWAY), "DDP941"),
    Flags(_RESUMED_BY_A_HELPER, _WRAPPED_IN_THE_HELPER, "DDP935"),
    Silent(_RESUMED_BY_A_HELPER, "DDP935"),
    Flags(TRAINING, _WRAPPED_UNDER_A_GPU_TEST, "DDP935"),
    Flags(TRAINING, _MOVED_AGAIN_IN_THE_LOOP, "DDP935"),
    # The labels sized by this rank's inputs, after a gather of the embeddings.
    Flags(_CONTRASTIVE, _GATHERING.replace("    logits = ", "    q, k = gather_with_grad(q), gather_with_grad(k)\n"
                                           "    logits = ").replace("len(logits)", "len(x)"), "DDP923"),
    Flags(_MOVED, _MOVED.replace("model.to(device)\n", ""), "DDP910"),
    # The move chained on the construction (`Net().to(device=..., dtype=...)`) is a move of the name it fills.
    Flags(TRAINING, TRAINING.replace("torch.nn.Linear(4, 1).to(device)", "torch.nn.Linear(4, 1)"), "DDP910"),
    # Part of the model frozen after its wrap: DDP waits for gradients that never come.
    Flags(TRAINING, _JOINED.replace("optimizer = torch", "model = DDP(model)\n"
                                    "model.module.bias.requires_grad_(False)\noptimizer = torch"), "DDP928"),
    # A teacher no optimizer steps, wrapped beside (or instead of) the student it teaches.
    Flags(_TEACHING, _TEACHING_JOINED.replace("optimizer = torch", "teacher = DDP(teacher)\noptimizer = torch"),
          "DDP932"),
    Flags(_TEACHING, _TEACHING_JOINED.replace("optimizer = torch", "student = DDP(student)\nteacher = DDP(teacher)\n"
                                              "optimizer = torch"), "DDP932"),
    # The script migrated: the student is wrapped, the teacher is not.
    Silent(_TEACHING, "DDP932"),
    # Weights drawn after the wrap: each rank its own, never brought together.
    Flags(TRAINING, _JOINED.replace("optimizer = torch", "model = DDP(model)\n"
                                    "torch.nn.init.normal_(model.module.weight)\noptimizer = torch"), "DDP929"),
    Silent(_JOINED.replace("optimizer = torch", "torch.nn.init.normal_(model.weight)\nmodel = DDP(model)\n"
                           "torch.nn.init.zeros_(model.module.bias)\noptimizer = torch"), "DDP929"),
    # The whole model frozen and unfrozen in turn (a GAN's discriminator) is safe.
    Silent(_JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch").replace(
        "        loss = ", "        model.requires_grad_(False)\n        model.requires_grad_(True)\n        loss = "),
        "DDP928"),
    # `nn.DataParallel(model).to(device)` moves the model it wraps: dropping the whole line drops the move.
    Flags(_MOVED.replace("model.to(device)", "model = torch.nn.DataParallel(model).to(device)"),
          _MOVED.replace("model.to(device)\n", ""), "DDP910"),
    Flags(TRAINING, TRAINING.replace("optimizer = torch", "model = DDP(model)\nmodel.to(device)\noptimizer = torch"),
          "DDP911"),
    # A wrap of a loop variable: the dict the training reads keeps its models unwrapped.
    Flags(TRAINING, _JOINED.replace("model = torch.nn.Linear(4, 1).to(device)\n",
                                    "models = {\"a\": torch.nn.Linear(4, 1)}\nfor name, m in models.items():\n"
                                    "    m.to(device)\nm = DDP(m)\nmodel = models[\"a\"]\n"), "DDP911"),
    # A wrap before a loop over a list the model was appended to: the loop moves it after the wrap.
    Flags(TRAINING, _JOINED.replace("model = torch.nn.Linear(4, 1).to(device)\n",
                                    "model = torch.nn.Linear(4, 1)\nmodels = []\nmodels.append(model)\n"
                                    "model = DDP(model)\nfor m in models:\n    m.to(device)\n"), "DDP911"),
    # A frozen teacher wrapped: DDP refuses a module with no parameter that requires a gradient.
    Flags(TRAINING, _JOINED.replace("optimizer = torch", "teacher = torch.nn.Linear(4, 1).to(device)\n"
                                    "teacher.requires_grad_(False)\nteacher = DDP(teacher)\nmodel = DDP(model)\n"
                                    "optimizer = torch"), "DDP911"),
    # Joined and training with no wrap at all: each rank trains its own copy.
    Flags(TRAINING, _JOINED, "DDP911"),
    # A second function's own model, trained there with no wrap of it (only the first stage's).
    Flags(_STAGES + "stage(0.1)\nstage(0.01)\n", _STAGES_HALF_WRAPPED, "DDP911"),
    Flags(TRAINING, _JOINED, "DDP912"),
    Flags(TRAINING, _JOINED, "DDP913"),
    # A lambda made before the join writes when it is called, after it; so does a writer handed on.
    Flags(TRAINING, 'snapshot = lambda: torch.save({}, "last.pt")\n' + _JOINED.replace(
        "    print(epoch, loss.item())\n", "    snapshot()\n"), "DDP913"),
    Flags(TRAINING, _JOINED.replace("    print(epoch, loss.item())\n",
                                    '    pool.submit(torch.save, {}, "last.pt")\n'), "DDP913"),
    Silent(TRAINING.replace("    print(epoch, loss.item())\n", "") + 'snapshot = lambda: torch.save({}, "last.pt") '
           "if is_main_process() else None\n", "DDP913"),
    # ... and a function handed on by name, never called here, whose write is part of a return.
    Flags(TRAINING, 'def snapshot():\n    return torch.save({}, "last.pt")\n\n\n' + _JOINED.replace(
        "    print(epoch, loss.item())\n", "    callbacks = [snapshot]\n"), "DDP913"),
    Flags(TRAINING.replace("for epoch", _MAIN_BLOCK + "for epoch"),
          _JOINED.replace("for epoch", _MAIN_BLOCK + "for epoch"), "DDP914"),
    Flags(TRAINING, _JOINED.replace("        loss.backward()", "        if is_main:\n            loss.backward()"),
          "DDP916"),
    # A layer made for its fresh weights on rank 0 only, before the data is drawn from the same
    # generator: the ranks' datasets differ. Seeded again in between, the streams agree.
    Flags(TRAINING, _JOINED.replace("dataset = ", _SAVES_FRESH_WEIGHTS + "dataset = "), "DDP916"),
    # The same draw one call down, in a function of the file the guarded save calls.
    Flags(TRAINING, _JOINED.replace("dataset = ", "def fresh():\n    return torch.randn(3)\n\n\n"
                                    + _SAVES_FRESH_WEIGHTS.replace("torch.nn.Linear(4, 1).state_dict()", "fresh()")
                                    + "dataset = "), "DDP916"),
    Silent(TRAINING.replace("dataset = ", 'torch.save(torch.nn.Linear(4, 1).state_dict(), "init.pt")\n'
                            "torch.manual_seed(0)\ndataset = "), "DDP916"),
    # The exporter handed the wrapper, not the bare model ddpify unwraps for it.
    Flags(TRAINING + 'torch.jit.script(model).save("model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'torch.jit.script(model).save("model.pt")\n', "DDP922"),
    Flags(TRAINING + 'torch.onnx.export(model, torch.zeros(1, 4), "model.onnx")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'torch.onnx.export(model, torch.zeros(1, 4), "model.onnx")\n', "DDP922"),
    Silent(TRAINING + 'torch.jit.script(model).save("model.pt")\n', "DDP922"),
    # An attribute of the model's own read through the wrapper: AttributeError under torchrun.
    Flags(TRAINING.replace("optimizer = torch", "model.accumulate = 2\noptimizer = torch"),
          _JOINED.replace("optimizer = torch", "model.accumulate = 2\nmodel = DDP(model)\noptimizer = torch")
          .replace("for epoch", "sync = model.accumulate == 1\nfor epoch"), "DDP925"),
    # A part of the raw module run beside the wrapper's forward, in the loss the step backpropagates.
    Flags(TRAINING.replace("model(x.to(device))", "model(x.to(device)) + model.weight.sum()"),
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch").replace(
              "model(x.to(device))", 'model(x.to(device)) + getattr(model, "module", model)(x.to(device))'),
          "DDP926"),
    # ddpify's own output reads it through `getattr(model, "module", model)`.
    Silent(TRAINING.replace("optimizer = torch", "model.accumulate = 2\noptimizer = torch")
           .replace("for epoch", "sync = model.accumulate == 1\nfor epoch"), "DDP925"),
    # The checkpoint saved from the wrapper's state_dict: its keys carry `module.`.
    Flags(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'torch.save({"model": model.state_dict()}, "model.pt")\n', "DDP922"),
    # The wrapper itself pickled: an arm of the script's own GPU test, a dict value, the save's argument.
    Flags(TRAINING + 'torch.save({"net": model.module if torch.cuda.is_available() else model}, "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'state = {"net": getattr(model, "module", model) if torch.cuda.is_available() else model}\n'
          + 'torch.save(state, "m.pt")\n',
          "DDP922"),
    Flags(TRAINING + 'torch.save(model, "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'torch.save(model, "model.pt")\n', "DDP922"),
    Silent(TRAINING + 'torch.save({"net": model.module if torch.cuda.is_available() else model}, "m.pt")\n'
           + 'torch.save(model, "model.pt")\n', "DDP922"),
    # ... the state built in an `else` of the script's own GPU test; not in one of a test of the wrapper.
    Flags(TRAINING + 'torch.save(model, "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'if torch.cuda.is_available():\n    state = {"net": model.module}\nelse:\n    state = {"net": model}\n'
          + 'torch.save(state, "m.pt")\n', "DDP922"),
    Silent(TRAINING + 'if isinstance(model, torch.nn.DataParallel):\n    state = {"net": model.module}\n'
           + 'else:\n    state = {"net": model}\ntorch.save(state, "m.pt")\n', "DDP922"),
    # ... also where the wrapper is handed on: a helper's parameter, a Trainer's `self.model`.
    Flags(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + _SAVE_HELPER + 'save_checkpoint(model, "model.pt")\n', "DDP922"),
    Flags(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + _SAVING_TRAINER + 'Keeper(model).keep("model.pt")\n', "DDP922"),
    # ... an early-stopping object's `__call__`, and a state built in two steps before the save.
    Flags(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + _STOPPER + 'stopper = Stopper("best.pt")\nstopper(0.5, model)\n', "DDP922"),
    Flags(TRAINING + 'torch.save(model.state_dict(), "model.pt")\n',
          _JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
          + 'state = model.state_dict()\ncpu_state = {k: v.cpu() for k, v in state.items()}\n'
          + 'torch.save(cpu_state, "model.pt")\n', "DDP922"),
    Silent(_JOINED.replace("optimizer = torch", "model = DDP(model)\noptimizer = torch")
           + _SAVE_HELPER.replace("model.state_dict()", 'getattr(model, "module", model).state_dict()')
           + 'save_checkpoint(model, "model.pt")\n', "DDP922"),
    # A Trainer's `__init__` that assigns `self.model` again after wrapping it: its other methods train no wrapper.
    Flags(_TRAINER, _TRAINER.replace("        self.model = model.to(device)\n", "").replace(
        "        self.loader = loader\n",
        "        if dist.is_initialized():\n            self.model = DDP(self.model)\n"
        "        self.model = model.to(device)\n        self.loader = loader\n"), "DDP911"),
    # ... the batch step in a method of its own, the loop in another.
    Flags(_TRAINER, _TRAINER.replace("        self.model = model.to(device)\n", "").replace(
        "        self.loader = loader\n",
        "        if dist.is_initialized():\n            self.model = DDP(self.model)\n"
        "        self.model = model.to(device)\n        self.loader = loader\n").replace(
        "            loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "            self.optimizer.zero_grad()\n            loss.backward()\n            self.optimizer.step()\n",
        "            self.step(x, y)\n\n    def step(self, x, y):\n"
        "        loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "        self.optimizer.zero_grad()\n        loss.backward()\n        self.optimizer.step()\n"), "DDP911"),
    # The wrap in build_model(), the move in __init__ after the call: a CPU module wrapped.
    Flags(_SOLVER, _SOLVER_WRAPPED_IN_BUILD, "DDP927"),
    Flags(_SOLVER, _SOLVER_WRAPPED_IN_BUILD.replace("            self.net.cuda()\n",
                                                    "            for net in self.nets.values():\n"
                                                    "                net.cuda()\n"), "DDP927"),
    # ... where ddpify migrates the single-process solver, the wrap follows the move.
    Silent(_single_process(_SOLVER) + _RUN_SOLVER.format(made="Solver(loader, torch.cuda.is_available())"), "DDP927"),
    # The wrap in the fresh branch; the other branch builds the model anew through a method.
    Flags(_RESUMING, _RESUMING_WRAPPED_IN_ONE_BRANCH, "DDP927"),
    Silent(_single_process(_RESUMING) + _RUN_SOLVER.format(made="Trainer(loader, '')"), "DDP927"),
    Flags(TRAINING, _LATE_GROUP, "DDP917"),
    Flags(TRAINING, _LATE_WRAP, "DDP917"),
    Flags(TRAINING, TRAINING.replace("model(x.to(device))", "model(x.to(rank_device))"), "DDP919"),
    Flags(_BRANCH_LOADERS, _BRANCH_SAMPLERS, "DDP919"),
    # The join written twice on one path (tests/test_selfcheck.py: asked first, it is silent).
    Flags(TRAINING, _JOINED.replace("device = torch", 'torch.distributed.init_process_group("gloo")\ndevice = torch'),
          "DDP933"),
    # Both arms bind the one name the set_epoch reads: bound on every path.
    Silent(_BRANCH_SAMPLERS.replace("sampler_", "sampler"), "DDP919"),
    Flags(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)", "model = torch.nn.Linear(4, 1).cuda(args.gpu)"),
          _JOINED.replace("model(x.to(device))", "model(x.to(device) + torch.randn(1, device=f\"cuda:{args.gpu}\"))"),
          "DDP924"),
    Flags(TRAINING, _JOINED.replace("model(x.to(device))", "model(x.to(device) + torch.ones(1, device=1))"), "DDP924"),
    Flags(_MEASURED, _MEASURED_SHARE, "DDP943"),
    # A stop on the last batch's loss of a sharded loader, not passed through rank0_value.
    Flags(TRAINING, _SHARDED.replace("    print(epoch, loss.item())\n", "    if loss.item() < 0.01:\n        break\n"),
          "DDP939"),
    Silent(TRAINING, "DDP939"),
    # A comprehension's own `x, y` are its iterable's items, not the training loop's batch.
    Flags(TRAINING, _SHARDED.replace("    print(epoch, loss.item())\n", _WHOLE_CHECK.format(over="loader")), "DDP939"),
    Silent(_SHARDED.replace("    print(epoch, loss.item())\n", _WHOLE_CHECK.format(over="val_batches")), "DDP939"),
    # A module a call is made on (`json.dump(stats, f)`) holds no value: what json.load reads back
    # is the file's.
    Silent("import json\n" + _SHARDED.replace("    print(epoch, loss.item())\n", (
        "    if is_main:\n        json.dump({\"loss\": loss.item(), \"stop\": epoch > 1}, open(\"s.json\", \"w\"))\n"
        "    if distributed:\n        dist.barrier()\n"
        "    if json.load(open(\"s.json\"))[\"stop\"]:\n        break\n")), "DDP939"),
    # The first batches of the evaluation, each rank's own, gathered (DDP947); kept whole it is silent.
    Flags(_CAPPED, _CAPPED_GATHERED, "DDP947"),
    Flags(_CAPPED.replace("zip(range(2), loader)", "enumerate(loader)").replace(
        "        total +=", "        if i >= 2:\n            break\n        total +="),
          _CAPPED_GATHERED.replace("zip(range(2), loader)", "enumerate(loader)").replace(
        "        total +=", "        if i >= 2:\n            break\n        total +="), "DDP947"),
    Flags(_CAPPED.replace("zip(range(2), loader)", "enumerate(loader)").replace(
        "        total +=", "        if dry_run:\n            break\n        total +="),
          _CAPPED_GATHERED.replace("zip(range(2), loader)", "enumerate(loader)").replace(
        "        total +=", "        if dry_run:\n            break\n        total +="), "DDP947"),
    Flags(_drawn(_CAPPED), _drawn(_CAPPED_GATHERED), "DDP947"),
    Silent(_CAPPED, "DDP947"),
    # The same count gathered twice in a row after its loop (DDP955); once, or counted anew, is silent.
    Flags(_CAPPED, _CAPPED_GATHERED.replace("total = sum(every_rank(total))\n",
                                            "total = sum(every_rank(total))\ntotal = sum(every_rank(total))\n"),
          "DDP955"),
    Silent(_CAPPED_GATHERED, "DDP955"),
    Silent(_CAPPED_GATHERED.replace("total = sum(every_rank(total))\n",
                                    "total = sum(every_rank(total))\ntotal = 0.0\n"
                                    "for x, y in loader:\n    total += 1.0\ntotal = sum(every_rank(total))\n"),
           "DDP955"),
    # The training loader's first batches measured per rank, in a helper it is handed to (DDP953).
    Flags(_FIRST_BATCHES, _FIRST_BATCHES_SHARDED, "DDP953"),
    Flags(_FIRST_BATCHES, _FIRST_BATCHES_SHARDED.replace("enumerate(data_loader)", "enumerate(islice(data_loader, 5))")
          .replace("import torch\n", "from itertools import islice\n\nimport torch\n", 1).replace(
              "        if i >= num_batches:\n            break\n", ""), "DDP953"),
    Silent(_CAPPED, "DDP953"),
    # A GPU index kept in a name (`gpu = 0`), handed to `.to()`: GPU 0 on every rank.
    Flags(TRAINING.replace("model = torch.nn.Linear(4, 1).to(device)", _GPU_IN_A_NAME),
          _JOINED.replace("model = torch.nn.Linear(4, 1).to(device)", _GPU_IN_A_NAME), "DDP924"),
    # A CUDA tensor type called before this rank's GPU is made the current one.
    Flags(TRAINING, _JOINED.replace("device = torch", "Tensor = torch.cuda.FloatTensor\nnoise = Tensor(4, 4)\n"
                                    "torch.cuda.set_device(0)\ndevice = torch"), "DDP924"),
    Flags('device = "cuda"\nwith torch.autocast(device_type=device):\n    pass\n',
          'device = torch.device("cuda", 0)\nwith torch.autocast(device_type=device):\n    pass\n', "DDP915"),
)
