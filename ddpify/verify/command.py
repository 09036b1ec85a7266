"""The `ddpify verify` command line: files in, runs out, exit status 0 / 1 / 2."""
from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import List, Optional, Tuple

import click

from ddpify.verify.checks import CHECK_IDS

INSTALL_HINT = "ddpify verify needs torch: pip install ddpify[verify]"


class UsageFailure(click.ClickException):
    """A problem with what was asked for, not with the scripts: exit status 2."""

    exit_code = 2


def parse_checks(value: Optional[str]) -> Tuple[str, ...]:
    if not value:
        return CHECK_IDS
    chosen = tuple(part.strip().replace("-", "_") for part in value.split(",") if part.strip())
    unknown = [check_id for check_id in chosen if check_id not in CHECK_IDS]
    if unknown:
        raise click.BadParameter(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECK_IDS)}")
    return chosen


def migrate_into(script: str, target: str) -> List[str]:
    """Migrates script into target; returns the diagnostics as `path:line:col: CODE message`."""
    from ddpify.api import MigrationError, migrate_source
    from ddpify.options import Options

    with open(script, encoding="utf-8") as source:
        code = source.read()
    try:
        result = migrate_source(code, Options())
    except MigrationError as error:
        raise UsageFailure(f"cannot migrate {script}: {error.message}")
    with open(target, "w", encoding="utf-8") as output:
        output.write(result.code)
    return [diagnostic.format(script) for diagnostic in result.diagnostics]


@click.command(
    "verify",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""Runs, each in a fresh temporary directory: (1) python SCRIPT; (2) python on the
migrated script, as a group of one; (3) torchrun --standalone --nproc_per_node=N; (4) two
torchrun agents with one process each (RANK=1 has LOCAL_RANK=0). Checks: runs,
same_as_original, ranks_agree, data_sharded, one_writer, one_voice, multinode_ready,
equivalent_update (not implemented: always n/a). By default every run stops when its
training loader starts epoch 2, which is enough to compare two epochs' shuffles. Exit
status: 0 every applicable check passes, 1 a check fails, 2 usage error.""",
)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", "migrated", type=click.Path(dir_okay=False),
    help="The migrated script: used as is when it exists, else SCRIPT is migrated into it. "
    "Without -o the migration goes to a temporary file.",
)
@click.option("--nproc", type=click.IntRange(min=2),
              help="Processes under torchrun [default: GPUs if >1, else 2 on CPU].")
@click.option("--max-steps", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop every process after K optimizer steps of its own (0: no limit).")
@click.option("--max-epochs", type=click.IntRange(min=0), default=2, show_default=True,
              help="Stop every run when its training loader starts epoch E (0: run to the end).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds per run; a run still going is killed and its ranks' stacks shown.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report as JSON here.")
@click.option("--checks", "checks_value", metavar="IDS",
              help="Comma-separated checks to run; only the runs they need are launched [default: all].")
@click.option("--skip-multinode", is_flag=True, help="Leave out the two-agent run and its check.")
@click.option("--keep-temp", is_flag=True, help="Keep the run directories (scripts, outputs, event files).")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def verify_command(
    script, migrated, nproc, max_steps, max_epochs, timeout, json_path, checks_value,
    skip_multinode, keep_temp, script_args,
):
    """Prove a migration by running it: SCRIPT and its DDP version, with and without torchrun.

    Arguments after `--` go to both scripts: ddpify verify train.py -- --epochs 1
    """
    checks = parse_checks(checks_value)
    if skip_multinode:
        checks = tuple(check_id for check_id in checks if check_id != "multinode_ready")
    if importlib.util.find_spec("torch") is None:
        raise UsageFailure(INSTALL_HINT)
    from ddpify.verify.report import render_text, write_json
    from ddpify.verify.runner import RunSettings
    from ddpify.verify.session import verify

    settings = RunSettings(
        script_args=tuple(script_args), max_steps=max_steps, max_epochs=max_epochs, timeout=timeout
    )
    with tempfile.TemporaryDirectory(prefix="ddpify-verify-") as scratch:
        if migrated is None or not os.path.exists(migrated):
            stem = os.path.splitext(os.path.basename(script))[0]
            target = migrated or os.path.join(scratch, f"{stem}_ddp.py")
            for line in migrate_into(script, target):
                click.echo(line, err=True)
            migrated = target
        report = verify(
            script, migrated, settings, checks=checks, nproc=nproc, keep_temp=keep_temp,
            on_run=lambda run: click.echo(f"ran {run.name}: {'ok' if run.ok else 'failed'} "
                                          f"({run.seconds:.1f}s)", err=True),
        )
    click.echo(render_text(report))
    if json_path:
        write_json(report, json_path)
    raise SystemExit(0 if report.ok else 1)
