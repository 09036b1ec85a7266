"""The `ddpify launch` command line: a migrated script in, its launch files written next to
it, exit status 0 / 1 / 2.

The files name the script by the path given here, so they are run (or submitted) from the
folder `ddpify launch` ran in, as the script itself would be; the Kubeflow manifest names it
under the image's working directory the same way.
"""
import os

import click

from ddpify.launch.templates import (
    DEFAULT_PORT,
    DEFAULT_WORKDIR,
    LaunchPlan,
    default_job_name,
    job_name_problem,
    pytorchjob_manifest,
    sbatch_script,
    torchrun_script,
)

# Suffixes that replace the script's `.py`: train_ddp.py -> train_ddp.torchrun.sh, ...
TORCHRUN_SUFFIX = ".torchrun.sh"
SBATCH_SUFFIX = ".sbatch"
PYTORCHJOB_SUFFIX = ".pytorchjob.yaml"


class UsageFailure(click.ClickException):
    """A problem with what was asked for: exit status 2, as for the migration."""

    exit_code = 2


@click.command(
    "launch",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=f"""Files written next to SCRIPT (X.py): X{TORCHRUN_SUFFIX} (torchrun on this machine,
or with a host name on each of --nodes machines), X{SBATCH_SUFFIX} (SLURM: one task per node,
srun starts torchrun on each), and with --image X{PYTORCHJOB_SUFFIX} (Kubeflow PyTorchJob,
Master and Workers). Each starts one process per GPU with torchrun; the nodes meet through
torchrun's c10d rendezvous on the first node. Run or submit them from the folder you ran
ddpify launch in. Exit status: 0 written, 1 SCRIPT is not DDP-ready (migrate it first), 2
usage error.""",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Machines (SLURM nodes, Kubernetes pods).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="GPUs on each machine: torchrun starts one process per GPU.")
@click.option("--job-name", help="SLURM job and PyTorchJob name [default: from SCRIPT's name].")
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
              help="Rendezvous port on the first machine.")
@click.option("--partition", help="SLURM partition [default: the cluster's].")
@click.option("--time", "time_limit", metavar="TIME",
              help="SLURM time limit, e.g. 04:00:00 [default: the partition's].")
@click.option("--cpus-per-node", type=click.IntRange(min=1),
              help="SLURM CPUs for each node's task, shared by its GPU processes and their "
              "DataLoader workers [default: the cluster's].")
@click.option("--image", help="Container image holding SCRIPT under --workdir: writes the Kubeflow manifest.")
@click.option("--workdir", default=DEFAULT_WORKDIR, show_default=True,
              help="Working directory in the image; SCRIPT's path is taken from there.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch_command(script, nodes, gpus_per_node, job_name, port, partition, time_limit, cpus_per_node,
                   image, workdir, script_args):
    """Write the files that launch SCRIPT, a migrated script, on one machine or a cluster.

    Arguments after `--` go to the script: ddpify launch train_ddp.py --nodes 2 -- --epochs 3
    """
    # One name for every target, so it must suit the strictest: a Kubernetes object name.
    problem = job_name_problem(job_name) if job_name is not None else None
    if problem:
        raise UsageFailure(f"--job-name {job_name}: {problem}")
    _require_ddp_ready(script)
    plan = LaunchPlan(
        script=script.replace(os.sep, "/"), nodes=nodes, gpus_per_node=gpus_per_node,
        script_args=tuple(script_args), job_name=job_name or default_job_name(script), port=port,
        image=image, workdir=workdir, partition=partition, time=time_limit, cpus_per_node=cpus_per_node,
    )
    for path, text in launch_files(plan, os.path.splitext(script)[0]):
        _write(path, text)
        click.echo(f"wrote {path}", err=True)
    if image is None:
        click.echo(f"no Kubeflow manifest: give --image (the image that holds {script})", err=True)


def launch_files(plan: LaunchPlan, stem: str) -> list[tuple[str, str]]:
    """(path, text) of each launch file for `plan`, named after `stem` (the script's path
    without .py)."""
    files = [(stem + TORCHRUN_SUFFIX, torchrun_script), (stem + SBATCH_SUFFIX, sbatch_script)]
    if plan.image is not None:
        files.append((stem + PYTORCHJOB_SUFFIX, pytorchjob_manifest))
    return [(path, render(plan, os.path.basename(path))) for path, render in files]


def _require_ddp_ready(script: str) -> None:
    """Launching a single-GPU script with torchrun trains N copies of it side by side: refuse
    a script that ddpify would still change."""
    from ddpify.jobs import CHECK, ERROR, Job, run

    report = run(Job(script, CHECK))
    if report.exit_code == ERROR:
        raise UsageFailure(report.error or f"cannot read {script}")
    if report.changed:
        stem = os.path.splitext(script)[0]
        click.echo(f"ddpify launch: {script} is not DDP-ready: migrate it first "
                   f"(ddpify {script} -o {stem}_ddp.py) and launch the result", err=True)
        raise SystemExit(1)


def _write(path: str, text: str) -> None:
    from ddpify.files import SourceError, write_atomically

    try:
        write_atomically(path, text.encode())
    except SourceError as error:
        raise UsageFailure(str(error)) from None
