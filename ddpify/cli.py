"""The command line: options, files in and out, exit codes. No migration logic here.

Exit codes: 0 all good; 1 changes pending (--check, --diff, --twin) or diagnostics that
need a person; 2 usage, parse or internal error; 130 interrupted (Ctrl-C). Results go to
stdout, messages to stderr.
"""
import json
import os
import sys
from collections.abc import Sequence
from typing import Optional

import click

from ddpify import __version__, interrupts, project_jobs
from ddpify import jobs as job_modes
from ddpify.config import Config, ConfigError
from ddpify.config import load as load_config
from ddpify.diagnostics import explain, registry, unknown_codes
from ddpify.files import TWIN_SUFFIX, SourceError, source_of_twin, twin_of
from ddpify.formats import FORMATS, Printer, printer, summary_line
from ddpify.interrupts import INTERRUPTED
from ddpify.jobs import ERROR, OK, Job, Report
from ddpify.launch.command import launch_command
from ddpify.options import CHECKPOINT_FORMATS, STRATEGIES, Options
from ddpify.progress import Progress
from ddpify.walk import Entry, expand, notebooks_under


class _MigrateByDefault(click.Group):
    """`ddpify train.py` migrates; `ddpify verify train.py` runs a subcommand."""

    def parse_args(self, ctx, args):
        if not args:
            # Bare `ddpify`: a newcomer, not a pre-commit hook (those pass options).
            click.echo(migrate.get_help(click.Context(migrate, info_name=ctx.info_name)), err=True)
            ctx.exit(ERROR)
        if args[0] not in self.commands:
            args = ["migrate", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        # click would print "Aborted!" and exit 1; an interrupted run exits 130.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("\nddpify: interrupted", err=True)
            ctx.exit(INTERRUPTED)


@click.group(cls=_MigrateByDefault, add_help_option=False)
def main() -> None:
    """ddpify: migrate single-GPU PyTorch training scripts to DistributedDataParallel."""


def _codes(ctx, param, value: Optional[str]) -> Optional[tuple]:
    if value is None:
        return None
    codes = tuple(code.strip().upper() for code in value.split(",") if code.strip())
    unknown = unknown_codes(codes)
    if unknown:
        raise click.BadParameter(f"unknown rule code or prefix {', '.join(unknown)}; "
                                 "see ddpify --list-rules")
    return codes


class _DefaultCommand(click.Command):
    """Usage reads `ddpify [OPTIONS] [PATHS]...`: people type `ddpify train.py`."""

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.find_root().info_name, " ".join(self.collect_usage_pieces(ctx)))


@main.command("migrate", cls=_DefaultCommand)
@click.argument("paths", nargs=-1, type=click.Path(allow_dash=True))
@click.option("-o", "--output", type=click.Path(allow_dash=True),
              help="Write the migrated script here (one input only); OUT_DIR/ (a directory, or a "
                   "path ending in /): a migrated copy of the whole project tree.")
@click.option("-i", "--in-place", is_flag=True, help="Rewrite the input files.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if a file is not DDP-ready (or its -o/--twin twin is stale).")
@click.option("--twin", is_flag=True,
              help=f"Keep X{TWIN_SUFFIX} in sync with each X.py given (X{TWIN_SUFFIX} maps back to "
                   "X.py); exit 1 if a twin was written.")
@click.option("--select", callback=_codes, default=None, help="Report only these codes or prefixes (DDP2,DDP301).")
@click.option("--ignore", callback=_codes, default=None, help="Do not report these codes or prefixes.")
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB",
              help="Leave out paths matching GLOB (repeatable; added to [tool.ddpify] exclude).")
@click.option("--sync-batchnorm/--no-sync-batchnorm", default=None,
              help="Convert BatchNorm layers to SyncBatchNorm.")
@click.option("--keep-global-batch/--no-keep-global-batch", default=None,
              help="Divide the per-process batch size by the world size.")
@click.option("--shard-eval/--no-shard-eval", default=None,
              help="Shard evaluation loaders and gather their figures (default); "
                   "--no-shard-eval keeps the whole evaluation on every rank.")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="ddp", show_default=True,
              help="ddp: a full model copy per GPU (DistributedDataParallel); fsdp2: parameters, "
                   "gradients and optimizer state sharded across GPUs (fully_shard).")
@click.option("--fsdp-blocks", metavar="ATTR",
              help="With --strategy fsdp2: the model attribute holding its repeated blocks "
                   "(self.ATTR), when ddpify finds none; each block is sharded on its own.")
@click.option("--checkpoint", "checkpoint_format", type=click.Choice(CHECKPOINT_FORMATS), default="full",
              show_default=True,
              help="With --strategy fsdp2: full: one file holding the full state dict, gathered on "
                   "every rank and written by rank 0; dcp: a Distributed Checkpoint folder (at the "
                   "path the script saved to), each rank writing its own shards.")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="text",
              show_default=True, help="How diagnostics are printed.")
@click.option("--stdin-filename", metavar="PATH",
              help="The file that - (stdin) stands for, for editors: named in messages, and "
                   "where [tool.ddpify] and the helper modules are looked up.")
@click.option("-j", "--jobs", "workers", type=click.IntRange(min=0), default=1, show_default=True,
              help="Worker processes (0: one per CPU).")
@click.option("-q", "--quiet", is_flag=True, help="Leave out notes (info diagnostics) and the summary line.")
@click.option("-v", "--verbose", is_flag=True, help="Also list every rewrite made.")
@click.option("--list-rules", is_flag=True, help="List every rule code and exit.")
@click.option("--explain", "explain_code", metavar="CODE", help="Explain one rule code and exit.")
@click.version_option(__version__, prog_name="ddpify")
@click.help_option("-h", "--help")
def migrate(paths, output, in_place, show_diff, check, twin, select, ignore, excludes,
            sync_batchnorm, keep_global_batch, shard_eval, strategy, fsdp_blocks, checkpoint_format, output_format,
            stdin_filename, workers, quiet, verbose, list_rules, explain_code) -> None:
    """Migrate PATHS (files, directories, or - for stdin) to DistributedDataParallel.

    \b
    ddpify train.py -o train_ddp.py   write the migrated script
    ddpify train.py -o out/           write a migrated copy of the project (train.py's imports)
    ddpify train.py -i                migrate train.py and the modules it imports, in place
    ddpify train.py                   print it to stdout
    ddpify --diff train.py            show what would change
    ddpify --check src/               exit 1 unless every training script is DDP-ready
    ddpify --twin train.py            keep train_ddp.py in sync with train.py
    ddpify verify train.py            run both scripts and compare (see verify --help)
    ddpify launch train_ddp.py        write torchrun, SLURM and Kubeflow launch files (see launch --help)

    A script given by name brings its project along: the modules of its own folder (and
    packages) that it imports are migrated with it by -i, --diff, --check and -o DIR/.

    Defaults come from [tool.ddpify] in the nearest pyproject.toml; flags win.

    \b
    Exit codes:
      0    done; nothing needs a person (--check: every file is DDP-ready)
      1    changes pending (--check, --diff, --twin) or a diagnostic that needs a person
      2    usage error (-o FILE for a project that needs more files changed, -o DIR/
           inside the input tree), unreadable file, syntax error or internal error
      130  interrupted (Ctrl-C); nothing is written for the file in progress
    """
    if list_rules:
        _list_rules(output_format)
        return
    if explain_code:
        code = explain_code.upper()
        if code not in registry():
            _fail(f"unknown rule code {explain_code}; see ddpify --list-rules")
        click.echo(explain(code))
        return
    if not paths:
        if not quiet:
            click.echo("ddpify: no paths given: nothing to do", err=True)
        sys.exit(OK)
    mode = _mode(paths, output, in_place, show_diff, check, twin, output_format)
    if checkpoint_format == "dcp" and strategy != "fsdp2":
        _fail("--checkpoint dcp writes sharded Distributed Checkpoints: it needs --strategy fsdp2 "
              "(a DDP model is whole on every rank, and rank 0 saves it)")
    if stdin_filename is not None and "-" not in paths:
        _fail("--stdin-filename names what - (stdin) stands for: give - as a path")
    config = _config(stdin_filename if paths[0] == "-" and stdin_filename else paths[0])
    options = Options(
        sync_batchnorm=_first(sync_batchnorm, config.sync_batchnorm, False),
        keep_global_batch=_first(keep_global_batch, config.keep_global_batch, False),
        shard_evaluation=_first(shard_eval, config.shard_eval, True),
        select=_first(select, config.select, ()),
        ignore=_first(ignore, config.ignore, ()),
        strategy=strategy,
        fsdp_blocks=fsdp_blocks,
        checkpoint=checkpoint_format,
    )
    excluded = (*config.exclude, *excludes)
    entries = expand(paths, excluded)
    _say_where_no_python_was_found(paths, entries, excluded)
    show = printer(output_format, verbose=verbose, quiet=quiet)
    if mode == job_modes.TREE:
        reports = _write_tree(paths[0], output, entries, options, excluded, workers, show)
    elif mode == job_modes.WRITE and paths[0] != "-":
        reports = _write_entry(entries, output, options, excluded, workers, show)
    else:
        beside = mode in (job_modes.IN_PLACE, job_modes.DIFF) or mode == job_modes.CHECK and not output
        if beside:
            entries = project_jobs.with_project_modules(entries, excluded)
        planned = _jobs(entries, mode, output, options, stdin_filename)
        if beside:  # the project's modules are migrated where their callers import them from
            planned = project_jobs.together(planned)
        one_project = mode == job_modes.IN_PLACE and len(paths) == 1 and len(entries) > 1 \
            and project_jobs.is_entry_script(entries[0])
        reports = _run_project(planned, workers, show) if one_project else _run(planned, workers, show)
    sys.exit(max((report.exit_code for report in reports), default=OK))


def _mode(paths, output, in_place, show_diff, check, twin, output_format) -> str:
    """The one thing this run does with migrated code; usage errors exit 2 here."""
    _refuse_clashing_options(paths, output, in_place, show_diff, check, twin)
    _refuse_paths_the_mode_cannot_take(paths, output, in_place, show_diff, check, twin)
    if check:
        return job_modes.TWIN_CHECK if twin else job_modes.CHECK
    if twin:
        return job_modes.TWIN
    if project_jobs.is_directory_output(output):
        return job_modes.TREE
    if show_diff:
        return job_modes.DIFF
    if in_place:
        return job_modes.IN_PLACE
    if output_format != "text" and output in (None, "-"):
        _fail(f"--format {output_format} prints reports on stdout: add -o, -i, --diff, --check "
              "or --twin")
    return job_modes.WRITE


def _refuse_clashing_options(paths, output, in_place, show_diff, check, twin) -> None:
    """-i, --diff, --check, --twin and -o each say where migrated code goes: two answers,
    or an -o that cannot hold the one answer, are a usage error before any file is read."""
    if sum([in_place, show_diff, check and not (output or twin), twin and not check]) > 1:
        _fail("choose one of -i/--in-place, --diff, --check and --twin")
    if output and (in_place or show_diff or twin):
        _fail("-o/--output cannot be combined with -i/--in-place, --diff or --twin")
    if output and len(paths) != 1:
        _fail("-o/--output takes exactly one input path")
    if output and os.path.isdir(paths[0]) and not project_jobs.is_directory_output(output):
        _fail(f"-o/--output {output} is a file: a directory ({paths[0]}) is copied into a "
              "directory, -o OUT_DIR/")
    if check and output == "-":
        _fail("--check compares with a file: -o - has nothing to compare")
    if project_jobs.is_directory_output(output) and (check or paths[0] == "-"):
        _fail("-o OUT_DIR/ writes a migrated copy of a project tree: it takes a script or a "
              "directory, without --check")


def _refuse_paths_the_mode_cannot_take(paths, output, in_place, show_diff, check, twin) -> None:
    """Plain `ddpify PATH` prints one migration, so several files need a mode that handles
    each on its own; stdin has no file to rewrite and can be read only once."""
    handles_each_file = in_place or show_diff or check or twin
    if len(paths) > 1 and not handles_each_file:
        _fail("several paths need -i/--in-place, --diff, --check or --twin (or one path with -o)")
    if any(os.path.isdir(path) for path in paths) and not handles_each_file and not output:
        _fail("a directory needs -i/--in-place, --diff, --check, --twin or -o OUT_DIR/")
    if "-" in paths and (in_place or twin):
        _fail("-i/--in-place and --twin cannot rewrite stdin")
    if paths.count("-") > 1:
        _fail("- (stdin) can be given once")


def _config(first_path: str) -> Config:
    try:
        config = load_config(first_path)
    except ConfigError as error:
        _fail(str(error))
    for note in config.notes:
        click.echo(f"ddpify: note: {note}", err=True)
    return config


def _first(*values):
    return next(value for value in values if value is not None)


def _list_rules(output_format: str) -> None:
    """The registry in code order; `--format json` for tools (editors, docs generators)."""
    rules = sorted(registry().values(), key=lambda rule: rule.code)
    if output_format == "json":
        click.echo(json.dumps({"version": __version__, "rules": [
            {"code": rule.code, "severity": rule.severity.value, "summary": rule.summary,
             "why": rule.why, "fix": rule.fix, "status": rule.status.value,
             # "retired" predates "status"; kept for tools that read it.
             "retired": rule.removed} for rule in rules]},
            indent=2))
        return
    for rule in rules:
        severity = "removed" if rule.removed else rule.severity.value
        click.echo(f"{rule.code}  {severity:<7}  {rule.summary}")


def _say_where_no_python_was_found(paths: Sequence[str], entries: Sequence[Entry],
                                   excludes: Sequence[str]) -> None:
    """A directory that holds no Python file was not checked at all: say so, and why when
    it holds notebooks, rather than pass in silence (ruff warns the same way)."""
    walked = [os.path.abspath(entry.path) for entry in entries if not entry.explicit]
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            continue
        top = os.path.abspath(path)
        if any(found.startswith(top.rstrip(os.sep) + os.sep) for found in walked):
            continue
        notebooks = notebooks_under(path, excludes)
        why = (f": its {notebooks} notebook{'s are' if notebooks > 1 else ' is'} not read (export "
               "the code with `jupyter nbconvert --to script`, then run ddpify on the .py)"
               if notebooks else "")
        click.echo(f"ddpify: warning: no Python file to check under {path}: nothing was checked{why}",
                   err=True)


def _jobs(entries: Sequence[Entry], mode: str, output: Optional[str], options: Options,
          stdin_filename: Optional[str] = None) -> list[Job]:
    """One job per file; with --twin each X.py and X_ddp.py becomes one job for X.py."""
    planned, seen = [], set()
    for entry in entries:
        if mode in (job_modes.TWIN, job_modes.TWIN_CHECK):
            source = source_of_twin(entry.path)
            if source != entry.path and not os.path.exists(source):
                continue  # a *_ddp.py without its source is nobody's twin
            if os.path.normpath(source) in seen:
                continue
            seen.add(os.path.normpath(source))
            planned.append(Job(source, mode, options, output=twin_of(source),
                               explicit=entry.explicit))
            continue
        data = sys.stdin.buffer.read() if entry.path == "-" else None
        planned.append(Job(entry.path, mode, options, output=output, data=data,
                           explicit=entry.explicit,
                           stdin_filename=stdin_filename if entry.path == "-" else None))
    return planned


def _write_entry(entries: Sequence[Entry], output: Optional[str], options: Options,
                 excludes: Sequence[str], workers: int, show: Printer) -> list[Report]:
    """`ddpify train.py [-o FILE]`: one file out, so the project's other modules are only
    migrated to see that they stay as they are; if not, one file cannot hold the answer."""
    if not entries:
        return []
    entry = entries[0]
    modules = project_jobs.project_modules(entry.path, excludes) if project_jobs.is_entry_script(entry) else []
    planned = [Job(entry.path, job_modes.WRITE, options, output=output, explicit=entry.explicit),
               *(Job(module, job_modes.DIFF, options, explicit=False) for module in modules)]
    prepared = _prepared_all(planned, workers)
    others = project_jobs.extra_changes(prepared)
    if others:
        _fail(f"migrating {entry.path} changes other modules of its project too "
              f"({', '.join(others)}): one file cannot hold that; use -o OUT_DIR/ for a migrated "
              "copy of the project, -i to migrate it in place, or --diff to see the changes")
    return _run(planned[:1], workers, show, ready=prepared[:1])


def _write_tree(path: str, output: str, entries: Sequence[Entry], options: Options,
                excludes: Sequence[str], workers: int, show: Printer) -> list[Report]:
    """`ddpify train.py -o OUT_DIR/`: every file of the project is prepared before anything
    is written; a file that cannot be migrated leaves OUT_DIR as it was."""
    if not os.path.exists(path):
        _fail(f"{path}: no such file or directory")
    tree = project_jobs.tree_of(path, output, entries, excludes)
    clash = project_jobs.overlap(tree)
    if clash:
        _fail(clash)
    try:
        planned = project_jobs.tree_jobs(tree, options)
    except SourceError as error:
        _fail(str(error))
    prepared = _prepared_all(planned, workers)
    project_jobs.check_project(planned, prepared)
    if project_jobs.failed(prepared):
        for report in prepared:
            report.pending = None
        reports = _run(planned, workers, show, ready=prepared)
        click.echo(f"ddpify: {output}: nothing written: a file of the project could not be migrated",
                   err=True)
        return reports
    try:
        project_jobs.copy_tree(tree, prepared)
    except SourceError as error:
        _fail(str(error))
    reports = _run(planned, workers, show, ready=prepared)
    if not show.quiet:
        click.echo(f"ddpify: {output}: a migrated copy of {tree.shown_root} "
                   f"({sum(report.changed for report in reports)} of {len(reports)} Python "
                   "files of the project changed)", err=True)
    return reports


def _run_project(planned: Sequence[Job], workers: int, show: Printer) -> list[Report]:
    """`ddpify -i train.py`: one project, self-checked as a whole (project_jobs.check_project)
    before its files are written."""
    prepared = _prepared_all(planned, workers)
    project_jobs.check_project(planned, prepared)
    return _run(planned, workers, show, ready=prepared)


def _prepared_all(planned: Sequence[Job], workers: int) -> list[Report]:
    """Every job prepared, nothing written yet, with the progress bar a long wait deserves."""
    progress = Progress(len(planned), sys.stderr)
    prepared = []
    results = _results(planned, workers)
    try:
        for report in results:
            progress.advance(report.path)
            prepared.append(report)
    except KeyboardInterrupt:
        results.close()  # stop the workers now (see _run); nothing was written
        raise
    finally:
        progress.clear()
    return prepared


def _run(planned: Sequence[Job], workers: int, show: Printer,
         ready: Optional[Sequence[Report]] = None) -> list[Report]:
    """Commit and show each report in input order: prepared here (in workers with -j), or
    `ready`, prepared already by a caller that had to see them all first."""
    progress = Progress(len(planned), sys.stderr)
    show.before_output = progress.clear
    reports = []
    results = _results(planned, workers) if ready is None else (report for report in ready)
    try:
        for prepared in results:
            # A file written is a file reported: Ctrl-C waits until both are done.
            with interrupts.deferred():
                report = job_modes.commit(prepared)
                show.report(report)
                progress.advance(report.path)
                reports.append(report)
    except KeyboardInterrupt:
        # Stop the workers now, not whenever the suspended generator is collected (at exit,
        # racing concurrent.futures' own exit hook).
        results.close()
        progress.clear()
        done = f" after {len(reports)} of {len(planned)} files" if len(planned) > 1 else ""
        click.echo(f"\nddpify: interrupted{done}; the file in progress was left as it was",
                   err=True)
        sys.exit(INTERRUPTED)
    progress.clear()
    writes = planned[0].mode in (job_modes.WRITE, job_modes.IN_PLACE, job_modes.TWIN,
                                 job_modes.TREE) if planned else True
    show.finish(reports, summary_line(reports, writes))
    return reports


def _results(planned: Sequence[Job], workers: int):
    """Prepared reports (nothing written yet) in input order, from worker processes when
    there is work enough to share."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(planned) < 2:
        yield from map(job_modes.prepare, planned)
        return
    from ddpify.workers import reports

    yield from reports(planned, workers)


def _fail(message: str) -> None:
    click.echo(f"ddpify: error: {message}", err=True)
    sys.exit(ERROR)


def _register_subcommands() -> None:
    try:
        from ddpify.verify.command import verify_command
    except ImportError:  # verify is optional while it is being built
        return
    main.add_command(verify_command, "verify")


_register_subcommands()
main.add_command(launch_command, "launch")
