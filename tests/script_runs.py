"""Running a training script for real: plain python and torchrun (Gloo on CPU).

The checks here are plain functions so that tests/test_script_runs.py can show each one
failing on a deliberately broken script.
"""
import atexit
import json
import os
import pickle
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

# The mark of a test that imports torch in the test process (torch's import costs 2.3 s of CPU
# here). The test modules import torch in the tests that use it, not when they are collected:
# every pytest-xdist worker collects every module, and torch's import was a third of that.
# These tests run on one worker (a group of their own, as a fixture's checks are), which alone
# pays for the import.
IMPORTS_TORCH = pytest.mark.xdist_group("torch_in_the_test_process")

GLOO_TEARDOWN_ABORT = "terminate called without an active exception"
GLOO_ABORT_RETRIES = 4
TORCHRUN_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID")
# The evaluation check's shim (tests/eval_site/sitecustomize.py) and the variable that turns it
# on by naming the folder it logs fetches to.
EVAL_SITE = Path(__file__).resolve().parent / "eval_site"
EVAL_LOG_VAR = "DDPIFY_EVAL_CHECK"
EVAL_LOG_DIR = "ddpify-eval-log"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    workdir: Path
    # Under torchrun with rank_logs: what the ranks other than 0 printed (stdout is rank 0's).
    other_ranks: str = ""

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


TORCHRUN_LAUNCHER = Path(__file__).resolve().parent / "torchrun_launcher.py"
RANK_CLIENT = Path(__file__).resolve().parent / "rank_client.py"


def _environment(overrides: Optional[Mapping[str, str]] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV_VARS}
    env["PYTHONHASHSEED"] = "0"
    env["OMP_NUM_THREADS"] = "1"
    env.update(overrides or {})
    return env


def evaluation_env(workdir: Path) -> dict[str, str]:
    """Environment overrides that run a script under the evaluation shim, logging into workdir.

    The log lives inside the run's workdir so that a torchrun retry, which starts over in a
    clean workdir, starts over with a clean log too.
    """
    path = [str(EVAL_SITE)] + [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    return {EVAL_LOG_VAR: str(evaluation_log(workdir)), "PYTHONPATH": os.pathsep.join(path)}


def evaluation_log(workdir: Path) -> Path:
    return workdir / EVAL_LOG_DIR


# The one-writer check's log, relative to each run's folder (tests/eval_site/sitecustomize.py).
WRITES_LOG_VAR = "DDPIFY_WRITES_LOG"
WRITES_LOG_DIR = "ddpify-writes-log"


def writes_env() -> dict[str, str]:
    """Environment overrides that log every file each rank of a run writes (one_writer)."""
    path = [str(EVAL_SITE)] + [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    return {WRITES_LOG_VAR: WRITES_LOG_DIR, "PYTHONPATH": os.pathsep.join(path)}


def checks_one_writer(spec: Mapping) -> bool:
    """Every run of a fixture is under the one-writer check unless its run.json opts out with
    the reason: `"one_writer": "each rank writes its own log file"`. A bare `false` is refused,
    so that an opt-out always says why the check cannot hold."""
    choice = spec.get("one_writer", True)
    if choice is True:
        return True
    if isinstance(choice, str) and choice.strip():
        return False
    raise ValueError(f'run.json "one_writer" is true (the default) or a reason string, not {choice!r}')


def problems_one_writer(workdir: Path) -> list[str]:
    """Under torchrun, each file the run writes is written by one rank (rank 0, or each rank
    to a name of its own): two ranks writing one path race, and a reader may load half a file."""
    logs = list((workdir / WRITES_LOG_DIR).glob("writes-*.log"))
    if not logs:
        return [f"no write log under {workdir}: the one-writer shim did not run"]
    writers: dict[str, set[str]] = {}
    for log in logs:
        rank = log.name.split("-")[1]
        for path in log.read_text().splitlines():
            writers.setdefault(path, set()).add(rank)
    return [f"{os.path.relpath(path, workdir)} written by ranks {sorted(ranks)}"
            for path, ranks in sorted(writers.items()) if len(ranks) > 1]


def run_python(script: Path, workdir: Path, args: Sequence[str] = (), timeout: int = 120,
               env: Optional[Mapping[str, str]] = None) -> Run:
    """`python script args...` in workdir: a fork of tests/fork_server.py, which has torch
    imported already (DDPIFY_TESTS_NO_FORK=1 starts a fresh interpreter instead)."""
    if os.environ.get("DDPIFY_TESTS_NO_FORK") or _read_at_import(env):
        return _run([sys.executable, script.name, *args], script, workdir, timeout, env)
    copy_with_modules(script, workdir)
    return run_forked(workdir / script.name, args, workdir, _environment(env), timeout)


def _read_at_import(env: Optional[Mapping[str, str]]) -> bool:
    """Whether env sets what torch reads when it (or torch._dynamo, which the fork server has
    imported too) is imported: TORCH_LOGS, TORCH_COMPILE_DISABLE. A fork would not see it."""
    return any(name.startswith(("TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_")) for name in env or {})


def run_forked(script: Path, args: Sequence[str], workdir: Path, env: Mapping[str, str],
               timeout: int = 120) -> Run:
    """`python script args...` in workdir with exactly `env`, as a fork of the torch-loaded
    server (tests/fork_server.py)."""
    returncode, stdout, stderr = _fork_server().run(script, args, workdir, env, timeout)
    return Run(returncode, stdout, stderr, workdir)


def run_torchrun(script: Path, workdir: Path, args: Sequence[str] = (), nproc: int = 2,
                 timeout: int = 180, env: Optional[Mapping[str, str]] = None, rank_logs: bool = False,
                 fresh_ranks: bool = False) -> Run:
    """torchrun on script in workdir. With rank_logs each rank's stdout goes to a file of its
    own (torchrun --redirects, beside workdir): the run's stdout is rank 0's, and
    `other_ranks` holds what the others printed. `fresh_ranks`: each rank a new interpreter,
    not a fork of the torch-loaded server (a run that must not find what the server imported)."""
    logs = workdir.parent / f"{workdir.name}-ranks"
    redirects = ["--log-dir", str(logs), "--redirects", "1"] if rank_logs else []
    options = ["--standalone", f"--nproc_per_node={nproc}", *redirects]
    launch_args = [*options, script.name, *args]
    command = [sys.executable, "-m", "torch.distributed.run", *launch_args]

    def launch() -> Run:
        if os.environ.get("DDPIFY_TESTS_NO_FORK"):
            return _run(command, script, workdir, timeout, env)
        # The launcher and the ranks are forks of the torch-loaded server: each rank's process
        # is tests/rank_client.py, which has the server fork the rank (tests/fork_server.py).
        copy_with_modules(script, workdir)
        if fresh_ranks or _read_at_import(env):
            # torch reads these when it is imported (TORCH_LOGS): the ranks must import it anew.
            return run_forked(TORCHRUN_LAUNCHER, launch_args, workdir, _environment(env), timeout)
        server = _fork_server()
        forked_ranks = [*options, "--no-python", sys.executable, "-S", str(RANK_CLIENT), script.name, *args]
        return run_forked(TORCHRUN_LAUNCHER, forked_ranks, workdir,
                          {**_environment(env), "DDPIFY_RANK_SOCKET": server.rank_socket}, timeout)

    shutil.rmtree(logs, ignore_errors=True)
    run = launch()
    for _ in range(GLOO_ABORT_RETRIES):
        if run.returncode == 0 or GLOO_TEARDOWN_ABORT not in run.stderr:
            break
        # Under heavy CPU contention Gloo's worker threads sometimes abort while the
        # interpreter exits (pytorch/pytorch#179291), after the script has finished. It is
        # not the script's doing; run it again, in a clean directory, before judging.
        warnings.warn(f"{script.name}: Gloo aborted at exit; running it again", stacklevel=2)
        shutil.rmtree(workdir)
        shutil.rmtree(logs, ignore_errors=True)
        run = launch()
    return _split_by_rank(run, logs) if rank_logs else run


def _split_by_rank(run: Run, logs: Path) -> Run:
    # torchrun writes <log-dir>/<run id>/attempt_<n>/<rank>/stdout.log.
    printed: dict[int, str] = {}
    for path in sorted(logs.glob("*/attempt_*/*/stdout.log")):
        printed[int(path.parent.name)] = printed.get(int(path.parent.name), "") + path.read_text(errors="replace")
    others = "".join(text for rank, text in sorted(printed.items()) if rank != 0)
    return Run(run.returncode, printed.get(0, ""), run.stderr, run.workdir, others)


def run_three_ways(original: Path, migrated: Path, workdir: Path, args: Sequence[str] = (),
                   logged: Sequence[str] = (), rank_logs: bool = False,
                   extra_env: Optional[Mapping[str, str]] = None) -> tuple[Run, Run, Run]:
    """`python original`, `python migrated` and torchrun on migrated (run_torchrun's
    rank_logs), in workdir/original, /single and /torchrun; those named in `logged` run under
    the evaluation shim; `extra_env` goes to all three.

    The three are independent: started together, they overlap their start-up (most of a run's
    time here), which keeps the suites inside CI's budget.
    """
    def env(name: str) -> Optional[dict[str, str]]:
        overrides = {**(extra_env or {}), **(evaluation_env(workdir / name) if name in logged else {})}
        return overrides or None

    with ThreadPoolExecutor(max_workers=3) as runs:
        started = [runs.submit(run_python, original, workdir / "original", args, env=env("original")),
                   runs.submit(run_python, migrated, workdir / "single", args, env=env("single")),
                   runs.submit(run_torchrun, migrated, workdir / "torchrun", args, env=env("torchrun"),
                               rank_logs=rank_logs)]
        first, second, third = (run.result() for run in started)
    return first, second, third


def copy_with_modules(script: Path, workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, workdir / script.name)
    # The project's own modules beside the script (a fixture's utils.py) go with it, and so
    # do its packages (a project fixture's trainer/, fixtures/projects/).
    for module in script.parent.glob("*.py"):
        if module.name not in (script.name, "input.py", "expected.py"):
            shutil.copy(module, workdir / module.name)
    for package in script.parent.glob("*/__init__.py"):
        shutil.copytree(package.parent, workdir / package.parent.name,
                        ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)


class _ForkServer:
    """The client side of tests/fork_server.py: runs from several threads at once."""

    def __init__(self) -> None:
        self._sockets = Path(tempfile.mkdtemp(prefix="ddpify-ranks-"))
        self.rank_socket = str(self._sockets / "ranks.sock")
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("fork_server.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env={**_environment(), "DDPIFY_RANK_SOCKET": self.rank_socket})
        self._lock = threading.Lock()
        self._next_id = 0
        self._waiting: dict[int, queue.Queue[dict]] = {}
        self._outputs = Path(tempfile.mkdtemp(prefix="ddpify-runs-"))
        threading.Thread(target=self._read_replies, daemon=True).start()
        atexit.register(self.close)

    def run(self, script: Path, args: Sequence[str], workdir: Path, env: Mapping[str, str],
            timeout: int):
        with self._lock:
            run_id, self._next_id = self._next_id, self._next_id + 1
            replies: queue.Queue[dict] = queue.Queue()
            self._waiting[run_id] = replies
            stdout, stderr = self._outputs / f"{run_id}.out", self._outputs / f"{run_id}.err"
            request = {"id": run_id, "script": str(script), "args": list(args), "cwd": str(workdir),
                       "env": dict(env), "stdout": str(stdout), "stderr": str(stderr)}
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
        pid = replies.get(timeout=60)["pid"]
        try:
            returncode = replies.get(timeout=timeout)["returncode"]
        except queue.Empty:
            os.killpg(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired([script.name, *args], timeout) from None
        return returncode, stdout.read_text(errors="replace"), stderr.read_text(errors="replace")

    def _read_replies(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            reply = json.loads(line)
            with self._lock:
                replies = self._waiting[reply["id"]]
                if "returncode" in reply:
                    del self._waiting[reply["id"]]
            replies.put(reply)

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait(timeout=60)
        shutil.rmtree(self._outputs, ignore_errors=True)
        shutil.rmtree(self._sockets, ignore_errors=True)


_server: Optional[_ForkServer] = None
_server_lock = threading.Lock()


def _fork_server() -> _ForkServer:
    global _server
    with _server_lock:
        if _server is None:
            _server = _ForkServer()
        return _server


def _run(command, script: Path, workdir: Path, timeout: int, env: Optional[Mapping[str, str]]) -> Run:
    copy_with_modules(script, workdir)
    completed = subprocess.run(command, cwd=workdir, env=_environment(env), capture_output=True,
                               text=True, timeout=timeout)
    return Run(completed.returncode, completed.stdout, completed.stderr, workdir)


def problems_single_process(original: Run, migrated: Run) -> list[str]:
    """Plain `python` on the migrated script must print exactly what the original printed."""
    problems = []
    if original.returncode != 0:
        problems.append(f"original failed: {original.stderr[-2000:]}")
    if migrated.returncode != 0:
        problems.append(f"migrated (python) failed: {migrated.stderr[-2000:]}")
    if migrated.stdout != original.stdout:
        problems.append(f"output differs:\n--- original\n{original.stdout}\n--- migrated\n{migrated.stdout}")
    return problems


def problems_distributed(original: Run, distributed: Run, files: Sequence[str]) -> list[str]:
    """Under torchrun: exit 0, each line printed once, checkpoints exist and load unwrapped."""
    problems = []
    if distributed.returncode != 0:
        problems.append(f"torchrun failed ({distributed.returncode}): {distributed.stderr[-3000:]}")
    # Numbers differ between one and two processes, and a sharded epoch logs fewer steps;
    # but no line may appear more often than the original printed it, and the run must end
    # on the same kind of line.
    original_counts = Counter(map(line_shape, original.lines))
    for shape, count in Counter(map(line_shape, distributed.lines)).items():
        if count > original_counts[shape]:
            problems.append(f"printed {count} times under torchrun, {original_counts[shape]} "
                            f"in the original: {shape!r}")
    if original.lines and (not distributed.lines or
                           line_shape(distributed.lines[-1]) != line_shape(original.lines[-1])):
        problems.append(f"final line differs under torchrun:\n{distributed.stdout}")
    for name in files:
        problems.extend(_checkpoint_problems(distributed.workdir / name))
    return problems


def problems_other_ranks_silent(distributed: Run) -> list[str]:
    """Only rank 0 prints (a run_torchrun with rank_logs)."""
    if not distributed.other_ranks:
        return []
    lines = distributed.other_ranks.splitlines()
    return [f"ranks other than 0 printed {len(lines)} lines, e.g. {lines[0]!r}"]


def problems_evaluation_lines(original: Run, distributed: Run, pattern: str) -> list[str]:
    """With frozen weights rank 0 must print exactly the original's evaluation lines.

    The shim keeps every parameter at its seeded initial value, so a sharded evaluation whose
    figures are gathered across ranks gives the one-process figures; one that reports a
    single rank's share, or counts padded samples, does not. torchrun's stdout is rank 0's when
    the other ranks do not print.
    """
    expected = matching_lines(original, pattern)
    if not expected:
        return [f"the original printed no line matching {pattern!r}:\n{original.stdout}"]
    printed = matching_lines(distributed, pattern)
    if printed == expected:
        return []
    return [f"evaluation lines differ under torchrun ({len(printed)} printed, {len(expected)} expected):\n"
            + "--- original\n" + "\n".join(expected) + "\n--- torchrun\n" + "\n".join(printed)]


def matching_lines(run: Run, pattern: str) -> list[str]:
    return [line for line in run.lines if re.search(pattern, line)]


def problems_evaluation_fetches(log_dir: Path, world_size: int, copies: int = 1) -> list[str]:
    """Every evaluation pass, taken across the ranks, fetches each index exactly once
    (`copies` times: an evaluation set of fewer batches than ranks stays whole on each rank).

    An evaluation pass is one whose every fetch ran with grad disabled; the same loop's pass
    has the same number on every rank (tests/eval_site/sitecustomize.py). A duplicate means
    padding (DistributedSampler) or a full set on every rank; a miss means dropped samples.
    """
    records = read_fetch_log(log_dir)
    problems = [f"a fetch log from rank {rank}, outside a world of {world_size}"
                for rank in sorted({record["rank"] for record in records}) if rank >= world_size]
    passes = evaluation_passes(records)
    if not passes:
        problems.append(f"no evaluation pass (fetches under torch.no_grad(), num_workers=0) was logged in {log_dir}")
    for (name, length, number), indices in sorted(passes.items(), key=lambda item: (item[0][0], item[0][2])):
        problems.extend(_coverage_problems(f"evaluation pass {number} over {name} of {length}", length,
                                           indices, copies))
    return problems


def problems_training_fetches(log_dir: Path, world_size: int) -> list[str]:
    """Every training pass (fetches with grad enabled) over a shuffled loader is sharded across
    the ranks, and each rank's order changes from one epoch to the next (set_epoch).

    Sharded: no rank fetches more than its share, ceil(length / world_size) (DistributedSampler
    pads to that), and the ranks together fetch every index. A rank that draws the same order
    in every pass is a DistributedSampler whose epoch is never set: it shuffles with the same
    seed each time.
    """
    records = read_fetch_log(log_dir)
    by_pass: dict[tuple, dict[int, list]] = {}
    for record in records:
        if record["grad"]:
            name, length = record["key"]
            ranks = by_pass.setdefault((name, length, record["pass"]), {})
            ranks.setdefault(record["rank"], []).extend(record["indices"])
    if not by_pass:
        return [f"no training pass (fetches with grad enabled, num_workers=0) was logged in {log_dir}"]
    problems = []
    orders: dict[tuple, dict[int, list]] = {}
    for (name, length, number), ranks in sorted(by_pass.items()):
        label = f"training pass {number} over {name} of {length}"
        share = -(-length // world_size) if length is not None else None
        for rank, indices in sorted(ranks.items()):
            if share is not None and len(indices) > share:
                problems.append(f"{label}: rank {rank} fetched {len(indices)} samples, more than its "
                                f"share of {share}: the loader is not sharded")
            orders.setdefault((name, length), {}).setdefault(rank, []).append(indices)
        if length is not None:
            missed = sorted(set(range(length)) - {index for indices in ranks.values() for index in indices})
            if missed:
                problems.append(f"{label}: {len(missed)} of {length} indices never fetched, e.g. {missed[0]}")
    for (name, length), ranks in sorted(orders.items()):
        for rank, passes in sorted(ranks.items()):
            if len(passes) > 1 and all(indices == passes[0] for indices in passes[1:]):
                problems.append(f"{len(passes)} training passes over {name} of {length}: rank {rank} "
                                "fetched the same order in each (set_epoch never called?)")
    return problems


def read_fetch_log(log_dir: Path) -> list[dict]:
    records = []
    for path in sorted(log_dir.glob("fetch-*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return records


def evaluation_passes(records: Sequence[dict]) -> dict[tuple, list]:
    """(dataset name, length, pass number) -> all ranks' fetched indices, for the passes that
    fetched with grad disabled throughout (a training pass fetches with grad enabled)."""
    passes: dict[tuple, list] = {}
    trained = set()
    for record in records:
        name, length = record["key"]
        key = (name, length, record["pass"])
        passes.setdefault(key, []).extend(record["indices"])
        if record["grad"]:
            trained.add(key)
    return {key: indices for key, indices in passes.items() if key not in trained}


def _coverage_problems(label: str, length: Optional[int], indices: Sequence, copies: int = 1) -> list[str]:
    counts = Counter(indices)
    problems = []
    repeated = sorted(((index, count) for index, count in counts.items() if count > copies),
                      key=lambda pair: _index_order(pair[0]))
    if repeated:
        index, count = repeated[0]
        often = "once" if copies == 1 else f"{copies} times"
        problems.append(f"{label}: {len(repeated)} indices fetched more than {often} across ranks, "
                        f"e.g. {index!r} ({count} times)")
    short = sorted((index for index, count in counts.items() if count < copies), key=_index_order)
    if short:
        problems.append(f"{label}: {len(short)} indices fetched fewer than {copies} times, e.g. {short[0]!r}")
    if length is None:
        return problems + [f"{label}: the dataset has no len(), so coverage cannot be checked"]
    missed = sorted(set(range(length)) - set(counts))
    if missed:
        problems.append(f"{label}: {len(missed)} of {length} indices never fetched, e.g. {missed[0]}")
    strays = sorted(map(repr, set(counts) - set(range(length))))  # may mix ints and reprs
    if strays:
        problems.append(f"{label}: {len(strays)} fetched indices outside range({length}), e.g. {strays[0]}")
    return problems


def _index_order(index) -> tuple:
    # The shim logs an index it cannot make an int of as its repr; ints sort first, by value.
    return (0, index, "") if isinstance(index, int) else (1, 0, repr(index))


def line_shape(line: str) -> str:
    return re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", line)


def _checkpoint_problems(path: Path) -> list[str]:
    import torch

    if not path.exists():
        return [f"{path.name} was not written"]
    classes: set[str] = set()
    state = torch.load(path, map_location="cpu", weights_only=False,
                       pickle_module=_any_class_pickle(classes))
    if "torch.nn.parallel.distributed.DistributedDataParallel" in classes:
        return [f"{path.name} holds a pickled DistributedDataParallel wrapper"]
    keys = _state_dict_keys(state)
    wrapped = [key for key in keys if key.startswith("module.")]
    if wrapped:
        return [f"{path.name} holds DDP-wrapped keys such as {wrapped[0]!r}"]
    # `"arch": type(self.model).__name__` read off the wrapper instead of the model.
    if "DistributedDataParallel" in _strings(state):
        return [f"{path.name} names the DistributedDataParallel wrapper where the model's class belongs"]
    return []


def _strings(state) -> set[str]:
    """The strings among a checkpoint's values, at any depth of dicts, lists and tuples."""
    if isinstance(state, str):
        return {state}
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else ()
    return {text for value in values for text in _strings(value)}


class _Stub:
    """Stands in for a class of the script's own (a whole pickled model) that this process
    cannot import: the checkpoint is still read, to see what it holds."""

    def __setstate__(self, state) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)


def _any_class_pickle(classes: set[str]) -> types.ModuleType:
    """A pickle module for torch.load that records every class the file names."""
    module = types.ModuleType("pickle")
    module.__dict__.update(pickle.__dict__)

    class Unpickler(pickle.Unpickler):
        def find_class(self, module_name: str, name: str):
            classes.add(f"{module_name}.{name}")
            if name == "DistributedDataParallel":
                return _Stub  # its own unpickling needs a process group
            try:
                return super().find_class(module_name, name)
            except (AttributeError, ImportError):
                return type(name, (_Stub,), {})

    module.Unpickler = Unpickler  # type: ignore[attr-defined]
    return module


def problems_full_checkpoint(original: Path, distributed: Path) -> list[str]:
    """FSDP2: the checkpoint written under torchrun is a full state dict, as the original's is:
    the same model keys, every tensor plain (no DTensor shard) and of the same shape, so that
    it loads into the single-process model unchanged. Optimizer state (a dict of "state" and
    "param_groups") is keyed by parameter name under FSDP2 (get_optimizer_state_dict), by
    index in the original: there the tensors must hold as many numbers in all."""
    import torch

    if not distributed.exists():
        return [f"{distributed.name} was not written under torchrun"]
    expected, expected_optimizer = _tensors(torch.load(original, map_location="cpu", weights_only=False))
    written, written_optimizer = _tensors(torch.load(distributed, map_location="cpu", weights_only=False))
    if list(written) != list(expected):
        return [f"{distributed.name}: keys differ from the original's: {sorted(set(written) ^ set(expected))[:5]}"]
    problems = [f"{distributed.name}: {key} is a {type(value).__name__} of shape {tuple(value.shape)}, the "
                f"original's a tensor of shape {tuple(expected[key].shape)}"
                for key, value in written.items()
                if type(value) is not torch.Tensor or value.shape != expected[key].shape]
    shards = [value for value in written_optimizer if type(value) is not torch.Tensor]
    if shards:
        problems.append(f"{distributed.name}: optimizer state holds a {type(shards[0]).__name__}")
    sizes = (sum(value.numel() for value in written_optimizer), sum(value.numel() for value in expected_optimizer))
    if sizes[0] != sizes[1]:
        problems.append(f"{distributed.name}: optimizer state holds {sizes[0]} numbers, the original's {sizes[1]}")
    return problems


def problems_dcp_checkpoint(original: Path, distributed: Path, world_size: int = 2) -> list[str]:
    """FSDP2 with --checkpoint dcp: under torchrun the script's checkpoint path is a
    Distributed Checkpoint folder that every rank wrote its shards into, and it holds the
    original file's model tensors by the same names and shapes (DCP flattens the saved dict:
    `model.layers.0.weight` for checkpoint["model"]["layers.0.weight"]), and the same other
    values (`epoch`). Reading its metadata needs neither numpy nor a process group."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not (distributed / ".metadata").is_file():
        return [f"{distributed.name} is no Distributed Checkpoint folder (no .metadata)"]
    writers = sorted(path.name.split("_")[2] for path in distributed.glob("__*_*.distcp"))
    problems = [] if len(set(writers)) == world_size else [
        f"{distributed.name}: shard files from {len(set(writers))} of {world_size} ranks: {writers}"]
    stored = FileSystemReader(str(distributed)).read_metadata().state_dict_metadata
    expected, _ = _tensors(torch.load(original, map_location="cpu", weights_only=False))
    saved = {key: tuple(entry.size) for key, entry in stored.items()
             if isinstance(entry, TensorStorageMetadata) and key in expected}
    if set(saved) != set(expected):
        problems.append(f"{distributed.name}: model tensors differ from the original's: "
                        f"{sorted(set(saved) ^ set(expected))[:5]}")
    problems.extend(f"{distributed.name}: {key} holds shape {shape}, the original's {tuple(expected[key].shape)}"
                    for key, shape in saved.items() if shape != tuple(expected[key].shape))
    return problems


def _tensors(state, prefix: str = "") -> tuple[dict, list]:
    """Every tensor in a (nested) checkpoint by its dotted path of keys, and apart from
    them the tensors of optimizer state dicts."""
    found: dict = {}
    optimizer: list = []
    if isinstance(state, dict) and {"state", "param_groups"} <= set(state):
        return {}, [tensor for tensors in [_tensors(state["state"])] for tensor in tensors[0].values()]
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, (dict, list, tuple)):
            nested, nested_optimizer = _tensors(value, path + ".")
            found.update(nested)
            optimizer.extend(nested_optimizer)
        elif hasattr(value, "shape"):
            found[path] = value
    return found, optimizer


def _state_dict_keys(state) -> list[str]:
    if not isinstance(state, dict):
        return []
    keys = []
    for key, value in state.items():
        if isinstance(value, dict):
            keys.extend(_state_dict_keys(value))
        elif isinstance(key, str):
            keys.append(key)
    return keys
