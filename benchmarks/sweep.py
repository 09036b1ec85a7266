r"""Robustness sweep: ddpify's API over every .py file of the installed site-packages.

For each file, in worker processes that are restarted if one dies:
  - a crash is any exception other than a MigrationError for a real syntax error, and any
    error at all on a file that `compile()` accepts (libcst must parse what Python parses);
  - the output must compile whenever the input did;
  - a file that trains nothing when run must come back byte-identical: one whose
    `.backward()`/`.step()` calls are not reachable from its module-level code (through the
    functions it calls and the classes it instantiates), such as a library module whose
    methods call `.backward()`;
  - what ddpify changed, migrated again, must not change (idempotence).
Each file runs under a time limit (`--limit-s`); files over it are listed, not counted as
crashes. Files are decoded as Python would (BOM, coding declaration); ones that cannot be
are counted apart.

    python benchmarks/sweep.py                       # everything: ~14k files, hours on 2 cores
    python benchmarks/sweep.py --torch-only -j 2     # the 2,000 files that mention torch
    python benchmarks/sweep.py --torch-only --pattern '\.backward\(|\.step\(|DataLoader'
    python benchmarks/sweep.py --sample 150 --seed 0 --json sweep.json

Exit status 1 when any crash, output that does not compile, or unwanted change is found.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import sysconfig
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Optional

# Outcomes. The first four are fine; the rest are findings.
UNCHANGED, MIGRATED, SYNTAX_ERROR, UNDECODABLE = "unchanged", "migrated", "syntax-error", "undecodable"
TIMEOUT = "timeout"
CRASH, BAD_OUTPUT, UNWANTED_CHANGE, NOT_IDEMPOTENT = (
    "crash", "output-does-not-compile", "changed-without-training", "not-idempotent")
FINDINGS = (CRASH, BAD_OUTPUT, UNWANTED_CHANGE, NOT_IDEMPOTENT)

_TRAINING_CALLS = {"backward", "step"}


@dataclass
class Record:
    path: str
    outcome: str
    seconds: float = 0.0
    size: int = 0
    codes: str = ""
    details: str = ""


class _TimeLimit(BaseException):  # libcst turns Exceptions into TransformFailure
    pass


def _alarm(signum, frame):
    raise _TimeLimit()


def site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def python_files(root: str) -> list[str]:
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        found.extend(os.path.join(directory, name) for name in sorted(files) if name.endswith(".py"))
    return found


def select(files: list[str], torch_only: bool, sample: Optional[int], seed: int,
           pattern: Optional[str] = None) -> list[str]:
    if torch_only:
        files = [path for path in files if b"torch" in _read(path)]
    if pattern:
        matches = re.compile(pattern.encode()).search
        files = [path for path in files if matches(_read(path))]
    if sample is not None and sample < len(files):
        files = sorted(random.Random(seed).sample(files, sample))
    return files


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def check_file(path: str, limit_s: float = 60.0) -> Record:
    """Migrate one file in this process and judge the result."""
    from ddpify.api import MigrationError, migrate_source
    from ddpify.files import SourceError, decode

    data = _read(path)
    record = Record(path, UNCHANGED, size=len(data))
    try:
        source = decode(data, path)
    except SourceError as error:
        record.outcome, record.details = UNDECODABLE, str(error)
        return record
    compiles = _compiles(source.text, path)
    started = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        result = migrate_source(source.text)
        again = migrate_source(result.code).code if result.code != source.text else result.code
    except _TimeLimit:
        record.outcome = TIMEOUT
        return record
    except MigrationError as error:
        is_syntax = error.message.startswith("syntax error")
        record.outcome = SYNTAX_ERROR if is_syntax and not compiles else CRASH
        record.details = error.message if is_syntax else error.message[:4000]
        return record
    except Exception:
        record.outcome, record.details = CRASH, traceback.format_exc()[-4000:]
        return record
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        record.seconds = round(time.perf_counter() - started, 3)

    record.codes = ",".join(sorted({d.code for d in result.diagnostics}))
    changed = result.code != source.text
    record.outcome = MIGRATED if changed else UNCHANGED
    if changed and compiles and not _compiles(result.code, path):
        record.outcome = BAD_OUTPUT
    elif changed and not trains_when_run(source.text):
        record.outcome = UNWANTED_CHANGE
    elif again != result.code:
        record.outcome = NOT_IDEMPOTENT
    if record.outcome in FINDINGS and not record.details:
        record.details = _short_diff(source.text, result.code if record.outcome != NOT_IDEMPOTENT else again)
    return record


def trains_when_run(source: str) -> bool:
    """Does running this file call .backward() or .step()? Module-level code is reachable,
    and so is every top-level function it calls and every method of a class it uses."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True  # cannot tell: do not judge
    definitions = {node.name: node for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    pending = [node for node in tree.body if not isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if any(isinstance(child, ast.Call) and not child.args and (
            isinstance(child.func, ast.Name) and child.func.id == "Fire"
            or isinstance(child.func, ast.Attribute) and child.func.attr == "Fire")
           for node in pending for child in ast.walk(node)):
        # `fire.Fire()`: the command line names the function to run, any of them.
        pending += [node for node in definitions.values() if not isinstance(node, ast.ClassDef)]
    reached = set()
    while pending:
        node = pending.pop()
        for child in ast.walk(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr in _TRAINING_CALLS:
                return True
            if isinstance(child, ast.Name) and child.id in definitions and child.id not in reached:
                reached.add(child.id)
                pending.append(definitions[child.id])
    return False


def _compiles(text: str, path: str) -> bool:
    try:
        compile(text, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _short_diff(before: str, after: str) -> str:
    import difflib

    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1))
    return "\n".join(lines[:60])


# -- workers -------------------------------------------------------------------------------

def _worker(limit_s: float, list_path: str) -> None:
    """Paths from a file, one a line; one JSON record per line on stdout, in order."""
    with open(list_path) as handle:
        paths = handle.read().splitlines()
    for path in paths:
        record = check_file(path, limit_s)
        sys.stdout.write(json.dumps(asdict(record)) + "\n")
        sys.stdout.flush()


def _run_slice(paths: list[str], limit_s: float) -> Iterable[Record]:
    """One worker process over `paths`; if it dies, the file it was on is a crash."""
    import tempfile

    remaining = list(paths)
    while remaining:
        # The list goes through a file: written to a pipe, a long one would fill it while
        # the worker blocks writing records that nobody reads yet.
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
            listing.write("".join(path + "\n" for path in remaining))
        with tempfile.TemporaryFile("w+") as errors:
            process = subprocess.Popen(
                [sys.executable, __file__, "--worker", listing.name, "--limit-s", str(limit_s)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True,
            )
            for line in process.stdout:
                record = Record(**json.loads(line))
                remaining.pop(0)
                yield record
            code = process.wait()
            errors.seek(0)
            stderr = errors.read()
        os.unlink(listing.name)
        if remaining:
            yield Record(remaining.pop(0), CRASH, details=f"worker died (exit {code}): {stderr[-2000:]}")


def sweep(paths: list[str], jobs: int, limit_s: float, progress: bool) -> list[Record]:
    import threading

    slices = [paths[index::jobs] for index in range(jobs)]
    records: list[Record] = []
    lock = threading.Lock()

    def drain(slice_paths):
        for record in _run_slice(slice_paths, limit_s):
            with lock:
                records.append(record)
                if progress:
                    sys.stderr.write(f"\r{len(records)}/{len(paths)} {record.outcome:<24}")
                    sys.stderr.flush()

    threads = [threading.Thread(target=drain, args=(part,)) for part in slices if part]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if progress:
        sys.stderr.write("\n")
    order = {path: index for index, path in enumerate(paths)}
    return sorted(records, key=lambda record: order[record.path])


def summarise(records: list[Record], root: str, seconds: float) -> str:
    counts = {}
    for record in records:
        counts[record.outcome] = counts.get(record.outcome, 0) + 1
    lines = [f"{len(records)} files under {root} in {seconds:.0f} s: "
             + ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))]
    slowest = sorted(records, key=lambda record: record.seconds, reverse=True)[:5]
    lines.append("slowest: " + ", ".join(f"{os.path.relpath(r.path, root)} ({r.size // 1024} KiB, "
                                         f"{r.seconds:.1f} s)" for r in slowest))
    for record in records:
        if record.outcome in FINDINGS or record.outcome == TIMEOUT:
            lines.append(f"\n{record.outcome.upper()}: {record.path}\n{record.details.rstrip()}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=site_packages(), help="directory to sweep (default: site-packages)")
    parser.add_argument("--torch-only", action="store_true", help="only files that mention torch")
    parser.add_argument("--pattern", help="only files whose bytes match this regular expression")
    parser.add_argument("--sample", type=int, help="a random sample of this many files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit per file")
    parser.add_argument("--json", help="write every record here")
    parser.add_argument("--worker", metavar="LIST", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.limit_s, args.worker)
        return 0
    paths = select(python_files(args.root), args.torch_only, args.sample, args.seed,
                   args.pattern)
    started = time.perf_counter()
    records = sweep(paths, max(1, args.jobs), args.limit_s, progress=sys.stderr.isatty())
    print(summarise(records, args.root, time.perf_counter() - started))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(record) for record in records], handle, indent=1)
    return 1 if any(record.outcome in FINDINGS for record in records) else 0


if __name__ == "__main__":
    sys.exit(main())
