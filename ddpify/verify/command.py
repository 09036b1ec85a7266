"""The `ddpify verify` command line: files in, runs out, exit status 0 / 1 / 2 (130 / 143
when interrupted by SIGINT / SIGTERM, after every process it started was stopped)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import tempfile
import threading

import click

from ddpify.options import CHECKPOINT_FORMATS, STRATEGIES
from ddpify.verify.checks import CHECK_IDS, default_checks

INSTALL_HINT = 'ddpify verify needs torch: pip install -e ".[verify]" (or pip install torch)'


class UsageFailure(click.ClickException):
    """A problem with what was asked for, not with the scripts: exit status 2."""

    exit_code = 2


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is so that every `with` block cleans up."""


class NothingToVerify(Exception):
    """ddpify leaves the script (or project) as it is, so there is no second version to
    run: verify says why and exits with the status that `ddpify` itself would have."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def parse_checks(value: str | None, strategy: str = "ddp") -> tuple[str, ...]:
    """The checks asked for, or every check of the strategy (FSDP2's sharding checks only
    with --strategy fsdp2)."""
    if not value:
        return default_checks(strategy)
    chosen = tuple(part.strip().replace("-", "_") for part in value.split(",") if part.strip())
    unknown = [check_id for check_id in chosen if check_id not in CHECK_IDS]
    if unknown:
        raise click.BadParameter(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECK_IDS)}")
    return chosen


def migrate_into(script: str, target: str, options=None) -> tuple[list[str], bool, int]:
    """Migrates script into target the way `ddpify SCRIPT -o TARGET` does (its reading,
    encodings, line endings, messages and atomic write), with the migration's options
    (--strategy). Returns the diagnostic lines, whether the migration changed anything and
    the exit status `ddpify` would have."""
    from ddpify.formats import text_line
    from ddpify.jobs import ERROR, WRITE, Job, run, visible
    from ddpify.options import Options

    report = run(Job(script, WRITE, options=options or Options(), output=target))
    if report.exit_code == ERROR:
        raise UsageFailure(f"cannot migrate {report.error or script}")
    return [text_line(script, diagnostic) for diagnostic in report.diagnostics
            if visible(diagnostic, verbose=False, quiet=False)], report.changed, report.exit_code


def migrate_project(path: str, target: str, options=None) -> tuple[list[str], bool, int, str]:
    """Writes a migrated copy of the project tree into target, as `ddpify PATH -o TARGET/`
    does: PATH is a folder (each of its Python files migrated) or an entry script (its tree,
    the modules it imports migrated). Returns the diagnostic lines, whether any file
    changed, the exit status that command would have, and the root of the copied tree."""
    from ddpify import project_jobs
    from ddpify.files import SourceError
    from ddpify.formats import text_line
    from ddpify.jobs import ERROR, OK, commit, prepare, visible
    from ddpify.options import Options
    from ddpify.walk import expand

    tree = project_jobs.tree_of(path, target, expand([path]) if os.path.isdir(path) else [])
    clash = project_jobs.overlap(tree)
    if clash:
        raise UsageFailure(clash)
    prepared = [prepare(job) for job in project_jobs.tree_jobs(tree, options or Options())]
    failure = next((report for report in prepared if report.exit_code == ERROR), None)
    if failure is not None:
        raise UsageFailure(f"cannot migrate {failure.error or failure.path}")
    try:
        project_jobs.copy_tree(tree, prepared)
    except SourceError as error:
        raise UsageFailure(str(error)) from None
    reports = [commit(report) for report in prepared]
    lines = [text_line(report.path, diagnostic) for report in reports for diagnostic in report.diagnostics
             if diagnostic.code not in ("DDP900", "DDP901") and visible(diagnostic, False, False)]
    changed = any(report.changed for report in reports)
    return lines, changed, max((report.exit_code for report in reports), default=OK), tree.root


def project_folder(value: str | None) -> str | None:
    """`--project DIR` names an existing folder; `--project` alone ("") the entry's own."""
    if value and not os.path.isdir(value):
        raise click.BadParameter(f"{value}: not a directory (for the entry's own project, put "
                                 "--project alone after SCRIPT)", param_hint="'--project'")
    return value


def same_bytes(first: str, second: str) -> bool:
    try:
        with open(first, "rb") as one, open(second, "rb") as other:
            return one.read() == other.read()
    except OSError:
        return False


def check_json_target(path: str) -> None:
    """Fail before an hour of runs, not after: the report must have somewhere to go."""
    from ddpify.files import SourceError, check_writable

    try:
        check_writable(path)
    except SourceError as error:
        raise UsageFailure(f"--json {error}") from None
    target = path if os.path.exists(path) else os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.access(target, os.W_OK):
        raise UsageFailure(f"--json {path}: not writable")


@contextlib.contextmanager
def sigterm_raises():
    """SIGTERM becomes an exception in the main thread (Ctrl-C already is one), so the runs
    in flight are stopped and the temporary directories removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command(
    "verify",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""verify RUNS YOUR SCRIPT (and its migration) several times, with your user's
rights: each run gets a fresh working copy, HOME and TMPDIR of its own, and every write
outside them is reported, but nothing stops a script from writing where it likes. Runs: (1)
python SCRIPT; (2) python on the migrated script, as a group of one; (3) torchrun
--standalone --nproc_per_node=N; (4) the same again with rank 0's writes of files that
other ranks read delayed, when there are such files (hand-off); (5) two torchrun agents
with one process each (RANK=1 has LOCAL_RANK=0), sharing one working directory as nodes on
a shared filesystem do; (6) `import` of the migrated script, when
it has an `if __name__ == "__main__":` guard. GPUs: with one per rank the torchrun runs use
them (NCCL), else Gloo on the CPU; --device cpu hides every GPU. Checks: """
    + ", ".join(CHECK_IDS)
    + """. By default the first 2
epochs of each training loader run at full length and every later epoch yields one batch
per rank, so the code after training (final save, reload, last print, teardown) runs too.
Exit status: 0 every applicable check passes, 1 a check fails, 2 usage error, 130/143
interrupted (every process verify started is stopped); when ddpify migrates nothing, the
status `ddpify SCRIPT` has (0 already distributed or no training, 1 left for a person).""",
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", "migrated", type=click.Path(),
    help="The migrated script (with --project: folder): used as is when it exists, else SCRIPT "
    "is migrated into it. Without -o the migration goes to a temporary file.",
)
@click.option("--project", "project", callback=lambda ctx, param, value: project_folder(value),
              is_flag=False, flag_value="", metavar="[DIR]",
              help="SCRIPT is the entry of a multi-file project: alone, its own (the tree its imports "
              "resolve from, the modules it imports migrated); with DIR, that folder (every Python file "
              "migrated). The migrated copy of the tree goes into -o (a folder) or a temporary one, as "
              "`ddpify SCRIPT -o DIR/` writes it, and each run gets a copy of it, run from its root.")
@click.option("--nproc", type=click.IntRange(min=2),
              help="Processes under torchrun [default: GPUs if >1, else 2 on CPU].")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="cpu: every run on the CPU (Gloo); cuda: fail unless there is a GPU per rank.")
@click.option("--full-epochs", type=click.IntRange(min=0), default=2, show_default=True,
              help="Epochs of each training loader at full length; later ones yield one batch "
              "per rank (0: every epoch at full length).")
@click.option("--max-steps", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop every process after K optimizer steps of its own (0: no limit); "
              "the code after training then does not run.")
@click.option("--max-epochs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop every run when its training loader starts epoch E (0: no limit); "
              "the code after training then does not run.")
@click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds per run; a run still going is killed and its ranks' stacks shown.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report as JSON here.")
@click.option("--checks", "checks_value", metavar="IDS",
              help="Comma-separated checks to run; only the runs they need are launched [default: all].")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="ddp", show_default=True,
              help="The target SCRIPT is migrated to (as `ddpify --strategy`); fsdp2 adds the checks "
              "params_sharded, optimizer_sharded and full_checkpoint.")
@click.option("--fsdp-blocks", metavar="ATTR", help="With --strategy fsdp2: as `ddpify --fsdp-blocks`.")
@click.option("--checkpoint", "checkpoint_format", type=click.Choice(CHECKPOINT_FORMATS), default="full",
              show_default=True, help="With --strategy fsdp2: as `ddpify --checkpoint`.")
@click.option("--skip-multinode", is_flag=True, help="Leave out the two-agent run and its check.")
@click.option("--keep-temp", is_flag=True, help="Keep the run directories (scripts, outputs, event files).")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def verify_command(
    script, migrated, project, nproc, device, full_epochs, max_steps, max_epochs, timeout, json_path, checks_value,
    strategy, fsdp_blocks, checkpoint_format, skip_multinode, keep_temp, script_args,
):
    """Prove a migration by running it: SCRIPT and its DDP version, with and without torchrun.

    Arguments after `--` go to both scripts: ddpify verify train.py -- --epochs 1
    """
    from ddpify.options import Options

    if checkpoint_format == "dcp" and strategy != "fsdp2":
        raise UsageFailure("--checkpoint dcp needs --strategy fsdp2")
    options = Options(strategy=strategy, fsdp_blocks=fsdp_blocks, checkpoint=checkpoint_format)
    checks = parse_checks(checks_value, strategy)
    if skip_multinode:
        checks = tuple(check_id for check_id in checks if check_id != "multinode_ready")
    if json_path:
        check_json_target(json_path)
    if importlib.util.find_spec("torch") is None:
        raise UsageFailure(INSTALL_HINT)
    try:
        with sigterm_raises():
            status = verify_and_report(script, migrated, project, nproc, device, full_epochs, max_steps, max_epochs,
                                       timeout, json_path, checks, keep_temp, script_args, options)
    except KeyboardInterrupt:
        click.echo("ddpify verify: interrupted; every process it started was stopped", err=True)
        raise SystemExit(130) from None
    except Terminated:
        click.echo("ddpify verify: terminated; every process it started was stopped", err=True)
        raise SystemExit(143) from None
    raise SystemExit(status)


def verify_and_report(script, migrated, project, nproc, device, full_epochs, max_steps, max_epochs, timeout,
                      json_path, checks, keep_temp, script_args, options=None) -> int:
    from ddpify.verify.report import render_text, write_json
    from ddpify.verify.runner import RunSettings
    from ddpify.verify.session import DeviceError, verify

    settings = RunSettings(script_args=tuple(script_args), max_steps=max_steps, max_epochs=max_epochs,
                           full_epochs=full_epochs, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="ddpify-verify-") as scratch:
        try:
            if project is not None:
                migrated, roots = migrated_project_entry(script, migrated, project, scratch, options)
            else:
                migrated, roots = migrated_script(script, migrated, scratch, options), None
        except NothingToVerify as nothing:
            click.echo(nothing.message)
            return nothing.status
        try:
            report = verify(
                script, migrated, settings, checks=checks, nproc=nproc, keep_temp=keep_temp, device=device,
                roots=roots,
                on_run=lambda run: click.echo(f"ran {run.name}: {'ok' if run.ok else 'failed'} "
                                              f"({run.seconds:.1f}s)", err=True),
            )
        except DeviceError as error:
            raise UsageFailure(str(error)) from None
    click.echo(render_text(report))
    if json_path:
        try:
            write_json(report, json_path)
        except OSError as error:
            raise UsageFailure(f"--json {json_path}: {error.strerror or error}") from None
    return 0 if report.ok else 1


def migrated_project_entry(script: str, migrated: str | None, project: str,
                           scratch: str, options=None) -> tuple[str, dict[str, str]]:
    """The migrated entry script, and the folder each version runs from. An existing -o
    folder is used as it is; otherwise the project is migrated into it (or into scratch)."""
    from ddpify.project_jobs import tree_of

    # `--project` alone: the entry's own project, the tree its imports resolve from.
    root = project or tree_of(script, scratch, []).root
    entry = os.path.relpath(os.path.abspath(script), os.path.abspath(root))
    if entry.startswith(os.pardir):
        raise UsageFailure(f"{script} is not inside the project folder {project}")
    target = migrated or os.path.join(scratch, "migrated")
    if not os.path.exists(target):
        lines, changed, status, root = migrate_project(project or script, target, options)
        for line in lines:
            click.echo(line, err=True)
        if not changed:
            raise NothingToVerify(f"nothing to verify: ddpify leaves every file of {root} unchanged",
                                  status)
    elif not os.path.isdir(target):
        raise UsageFailure(f"-o {target}: with --project, -o names the migrated project folder")
    migrated_entry = os.path.join(target, entry)
    return migrated_entry, {script: root, migrated_entry: target}


def migrated_script(script: str, migrated: str | None, scratch: str, options=None) -> str:
    """The migrated script: an existing -o file as it is, else SCRIPT migrated into -o (or
    into scratch)."""
    if migrated is not None and os.path.isdir(migrated):
        raise UsageFailure(f"-o {migrated}: is a directory (a migrated project folder needs --project)")
    if migrated is not None and os.path.exists(migrated):
        if same_bytes(script, migrated):
            raise NothingToVerify(f"nothing to verify: {migrated} is byte-identical to {script}", 0)
        return migrated
    stem = os.path.splitext(os.path.basename(script))[0]
    target = migrated or os.path.join(scratch, f"{stem}_ddp.py")
    lines, changed, status = migrate_into(script, target, options)
    for line in lines:
        click.echo(line, err=True)
    if not changed:
        # The migration's own exit status: 1 when it left the script single-process
        # for a person to fix, so that a CI step running verify fails as ddpify does.
        first = re.search(r"DDP\d+ .*", lines[0]) if lines else None
        raise NothingToVerify(f"nothing to verify: ddpify leaves {script} unchanged"
                              + (f" ({first.group(0)})" if first else ""), status)
    return target
