"""Launching the four runs: processes, temporary directories, environments and time limits.

Every run gets fresh working directories (scripts write checkpoints into their cwd) holding
a copy of the script, and goes through the probe so that it leaves event files behind.
Nothing here judges the results; that is the checks package.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ddpify.verify import records
from ddpify.verify.probing.paths import inside
from ddpify.verify.records import RunResult

# Set by torchrun; a run that inherits them from a surrounding job would not be what it claims.
DISTRIBUTED_ENV_VARS = (
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERMINATE_GRACE_S = 5.0
# Seconds the other launches of a run get to end once one has failed (see launch_and_wait).
PEER_FAILURE_GRACE_S = 10.0
POLL_S = 0.1
# Left out of a project's working copy: version control, environments, caches.
NOT_COPIED = (".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache",
              "node_modules")
OUTPUT_TAIL_CHARS = 4000
# A Unix socket's path holds 107 characters (sun_path). DataLoader workers (num_workers > 0)
# bind one at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, 32 characters below TMPDIR; with a
# longer TMPDIR they fail and the script waits on them until the timeout. Margin for others.
UNIX_SOCKET_PATH_MAX = 107
SOCKET_PATH_BELOW_TMPDIR = 40
SHORT_TEMP_PARENT = "/tmp"


@dataclass(frozen=True)
class RunSettings:
    script_args: tuple[str, ...] = ()
    max_steps: int = 0
    max_epochs: int = 0
    # Epochs of full length; later epochs yield one batch per loader and rank (0: all full).
    full_epochs: int = 2
    timeout: float = 120.0
    # Directory the runs' temporary directories are made in (None: the system's).
    temp_parent: str | None = None
    # Seconds rank 0 waits before each write of a handed-off file in the hand-off run.
    slow_writes: float = 1.5


@dataclass
class Launch:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def clean_environment(extra_paths: Sequence[str]) -> dict[str, str]:
    """The caller's environment minus torchrun's variables, with ddpify importable."""
    env = {key: value for key, value in os.environ.items() if key not in DISTRIBUTED_ENV_VARS}
    paths = [PACKAGE_ROOT, *extra_paths]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def free_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


def probe_argv(record_dir: str, script_name: str, settings: RunSettings, dump_at: float,
               extra: Sequence[str] = ()) -> list[str]:
    return [
        "-m", "ddpify.verify.probe",
        "--record", record_dir,
        "--max-steps", str(settings.max_steps),
        "--max-epochs", str(settings.max_epochs),
        "--full-epochs", str(settings.full_epochs),
        "--dump-at", f"{dump_at:.3f}",
        *extra,
        script_name,
        *settings.script_args,
    ]


def reaped(argv: list[str], report_path: str) -> list[str]:
    """argv run under the reaper, which leaves none of its processes behind."""
    return [sys.executable, "-m", "ddpify.verify.reaper", "--report", report_path, "--", *argv]


def socket_fits(directory: str) -> bool:
    """Whether Unix sockets made below `directory` (as multiprocessing makes them) fit."""
    return len(os.path.abspath(directory)) + SOCKET_PATH_BELOW_TMPDIR <= UNIX_SOCKET_PATH_MAX


def scratch_directory(run_dir: str) -> str:
    """The run's TMPDIR: run_dir/tmp, or, when that path is too long for the Unix sockets
    of DataLoader workers (a long --temp-parent or TMPDIR), a short folder under /tmp that
    run_dir/tmp links to. The caller removes a short one (it lies outside run_dir)."""
    import tempfile

    scratch = os.path.join(run_dir, "tmp")
    if not socket_fits(scratch) and os.path.isdir(SHORT_TEMP_PARENT):
        short = tempfile.mkdtemp(prefix="ddpify-tmp-", dir=SHORT_TEMP_PARENT)
        os.symlink(short, scratch)
        return short
    os.makedirs(scratch, exist_ok=True)
    return scratch


def sandbox_environment(env: dict[str, str], run_dir: str, scratch: str | None = None) -> dict[str, str]:
    """A HOME and a TMPDIR of the run's own, so caches and scratch files stay inside it.

    User-site packages (pip install --user) live under the real HOME: PYTHONUSERBASE keeps
    them importable."""
    import site

    home = os.path.join(run_dir, "home")
    scratch = scratch or os.path.join(run_dir, "tmp")
    os.makedirs(home, exist_ok=True)
    os.makedirs(scratch, exist_ok=True)
    env = dict(env)
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    env.update(HOME=home, TMPDIR=scratch, TMP=scratch, TEMP=scratch)
    env[records.SCRATCH_ENV] = scratch
    return env


def stack_dump_margin(timeout: float) -> float:
    """Seconds before the deadline at which hung ranks dump their stacks."""
    return max(2.0, min(5.0, 0.2 * timeout))


class Runner:
    """Runs scripts under the probe inside one temporary directory, removed by close()."""

    def __init__(self, settings: RunSettings, keep: bool = False, roots: dict[str, str] | None = None):
        import tempfile

        self.settings = settings
        self.keep = keep
        # Script -> the project folder it belongs to, copied whole into each run's working
        # copy (the script runs from its root); a script without one is copied alone.
        self.roots = {os.path.abspath(script): os.path.abspath(root) for script, root in (roots or {}).items()}
        # Every process started and not yet waited for, whichever thread started it: close()
        # stops them when an exception (Ctrl-C, SIGTERM) ends the verification early.
        self.active: list[subprocess.Popen] = []
        # Set once Ctrl-C or SIGTERM ends the verification: no thread starts a run after that.
        self.stopping = False
        self.root = tempfile.mkdtemp(prefix="ddpify-verify-", dir=settings.temp_parent)
        # Short TMPDIRs made outside root for runs whose own would be too long.
        self.short_scratch: list[str] = []

    def close(self) -> None:
        self.stopping = True
        terminate(list(self.active))
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
            for scratch in self.short_scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def run_plain_together(self, jobs: Sequence[tuple[str, str]], gpus: list[str] | None = None
                           ) -> list[RunResult]:
        """Several single-process runs at once (the original and the group of one: on two
        cores, two imports of torch side by side take little longer than one)."""
        from concurrent.futures import ThreadPoolExecutor

        # Side by side, each gets half the cores: two processes with a thread per core each
        # oversubscribe the machine, and OpenMP's spinning threads then slow both down a lot.
        threads = str(max(1, (os.cpu_count() or 2) // max(1, len(jobs))))
        pool = ThreadPoolExecutor(max_workers=max(1, len(jobs)))
        try:
            futures = [pool.submit(self.run_plain, name, script, gpus, False, threads) for name, script in jobs]
            return [future.result() for future in futures]
        except BaseException:
            # Ctrl-C or SIGTERM reach this thread only: stop the runs the others wait on,
            # and keep their threads from starting another (the Gloo-abort rerun would: a
            # stopped run can look like one that aborted after finishing).
            self.stopping = True
            terminate(list(self.active))
            raise
        finally:
            pool.shutdown(wait=True)

    # -- the runs --------------------------------------------------------------------

    def run_plain(self, name: str, script: str, gpus: list[str] | None = None,
                  import_only: bool = False, threads: str | None = None) -> RunResult:
        """`python script.py` through the probe: a single process, no distributed variables.

        gpus is its CUDA_VISIBLE_DEVICES ([]: none; None: as inherited). import_only imports
        it instead, in the world of one that torchrun would give a single process (so a
        process group started at import time would start)."""
        env = self._environment(script, gpus=gpus)
        if threads:
            env.setdefault("OMP_NUM_THREADS", threads)
        extra = []
        if import_only:
            extra = ["--import-only"]
            env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        return self._run(name, script, world_size=1, plan=lambda record, workdir, dump_at: [
            Launch([sys.executable, *probe_argv(record, self.script_arg(script), self.settings, dump_at, extra)],
                   workdir, env)
        ])

    def run_torchrun(self, name: str, script: str, nproc: int, gpus: list[str] | None = None,
                     slow_paths: Sequence[str] = ()) -> RunResult:
        """`torchrun --standalone --nproc_per_node=N` on one machine, on `gpus` (one per rank;
        [] for Gloo on the CPU). slow_paths makes it the hand-off run: rank 0 writes those
        files late."""
        env = self._environment(script, distributed=True, gpus=gpus)
        launcher = [
            sys.executable, "-m", "torch.distributed.run",
            "--standalone", "--nproc_per_node", str(nproc),
        ]
        extra = [f"--slow-writes={self.settings.slow_writes:g}"] if slow_paths else []
        extra += [f"--slow-path={path}" for path in slow_paths]
        return self._run(name, script, world_size=nproc, plan=lambda record, workdir, dump_at: [
            Launch([*launcher, *probe_argv(record, self.script_arg(script), self.settings, dump_at, extra)],
                   workdir, env)
        ])

    def run_multinode(self, name: str, script: str, gpu_per_node: list[str] | None) -> RunResult:
        """Two torchrun agents with one process each, meeting through c10d rendezvous: the
        second "node" runs RANK=1 with LOCAL_RANK=0.

        Both nodes run in one working directory: the common cluster set-up is a shared
        filesystem (the job's folder on NFS or Lustre), where what rank 0 saves the other
        nodes can read after a barrier. gpu_per_node gives each agent its
        CUDA_VISIBLE_DEVICES; None runs both on the CPU.
        """
        endpoint = f"127.0.0.1:{free_port()}"
        launcher = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint,
            "--rdzv_id", f"ddpify-verify-{uuid.uuid4().hex[:8]}",
        ]

        def plan(record, workdir, dump_at):
            launches = []
            for node in range(2):
                gpus = [gpu_per_node[node]] if gpu_per_node else []
                env = self._environment(script, distributed=True, gpus=gpus)
                argv = [*launcher, *probe_argv(record, self.script_arg(script), self.settings, dump_at)]
                launches.append(Launch(argv, workdir, env))
            return launches

        return self._run(name, script, world_size=2, plan=plan)

    # -- machinery -------------------------------------------------------------------

    def script_arg(self, script: str) -> str:
        """The script as the run names it, relative to its working copy."""
        root = self.roots.get(os.path.abspath(script))
        return os.path.relpath(os.path.abspath(script), root) if root else os.path.basename(script)

    def _environment(self, script: str, distributed: bool = False,
                     gpus: list[str] | None = None) -> dict[str, str]:
        # A lone script may import modules that sit beside it; a project brings its own.
        beside = [] if os.path.abspath(script) in self.roots else [os.path.dirname(os.path.abspath(script))]
        env = clean_environment(beside)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        if distributed:
            # What torchrun would set anyway, minus the banner it prints about it.
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def _run(self, name, script, world_size, plan) -> RunResult:
        result = self._run_once(name, script, world_size, plan)
        if aborted_after_finishing(result) and not self.stopping:
            # Gloo's worker threads can abort while the interpreter exits after the script
            # has finished (pytorch/pytorch#179291, seen under CPU contention): not the
            # script's doing. Run it once more before judging; a second abort is reported.
            shutil.rmtree(os.path.join(self.root, name))
            result = self._run_once(name, script, world_size, plan)
        return result

    def _run_once(self, name, script, world_size, plan) -> RunResult:
        if self.stopping:
            raise RuntimeError("the verification was stopped")
        run_dir = os.path.join(self.root, name)
        record_dir = os.path.join(run_dir, "record")
        os.makedirs(record_dir)
        workdir = os.path.join(run_dir, "work")
        root = self.roots.get(os.path.abspath(script))
        if root:
            shutil.copytree(root, workdir, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
        else:
            os.makedirs(workdir)
            shutil.copy2(script, workdir)
        copied = {os.path.relpath(os.path.join(directory, name), workdir)
                  for directory, _, names in os.walk(workdir) for name in names}
        started = time.time()
        deadline = started + self.settings.timeout
        launches = plan(record_dir, workdir, deadline - stack_dump_margin(self.settings.timeout))
        scratch = scratch_directory(run_dir)
        if not inside(scratch, run_dir):
            self.short_scratch.append(scratch)
        for launch in launches:
            launch.env = sandbox_environment(launch.env, run_dir, scratch)
        log_paths = [os.path.join(run_dir, f"output{index}.txt") for index in range(len(launches))]
        reports = [os.path.join(run_dir, f"reaper{index}.json") for index in range(len(launches))]
        returncodes, timed_out = launch_and_wait(launches, log_paths, deadline, reports, self.active)
        seconds = time.time() - started
        events = records.load_events(record_dir)
        if timed_out:
            kill_leftover_ranks(events)
        return RunResult(
            name=name,
            commands=[launch.argv for launch in launches],
            returncodes=returncodes,
            timed_out=timed_out,
            seconds=seconds,
            world_size=world_size,
            limit=self.settings.timeout,
            events=events,
            stacks=records.load_stacks(record_dir),
            files_created=created_files(workdir, copied),
            output_tail=read_tail(log_paths),
            script_name=os.path.basename(script),
            leftovers=records.load_leftovers(reports),
            workdir=workdir,
            run_dir=run_dir,
            copied=sorted(copied),
        )


GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def aborted_after_finishing(result: RunResult) -> bool:
    """Every rank reached the end of the script, yet the run failed with Gloo's exit abort."""
    return (
        not result.ok and not result.timed_out and not result.unfinished_ranks()
        and GLOO_TEARDOWN_ABORT in result.output_tail
    )


def launch_and_wait(launches: list[Launch], log_paths: list[str], deadline: float,
                    reports: list[str] | None = None, active: list[subprocess.Popen] | None = None):
    """Starts every launch under a reaper in its own session and waits for all of them or
    the deadline. Whatever ends the wait (the deadline, Ctrl-C, SIGTERM turned into an
    exception by the command line), every process started here is stopped before it returns.
    `active` holds them meanwhile, for a caller in another thread to stop.

    Once one launch fails, the others get PEER_FAILURE_GRACE_S to end and are then stopped,
    as a cluster's scheduler stops a job whose task failed: the other torchrun agent would
    otherwise wait for the failed one (in a collective, or at its exit barrier) until the
    deadline, and a crash would read as a hang."""
    processes: list[subprocess.Popen] = []
    active = [] if active is None else active
    timed_out = False
    try:
        for index, (launch, log_path) in enumerate(zip(launches, log_paths)):
            report = reports[index] if reports else log_path + ".reaper.json"
            with open(log_path, "wb") as log:
                processes.append(subprocess.Popen(
                    reaped(launch.argv, report), cwd=launch.cwd, env=launch.env, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ))
            active.append(processes[-1])
        timed_out = wait_for_all(processes, deadline)
    except BaseException:
        terminate(processes)
        raise
    terminate(processes)
    for process in processes:
        if process in active:
            active.remove(process)
    return [process.returncode for process in processes], timed_out


def wait_for_all(processes: list[subprocess.Popen], deadline: float) -> bool:
    """Waits until every process has ended, the deadline has passed (True), or a process
    failed and the others have had their grace."""
    stop_at = deadline
    while [process.poll() for process in processes].count(None):
        now = time.time()
        if now >= stop_at:
            return stop_at == deadline
        if any(process.returncode not in (None, 0) for process in processes):
            stop_at = min(stop_at, now + PEER_FAILURE_GRACE_S)
        time.sleep(POLL_S)
    return False


def terminate(processes: list[subprocess.Popen]) -> None:
    """SIGTERM first (the reaper then stops its whole tree), SIGKILL what is left."""
    for process in processes:
        signal_group(process, signal.SIGTERM)
    grace_end = time.time() + TERMINATE_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, grace_end - time.time()))
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()


def signal_group(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


def kill_leftover_ranks(events: dict[int, list[dict]]) -> None:
    """A last resort where the reaper could not run: the ranks' pids from their start events."""
    for rank_events in events.values():
        pids = [event["pid"] for event in rank_events if event["ev"] == "start"]
        for pid in pids:
            if is_probe_process(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def is_probe_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"ddpify.verify.probe" in cmdline.read()
    except OSError:
        return False


def created_files(workdir: str, copied: set[str]) -> list[str]:
    """Files in the working copy that the copy did not bring (bytecode aside)."""
    found = []
    for directory, _, names in os.walk(workdir):
        for name in names:
            relative = os.path.relpath(os.path.join(directory, name), workdir)
            if relative not in copied and "__pycache__" not in relative.split(os.sep):
                found.append(relative)
    return sorted(found)


def read_tail(log_paths: list[str]) -> str:
    parts = []
    for path in log_paths:
        with open(path, encoding="utf-8", errors="replace") as log:
            parts.append(log.read()[-OUTPUT_TAIL_CHARS:])
    return "\n".join(part for part in parts if part)
