"""Memory per rank under each strategy: parameters + gradients + optimizer state, in bytes.

The model is the one of fixtures/fsdp2/transformer_block_list (a token embedding, a stack of
transformer blocks, a head), made wider and deeper with --width/--depth. Each strategy runs
under `torchrun --standalone --nproc_per_node=N` on the CPU (Gloo) and takes one AdamW step,
shaped the way ddpify writes it: DDP wraps the model; FSDP2 shards each block, then the root,
and builds the optimizer afterwards. What each rank holds is then counted: its own tensors,
or its local shard of a DTensor. Activations and the gathered block of the moment are not
counted (they depend on the batch, not on the strategy's bookkeeping).

    python benchmarks/bench_memory.py
    python benchmarks/bench_memory.py --width 256 --depth 8 --nproc 4
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_SCRIPT = ROOT / "fixtures" / "fsdp2" / "transformer_block_list" / "input.py"
STRATEGIES = ("ddp", "fsdp2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--worker", choices=STRATEGIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.width, args.depth)
        return
    rows = {strategy: _measure(strategy, args) for strategy in STRATEGIES}
    print(f"model of {MODEL_SCRIPT.relative_to(ROOT)}, width {args.width}, depth {args.depth}, "
          f"{args.nproc} ranks; bytes per rank (largest rank), one AdamW step:")
    print(f"{'strategy':10}{'parameters':>14}{'gradients':>14}{'optimizer':>14}{'total':>14}")
    for strategy, row in rows.items():
        figures = (row[key] for key in ("parameters", "gradients", "optimizer", "total"))
        print(f"{strategy:10}" + "".join(f"{figure:>14,}" for figure in figures))
    print(f"fsdp2 / ddp: {rows['fsdp2']['total'] / rows['ddp']['total']:.2f}")


def _measure(strategy: str, args) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, "--worker", strategy, "--width", str(args.width), "--depth", str(args.depth)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{strategy} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    per_rank = [json.loads(line) for line in lines]
    return {key: max(rank[key] for rank in per_rank) for key in per_rank[0]}


def _worker(strategy: str, width: int, depth: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    spec = importlib.util.spec_from_file_location("transformer_block_list", MODEL_SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # defines the classes; main() runs only as __main__
    script.WIDTH = width
    torch.manual_seed(0)
    model = script.TinyTransformer(depth=depth)
    if strategy == "ddp":
        model = DDP(model)
    else:
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, script.VOCAB, (4, script.CONTEXT + 1))
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, script.VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()

    def size(tensor) -> int:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        return local.numel() * local.element_size()

    parameters = sum(size(p) for p in model.parameters())
    gradients = sum(size(p.grad) for p in model.parameters() if p.grad is not None)
    state = sum(size(value) for per_parameter in optimizer.state.values() for value in per_parameter.values()
                if isinstance(value, torch.Tensor))
    print(json.dumps({"parameters": parameters, "gradients": gradients, "optimizer": state,
                      "total": parameters + gradients + state}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
