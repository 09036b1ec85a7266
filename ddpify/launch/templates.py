"""The launch files, rendered as text from one `LaunchPlan`; no I/O here.

Every file starts torchrun with the same options, so that a script launched on several
machines, on SLURM or on Kubernetes runs the same way: torchrun starts one process per GPU
on each node, and the nodes meet through torchrun's c10d rendezvous (`--rdzv-backend=c10d`),
hosted by the first node. What each file adds is where the first node's address, the node
count and the rendezvous id come from. On one machine `--standalone` hosts the rendezvous.

Values that come from the user (the script's arguments, names, the image) are quoted for
the file they land in: `shlex.quote` for bash, JSON strings for YAML (JSON is valid YAML
1.2 and PyYAML reads it), so that a space, a quote or a `$` in an argument reaches the
script unchanged.
"""
import json
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

# torchrun's own default is 29400; 29500 is the port PyTorch's examples and most SLURM
# set-ups use for MASTER_PORT, and the one users look for.
DEFAULT_PORT = 29500
DEFAULT_WORKDIR = "/workspace"
# A Kubernetes object name: a DNS-1123 label. The operator appends "-worker-NN" to it for
# pod names, which must fit in 63 characters too.
_JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_JOB_NAME_MAX = 50
# The Kubeflow training operator's fixed names: it reads the port named pytorchjob-port on
# the container named pytorch to set MASTER_PORT.
KUBEFLOW_CONTAINER = "pytorch"
KUBEFLOW_PORT_NAME = "pytorchjob-port"


@dataclass(frozen=True)
class LaunchPlan:
    """What the launch files start, and where."""

    # The script as the launch files name it: relative to the folder they are run (or
    # submitted) from, with forward slashes.
    script: str
    nodes: int = 1
    gpus_per_node: int = 1
    script_args: tuple[str, ...] = ()
    job_name: str = "train"
    port: int = DEFAULT_PORT
    # Kubeflow: the container image that holds the script under `workdir`.
    image: Optional[str] = None
    workdir: str = DEFAULT_WORKDIR
    # SLURM: left to the cluster's defaults when None.
    partition: Optional[str] = None
    time: Optional[str] = None
    cpus_per_node: Optional[int] = None


def default_job_name(script: str) -> str:
    """A job name from the script's file name that SLURM and Kubernetes both accept."""
    stem = posixpath.splitext(posixpath.basename(script.replace("\\", "/")))[0]
    name = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:_JOB_NAME_MAX].strip("-")
    return name or "train"


def job_name_problem(name: str) -> Optional[str]:
    """Why Kubernetes would refuse `name` for the PyTorchJob, or None."""
    if len(name) > _JOB_NAME_MAX:
        return f"at most {_JOB_NAME_MAX} characters (Kubernetes names the pods after it)"
    if not _JOB_NAME.fullmatch(name):
        return ("lower-case letters, digits and '-', starting and ending with a letter or digit "
                "(a Kubernetes name)")
    return None


class TorchrunCommand(NamedTuple):
    """torchrun's options, and the script with its own arguments, as words of a target file."""

    options: tuple[str, ...]
    script: tuple[str, ...]

    @property
    def words(self) -> list[str]:
        return ["torchrun", *self.options, *self.script]


def single_node_command(plan: LaunchPlan, quote: Callable[[str], str] = str) -> TorchrunCommand:
    """torchrun on one machine: --standalone hosts the rendezvous itself on a free port.
    `quote` turns the user's words (script, arguments) into the target file's syntax."""
    return TorchrunCommand(
        ("--standalone", "--nnodes=1", f"--nproc-per-node={plan.gpus_per_node}"),
        (quote(plan.script), *map(quote, plan.script_args)))


def multi_node_command(plan: LaunchPlan, nnodes: str, rdzv_id: str, endpoint: str,
                       quote: Callable[[str], str] = str) -> TorchrunCommand:
    """torchrun on each of several nodes, meeting at `endpoint` (the first node, host:port).
    `nnodes`, `rdzv_id` and `endpoint` are already in the target file's syntax (a shell or
    Kubernetes variable); `quote` turns the user's words into it."""
    return TorchrunCommand(
        (f"--nnodes={nnodes}", f"--nproc-per-node={plan.gpus_per_node}", f"--rdzv-id={rdzv_id}",
         "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}"),
        (quote(plan.script), *map(quote, plan.script_args)))


def torchrun_script(plan: LaunchPlan, file_name: str) -> str:
    """A bash script: no argument runs on this machine; a host name runs one node of N."""
    one = _bash_command(single_node_command(plan, shlex.quote))
    lines = [
        "#!/usr/bin/env bash",
        f"# torchrun launch for {plan.script}, written by `ddpify launch`; run it from the folder",
        "# ddpify launch ran in.",
        f"#   this machine, {_processes(plan)}:",
        f"#     bash {file_name}",
    ]
    if plan.nodes > 1:
        many = _bash_command(multi_node_command(
            plan, str(plan.nodes), shlex.quote(plan.job_name), f'"$1:{plan.port}"', shlex.quote))
        lines += [
            f"#   {plan.nodes} machines, {_processes(plan)} each: on every machine,",
            f"#     bash {file_name} HOST",
            f"#   where HOST is the first machine's address; the others must reach its port {plan.port}.",
            "set -euo pipefail",
            "",
            'if [ "$#" -eq 0 ]; then',
            _indented(f"exec {one}"),
            "fi",
            f"exec {many}",
        ]
    else:
        lines += ["set -euo pipefail", "", f"exec {one}"]
    return "\n".join(lines) + "\n"


def sbatch_script(plan: LaunchPlan, file_name: str) -> str:
    """A SLURM batch script: one task per node, srun starts torchrun in each, and each
    torchrun starts one process per GPU; the allocation's first node hosts the rendezvous."""
    directives = [
        f"--job-name={plan.job_name}",
        f"--nodes={plan.nodes}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={plan.gpus_per_node}",
    ]
    if plan.cpus_per_node is not None:
        directives.append(f"--cpus-per-task={plan.cpus_per_node}")
    if plan.partition is not None:
        directives.append(f"--partition={plan.partition}")
    if plan.time is not None:
        directives.append(f"--time={plan.time}")
    # srun is given the CPUs again: some Slurm releases (22.05 among them) do not pass
    # sbatch's --cpus-per-task on to srun.
    srun = ["srun"] + ([f"--cpus-per-task={plan.cpus_per_node}"] if plan.cpus_per_node else [])
    torchrun = multi_node_command(plan, '"$SLURM_JOB_NUM_NODES"', '"$SLURM_JOB_ID"',
                                  f'"$head_node:{plan.port}"', shlex.quote)
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {shlex.quote(directive)}" for directive in directives]
    lines += [
        f"# SLURM batch script for {plan.script}, written by `ddpify launch`; submit it from the",
        f"# folder ddpify launch ran in: sbatch {file_name}",
        "# One task per node: srun starts torchrun on each node, and each torchrun starts",
        f"# {_processes(plan)}.",
        "set -euo pipefail",
        "",
        "# The allocation's first node hosts the rendezvous.",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "",
        _bash_command(torchrun, launcher=srun),
    ]
    return "\n".join(lines) + "\n"


def pytorchjob_manifest(plan: LaunchPlan, file_name: str) -> str:
    """A Kubeflow PyTorchJob: a Master pod and nodes-1 Worker pods, each running torchrun.

    torchrun meets the other pods at the Master's MASTER_ADDR:MASTER_PORT, which the
    operator sets in every pod (from the port named pytorchjob-port) and Kubernetes expands
    in `command` as $(VAR). The job does not read the operator's WORLD_SIZE and RANK: before
    v1.7 the operator counted pods in WORLD_SIZE, not processes, and torchrun sets both for
    the processes it starts anyway.
    """
    if plan.image is None:
        raise ValueError("a PyTorchJob needs the image that holds the script")
    command = multi_node_command(plan, str(plan.nodes), plan.job_name,
                                 "$(MASTER_ADDR):$(MASTER_PORT)", _kubernetes_literal).words
    lines = [
        f"# Kubeflow PyTorchJob for {plan.script}, written by `ddpify launch`, for the training",
        f"# operator v1.7 or later (spec.nprocPerNode): kubectl create -f {file_name}",
        f"# The image holds {plan.script} under {plan.workdir}. Each pod runs torchrun, which",
        f"# starts {_processes(plan)} and meets the other pods at the Master pod.",
        "apiVersion: kubeflow.org/v1",
        "kind: PyTorchJob",
        "metadata:",
        f"  name: {_yaml(plan.job_name)}",
        "spec:",
        f"  nprocPerNode: {_yaml(str(plan.gpus_per_node))}",
        "  pytorchReplicaSpecs:",
    ]
    lines += _replica_spec("Master", 1, plan, command)
    if plan.nodes > 1:
        lines += _replica_spec("Worker", plan.nodes - 1, plan, command)
    return "\n".join(lines) + "\n"


def _replica_spec(role: str, replicas: int, plan: LaunchPlan, command: Sequence[str]) -> list[str]:
    """One role's pods; Master and Worker pods differ only in their number."""
    lines = [
        f"    {role}:",
        f"      replicas: {replicas}",
        "      restartPolicy: OnFailure",
        "      template:",
        "        spec:",
        "          containers:",
        f"            - name: {KUBEFLOW_CONTAINER}",
        f"              image: {_yaml(str(plan.image))}",
        f"              workingDir: {_yaml(plan.workdir)}",
        "              command:",
    ]
    lines += [f"                - {_yaml(word)}" for word in command]
    lines += [
        "              ports:",
        f"                - name: {KUBEFLOW_PORT_NAME}",
        f"                  containerPort: {plan.port}",
        "              resources:",
        "                limits:",
        f"                  nvidia.com/gpu: {plan.gpus_per_node}",
        # DataLoader workers and NCCL share memory through /dev/shm, which a container
        # otherwise gets 64 MB of.
        "              volumeMounts:",
        "                - name: dshm",
        "                  mountPath: /dev/shm",
        "          volumes:",
        "            - name: dshm",
        "              emptyDir:",
        "                medium: Memory",
    ]
    return lines


def _processes(plan: LaunchPlan) -> str:
    count = plan.gpus_per_node
    return f"{count} process{'es' if count != 1 else ''} (one per GPU)"


def _bash_command(command: TorchrunCommand, launcher: Sequence[str] = ()) -> str:
    """The command as people write one: the launchers on the first line, an option per line,
    and the script with its arguments on the last."""
    lines = [" ".join([*launcher, "torchrun"]), *command.options, " ".join(command.script)]
    return " \\\n    ".join(lines)


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _kubernetes_literal(word: str) -> str:
    """Kubernetes expands $(VAR) in a container's command; $$( keeps the user's word as it is."""
    return word.replace("$(", "$$(")


def _yaml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)
