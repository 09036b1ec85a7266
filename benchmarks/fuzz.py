r"""Fuzz: ddpify over real files and broken edits of its fixtures (issue 10), run by hand.

The corpus: installed site-packages files that mention torch, plus mutations of every
fixture's input.py: wrapped in a function, CRLF, tabs, no final newline, deep nesting
(parentheses and `if` blocks, some beyond what Python or libcst's parser can take), and
random token deletions. Each file goes through benchmarks/sweep.py's checks, in worker
processes that are restarted if one dies: no crash, output compiles, unchanged unless it
trains, idempotent; and here also every input that Python rejects is reported as a syntax
error. Then the command line runs once over the whole corpus (`ddpify --check -j 2`): it
must finish with a summary, no traceback, and one error line per broken input.

    python benchmarks/fuzz.py                 # 1,000 files: 500 real, 500 mutations
    python benchmarks/fuzz.py --real 100 --mutations 100 --keep /tmp/corpus

Exit status 1 on any finding.
"""
import argparse
import io
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BROKEN_INPUT_ACCEPTED = "broken-input-accepted"


def _in_function(text: str) -> str:
    body = "".join("    " + line if line.strip() else line for line in text.splitlines(True))
    return f"def main():\n{body}\n\nif __name__ == \"__main__\":\n    main()\n"


def _tabs(text: str) -> str:
    return re.sub(r"(?m)^((?:    )+)", lambda match: "\t" * (len(match.group(1)) // 4), text)


def _deep_parentheses(rng: random.Random) -> Callable[[str], str]:
    depth = rng.choice([50, 150, 199, 250, 1000, 10_000, 50_000])
    return lambda text: text + f"\nnested = {'(' * depth}1{')' * depth}\n"


def _deep_blocks(rng: random.Random) -> Callable[[str], str]:
    depth = rng.choice([20, 60, 99, 101, 150])
    return lambda text: text + "\n" + "".join(
        " " * level + f"if {level} > 0:\n" for level in range(depth)) + " " * depth + "pass\n"


def _delete_tokens(rng: random.Random) -> Callable[[str], str]:
    count = rng.choice([1, 1, 2, 3])

    def mutate(text: str) -> str:
        lines = text.splitlines(True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        tokens = [token for token in tokenize.generate_tokens(io.StringIO(text).readline)
                  if token.string.strip() and token.type != tokenize.COMMENT]
        for token in sorted(rng.sample(tokens, min(count, len(tokens))),
                            key=lambda token: token.start, reverse=True):
            start = offsets[token.start[0] - 1] + token.start[1]
            end = offsets[token.end[0] - 1] + token.end[1]
            text = text[:start] + text[end:]
        return text
    return mutate


MUTATIONS: dict[str, Callable[[random.Random], Callable[[str], str]]] = {
    "as-is": lambda rng: lambda text: text,
    "in-function": lambda rng: _in_function,
    "crlf": lambda rng: lambda text: text.replace("\n", "\r\n"),
    "tabs": lambda rng: _tabs,
    "no-final-newline": lambda rng: lambda text: text.rstrip("\n"),
    "deep-parentheses": _deep_parentheses,
    "deep-blocks": _deep_blocks,
    "token-deletion": _delete_tokens,
}


def corpus(directory: Path, real: int, mutations: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    small = [path for path in sweep.python_files(sweep.site_packages())
             if os.path.getsize(path) < 100_000]
    paths = sweep.select(small, torch_only=True, sample=real, seed=seed)
    fixtures = sorted((ROOT / "fixtures").glob("*/*/input.py"), key=lambda path: path.parent.name)
    names = sorted(MUTATIONS)
    for index in range(mutations):
        fixture = fixtures[index % len(fixtures)]
        # Every fixture through every mutation first, then random ones.
        name = names[(index // len(fixtures)) % len(names)] if index < len(fixtures) * len(names) \
            else rng.choice(names)
        text = MUTATIONS[name](rng)(fixture.read_text())
        path = directory / f"{index:04d}_{fixture.parent.name}_{name}.py"
        path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    return paths


def judge(records: list[sweep.Record]) -> list[sweep.Record]:
    """sweep's findings, and a broken input that ddpify did not call a syntax error."""
    for record in records:
        if record.outcome in (sweep.UNCHANGED, sweep.MIGRATED) and not _compiles_file(record.path):
            record.outcome, record.details = BROKEN_INPUT_ACCEPTED, "Python rejects it"
    return [record for record in records if record.outcome in (*sweep.FINDINGS, BROKEN_INPUT_ACCEPTED)]


def _compiles_file(path: str) -> bool:
    from ddpify.files import SourceError, decode

    try:
        return sweep._compiles(decode(Path(path).read_bytes(), path).text, path)
    except SourceError:
        return False


def command_line(directory: Path, broken: int) -> list[str]:
    """Problems with one `ddpify --check -j 2` over the mutated files."""
    process = subprocess.run([sys.executable, "-m", "ddpify", "--check", "-j", "2", "-q",
                              str(directory)], capture_output=True, text=True, timeout=3600)
    errors = [line for line in process.stderr.splitlines() if line.startswith("ddpify: error:")]
    problems = []
    if process.returncode != (2 if broken else 1):
        problems.append(f"exit {process.returncode}")
    if "Traceback" in process.stderr or "internal error" in process.stderr:
        problems.append("traceback or internal error:\n" + process.stderr[-3000:])
    if len(errors) != broken:
        problems.append(f"{len(errors)} error lines for {broken} broken inputs")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=int, default=500, help="site-packages files that mention torch")
    parser.add_argument("--mutations", type=int, default=500, help="mutated fixture inputs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit per file")
    parser.add_argument("--keep", help="write the mutated files here instead of a temporary directory")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(args.keep or temporary)
        directory.mkdir(parents=True, exist_ok=True)
        paths = corpus(directory, args.real, args.mutations, args.seed)
        started = time.perf_counter()
        records = sweep.sweep(paths, max(1, args.jobs), args.limit_s, progress=sys.stderr.isatty())
        findings = judge(records)
        print(sweep.summarise(records, str(directory), time.perf_counter() - started))
        broken = sum(not _compiles_file(str(path)) for path in directory.glob("*.py"))
        problems = command_line(directory, broken)
        print(f"command line over {len(list(directory.glob('*.py')))} mutated files "
              f"({broken} broken): " + ("ok" if not problems else "; ".join(problems)))
        for record in findings:
            if record.outcome == BROKEN_INPUT_ACCEPTED:
                print(f"\n{record.outcome.upper()}: {record.path}")
    return 1 if findings or problems else 0


if __name__ == "__main__":
    sys.exit(main())
