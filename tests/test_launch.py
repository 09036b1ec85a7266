"""`ddpify launch`: each launch file is rendered and checked as its consumer would read it.

The bash scripts are checked by `bash -n` and then run by bash with stand-ins for torchrun,
srun and scontrol that record what they were started with; every torchrun command is parsed
by torchrun's own argument parser; the manifest is parsed as YAML (PyYAML, which the test
extra already installs through pre-commit) and its PyTorchJob fields are checked. The slow
tests run the torchrun script for real, on the CPU, on a migrated fixture.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml
from click.testing import CliRunner
from fixture_cases import FIXTURES
from script_runs import GLOO_TEARDOWN_ABORT, IMPORTS_TORCH, TORCHRUN_ENV_VARS

from ddpify.cli import main
from ddpify.launch.templates import (
    KUBEFLOW_CONTAINER,
    KUBEFLOW_PORT_NAME,
    LaunchPlan,
    default_job_name,
    pytorchjob_manifest,
    sbatch_script,
    torchrun_script,
)

MIGRATED = FIXTURES / "guide" / "guide_image_classifier" / "expected.py"
NOT_MIGRATED = FIXTURES / "guide" / "guide_image_classifier" / "input.py"
# Arguments a shell or Kubernetes would change if they were not quoted for them.
AWKWARD_ARGS = ("--epochs", "3", "--name", "two words", "$HOME", "$(whoami)", "it's", 'say "hi"')
PLAN = LaunchPlan(script="jobs/train_ddp.py", nodes=3, gpus_per_node=4, script_args=AWKWARD_ARGS,
                  job_name="train-ddp", port=29555, image="registry.example.com/train:1",
                  partition="gpu", time="04:00:00", cpus_per_node=32)


# -- the checks, each shown failing on a broken file below ------------------------------------

def bash_syntax_problems(text: str) -> list[str]:
    """What `bash -n` (parse, run nothing) says about a script."""
    checked = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    return [checked.stderr.strip()] if checked.returncode else []


def torchrun_argv_problems(argv: Sequence[str], script: str, script_args: Sequence[str]) -> list[str]:
    """What torchrun's own argument parser refuses in a command (argv[0] is torchrun), or
    where it finds a script or arguments other than the ones meant. (Imported here, by the
    tests marked IMPORTS_TORCH, which call this.)"""
    from torch.distributed.run import get_args_parser

    if argv[0] != "torchrun":
        return [f"not a torchrun command: {argv[0]}"]
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        parsed = parser.parse_args(list(argv[1:]))
    except Exception as error:  # argparse.ArgumentError
        return [str(error)]
    except SystemExit:  # what argparse does with an unknown option, exit_on_error or not
        return [f"torchrun refuses {' '.join(argv[1:])}"]
    if (parsed.training_script, parsed.training_script_args) != (script, list(script_args)):
        return [f"torchrun would run {parsed.training_script} {parsed.training_script_args}"]
    return []


def sbatch_directives(text: str) -> dict[str, str]:
    """The #SBATCH options sbatch reads: those before the first command (later ones are
    comments to it)."""
    directives = {}
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            name, _, value = line[len("#SBATCH "):].partition("=")
            directives[name] = value
        elif line.strip() and not line.startswith("#"):
            break
    return directives


def pytorchjob_problems(document: dict, nodes: int, gpus_per_node: int) -> list[str]:
    """The fields the Kubeflow training operator reads from a PyTorchJob."""
    problems = []
    if document.get("apiVersion") != "kubeflow.org/v1" or document.get("kind") != "PyTorchJob":
        problems.append(f"not a kubeflow.org/v1 PyTorchJob: {document.get('apiVersion')} "
                        f"{document.get('kind')}")
    if not document.get("metadata", {}).get("name"):
        problems.append("metadata.name missing")
    specs = document.get("spec", {}).get("pytorchReplicaSpecs", {})
    expected = {"Master": 1, **({"Worker": nodes - 1} if nodes > 1 else {})}
    if set(specs) != set(expected):
        problems.append(f"replica specs {sorted(specs)}, expected {sorted(expected)}")
    for role, replicas in expected.items():
        spec = specs.get(role, {})
        if spec.get("replicas") != replicas:
            problems.append(f"{role}: replicas {spec.get('replicas')}, expected {replicas}")
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        named = [c for c in containers if c.get("name") == KUBEFLOW_CONTAINER]
        if not named:
            problems.append(f"{role}: no container named {KUBEFLOW_CONTAINER} "
                            f"(the operator sets MASTER_ADDR/MASTER_PORT only there)")
            continue
        container = named[0]
        if not container.get("image"):
            problems.append(f"{role}: no image")
        if container.get("command", [""])[0] != "torchrun":
            problems.append(f"{role}: the command does not start torchrun")
        if KUBEFLOW_PORT_NAME not in [port.get("name") for port in container.get("ports", [])]:
            problems.append(f"{role}: no port named {KUBEFLOW_PORT_NAME}")
        gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        if gpus != gpus_per_node:
            problems.append(f"{role}: nvidia.com/gpu limit {gpus}, expected {gpus_per_node}")
    if str(document.get("spec", {}).get("nprocPerNode")) != str(gpus_per_node):
        problems.append(f"spec.nprocPerNode {document.get('spec', {}).get('nprocPerNode')}, "
                        f"expected {gpus_per_node}")
    return problems


def kubernetes_expanded(word: str, env: dict[str, str]) -> str:
    """What Kubernetes makes of $(VAR) and $$ in a container command."""
    out, index = [], 0
    while index < len(word):
        if word.startswith("$$", index):
            out.append("$")
            index += 2
        elif word.startswith("$(", index) and ")" in word[index:]:
            end = word.index(")", index)
            name = word[index + 2:end]
            out.append(env.get(name, word[index:end + 1]))
            index = end + 1
        else:
            out.append(word[index])
            index += 1
    return "".join(out)


# -- running the bash scripts with stand-ins ----------------------------------------------

_RECORDER = """\
import json, os, sys
with open(os.environ["LAUNCH_LOG"], "a") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""
_STAND_INS = {
    "torchrun": _RECORDER,
    # One node's srun: record, then start what it was given (from torchrun on) once.
    "srun": _RECORDER + "os.execvp('torchrun', sys.argv[sys.argv.index('torchrun'):])\n",
    # The nodes of SLURM_JOB_NODELIST=gpu-[07-08], one per line.
    "scontrol": "import os, sys\nassert sys.argv[1:] == ['show', 'hostnames', os.environ['SLURM_JOB_NODELIST']]\n"
                "print('gpu-07')\nprint('gpu-08')\n",
}


def run_with_stand_ins(text: str, tmp_path: Path, args: Sequence[str] = (),
                       env: Optional[dict[str, str]] = None) -> list[list[str]]:
    """Runs a launch script with bash; returns the commands the stand-ins were started with."""
    bin_dir = tmp_path / "stand-ins"
    bin_dir.mkdir(exist_ok=True)
    for name, body in _STAND_INS.items():
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    script, log = tmp_path / "launch.sh", tmp_path / "launch.log"
    script.write_text(text)
    log.write_text("")
    environment = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "LAUNCH_LOG": str(log),
                   "HOME": "/home/someone", **(env or {})}
    completed = subprocess.run(["bash", str(script), *args], env=environment, capture_output=True,
                               text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


# -- torchrun script -----------------------------------------------------------------------

@IMPORTS_TORCH
def test_torchrun_script_starts_one_machine_without_arguments_and_one_node_with_a_host(tmp_path):
    text = torchrun_script(PLAN, "train_ddp.torchrun.sh")
    assert bash_syntax_problems(text) == []
    one_machine = run_with_stand_ins(text, tmp_path)
    assert one_machine == [["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=4",
                            "jobs/train_ddp.py", *AWKWARD_ARGS]]
    one_node = run_with_stand_ins(text, tmp_path, args=["node0.example.com"])
    assert one_node == [["torchrun", "--nnodes=3", "--nproc-per-node=4", "--rdzv-id=train-ddp",
                         "--rdzv-backend=c10d", "--rdzv-endpoint=node0.example.com:29555",
                         "jobs/train_ddp.py", *AWKWARD_ARGS]]
    for argv in one_machine + one_node:
        assert torchrun_argv_problems(argv, "jobs/train_ddp.py", AWKWARD_ARGS) == []


def test_torchrun_script_for_one_machine_has_only_the_one_machine_command(tmp_path):
    text = torchrun_script(LaunchPlan(script="train_ddp.py", gpus_per_node=2), "train_ddp.torchrun.sh")
    assert "--rdzv-endpoint" not in text and "HOST" not in text
    assert run_with_stand_ins(text, tmp_path) == [
        ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", "train_ddp.py"]]


# -- SLURM ---------------------------------------------------------------------------------

def test_sbatch_asks_for_one_task_per_node_and_the_gpus():
    directives = sbatch_directives(sbatch_script(PLAN, "train_ddp.sbatch"))
    assert directives == {"--job-name": "train-ddp", "--nodes": "3", "--ntasks-per-node": "1",
                          "--gpus-per-node": "4", "--cpus-per-task": "32", "--partition": "gpu",
                          "--time": "04:00:00"}


def test_sbatch_leaves_unset_options_to_the_cluster():
    directives = sbatch_directives(sbatch_script(LaunchPlan(script="t.py"), "t.sbatch"))
    assert set(directives) == {"--job-name", "--nodes", "--ntasks-per-node", "--gpus-per-node"}


@IMPORTS_TORCH
def test_sbatch_srun_starts_torchrun_with_the_first_node_as_rendezvous(tmp_path):
    text = sbatch_script(PLAN, "train_ddp.sbatch")
    assert bash_syntax_problems(text) == []
    slurm_env = {"SLURM_JOB_NODELIST": "gpu-[07-08]", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_ID": "4242"}
    srun, torchrun = run_with_stand_ins(text, tmp_path, env=slurm_env)
    assert srun[:2] == ["srun", "--cpus-per-task=32"]
    assert torchrun == ["torchrun", "--nnodes=3", "--nproc-per-node=4", "--rdzv-id=4242",
                        "--rdzv-backend=c10d", "--rdzv-endpoint=gpu-07:29555",
                        "jobs/train_ddp.py", *AWKWARD_ARGS]
    assert torchrun_argv_problems(torchrun, "jobs/train_ddp.py", AWKWARD_ARGS) == []


# -- Kubeflow ------------------------------------------------------------------------------

@IMPORTS_TORCH
def test_pytorchjob_has_master_and_workers_running_torchrun():
    document = yaml.safe_load(pytorchjob_manifest(PLAN, "train_ddp.pytorchjob.yaml"))
    assert pytorchjob_problems(document, nodes=3, gpus_per_node=4) == []
    assert document["metadata"]["name"] == "train-ddp"
    operator_env = {"MASTER_ADDR": "train-ddp-master-0", "MASTER_PORT": "29555"}
    for role in ("Master", "Worker"):
        (container,) = document["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/train:1"
        assert container["workingDir"] == "/workspace"
        assert container["ports"] == [{"name": KUBEFLOW_PORT_NAME, "containerPort": 29555}]
        argv = [kubernetes_expanded(word, operator_env) for word in container["command"]]
        assert argv == ["torchrun", "--nnodes=3", "--nproc-per-node=4", "--rdzv-id=train-ddp",
                        "--rdzv-backend=c10d", "--rdzv-endpoint=train-ddp-master-0:29555",
                        "jobs/train_ddp.py", *AWKWARD_ARGS]
        assert torchrun_argv_problems(argv, "jobs/train_ddp.py", AWKWARD_ARGS) == []


def test_pytorchjob_for_one_node_has_only_a_master():
    plan = LaunchPlan(script="train_ddp.py", gpus_per_node=8, image="img")
    document = yaml.safe_load(pytorchjob_manifest(plan, "train_ddp.pytorchjob.yaml"))
    assert pytorchjob_problems(document, nodes=1, gpus_per_node=8) == []


# -- the checks catch broken files ---------------------------------------------------------

def test_bash_check_catches_a_syntax_error():
    broken = torchrun_script(PLAN, "x.sh").replace("\nfi\n", "\n")
    assert bash_syntax_problems(broken)


@IMPORTS_TORCH
def test_torchrun_check_catches_a_misspelt_option_and_a_misplaced_script():
    assert torchrun_argv_problems(["torchrun", "--procs-per-node=2", "train.py"], "train.py", [])
    # An option after the script is the script's, not torchrun's.
    assert torchrun_argv_problems(["torchrun", "train.py", "--nnodes=2"], "train.py", [])
    assert torchrun_argv_problems(["python", "train.py"], "train.py", [])


def test_sbatch_check_ignores_a_directive_after_a_command():
    text = sbatch_script(PLAN, "x.sbatch").replace("#SBATCH --nodes=3\n", "")
    late = text.replace("set -euo pipefail\n", "set -euo pipefail\n#SBATCH --nodes=3\n")
    assert "--nodes" not in sbatch_directives(late)


@pytest.mark.parametrize("breakage", [
    lambda doc: doc["spec"]["pytorchReplicaSpecs"].update(Workers=doc["spec"]["pytorchReplicaSpecs"].pop("Worker")),
    lambda doc: doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].update(name="main"),
    lambda doc: doc["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=3),
    lambda doc: doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("ports"),
    lambda doc: doc["spec"].update(nprocPerNode="auto"),
], ids=["Workers", "container name", "replicas", "port", "nprocPerNode"])
def test_pytorchjob_check_catches_a_broken_manifest(breakage):
    document = yaml.safe_load(pytorchjob_manifest(PLAN, "x.yaml"))
    breakage(document)
    assert pytorchjob_problems(document, nodes=3, gpus_per_node=4)


def test_a_manifest_that_is_not_yaml_fails_to_parse():
    misindented = '              - "torchrun"'
    broken = pytorchjob_manifest(PLAN, "x.yaml").replace("  " + misindented, misindented, 1)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(broken)


# -- the command line ----------------------------------------------------------------------

@pytest.fixture
def in_project(tmp_path, monkeypatch):
    """A folder holding a migrated script (train_ddp.py) and its original (train.py)."""
    shutil.copy(MIGRATED, tmp_path / "train_ddp.py")
    shutil.copy(NOT_MIGRATED, tmp_path / "train.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch(*args):
    return CliRunner().invoke(main, ["launch", *args])


def test_launch_writes_the_three_files_next_to_the_script(in_project):
    (in_project / "jobs").mkdir()
    shutil.move("train_ddp.py", "jobs/train_ddp.py")
    result = launch("jobs/train_ddp.py", "--nodes", "3", "--gpus-per-node", "4", "--job-name", "train-ddp",
                    "--port", "29555", "--image", "registry.example.com/train:1", "--partition", "gpu",
                    "--time", "04:00:00", "--cpus-per-node", "32", "--", *AWKWARD_ARGS)
    assert result.exit_code == 0, result.output
    written = {"jobs/train_ddp.torchrun.sh": torchrun_script(PLAN, "train_ddp.torchrun.sh"),
               "jobs/train_ddp.sbatch": sbatch_script(PLAN, "train_ddp.sbatch"),
               "jobs/train_ddp.pytorchjob.yaml": pytorchjob_manifest(PLAN, "train_ddp.pytorchjob.yaml")}
    for path, text in written.items():
        assert Path(path).read_text() == text
        assert f"wrote {path}" in result.stderr
    assert result.stdout == ""


def test_without_an_image_there_is_no_manifest_and_a_note_says_why(in_project):
    result = launch("train_ddp.py")
    assert result.exit_code == 0
    assert sorted(path.name for path in in_project.iterdir() if "." in path.name[len("train_ddp"):]) == [
        "train_ddp.py", "train_ddp.sbatch", "train_ddp.torchrun.sh"]
    assert "give --image" in result.stderr


def test_a_script_that_is_not_ddp_ready_is_refused(in_project):
    result = launch("train.py", "--nodes", "2")
    assert result.exit_code == 1
    assert "train.py is not DDP-ready" in result.stderr and "ddpify train.py -o train_ddp.py" in result.stderr
    assert not list(in_project.glob("train.*.sh")) and not list(in_project.glob("train.sbatch"))


@pytest.mark.parametrize("args, message", [
    (["missing.py"], "missing.py: no such file"),
    (["train_ddp.py", "--job-name", "Train_DDP"], "lower-case letters"),
    (["train_ddp.py", "--nodes", "0"], "--nodes"),
])
def test_usage_errors_exit_2_and_write_nothing(in_project, args, message):
    result = launch(*args)
    assert result.exit_code == 2 and message in result.output
    assert not list(in_project.glob("*.sh"))


def test_default_job_name_suits_kubernetes():
    assert default_job_name("jobs/Train_DDP v2.py") == "train-ddp-v2"
    assert default_job_name("___.py") == "train"


# -- running the torchrun script for real --------------------------------------------------

def _start_launch_script(script: Path, log_dir: Path, args: Sequence[str] = ()) -> subprocess.Popen:
    """bash SCRIPT in its folder, on the CPU, with this interpreter's torchrun on PATH and
    each process's output teed to LOG_DIR/<run>/attempt_0/<local rank>/ (torchrun reads
    PET_<OPTION> as the default of --<option>, so the script stays as written)."""
    env = {key: value for key, value in os.environ.items() if key not in TORCHRUN_ENV_VARS}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", PET_LOG_DIR=str(log_dir), PET_TEE="3")
    return subprocess.Popen(["bash", script.name, *args], cwd=script.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _failures(start_runs: Callable[[], Sequence[subprocess.Popen]], log_dirs: Sequence[Path]) -> list[str]:
    """The stderr tail of each run that failed, once runs started together have finished.
    Gloo's threads sometimes abort at exit under CPU contention, after the script is done
    (see script_runs.py): such runs are started again once, with fresh log folders."""
    failures: list[str] = []
    for _ in range(2):
        started = start_runs()
        outputs = [run.communicate(timeout=300) for run in started]
        failures = [stderr[-3000:] for run, (_, stderr) in zip(started, outputs) if run.returncode != 0]
        if not any(GLOO_TEARDOWN_ABORT in failure for failure in failures):
            break
        for log_dir in log_dirs:
            shutil.rmtree(log_dir, ignore_errors=True)
    return failures


def _rank_outputs(log_dir: Path) -> dict[str, str]:
    """stdout of each local rank of a torchrun run that teed into log_dir, by rank folder."""
    return {path.parent.name: path.read_text()
            for path in sorted(log_dir.glob("*/attempt_0/*/stdout.log"))}


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_the_one_machine_command_trains_with_two_processes(in_project):
    assert launch("train_ddp.py", "--gpus-per-node", "2").exit_code == 0
    assert "--nnodes=1 \\\n    --nproc-per-node=2" in (in_project / "train_ddp.torchrun.sh").read_text()
    logs = in_project / "logs"
    assert _failures(lambda: [_start_launch_script(in_project / "train_ddp.torchrun.sh", logs)], [logs]) == []
    outputs = _rank_outputs(in_project / "logs")
    assert sorted(outputs) == ["0", "1"]
    # The guide's script under DDP: rank 0 alone prints each epoch's line, and saves.
    assert outputs["0"].count("epoch ") == 3 and outputs["1"] == ""
    assert (in_project / "checkpoint_2.pth").exists()


@pytest.mark.slow
def test_the_n_machine_command_meets_at_the_first_machine(in_project):
    """Two "machines" on this one: two torchrun agents with one process each, meeting
    through the c10d rendezvous that the first one hosts."""
    port = _free_port()
    assert launch("train_ddp.py", "--nodes", "2", "--port", str(port)).exit_code == 0
    script, logs = in_project / "train_ddp.torchrun.sh", [in_project / "node0", in_project / "node1"]
    assert _failures(lambda: [_start_launch_script(script, log_dir, ["127.0.0.1"]) for log_dir in logs],
                     logs) == []
    node_outputs = [_rank_outputs(log_dir) for log_dir in logs]
    assert [sorted(outputs) for outputs in node_outputs] == [["0"], ["0"]]
    # One of the two agents holds global rank 0, which alone prints.
    assert sorted(outputs["0"].count("epoch ") for outputs in node_outputs) == [0, 3]
