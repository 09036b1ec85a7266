"""The command line: options, files in and out, exit codes. No migration logic here.

Exit codes: 0 all good; 1 changes pending (--check, --diff) or diagnostics that need a
person; 2 usage, parse or internal error. Results go to stdout, messages to stderr.
"""
import difflib
import sys
from dataclasses import dataclass
from typing import List, Optional

import click

from ddpify import __version__
from ddpify.diagnostics import RULES, Severity, explain
from ddpify.files import SourceError, check_writable, decode, encode, read_source, write_atomically
from ddpify.options import Options

OK, PENDING, ERROR = 0, 1, 2


@dataclass
class Outcome:
    path: str
    exit_code: int


class _MigrateByDefault(click.Group):
    """`ddpify train.py` migrates; `ddpify verify train.py` runs a subcommand."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands:
            args = ["migrate", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_MigrateByDefault, add_help_option=False)
def main() -> None:
    """ddpify: migrate single-GPU PyTorch training scripts to DistributedDataParallel."""


def _codes(ctx, param, value: str) -> tuple:
    return tuple(code.strip().upper() for code in value.split(",") if code.strip()) if value else ()


@main.command("migrate")
@click.argument("paths", nargs=-1, type=click.Path(allow_dash=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the migrated script here (one input only).")
@click.option("-i", "--in-place", is_flag=True, help="Rewrite the input files.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if a file is not DDP-ready (or its -o twin is stale).")
@click.option("--select", callback=_codes, default="", help="Report only these codes or prefixes (DDP2,DDP301).")
@click.option("--ignore", callback=_codes, default="", help="Do not report these codes or prefixes.")
@click.option("--sync-batchnorm", is_flag=True, help="Convert BatchNorm layers to SyncBatchNorm.")
@click.option("--keep-global-batch", is_flag=True,
              help="Divide the per-process batch size by the world size.")
@click.option("-v", "--verbose", is_flag=True, help="Also list every rewrite made.")
@click.option("--list-rules", is_flag=True, help="List every rule code and exit.")
@click.option("--explain", "explain_code", metavar="CODE", help="Explain one rule code and exit.")
@click.version_option(__version__, prog_name="ddpify")
@click.help_option("-h", "--help")
def migrate(paths, output, in_place, show_diff, check, select, ignore, sync_batchnorm,
            keep_global_batch, verbose, list_rules, explain_code) -> None:
    """Migrate PATHS (files, or - for stdin) to DistributedDataParallel.

    \b
    ddpify train.py -o train_ddp.py   write the migrated script
    ddpify train.py                   print it to stdout
    ddpify --diff train.py            show what would change
    ddpify --check train.py           exit 1 unless train.py is DDP-ready
    ddpify verify train.py            run both scripts and compare (see verify --help)
    """
    if list_rules:
        for rule in RULES.values():
            click.echo(f"{rule.code}  {rule.severity.value:<7}  {rule.summary}")
        return
    if explain_code:
        code = explain_code.upper()
        if code not in RULES:
            _fail(f"unknown rule code {explain_code}; see ddpify --list-rules")
        click.echo(explain(code))
        return
    _check_usage(paths, output, in_place, show_diff, check)
    options = Options(sync_batchnorm=sync_batchnorm, keep_global_batch=keep_global_batch,
                      select=select, ignore=ignore)
    mode = "check" if check else "diff" if show_diff else "in-place" if in_place else "write"
    codes = [_process(path, output, mode, options, verbose).exit_code for path in paths]
    sys.exit(max(codes, default=OK))


def _check_usage(paths, output, in_place, show_diff, check) -> None:
    if sum([bool(in_place), bool(show_diff), bool(check and not output)]) > 1:
        _fail("choose one of -i/--in-place, --diff and --check")
    if output and (in_place or show_diff):
        _fail("-o/--output cannot be combined with -i/--in-place or --diff")
    if output and len(paths) != 1:
        _fail("-o/--output takes exactly one input path")
    if len(paths) > 1 and not (in_place or show_diff or check):
        _fail("several paths need -i/--in-place, --diff or --check (or one path with -o)")
    if in_place and "-" in paths:
        _fail("-i/--in-place cannot rewrite stdin")


def _fail(message: str) -> None:
    click.echo(f"ddpify: error: {message}", err=True)
    sys.exit(ERROR)


def _process(path: str, output: Optional[str], mode: str, options: Options, verbose: bool) -> Outcome:
    from ddpify.api import MigrationError, migrate_source

    shown = "<stdin>" if path == "-" else path
    try:
        source = decode(sys.stdin.buffer.read(), shown) if path == "-" else read_source(path)
        if output and output != "-" and mode == "write":
            check_writable(output)
        result = migrate_source(source.text, options)
    except SourceError as error:
        return _error(path, str(error))
    except MigrationError as error:
        location = f"{shown}:{error.line}:{error.column}" if error.line else shown
        return _error(path, f"{location}: {error.message}")

    needs_person = False
    for diagnostic in result.diagnostics:
        if diagnostic.severity is Severity.EDIT and not verbose:
            continue
        needs_person |= diagnostic.severity is Severity.WARNING
        click.echo(diagnostic.format(shown), err=True)
    changed = result.code != source.text
    exit_code = PENDING if needs_person else OK

    if mode == "check":
        if output:
            stale = _read_or_none(output) != result.code
            if stale:
                click.echo(f"{output}: stale: not what ddpify writes for {shown}", err=True)
            return Outcome(path, PENDING if stale or needs_person else OK)
        if changed:
            click.echo(f"{shown}: not DDP-ready", err=True)
        return Outcome(path, PENDING if changed or needs_person else OK)
    if mode == "diff":
        if changed:
            click.echo(_unified_diff(source.text, result.code, shown), nl=False)
        return Outcome(path, PENDING if changed or needs_person else OK)
    try:
        if mode == "in-place":
            if changed:
                write_atomically(path, encode(result.code, source.encoding))
                click.echo(f"{shown}: migrated in place", err=True)
        elif output and output != "-":
            write_atomically(output, encode(result.code, source.encoding))
        else:
            sys.stdout.buffer.write(encode(result.code, _stdout_encoding(source.encoding)))
            sys.stdout.flush()
    except (SourceError, OSError) as error:
        return _error(path, str(error))
    return Outcome(path, exit_code)


def _stdout_encoding(encoding: str) -> str:
    # A BOM in the middle of a pipeline helps nobody.
    return "utf-8" if encoding == "utf-8-sig" else encoding


def _read_or_none(path: str) -> Optional[str]:
    try:
        return read_source(path).text
    except SourceError:
        return None


def _unified_diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def _error(path: str, message: str) -> Outcome:
    click.echo(f"ddpify: error: {message}", err=True)
    return Outcome(path, ERROR)


def _register_subcommands() -> None:
    try:
        from ddpify.verify.command import verify_command
    except ImportError:  # verify is optional while it is being built
        return
    main.add_command(verify_command, "verify")


_register_subcommands()
