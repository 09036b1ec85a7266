"""How fast ddpify is, against the floor of what libcst costs anyway, in one run.

1. Migration: for each script of a corpus (every fixture's input.py, and generated training
   scripts of ~500, ~2,000 and ~8,000 lines), the best of --repeat runs of
   `migrate_source` against the best of --repeat runs of the floor, one libcst
   `parse_module(code).code`. Target: total within 2x of the floor.
2. Start-up: `ddpify --version` in a subprocess against `python -c pass` (median of --starts).
3. Memory: peak RSS of a fresh process that migrates the largest .py file of site-packages
   (or --largest PATH), against one that only parses it and one that only imports ddpify.
4. With --project (alone): a generated 30-module project (an entry, loaders, a model with
   its layers package, a trainer package, utils, helpers) migrated the way `ddpify -i
   train.py` does (files_of, then each file with its project view), against the floor of
   its files. Target: within 2x of the floor.

    python benchmarks/bench_speed.py
    python benchmarks/bench_speed.py --repeat 5 --starts 20 --profile
    python benchmarks/bench_speed.py --project --repeat 5
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


PROJECT_TRAIN = '''\
import torch
import torch.nn.functional as F

from config import Config
from loaders import get_loaders
from model import build_model
from trainer import Trainer
from utils import *
from utils.checkpoint import save_checkpoint


def main():
    config = Config()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader, val_loader = get_loaders(config.batch_size)
    model = build_model(config.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    meter = AverageMeter()
    for epoch in range(config.epochs):
        model.train()
        for inputs, targets in train_loader:
            inputs, targets = inputs.to(device), targets.to(device)
            loss = F.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            meter.update(loss.item())
        print(f"epoch {epoch}: loss {meter.average:.4f}")
        save_checkpoint(model, f"checkpoint_{epoch}.pt")
    Trainer(model, optimizer, val_loader, device).evaluate()


if __name__ == "__main__":
    main()
'''


def _padding(index: int, count: int) -> str:
    """Helper functions and classes of the kind every module carries."""
    return "".join(
        f"\n\ndef helper_{index}_{number}(values, scale={number + 1}):\n"
        f"    \"\"\"Helper {number} of module {index}.\"\"\"\n"
        f"    total = 0.0\n"
        f"    for position, value in enumerate(values):\n"
        f"        if position % {number + 2} == 0:\n"
        f"            total += value * scale\n"
        f"        else:\n"
        f"            total -= value / scale\n"
        f"    return {{\"total\": total, \"count\": len(values)}}\n"
        for number in range(count))


def project_files() -> dict[str, str]:
    """30 modules: the entry, config, loaders, model, 8 layer modules and their package,
    a trainer package (4 modules), utils (5 modules), and 7 helper modules."""
    layers = [f"block_{index}" for index in range(8)]
    helpers = [f"helpers_{index}" for index in range(7)]
    files = {
        "train.py": PROJECT_TRAIN,
        "config.py": "import os\n\n\nclass Config:\n    batch_size = 16\n    width = 8\n    lr = 0.1\n"
                     "    epochs = 2\n    run_folder = os.path.join('runs', 'latest')\n" + _padding(0, 4),
        "loaders.py": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
                      "from helpers_0 import helper_100_0\n\n\n"
                      "def get_loaders(batch_size):\n"
                      "    inputs, targets = torch.randn(64, 8), torch.randint(0, 2, (64,))\n"
                      "    dataset = TensorDataset(inputs, targets)\n"
                      "    train = DataLoader(dataset, batch_size=batch_size, shuffle=True)\n"
                      "    val = DataLoader(dataset, batch_size=batch_size)\n    return train, val\n" + _padding(1, 6),
        "model.py": "import torch.nn as nn\n\nfrom layers import " + ", ".join(f"Block{index}" for index in range(8))
                    + "\n\n\ndef build_model(width):\n    return nn.Sequential("
                    + ", ".join(f"Block{index}(width)" for index in range(8)) + ", nn.Linear(width, 2))\n"
                    + _padding(2, 4),
        "layers/__init__.py": "".join(f"from .{name} import Block{index}\n" for index, name in enumerate(layers)),
        "trainer/__init__.py": "from .trainer import Trainer\nfrom .hooks import *\n",
        "trainer/trainer.py": "import torch\n\nfrom .callbacks import on_epoch_end\nfrom .state import TrainState\n\n\n"
                              "class Trainer:\n    def __init__(self, model, optimizer, loader, device):\n"
                              "        self.model, self.optimizer = model, optimizer\n"
                              "        self.loader, self.device = loader, device\n"
                              "        self.state = TrainState()\n\n"
                              "    @torch.no_grad()\n    def evaluate(self):\n        self.model.eval()\n"
                              "        correct = 0\n        for inputs, targets in self.loader:\n"
                              "            outputs = self.model(inputs.to(self.device))\n"
                              "            correct += (outputs.argmax(1) == targets.to(self.device)).sum().item()\n"
                              "        print(f\"accuracy {correct / len(self.loader.dataset):.3f}\")\n"
                              "        on_epoch_end(self.state)\n" + _padding(3, 6),
        "trainer/hooks.py": "def before_step(state):\n    state.steps += 1\n" + _padding(4, 4),
        "trainer/callbacks.py": "def on_epoch_end(state):\n    state.epochs += 1\n" + _padding(5, 4),
        "trainer/state.py": "class TrainState:\n    steps = 0\n    epochs = 0\n" + _padding(6, 2),
        "utils/__init__.py": "from .meters import AverageMeter\nfrom .logs import log\n",
        "utils/meters.py": "class AverageMeter:\n    def __init__(self):\n        self.total, self.count = 0.0, 0\n\n"
                           "    def update(self, value):\n        self.total += value\n        self.count += 1\n\n"
                           "    @property\n    def average(self):\n        return self.total / max(self.count, 1)\n"
                           + _padding(7, 4),
        "utils/checkpoint.py": "import os\n\nimport torch\n\n\ndef save_checkpoint(model, path):\n"
                               "    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
                               "    torch.save(model.state_dict(), path)\n" + _padding(8, 4),
        "utils/logs.py": "from . import formats\n\n\ndef log(message):\n    print(formats.line(message))\n"
                         + _padding(9, 4),
        "utils/formats.py": "import helpers_1\n\n\ndef line(message):\n    return f'[train] {message}'\n"
                            + _padding(10, 4),
    }
    for index, name in enumerate(layers):
        files[f"layers/{name}.py"] = (
            f"import torch\nimport torch.nn as nn\n\n\nclass Block{index}(nn.Module):\n"
            f"    def __init__(self, width):\n        super().__init__()\n"
            f"        self.linear = nn.Linear(width, width)\n\n"
            f"    def forward(self, x):\n        return x + torch.relu(self.linear(x))\n" + _padding(20 + index, 3))
    for index, name in enumerate(helpers):
        following = f"import helpers_{index + 1}\n" if index + 1 < len(helpers) else ""
        files[f"{name}.py"] = f"import math\n{following}" + _padding(100 + index, 8)
    return files


def measure_project(repeat: int, parent_of_many: int = 0) -> None:
    import ast
    import tempfile

    import libcst as cst

    from ddpify import project
    from ddpify.analysis import inert
    from ddpify.api import migrate_source
    from ddpify.jobs import _collector_paused
    from ddpify.project_files import files_of

    def migrate_project(entry: Path) -> int:
        """As `ddpify -i train.py` runs it, without the writes: a fresh project view."""
        project.clear_caches()
        changed = 0
        for path in files_of(entry):
            text = path.read_text()
            with _collector_paused():
                changed += migrate_source(text, project=project.read(str(path), text)).code != text
        return changed

    with tempfile.TemporaryDirectory(prefix="ddpify-bench-project-") as folder:
        # In a folder of its own, as a clone under ~/code is: working out the project's root
        # reads the folder above it (which scripts there import it or put it on sys.path),
        # and a system temp folder of thousands of entries is nobody's folder of projects
        # (README gives the ratio measured with one as well: --parent-of-many).
        root = Path(folder) / "project"
        for index in range(parent_of_many):
            (Path(folder) / f"other-{index}").mkdir()
            if index % 64 == 0:
                (Path(folder) / f"script_{index}.py").write_text("import os\n")
        for name, text in project_files().items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        entry = root / "train.py"
        modules = files_of(entry)
        texts = [path.read_text() for path in modules]
        lines = sum(len(text.splitlines()) for text in texts)
        views = [project.read(str(path), text) for path, text in zip(modules, texts)]
        read_by_libcst = [text for text, view in zip(texts, views)
                          if not inert.nothing_to_migrate(ast.parse(text), view.inert_definition, view.package)]
        # Interleaved, round by round, so that load from elsewhere hits floor and migration alike.
        rounds = [(best_of(1, lambda: [cst.parse_module(text).code for text in texts]),
                   best_of(1, lambda: (project.clear_caches(), files_of(entry))),
                   best_of(1, lambda: migrate_project(entry)),
                   best_of(1, lambda: [cst.parse_module(text).code for text in read_by_libcst]))
                  for _ in range(repeat)]
        floor, walk, migration, libcst_floor = (min(column) for column in zip(*rounds))
        changed = migrate_project(entry)
    print(f"4. a generated project of {len(modules)} modules ({lines} lines; {changed} changed by the "
          f"migration), best of {repeat} interleaved rounds")
    print(f"   floor (libcst parse_module + .code of every file) {floor * 1000:8.1f} ms")
    print(f"   files_of (which files form the project)            {walk * 1000:8.1f} ms")
    print(f"   migration (files_of + every file with its project) {migration * 1000:8.1f} ms"
          f"   ratio {migration / floor:.2f} (target <= 2.0)")
    print(f"   ({len(read_by_libcst)} modules are read by libcst, their floor alone {libcst_floor * 1000:.1f} ms; "
          f"the other {len(texts) - len(read_by_libcst)} have nothing to migrate (ddpify/analysis/inert.py) "
          f"and cost an `ast` read each)")


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
    parser.add_argument("--project", action="store_true", help="measure a generated 30-module project only")
    parser.add_argument("--parent-of-many", type=int, default=0, metavar="N",
                        help="with --project: N other folders (and a script per 64) beside the project")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    if args.project:
        measure_project(args.repeat, args.parent_of_many)
        return
    measure_migration(args.repeat)
    if args.profile:
        profile_migration()
    measure_startup(args.starts)
    for path in [args.largest] if args.largest else largest_python_files():
        measure_memory(path)


if __name__ == "__main__":
    main()
