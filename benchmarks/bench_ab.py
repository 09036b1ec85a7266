"""Migration CPU of two ddpify trees, side by side: every STEP-th fixture input (single-file
inputs and every module of the project fixtures, as the fixture tests migrate them), each
migrated by both trees in turn, one fixture at a time, so that both see the same load on a
shared machine. Each tree runs in a process of its own (`sys.path[0]` is the tree) that
times its migrations with `time.process_time()`; the sums and their ratio are printed.

    git archive BASE ddpify tests | tar -x -C /tmp/base   # the tree to compare with
    python benchmarks/bench_ab.py /tmp/base . --step 4

The fixtures are this checkout's; the two trees' outputs are not compared here (the
fixture tests and `tests/regenerate_fixtures.py` hold them to expected.py).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

_WORKER = r'''
import json, sys, time
from pathlib import Path
tree = sys.argv[1]
sys.path[0:0] = [tree, tree + "/tests"]
from fixture_cases import read_options
from ddpify.api import MigrationError, migrate_source
from ddpify.project import read as read_project
for line in sys.stdin:
    kind, directory = json.loads(line)
    directory = Path(directory)
    started = time.process_time()
    options = read_options(directory)
    if kind == "single":
        modules = [(directory / "input.py", ())]
    else:
        root = directory / "input"
        paths = sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)
        modules = [(path, [str(each) for each in paths]) for path in paths]
    for path, together in modules:
        text = path.read_text()
        try:
            migrate_source(text, options, read_project(str(path), text, together))
        except MigrationError:
            pass
    print(time.process_time() - started, flush=True)
'''


def fixtures(step: int, offset: int) -> list[tuple[str, str]]:
    found = []
    for family in sorted(path for path in FIXTURES.iterdir() if path.is_dir()):
        for directory in sorted(family.iterdir()):
            if (directory / "input.py").exists():
                found.append(("single", str(directory)))
            elif (directory / "input").is_dir():
                found.append(("project", str(directory)))
    return found[offset::step]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--step", type=int, default=4)
    parser.add_argument("--offset", type=int, default=0)
    args = parser.parse_args()
    cases = fixtures(args.step, args.offset)
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(Path(tree).resolve())], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd="/")
               for tree in (args.base, args.new)]
    totals = [0.0, 0.0]
    for index, case in enumerate(cases):
        for which in ((0, 1) if index % 2 == 0 else (1, 0)):  # who goes first alternates
            worker = workers[which]
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write(json.dumps(case) + "\n")
            worker.stdin.flush()
            totals[which] += float(worker.stdout.readline())
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    print(f"{len(cases)} fixtures: base {totals[0]:.2f} s, new {totals[1]:.2f} s of CPU, "
          f"new/base {totals[1] / totals[0]:.3f}")


if __name__ == "__main__":
    main()
