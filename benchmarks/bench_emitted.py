"""Is the emitted script as fast as a hand-written DDP script? (DESIGN §2.4)

1. Throughput: fixtures/guide/guide_image_classifier/expected.py (ddpify's output) against
   benchmarks/handwritten_guide_ddp.py (the same script migrated by hand), each under
   `torchrun --standalone --nproc_per_node=2` on CPU (Gloo), in alternating order.
   Both scripts train on 512 samples for 3 epochs; to run a fixed, larger number of steps
   the benchmark copies them to a temporary directory with three text substitutions, each
   of which must match exactly once:
       torch.randn(512, 3, 8, 8)          -> torch.randn(SAMPLES, 3, 8, 8)
       torch.randint(0, 10, (512,))       -> torch.randint(0, 10, (SAMPLES,))
       for epoch in range(3):             -> for epoch in range(EPOCHS):
   The scripts run unchanged otherwise: a small launcher installs a global optimizer-step
   hook and rank 0 reports steps per second between its first and last step, so start-up,
   rendezvous and teardown stay out of the figure. Target: emitted / hand-written >= 0.97.
2. Static: in every fixture, the loops that call `.backward()` must not gain host
   synchronisation (`.item()`, `.tolist()`, `.cpu()`, `all_reduce`, `barrier`, `synchronize`)
   in the migrated script compared with the original.

    python benchmarks/bench_emitted.py                     # both
    python benchmarks/bench_emitted.py --static-only
    python benchmarks/bench_emitted.py --samples 65536 --epochs 2 --rounds 5
"""
import argparse
import ast
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMITTED = ROOT / "fixtures" / "guide" / "guide_image_classifier" / "expected.py"
HANDWRITTEN = ROOT / "benchmarks" / "handwritten_guide_ddp.py"

SYNCHRONISING = ("item", "tolist", "cpu", "all_reduce", "all_gather", "barrier", "synchronize")


# -- 2. static -----------------------------------------------------------------------------

def step_loop_syncs(source: str) -> Counter:
    """Host-synchronising calls inside loops whose body calls .backward()."""
    counts = Counter()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            continue
        calls = [child for statement in node.body for child in ast.walk(statement)
                 if isinstance(child, ast.Call)]
        if not any(_called(call) == "backward" for call in calls):
            continue
        if any(_is_inner_step_loop(statement) for statement in node.body):
            continue  # an epoch loop: its batch loop is counted on its own
        counts.update(name for name in map(_called, calls) if name in SYNCHRONISING)
    return counts


def _is_inner_step_loop(statement) -> bool:
    return any(isinstance(child, (ast.For, ast.While, ast.AsyncFor))
               and any(isinstance(c, ast.Call) and _called(c) == "backward" for c in ast.walk(child))
               for child in ast.walk(statement))


def _called(call: ast.Call) -> str:
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def added_syncs(before: str, after: str) -> Counter:
    return step_loop_syncs(after) - step_loop_syncs(before)


def static_check() -> bool:
    print("static: host synchronisation added inside training-step loops")
    clean = True
    for case in sorted((ROOT / "fixtures").glob("*/*/"), key=lambda folder: folder.name):
        before, after = case / "input.py", case / "expected.py"
        if not (before.exists() and after.exists()):
            continue
        added = added_syncs(before.read_text(), after.read_text())
        clean &= not added
        print(f"   {case.name:<40}{'none' if not added else dict(added)}")
    return clean


# -- 1. throughput -------------------------------------------------------------------------

def scaled(source: str, samples: int, epochs: int) -> str:
    substitutions = [
        ("torch.randn(512, 3, 8, 8)", f"torch.randn({samples}, 3, 8, 8)"),
        ("torch.randint(0, 10, (512,))", f"torch.randint(0, 10, ({samples},))"),
        ("for epoch in range(3):", f"for epoch in range({epochs}):"),
    ]
    for old, new in substitutions:
        if source.count(old) != 1:
            raise SystemExit(f"bench_emitted: expected `{old}` once in the script; update the "
                             "substitutions if the fixture changed")
        source = source.replace(old, new)
    return source


# Runs a script under torchrun unchanged and times its training steps from the inside:
# a global optimizer-step hook stamps every step, so start-up, rendezvous and teardown
# (seconds, and noisy on a shared machine) stay out of the figure.
_TIMER = """
import atexit, os, runpy, sys, time
from torch.optim.optimizer import register_optimizer_step_post_hook

stamps = []
register_optimizer_step_post_hook(lambda optimizer, args, kwargs: stamps.append(time.perf_counter()))


def report():
    if os.environ.get("RANK", "0") == "0" and len(stamps) > 1:
        with open(os.environ["DDPIFY_BENCH_OUT"], "w") as handle:
            handle.write(f"{len(stamps) - 1} {stamps[-1] - stamps[0]}")


atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _torchrun(script: Path, timer: Path, attempts: int = 2):
    """(steps per second on rank 0, wall seconds of the whole run); a run that fails is
    tried once more (Gloo's teardown has been seen to abort a rank after training ended)."""
    for attempt in range(attempts):
        try:
            return _torchrun_once(script, timer)
        except RuntimeError as error:
            if attempt == attempts - 1:
                raise SystemExit(str(error)) from error
            print(f"   {script.name}: run failed, trying again ({str(error).splitlines()[0]})")


def _torchrun_once(script: Path, timer: Path):
    result = script.with_suffix(".steps")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
                   "DDPIFY_BENCH_OUT": str(result)}
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(timer), str(script)],
        cwd=script.parent, env=environment, capture_output=True, text=True,
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"{script.name} failed (exit {completed.returncode}):\n"
                           f"{completed.stdout[-2000:]}{completed.stderr[-4000:]}")
    steps, seconds = result.read_text().split()
    return int(steps) / float(seconds), wall


def throughput(samples: int, epochs: int, rounds: int) -> float:
    print(f"throughput: torchrun --nproc_per_node=2 (Gloo, CPU), {samples} samples x {epochs} epochs, "
          f"batch 32, {rounds} rounds, steps timed inside rank 0")
    directory = Path(tempfile.mkdtemp(prefix="ddpify-bench-"))
    try:
        timer = directory / "timed_run.py"
        timer.write_text(_TIMER)
        scripts = {}
        for name, path in (("emitted", EMITTED), ("handwritten", HANDWRITTEN)):
            scripts[name] = directory / f"{name}.py"
            scripts[name].write_text(scaled(path.read_text(), samples, epochs))
        rates = {name: [] for name in scripts}
        walls = {name: [] for name in scripts}
        for round_index in range(rounds):
            order = ["emitted", "handwritten"] if round_index % 2 == 0 else ["handwritten", "emitted"]
            for name in order:
                rate, wall = _torchrun(scripts[name], timer)
                rates[name].append(rate)
                walls[name].append(wall)
        medians = {}
        for name in scripts:
            medians[name] = statistics.median(rates[name])
            print(f"   {name:<12} {medians[name]:7.1f} steps/s per rank = "
                  f"{medians[name] * 32 * 2:7.0f} samples/s  (rounds: "
                  f"{', '.join(f'{rate:.1f}' for rate in rates[name])} steps/s; whole runs "
                  f"{statistics.median(walls[name]):.1f} s)")
        ratio = medians["emitted"] / medians["handwritten"]
        print(f"   emitted / hand-written throughput: {ratio:.3f}  (target >= 0.97)")
        return ratio
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--static-only", action="store_true")
    args = parser.parse_args()
    clean = static_check()
    if args.static_only:
        return 0 if clean else 1
    ratio = throughput(args.samples, args.epochs, args.rounds)
    return 0 if clean and ratio >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main())
