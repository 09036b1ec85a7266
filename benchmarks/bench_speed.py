"""How fast ddpify is, against the floor of what libcst costs anyway, in one run.

1. Migration: for each script of a corpus (every fixture's input.py, and generated training
   scripts of ~500, ~2,000 and ~8,000 lines), the best of --repeat runs of
   `migrate_source` against the best of --repeat runs of the floor, one libcst
   `parse_module(code).code`. Target: total within 2x of the floor.
2. Start-up: `ddpify --version` in a subprocess against `python -c pass` (median of --starts).
3. Memory: peak RSS of a fresh process that migrates the largest .py file of site-packages
   (or --largest PATH), against one that only parses it and one that only imports ddpify.

    python benchmarks/bench_speed.py
    python benchmarks/bench_speed.py --repeat 5 --starts 20 --profile
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated_script(functions: int) -> str:
    """A training script padded with the kind of code real ones carry: models, helpers."""
    guide = (ROOT / "fixtures" / "guide" / "guide_image_classifier" / "input.py").read_text()
    blocks = []
    for index in range(functions):
        blocks.append(
            f"\n\nclass Block{index}(nn.Module):\n"
            f"    \"\"\"Residual block {index}.\"\"\"\n\n"
            f"    def __init__(self, width={index % 7 + 8}):\n"
            f"        super().__init__()\n"
            f"        self.linear = nn.Linear(width, width)\n"
            f"        self.scale = {index / 10}\n\n"
            f"    def forward(self, x):\n"
            f"        if x.dim() > 2:\n"
            f"            x = x.flatten(1)\n"
            f"        return x + self.scale * torch.relu(self.linear(x))\n\n\n"
            f"def metric_{index}(outputs, targets):\n"
            f"    correct = (outputs.argmax(dim=1) == targets).sum()\n"
            f"    return {{\"accuracy_{index}\": correct / max(len(targets), 1)}}\n"
        )
    return guide.replace("\n\nclass MyModel", "".join(blocks) + "\n\nclass MyModel", 1)


def corpus():
    scripts = [(path.parent.name, path.read_text())
               for path in sorted((ROOT / "fixtures").glob("*/*/input.py"), key=lambda path: path.parent.name)]
    for functions in (25, 110, 450):
        text = generated_script(functions)
        scripts.append((f"generated_{len(text.splitlines())}_lines", text))
    return scripts


def best_of(repeat: int, function) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def measure_migration(repeat: int) -> None:
    import libcst as cst

    from ddpify import selfcheck
    from ddpify.api import migrate_source
    from ddpify.jobs import _collector_paused

    def as_the_cli_runs_it(text):
        with _collector_paused():
            migrate_source(text)

    def self_check_of(text):
        """The self-check's share of the api time: it runs inside migrate_source on a changed file."""
        result = migrate_source(text)
        if result.code == text:
            return lambda: None
        return lambda: selfcheck.check(text, result.code, result.diagnostics)

    print("1. migration against the floor (libcst parse_module + .code), best of", repeat)
    print("   api: migrate_source as is; cli: the same with the cyclic GC paused, as ddpify's CLI runs it;")
    print("   check: the self-check (safe mode) alone, part of api and cli")
    print(f"   {'script':<38}{'lines':>6}{'floor ms':>10}{'api ms':>10}{'ratio':>7}{'cli ms':>10}{'ratio':>7}"
          f"{'check ms':>10}")
    totals = [0.0, 0.0, 0.0, 0.0]
    for name, text in corpus():
        floor = best_of(repeat, lambda text=text: cst.parse_module(text).code)
        api = best_of(repeat, lambda text=text: migrate_source(text))
        cli = best_of(repeat, lambda text=text: as_the_cli_runs_it(text))
        check = best_of(repeat, self_check_of(text))
        for index, value in enumerate((floor, api, cli, check)):
            totals[index] += value
        print(f"   {name:<38}{len(text.splitlines()):>6}{floor * 1000:>10.1f}{api * 1000:>10.1f}"
              f"{api / floor:>7.1f}{cli * 1000:>10.1f}{cli / floor:>7.1f}{check * 1000:>10.1f}")
    floor, api, cli, check = totals
    print(f"   {'total':<38}{'':>6}{floor * 1000:>10.1f}{api * 1000:>10.1f}{api / floor:>7.1f}"
          f"{cli * 1000:>10.1f}{cli / floor:>7.1f}{check * 1000:>10.1f}   (target <= 2.0)")


def profile_migration() -> None:
    import cProfile
    import pstats

    from ddpify.api import migrate_source

    text = generated_script(110)
    profiler = cProfile.Profile()
    profiler.enable()
    migrate_source(text)
    profiler.disable()
    print("\n   where the time goes (generated script, cumulative, top 25):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)


def _start_times(commands, starts: int):
    """Interleaved, so that a burst of load elsewhere hits every command alike."""
    times = {name: [] for name in commands}
    for _ in range(starts):
        for name, command in commands.items():
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name].append((time.perf_counter() - started) * 1000)
    return times


def measure_startup(starts: int) -> None:
    entry = shutil.which("ddpify")
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "python -m ddpify --version": [sys.executable, "-m", "ddpify", "--version"]}
    if entry:
        commands["ddpify --version"] = [entry, "--version"]
    times = _start_times(commands, starts)
    bare_min, bare_median = min(times["python -c pass"]), statistics.median(times["python -c pass"])
    print(f"\n2. start-up over {starts} interleaved runs: min / median, and above python -c pass")
    for name, values in times.items():
        low, middle = min(values), statistics.median(values)
        extra = "" if name == "python -c pass" else (
            f"   +{low - bare_min:.0f} / +{middle - bare_median:.0f} ms (target +150 ms)")
        print(f"   {name:<28}{low:7.0f} / {middle:4.0f} ms{extra}")


# ru_maxrss would count the parent's pages at fork; VmHWM starts afresh at exec.
_RSS = """
import sys
text = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
if sys.argv[2] == "migrate":
    from ddpify.api import MigrationError, migrate_source
    try:
        migrate_source(text)
    except MigrationError as error:
        print("migration error:", error.message[:200], file=sys.stderr)
elif sys.argv[2] == "parse":
    import libcst
    libcst.parse_module(text).code
else:
    import ddpify.api
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def largest_python_files():
    """The largest .py file of site-packages, and the largest that mentions torch (the
    largest that reaches analysis and the transforms)."""
    root = sysconfig.get_paths()["purelib"]
    files = sorted(((os.path.getsize(os.path.join(directory, name)), os.path.join(directory, name))
                    for directory, _, names in os.walk(root) for name in names
                    if name.endswith(".py")), reverse=True)
    largest = Path(files[0][1])
    with_torch = next(Path(path) for _, path in files if b"torch" in Path(path).read_bytes())
    return [largest, with_torch]


def measure_memory(path: Path) -> None:
    def peak(kind):
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _RSS, str(path), kind], capture_output=True,
                             text=True, check=True)
        return int(out.stdout.strip().splitlines()[-1]) / 1024, time.perf_counter() - started

    lines = len(path.read_bytes().splitlines())
    print(f"\n3. peak RSS (VmHWM) on {path} ({path.stat().st_size // 1024} KiB, {lines} lines)")
    for kind in ("import", "parse", "migrate"):
        megabytes, seconds = peak(kind)
        print(f"   {kind:<8}{megabytes:8.0f} MiB   {seconds:6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--largest", type=Path, help="file for the memory measurement")
    parser.add_argument("--profile", action="store_true", help="also print a profile")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    measure_migration(args.repeat)
    if args.profile:
        profile_migration()
    measure_startup(args.starts)
    for path in [args.largest] if args.largest else largest_python_files():
        measure_memory(path)


if __name__ == "__main__":
    main()
