"""Run every runnable fixture on a CUDA machine: the original with `python`, ddpify's output
under `torchrun --nproc_per_node=N` (NCCL, one process per GPU).

On the CPU machines where the tests run, ddpify's output takes its Gloo branch; the branch a
GPU user runs (NCCL, `torch.cuda.set_device`, `device_ids=[local_rank]`, tensors moved to
`cuda:LOCAL_RANK`) is only read, never run. This script runs it, for every fixture with a
run.json (single-file and project fixtures alike), when a session is lent a GPU:

    python tests/nccl_runs.py --out results.json [--jobs 12] [--nproc 1] [--deadline 420]

It needs only the standard library, torch and pytest (no ddpify: the outputs are the fixtures'
expected files), so it runs under the GPU machine's own Python. For each fixture it records
the return codes, the tails of stderr, the warnings torch printed, the files run.json expects,
and what tests/nccl_site/sitecustomize.py saw: where each DDP wrap was built and on which
devices its module's parameters were, moves of a wrapped model, and the devices of the
parameters each optimizer's first step updates. A fixture is a finding when the output fails
(and whether the original fails too), when a wrap saw CPU parameters in a group with no CPU
backend, when a wrapped model was moved, or when the original trained on the GPU and the
output on the CPU.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from script_runs import copy_with_modules

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SITE = Path(__file__).resolve().parent / "nccl_site"
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "GROUP_RANK", "TORCHELASTIC_RUN_ID")
WARNING = re.compile(r"Warning|WARN|warn\(")


def runnable_fixtures() -> list[dict]:
    """One entry per run: single-file fixtures (fixtures/<family>/<idiom>/run.json) and each
    run of a project fixture (fixtures/projects/<idiom>/run.json, one run or a list).
    `gpu_run.json`, of the same form, marks a fixture whose original needs CUDA (`device = 0`):
    it runs here only, since the CPU tests run the original too."""
    found = []
    specs = sorted([*FIXTURES.glob("*/*/run.json"), *FIXTURES.glob("*/*/gpu_run.json")])
    for spec_path in specs:
        directory = spec_path.parent
        spec = json.loads(spec_path.read_text())
        if directory.parent.name == "projects":
            for index, run in enumerate(spec if isinstance(spec, list) else [spec]):
                found.append({"name": f"projects/{directory.name}#{index}", "directory": directory,
                              "project": True, "entry": run.get("entry", "train.py"), **_common(run)})
        else:
            found.append({"name": f"{directory.parent.name}/{directory.name}", "directory": directory,
                          "project": False, "entry": None, **_common(spec)})
    return found


def _common(spec: dict) -> dict:
    return {"args": [str(a) for a in spec.get("args", [])], "files": spec.get("files", []),
            "env": spec.get("env", {}), "needs": spec.get("needs", [])}


def _lay_out(fixture: dict, side: str, workdir: Path) -> str:
    """Copy the original ('input') or ddpify's output ('expected') into workdir, with the
    fixture's own modules and packages as the CPU tests copy them; the script to run."""
    directory = fixture["directory"]
    if fixture["project"]:
        shutil.copytree(directory / side, workdir, ignore=shutil.ignore_patterns("__pycache__"))
        return fixture["entry"]
    copy_with_modules(directory / f"{side}.py", workdir)
    return f"{side}.py"


def _run(command: list[str], workdir: Path, env: dict, timeout: int) -> dict:
    log = workdir / "placement.jsonl"
    env = {**env, "DDPIFY_NCCL_LOG": str(log)}
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode = "timeout"
        stdout, stderr = _text(expired.stdout), _text(expired.stderr)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    warnings = sorted({line.strip()[:300] for line in stderr.splitlines() if WARNING.search(line)})
    return {"rc": returncode, "seconds": round(time.monotonic() - started, 1), "stdout": stdout[-1500:],
            "stderr_tail": "\n".join(stderr.splitlines()[-25:]), "warnings": warnings, "events": events}


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def _environment(fixture: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    path = [str(SITE)] + [part for part in base.get("PYTHONPATH", "").split(os.pathsep) if part]
    base.update({"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                 "PYTHONPATH": os.pathsep.join(path)})
    base.update(fixture["env"])
    return base


def _workdir(scratch: Path, fixture: dict, side: str) -> Path:
    return scratch / fixture["name"].replace("/", "__").replace("#", "_") / side


def run_output(fixture: dict, scratch: Path, nproc: int, timeout: int) -> dict:
    """ddpify's output under torchrun. A world of one is launched as torchrun would launch it
    (its variables set, a free port), without the launcher's own process: on a machine where
    importing torch takes seconds, that halves the cost of a run."""
    missing = [module for module in fixture["needs"] if not _importable(module)]
    if missing:
        return {"skipped": f"needs {missing}"}
    workdir = _workdir(scratch, fixture, "torchrun")
    script = _lay_out(fixture, "expected", workdir)
    env = _environment(fixture)
    if nproc == 1:
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "TORCHELASTIC_RUN_ID": "nccl-check"})
        command = [sys.executable, script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script]
    run = _run([*command, *fixture["args"]], workdir, env, timeout)
    run["missing_files"] = [name for name in fixture["files"] if not (workdir / name).exists()]
    shutil.rmtree(workdir, ignore_errors=True)
    return run


def run_original(fixture: dict, scratch: Path, timeout: int) -> dict:
    workdir = _workdir(scratch, fixture, "original")
    script = _lay_out(fixture, "input", workdir)
    run = _run([sys.executable, script, *fixture["args"]], workdir, _environment(fixture), timeout)
    shutil.rmtree(workdir, ignore_errors=True)
    return run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _importable(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def findings(original: dict, output: dict) -> list[str]:
    """What a reviewer must look at: see the module docstring. `original` may be {} (not run)."""
    found = []
    if output["rc"] != 0:
        found.append("output fails" + (" (original fails too)" if original.get("rc", 0) != 0 else ""))
    if output["missing_files"] and output["rc"] == 0:
        found.append(f"files not written: {output['missing_files']}")
    for event in output["events"]:
        if event["kind"] == "wrap" and "cpu" in event["devices"] and "gloo" not in str(event.get("backend")):
            found.append(f"wrap at {event['where']} of a module with parameters on {event['devices']}")
        if event["kind"] == "moved after wrap":
            found.append(f"{event['method']}() at {event['where']} on a model wrapped at {event['wrapped_at']}")
    trained_on, trains_on = _trained_on(original), _trained_on(output)
    if any(d.startswith("cuda") for d in trained_on) and trains_on and not any(d.startswith("cuda") for d in trains_on):
        found.append(f"original trained on {sorted(trained_on)}, output on {sorted(trains_on)}")
    return found


def _trained_on(run: dict) -> set[str]:
    """The devices of the parameters the run's optimizers updated in their first steps."""
    return {device for event in run.get("events", []) if event["kind"] == "step" for device in event["devices"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per run")
    parser.add_argument("--deadline", type=int, default=0, help="stop starting runs after this many seconds")
    parser.add_argument("--only", default="", help="comma-separated substrings of fixture names")
    args = parser.parse_args()
    fixtures = runnable_fixtures()
    if args.only:
        fixtures = [f for f in fixtures if any(part in f["name"] for part in args.only.split(","))]
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="ddpify-nccl-"))
    results = {fixture["name"]: {"name": fixture["name"]} for fixture in fixtures}

    def late() -> bool:
        return bool(args.deadline) and time.monotonic() - started > args.deadline

    def output(fixture: dict) -> None:
        results[fixture["name"]]["torchrun"] = {"skipped": "deadline"} if late() else \
            run_output(fixture, scratch, args.nproc, args.timeout)

    def original(fixture: dict) -> None:
        results[fixture["name"]]["original"] = {"skipped": "deadline"} if late() else \
            run_original(fixture, scratch, args.timeout)

    def save() -> None:
        for result in results.values():
            if "rc" in result.get("torchrun", {}):
                result["findings"] = findings(result.get("original", {}), result["torchrun"])
        Path(args.out).write_text(json.dumps(sorted(results.values(), key=lambda r: r["name"]), indent=1))

    # Every output first, then the originals while time is left: an original explains an
    # output's failure (it fails too) and tells which device it trained on.
    jobs = [(output, fixture) for fixture in fixtures] + [(original, fixture) for fixture in fixtures]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for count, future in enumerate(as_completed([pool.submit(job, fixture) for job, fixture in jobs]), 1):
            future.result()
            if count % 20 == 0:
                save()
                print(f"{count}/{len(jobs)} runs, {time.monotonic() - started:.0f} s", flush=True)
    save()
    ran = [r for r in results.values() if "rc" in r.get("torchrun", {})]
    for result in ran:
        if result["findings"]:
            print(f"FIND {result['name']}: {result['findings']}")
    print(f"{len(ran)} outputs run, {sum(1 for r in ran if r['findings'])} with findings, "
          f"{sum(1 for r in results.values() if 'rc' in r.get('original', {}))} originals run, "
          f"{time.monotonic() - started:.0f} s")
    return 0

if __name__ == "__main__":
    sys.exit(main())
