"""Evaluation time per epoch with 2 ranks: sharded (ddpify's default) against every rank
evaluating the whole set (--no-shard-eval), run side by side, with one process as baseline.

    python benchmarks/bench_eval.py [--epochs 3] [--samples 6000]

The script below trains a small convolutional classifier for a few steps and times its
test() each epoch (the timing is the script's own, so the migration keeps it). Its
migration is made twice, with and without --no-shard-eval, and run under
`torchrun --standalone --nproc_per_node=2` (Gloo on CPU, one thread per rank); rank 0
prints the times. The figures are the median epoch.
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpify.api import migrate_source
from ddpify.options import Options

SCRIPT = '''\
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            correct += (output.argmax(1) == target).sum().item()
    return test_loss / len(test_loader.dataset), correct


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6000)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.randn(512 + args.samples, 3, 32, 32)
    labels = torch.randint(0, 10, (512 + args.samples,))
    train_loader = DataLoader(TensorDataset(images[:512], labels[:512]), batch_size=64, shuffle=True)
    test_loader = DataLoader(TensorDataset(images[512:], labels[512:]), batch_size=200)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        model.train()
        for data, target in train_loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()
        started = time.perf_counter()
        loss, correct = test(model, device, test_loader)
        print(f"epoch {epoch}: eval {time.perf_counter() - started:.3f} s, loss {loss:.4f}, correct {correct}")


if __name__ == "__main__":
    main()
'''
TIME = re.compile(r"eval (\d+\.\d+) s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6000)
    args = parser.parse_args()
    script_args = ["--epochs", str(args.epochs), "--samples", str(args.samples)]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "original.py").write_text(SCRIPT)
        (work / "sharded.py").write_text(migrate_source(SCRIPT, Options()).code)
        (work / "whole.py").write_text(migrate_source(SCRIPT, Options(shard_evaluation=False)).code)
        one = _median(_run([sys.executable, "original.py", *script_args], work))
        sharded = _median(_run(_torchrun("sharded.py", script_args), work))
        whole = _median(_run(_torchrun("whole.py", script_args), work))
    print(f"evaluation of {args.samples} samples, median of {args.epochs} epochs:")
    print(f"  1 process                      {one:.3f} s")
    print(f"  2 ranks, --no-shard-eval       {whole:.3f} s")
    print(f"  2 ranks, sharded (default)     {sharded:.3f} s   "
          f"{whole / sharded:.2f}x faster than --no-shard-eval")


def _torchrun(script: str, script_args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            script, *script_args]


def _run(command, cwd: Path) -> str:
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return completed.stdout


def _median(stdout: str) -> float:
    times = [float(match) for match in TIME.findall(stdout)]
    if not times:
        raise SystemExit(f"no evaluation times printed:\n{stdout}")
    return statistics.median(times)


if __name__ == "__main__":
    main()
