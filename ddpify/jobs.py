"""One file's work: read it, migrate it, decide what to write, write it, and say what happened.

A job runs in the main process or in a worker process (`-j N`), so it takes and returns
plain picklable values and prints nothing: the command line prints every report in input
order. Migration itself is `ddpify.api`'s business; this module is only files in and out.
"""
import contextlib
import difflib
import gc
import re
import traceback
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ddpify.diagnostics import Diagnostic, Severity
from ddpify.files import (
    SourceError, check_writable, decode, encode, read_bytes, read_source, write_atomically,
)
from ddpify.options import Options

OK, PENDING, ERROR = 0, 1, 2

# What a job does with the migrated code.
WRITE = "write"            # to `output` (a file, or stdout when None or "-")
IN_PLACE = "in-place"      # over the input
DIFF = "diff"              # a unified diff, nothing written
CHECK = "check"            # nothing written; pending when the input (or `output`) is stale
TWIN = "twin"              # keep `output` (X_ddp.py) equal to the migrated X.py
TWIN_CHECK = "twin-check"  # as TWIN, but only say whether the twin is stale

# Statuses counted in the summary line.
MIGRATED, UNCHANGED, SKIPPED, FAILED = "migrated", "unchanged", "skipped", "failed"

_NO_TRAINING = Diagnostic("DDP901", 1, 1, "no training code found: left unchanged")
# Notes about a whole file that say there is nothing to do (already distributed, no training).
WHOLE_FILE_NOTES = frozenset({"DDP900", "DDP901"})


@dataclass(frozen=True)
class Job:
    path: str
    mode: str
    options: Options = Options()
    output: Optional[str] = None
    # stdin's bytes: only the main process can read them.
    data: Optional[bytes] = None
    # Named on the command line rather than found by walking a directory.
    explicit: bool = True

    @property
    def shown(self) -> str:
        return "<stdin>" if self.path == "-" else self.path


@dataclass
class Report:
    path: str
    status: str
    exit_code: int
    diagnostics: Tuple[Diagnostic, ...] = ()
    # One-line messages for stderr (what was written, what is stale).
    notes: List[str] = field(default_factory=list)
    error: Optional[str] = None
    # With -v: the traceback behind an internal error.
    details: str = ""
    diff: str = ""
    # The migrated script when it goes to stdout, already encoded.
    stdout: bytes = b""
    written: Optional[str] = None
    changed: bool = False


def run(job: Job) -> Report:
    try:
        return _run(job)
    except Exception as error:  # a bug in ddpify must not take the other files down
        return Report(job.shown, FAILED, ERROR, error=f"{job.shown}: internal error: {error!r}",
                      details=traceback.format_exc())


def _run(job: Job) -> Report:
    from ddpify.api import MigrationError, migrate_source

    shown = job.shown
    try:
        data = job.data if job.path == "-" else read_bytes(job.path)
        if b"torch" not in data and job.mode != WRITE:
            # Cheap: a file that never mentions torch trains nothing, so it is not parsed.
            if not job.explicit:
                return Report(shown, SKIPPED, OK)
            decode(data, shown)
            return Report(shown, SKIPPED, OK, diagnostics=(_NO_TRAINING,))
        source = decode(data, shown)
        if job.mode == WRITE and job.output not in (None, "-"):
            check_writable(job.output)
        with _collector_paused():
            result = migrate_source(source.text, job.options)
    except SourceError as error:
        return Report(shown, FAILED, ERROR, error=str(error))
    except MigrationError as error:
        return _migration_failure(shown, error, locals().get("source"))

    changed = result.code != source.text
    diagnostics = result.diagnostics
    if not job.explicit:
        # Over a walked tree, "nothing to do here" for each of thousands of files is noise:
        # the summary line counts them as unchanged.
        diagnostics = tuple(d for d in diagnostics if d.code not in WHOLE_FILE_NOTES)
    report = Report(shown, MIGRATED if changed else UNCHANGED,
                    PENDING if result.needs_a_person else OK,
                    diagnostics=diagnostics, changed=changed)
    try:
        _deliver(job, report, source.text, result.code, source.encoding)
    except (SourceError, OSError) as error:
        report.status, report.exit_code = FAILED, ERROR
        report.error = str(error) if isinstance(error, SourceError) else f"{shown}: {error}"
    return report


@contextlib.contextmanager
def _collector_paused():
    """libcst allocates millions of small objects and makes almost no reference cycles, so the
    cyclic collector only rescans them: pausing it for one file saves about a third of the
    time (benchmarks/bench_speed.py) at the same peak memory."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _deliver(job: Job, report: Report, before: str, after: str, encoding: str) -> None:
    """Write or compare the migrated code as the mode asks, updating the report."""
    shown, changed = report.path, report.changed
    if job.mode == CHECK and job.output:
        _compare_twin(report, job.output, after, shown, missing_ok=False)
    elif job.mode == CHECK:
        if changed:
            report.notes.append(f"{shown}: not DDP-ready")
            report.exit_code = PENDING
    elif job.mode == TWIN_CHECK:
        _compare_twin(report, job.output, after, shown, missing_ok=not changed)
    elif job.mode == DIFF:
        if changed:
            report.diff = unified_diff(before, after, shown)
            report.exit_code = PENDING
    elif job.mode == IN_PLACE:
        if changed:
            write_atomically(job.path, encode(after, encoding))
            report.written = job.path
            report.notes.append(f"{shown}: migrated in place")
    elif job.mode == TWIN:
        current = _read_text_or_none(job.output)
        if current != after and (current is not None or changed):
            write_atomically(job.output, encode(after, encoding))
            report.written = job.output
            report.notes.append(f"{job.output}: {'updated' if current is not None else 'written'}"
                                f" from {shown}")
            report.exit_code = PENDING
    elif job.output not in (None, "-"):
        write_atomically(job.output, encode(after, encoding))
        report.written = job.output
    else:
        # A BOM in the middle of a pipeline helps nobody.
        report.stdout = encode(after, "utf-8" if encoding == "utf-8-sig" else encoding)


def _compare_twin(report: Report, twin: str, after: str, shown: str, missing_ok: bool) -> None:
    current = _read_text_or_none(twin)
    if current is None and missing_ok:
        return
    if current is None:
        report.notes.append(f"{twin}: missing: run ddpify {shown} -o {twin}")
    elif current != after:
        report.notes.append(f"{twin}: stale: not what ddpify writes for {shown}")
    else:
        return
    report.exit_code = PENDING


def _migration_failure(shown: str, error, source) -> Report:
    message, details = error.message, ""
    if message.startswith("internal error"):
        message, _, details = message.partition("\n")
        message += " (a bug in ddpify: please report it; -v shows the traceback)"
        return Report(shown, FAILED, ERROR, error=f"{shown}: {message}", details=details)
    line, column = error.line, error.column
    if source is not None:
        line, column, message = _python_syntax_error(source.text, shown) or (line, column, message)
    location = f"{shown}:{line}:{column}" if line else shown
    return Report(shown, FAILED, ERROR, error=f"{location}: {message}")


# Python's own messages for Python 2 code that Python 3 rejects.
_PYTHON2_HINTS = (
    "Missing parentheses in call to",
    "multiple exception types must be parenthesized",
    "leading zeros in decimal integer literals",
    "invalid syntax. Perhaps you forgot a comma?",
)


_PYTHON2_LINE = re.compile(r"print\s+[^\s(=]|exec\s+[\"']|.*`|.*<>")


def _python_syntax_error(text: str, shown: str) -> Optional[Tuple[int, int, str]]:
    """Python's own message says more than the parser's list of expected tokens."""
    import ast

    try:
        compile(text, shown, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        message = f"syntax error: {error.msg}"
        line = (error.text or "").strip()
        if any(hint in error.msg for hint in _PYTHON2_HINTS) or _PYTHON2_LINE.match(line):
            message += " (Python 2 source? ddpify reads Python 3 only)"
        return error.lineno or 0, error.offset or 0, message
    except (ValueError, MemoryError, RecursionError):
        return None
    return None


def unified_diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def _read_text_or_none(path: str) -> Optional[str]:
    try:
        return read_source(path).text
    except SourceError:
        return None


def visible(diagnostic: Diagnostic, verbose: bool, quiet: bool) -> bool:
    """Edits are listed with -v; notes are dropped with -q; what needs a person always shows."""
    if diagnostic.severity is Severity.EDIT:
        return verbose
    if diagnostic.severity is Severity.INFO:
        return not quiet
    return True
