"""Sharded evaluation on the real-world suite: at the same weights, do two ranks print the
evaluation lines one process prints, and does each evaluation pass fetch every sample once?

    python benchmarks/realworld_evaluation.py --realworld ../shared/realworld [--cases a,b]

The suite (not part of this project: third-party scripts with their own harness) migrates
and runs each case with synthetic data. This script reuses its harness to run the original
under `python` and the migration under `torchrun --nproc_per_node=2`, both with the fixture
runs' evaluation shim (tests/eval_site: parameters frozen at their seeded values, dataset
fetches logged), and applies the fixture checks of tests/script_runs.py to them.
"""
import argparse
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL_SITE = ROOT / "tests" / "eval_site" / "sitecustomize.py"
sys.path.insert(0, str(ROOT / "tests"))

from script_runs import (  # noqa: E402
    Run,
    evaluation_passes,
    problems_evaluation_fetches,
    problems_evaluation_lines,
    read_fetch_log,
)

# The lines each case prints about its evaluation (cases without an evaluation loop are
# not listed).
EVALUATION_LINES = {
    "ex_mnist": r"^Test set:",
    "ex_mnist_rnn": r"^Test set:",
    "ex_siamese_network": r"^Test set:",
    "ex_super_resolution": r"Avg\. PSNR",
    "ex_vae": r"Test set loss",
    "tut_quickstart": r"Accuracy:",
}
# At the suite's sizes most evaluation sets are one batch (64 samples, --test-batch-size 64),
# which ddpify leaves whole on every rank (fewer batches than ranks). --sharded-sizes gives
# each case an evaluation set of several batches, so that the sharded path runs.
SHARDED_SIZES = {
    "ex_mnist": {"env": {"RW_N_TEST": 256}},
    "ex_mnist_rnn": {"env": {"RW_N_TEST": 256}},
    "ex_siamese_network": {"env": {"RW_N_TEST": 256}},
    "ex_super_resolution": {"args": {"--testBatchSize": "1"}},
    "ex_vae": {"env": {"RW_N_TEST": 256}},
    "tut_quickstart": {"env": {"RW_N_TEST": 256}},
}
# Evaluations that draw random numbers (the VAE samples its latent code, the siamese test
# set draws random pairs in __getitem__): each rank draws its own, so only the fetches are
# compared.
STOCHASTIC = {"ex_vae": "the model samples in eval mode", "ex_siamese_network": "the dataset draws random pairs"}
# Both shims load at start-up: the suite's (synthetic data, event log) and ours.
COMBINED_SITE = """\
import os
for _path in os.environ["DDPIFY_SITES"].split(os.pathsep):
    exec(compile(open(_path).read(), _path, "exec"), {"__name__": "sitecustomize", "__file__": _path})
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--realworld", default=str(ROOT.parent / "shared" / "realworld"))
    parser.add_argument("--cases", default=",".join(EVALUATION_LINES))
    parser.add_argument("--ddpify", default=f"{sys.executable} -m ddpify")
    parser.add_argument("--sharded-sizes", action="store_true",
                        help="evaluation sets of several batches (see SHARDED_SIZES)")
    args = parser.parse_args()
    harness = _load_harness(Path(args.realworld))
    work_root = Path(tempfile.mkdtemp(prefix="ddpify-rw-eval-"))
    site = work_root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(COMBINED_SITE)
    _add_shim(harness, site, Path(args.realworld) / "sitecustomize.py")
    harness.Work.root = work_root
    failures = 0
    wanted = [name for name in args.cases.split(",") if name]
    for name, case_dir, case in harness.load_cases(Path(args.realworld) / "cases", wanted):
        if args.sharded_sizes:
            case = _resized(case, SHARDED_SIZES.get(name, {}))
        problems = _check_case(harness, name, case_dir, case, shlex.split(args.ddpify), work_root)
        failures += bool(problems)
        note = f" (lines not compared: {STOCHASTIC[name]})" if name in STOCHASTIC else ""
        print(f"{name}: {'yes' if not problems else 'no'}{note}")
        for problem in problems:
            print("    " + problem.replace("\n", "\n    "))
    shutil.rmtree(work_root, ignore_errors=True)
    return 1 if failures else 0


def _load_harness(folder: Path):
    spec = importlib.util.spec_from_file_location("realworld_run", folder / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _add_shim(harness, site: Path, harness_site: Path) -> None:
    """Every run the harness starts also loads the evaluation shim, logging to its run folder."""
    original = harness.harness_env

    def harness_env(env0, run_dir, inner, case, accel=False, extra=None):
        env = original(env0, run_dir, inner, case, accel, extra)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
        env["DDPIFY_SITES"] = os.pathsep.join([str(harness_site), str(EVAL_SITE)])
        (run_dir / "_evallog").mkdir(exist_ok=True)
        env["DDPIFY_EVAL_CHECK"] = str(run_dir / "_evallog")
        return env

    harness.harness_env = harness_env


def _check_case(harness, name, case_dir, case, ddpify, work_root):
    work = work_root / name
    work.mkdir()
    env = harness.base_env()
    migration = harness.migrate(case, case_dir, work, ddpify, env)
    if not migration["migrated_entry"]:
        return [f"not migrated: {migration['stderr'][-300:]}"]
    timeout = case.get("timeout", 150)
    original = harness.run_script(case, work, "orig", work / "orig", case["entry"], env, timeout)
    distributed = harness.run_script(case, work, "tr", work / "mig", migration["migrated_entry"], env,
                                     timeout, torchrun=True)
    problems = []
    for label, run in (("original", original), ("torchrun", distributed)):
        if run["rc"] != 0:
            problems.append(f"{label} failed: {harness.last_error_line(run['stderr'])}")
    if problems:
        return problems
    pattern = EVALUATION_LINES[name]
    rank0 = distributed["ranks"].get("0", {}).get("stdout", distributed["stdout"])
    if name not in STOCHASTIC:
        problems += problems_evaluation_lines(_as_run(original["stdout"]), _as_run(rank0), pattern)
    problems += problems_evaluation_fetches(Path(original["run_dir"]) / "_evallog", 1)
    log = Path(distributed["run_dir"]) / "_evallog"
    if _whole_on_every_rank(log, 2):
        print(f"{name}: every evaluation pass was whole on both ranks (fewer batches than ranks)")
    else:
        problems += problems_evaluation_fetches(log, 2)
    return problems


def _whole_on_every_rank(log: Path, world_size: int) -> bool:
    """ddpify leaves a set of fewer batches than ranks whole: each index once per rank."""
    passes = evaluation_passes(read_fetch_log(log))
    return bool(passes) and all(
        length is not None and sorted(indices) == sorted(list(range(length)) * world_size)
        for (_, length, _), indices in passes.items())


def _resized(case: dict, change: dict) -> dict:
    case = dict(case, env={**case.get("env", {}), **change.get("env", {})})
    arguments = [str(a) for a in case.get("args", [])]
    for flag, value in change.get("args", {}).items():
        arguments[arguments.index(flag) + 1] = value
    return dict(case, args=arguments)


def _as_run(stdout: str) -> Run:
    return Run(0, stdout, "", Path("."))


if __name__ == "__main__":
    sys.exit(main())
