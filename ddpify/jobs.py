"""One file's work: read it, migrate it, decide what to write, write it, and say what happened.

`prepare` (read, migrate, compare) runs in the main process or in a worker process (`-j N`),
so it takes and returns plain picklable values, prints nothing and writes nothing; `commit`
writes, always in the main process, which prints every report in input order. Migration
itself is `ddpify.api`'s business; this module is only files in and out.
"""
import contextlib
import difflib
import gc
import os
import traceback
from dataclasses import dataclass, field
from typing import Optional

from ddpify import interrupts, project, twins
from ddpify.diagnostics import Diagnostic, Severity
from ddpify.files import (
    SourceError,
    check_writable,
    decode,
    encode,
    read_bytes,
    read_only_note,
    read_source,
    require_regular_file,
    write_atomically,
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
TREE = "tree"              # to `output`, in a migrated copy of the tree, when it changes

# Statuses counted in the summary line.
MIGRATED, UNCHANGED, SKIPPED, FAILED = "migrated", "unchanged", "skipped", "failed"

NOTEBOOK_SUFFIX = ".ipynb"
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
    # --stdin-filename: the file that stdin's code stands for (an editor's buffer).
    stdin_filename: Optional[str] = None
    # The other files of its project that this run migrates too, where the program imports
    # them from (in place, or into the same copy of the tree): project.read.
    rewritten: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        if self.path == "-":
            return self.stdin_filename or "<stdin>"
        return self.path


@dataclass
class Report:
    path: str
    status: str
    exit_code: int
    diagnostics: tuple[Diagnostic, ...] = ()
    # One-line messages for stderr (what was written, what is stale).
    notes: list[str] = field(default_factory=list)
    error: Optional[str] = None
    # With -v: the traceback behind an internal error.
    details: str = ""
    diff: str = ""
    # The migrated script when it goes to stdout, already encoded.
    stdout: bytes = b""
    written: Optional[str] = None
    changed: bool = False
    # What `commit` is to write; `prepare` writes nothing.
    pending: Optional["PendingWrite"] = None


@dataclass(frozen=True)
class PendingWrite:
    path: str
    data: bytes
    # Said on stderr once written.
    note: str = ""


def run(job: Job) -> Report:
    """The whole job, in this process."""
    return commit(prepare(job))


def prepare(job: Job) -> Report:
    """Everything but writing: a worker process runs this, and may be stopped at any point
    without leaving a file half-done. What is to be written waits in `report.pending`."""
    try:
        return _prepare(job)
    except Exception as error:  # a bug in ddpify must not take the other files down
        return _internal_error(job.shown, error)


def commit(report: Report) -> Report:
    """Write what `prepare` decided. The command line calls this in its own process, one file
    after another, so that every file written is reported and Ctrl-C stops between files
    (or inside one, leaving it as it was)."""
    pending, report.pending = report.pending, None
    if pending is None:
        return report
    read_only = read_only_note(pending.path)
    try:
        write_atomically(pending.path, pending.data)
    except SourceError as error:
        report.status, report.exit_code, report.error = FAILED, ERROR, str(error)
    except Exception as error:
        return _internal_error(report.path, error)
    else:
        report.written = pending.path
        if pending.note:
            report.notes.append(pending.note)
        if read_only:
            report.notes.append(read_only)
    return report


def _internal_error(shown: str, error: Exception) -> Report:
    return Report(shown, FAILED, ERROR, error=f"{shown}: internal error: {error!r}",
                  details=traceback.format_exc())


def _prepare(job: Job) -> Report:
    with interrupts.deferred():  # (ddpify.interrupts: why an import is not cut short)
        from ddpify.api import MigrationError, migrate_source

    shown = job.shown
    if job.path.endswith(NOTEBOOK_SUFFIX):
        return Report(shown, FAILED, ERROR, error=f"{shown}: notebooks are not supported: export "
                      f"the code with `jupyter nbconvert --to script {shown}` and migrate the .py")
    try:
        if job.mode == IN_PLACE:
            require_regular_file(job.path)
        data = _bytes_of(job)
        if b"torch" not in data and job.mode != WRITE and not job.explicit and not project.imported_elsewhere(
                job.path) and not _loads_modules_by_name(data):
            # Cheap: a file that never mentions torch trains nothing, so a walk does not parse
            # it (unless the project's training imports it: its output, its run folders). A
            # file named on the command line is still checked: it must be Python.
            return Report(shown, SKIPPED, OK)
        source = decode(data, shown)
        if job.mode == WRITE and job.output not in (None, "-"):
            check_writable(job.output)
        with _collector_paused():
            neighbours = _project(job, source.text)
            result = migrate_source(source.text, job.options, neighbours)
    except SourceError as error:
        return Report(shown, FAILED, ERROR, error=str(error))
    except MigrationError as error:
        return _migration_failure(shown, error)

    changed = result.code != source.text
    diagnostics = result.diagnostics
    if job.mode in (CHECK, TWIN_CHECK):
        # A stale `# ddpify: ignore` fails a check, never a migration.
        diagnostics = tuple(sorted(diagnostics + result.unused_suppressions,
                                   key=lambda d: (d.line, d.column, d.code)))
    if not job.explicit:
        # Over a walked tree, "nothing to do here" for each of thousands of files is noise:
        # the summary line counts them as unchanged.
        diagnostics = tuple(d for d in diagnostics if d.code not in WHOLE_FILE_NOTES)
    status = MIGRATED if changed else SKIPPED if b"torch" not in data else UNCHANGED
    needs_a_person = any(d.severity is Severity.WARNING for d in diagnostics)
    report = Report(shown, status, PENDING if needs_a_person else OK,
                    diagnostics=diagnostics, changed=changed)
    _deliver(job, report, source.text, result.code, source.encoding)
    return report


# A package's `__init__.py` that imports its modules by computed name (`__import__(name)`
# over os.listdir, importlib.import_module): it never names torch, yet the modules it loads
# may train; it is read, so that the import ddpify cannot follow is reported (DDP909).
DYNAMIC_LOADS = (b"__import__(", b"import_module(")


def _loads_modules_by_name(data: bytes) -> bool:
    return any(marker in data for marker in DYNAMIC_LOADS)


def _bytes_of(job: Job) -> bytes:
    """A file's bytes are read here, in the worker; stdin's come with the job, as only the
    main process can read them (cli.py reads them when it plans the job)."""
    if job.path != "-":
        return read_bytes(job.path)
    assert job.data is not None, "a stdin job carries the bytes the main process read"
    return job.data


def _twin_path(job: Job) -> str:
    """A twin job is always planned with its twin's path (cli.py, twin_of)."""
    assert job.output is not None, f"a {job.mode} job without its twin's path"
    return job.output


def _project(job: Job, text: str) -> project.Project:
    """The helper modules beside the script: for stdin, beside the file it stands for."""
    path = job.stdin_filename if job.path == "-" else job.path
    return project.read(path, text, job.rewritten) if path else project.Project()


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
    """Compare the migrated code, or plan its writing, as the mode asks."""
    shown, changed = report.path, report.changed
    if job.mode == CHECK and job.output:
        _compare_twin(report, job.output, before, after, shown, missing_ok=False)
    elif job.mode == CHECK:
        if changed:
            # --quiet drops the notes and edits that say why: name the command that shows it.
            report.notes.append(f"{shown}: not DDP-ready: ddpify would rewrite it "
                                f"(ddpify --diff {shown} shows how)")
            report.exit_code = PENDING
    elif job.mode == TWIN_CHECK:
        _compare_twin(report, _twin_path(job), before, after, shown, missing_ok=not changed)
    elif job.mode == DIFF:
        if changed:
            report.diff = unified_diff(before, after, shown if job.path == "-" else patch_path(shown))
            report.exit_code = PENDING
    elif job.mode == IN_PLACE:
        if changed:
            report.pending = PendingWrite(job.path, encode(after, encoding),
                                          f"{shown}: migrated in place")
    elif job.mode == TWIN:
        _refresh_twin(report, _twin_path(job), before, after, encoding)
    elif job.output not in (None, "-"):
        if job.mode == WRITE or changed:  # a TREE job's unchanged file is copied as it is
            report.pending = PendingWrite(job.output, encode(after, encoding),
                                          f"{job.output}: written from {shown}")
    else:
        # A BOM in the middle of a pipeline helps nobody.
        report.stdout = encode(after, "utf-8" if encoding == "utf-8-sig" else encoding)


def _refresh_twin(report: Report, twin: str, before: str, after: str, encoding: str) -> None:
    """Plan the twin's writing only where it would change something: a person's twin is
    never overwritten, and a script ddpify leaves as it is gets no twin (nothing in it
    needs a DDP version) unless it already has one."""
    shown = report.path
    current = _read_text_or_none(twin)
    hand_edit = None if current is None else twins.judge(twin, current, shown, before)
    if hand_edit is not None:
        _report_hand_edit(report, hand_edit)
    elif current != after and (current is not None or report.changed):
        verb = "updated" if current is not None else "written"
        report.pending = PendingWrite(twin, encode(after, encoding), f"{twin}: {verb} from {shown}")
        report.exit_code = PENDING


def _compare_twin(report: Report, twin: str, before: str, after: str, shown: str,
                  missing_ok: bool) -> None:
    current = _read_text_or_none(twin)
    if current is None and missing_ok:
        return
    hand_edit = None if current is None else twins.judge(twin, current, shown, before)
    if hand_edit is not None:
        _report_hand_edit(report, hand_edit)
        return
    if current is None:
        report.notes.append(f"{twin}: missing: run ddpify {shown} -o {twin}")
    elif current != after:
        report.notes.append(f"{twin}: stale: not what ddpify writes for {shown}: "
                            f"run ddpify {shown} -o {twin} (a twin fixed by hand: add "
                            f"`{twins.MARKER}` to it)")
    else:
        return
    report.exit_code = PENDING


def _report_hand_edit(report: Report, verdict: twins.Verdict) -> None:
    if verdict.fresh:
        # A person fixed the twin for this very source: what ddpify would report about its
        # own migration (the warnings that made the fix necessary) is answered.
        report.diagnostics, report.exit_code = (), OK
        return
    report.notes.append(verdict.note)
    report.exit_code = PENDING


def _migration_failure(shown: str, error) -> Report:
    message, details = error.message, ""
    if message.startswith("internal error"):
        message, _, details = message.partition("\n")
        message += " (a bug in ddpify: please report it; -v shows the traceback)"
        return Report(shown, FAILED, ERROR, error=f"{shown}: {message}", details=details)
    location = f"{shown}:{error.line}:{error.column}" if error.line else shown
    return Report(shown, FAILED, ERROR, error=f"{location}: {message}")


def unified_diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def patch_path(path: str) -> str:
    """The path a diff names after `a/` and `b/`: relative to the current directory when the
    file is under it, so that `git apply` and `patch -p1` there take the patch of a project."""
    relative = os.path.relpath(os.path.abspath(path))
    if relative.split(os.sep, 1)[0] == os.pardir:
        return path
    return relative


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
