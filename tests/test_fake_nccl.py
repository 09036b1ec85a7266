"""ddpify's output run under torchrun (2 Gloo ranks) with a fake NCCL (tests/fake_nccl_site):
every collective the emitted code makes must be handed tensors on the script's own device
and every torch.load a map_location, as NCCL on a GPU machine needs, where a CPU run under
Gloo alone passes a CPU tensor ("No backend type associated with device type cpu" on the GPU
machine) or a load onto cuda:0 on every rank. (A wrap of a module the run left on the CPU is
logged, not failed: an `if use_cuda:` move is skipped in this run alone.)

The fixtures are chosen for the emitted code they run: the epoch sums (`totals`, DDP402),
the object gather (`every_rank`: evaluation sums, rank 0's values, a machine's folder), the
plateau mean (`mean_over_ranks`), rank 0's stop on the clock (DDP405), the all-gather with
gradients (`gather_with_grad`), resumed checkpoints (map_location), a group joined before
the device is chosen ("cpu:gloo,cuda:nccl"), a project whose helper module loads and sums.

    python -m pytest -q tests/test_fake_nccl.py            # slow: 14 torchrun runs, ~1 min
    python tests/test_fake_nccl.py NAME...                 # any fixtures, by idiom, by hand
    python tests/test_fake_nccl.py --all                   # every runnable fixture (480, ~1 h here)
"""
import json
import os
import sys
from pathlib import Path

import pytest
from fixture_cases import FIXTURES, all_cases
from script_runs import run_torchrun

FAKE_SITE = Path(__file__).resolve().parent / "fake_nccl_site"
LOG_VAR = "DDPIFY_FAKE_NCCL"
LOG = "fake-nccl.jsonl"
DATA = Path(__file__).resolve().parent / "data"

CHOSEN = (
    "epoch_loss_and_accuracy",  # totals on device=device
    "best_model_in_mkdtemp",  # every_rank, chosen_on_this_machine, totals, map_location
    "plateau_scheduler_on_last_batch_loss",  # mean_over_ranks
    "wall_clock_budget_break",  # dist.broadcast(decision, src=0)
    "plateau_and_patience_on_a_whole_validation_in_a_flat_script",  # rank0_value
    "model_built_at_module_level_moved_under_main_guard",  # gather_with_grad
    "checkpoint_loaded_with_map_location_as_second_argument",  # torch.load(path, device)
    "eval_mean_of_batch_losses",  # "cpu:gloo,cuda:nccl" group
    "run_folder_named_from_clock",  # chosen_by_rank_0
    "checkpoint_helper_loads_into_the_model_it_is_handed",  # a helper module's load and sums
)


def fake_nccl_env(workdir: Path) -> dict[str, str]:
    path = [str(FAKE_SITE)] + [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]
    return {LOG_VAR: str(workdir / LOG), "PYTHONPATH": os.pathsep.join(path)}


def fake_nccl_records(workdir: Path) -> list[dict]:
    log = workdir / LOG
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def fake_nccl_findings(records: list[dict], kinds=("host tensor", "load")) -> list[str]:
    """What the fake NCCL raised on, one line each: `where: message` (each rank's once);
    `kinds=("cpu wrap",)`: the wraps of a module the run left on the CPU, which it logs only."""
    return sorted({f"{record['where']}: {record['message']}" for record in records if record["kind"] in kinds})


def groups_joined(records: list[dict]) -> list[str]:
    """The backend each rank's group has on a GPU machine, as the shim read it: `rank backend`."""
    return sorted(f"{record['rank']} {record['message']}" for record in records if record["kind"] == "group")


def run_under_fake_nccl(script: Path, workdir: Path, args=()):
    workdir.mkdir(parents=True, exist_ok=True)
    run = run_torchrun(script, workdir, args, env=fake_nccl_env(workdir))
    records = fake_nccl_records(workdir)
    return run, fake_nccl_findings(records), groups_joined(records), fake_nccl_findings(records, ("cpu wrap",))


def _runs(name: str) -> list[tuple[Path, list[str]]]:
    """The scripts a fixture runs and their arguments: its expected.py, or each run of a
    project fixture (fixtures/projects/NAME: the entry of expected/, run.json's args)."""
    project = FIXTURES / "projects" / name
    if project.is_dir():
        spec = json.loads((project / "run.json").read_text())
        return [(project / "expected" / run.get("entry", "train.py"), run.get("args", []))
                for run in (spec if isinstance(spec, list) else [spec])]
    [case] = [case for case in all_cases() if case.name == name]
    return [(case.expected, (case.run_spec or {}).get("args", []))]


@pytest.mark.slow
@pytest.mark.parametrize("name", CHOSEN)
def test_emitted_collectives_and_loads_pass_a_fake_nccl(name, tmp_path):
    for index, (script, args) in enumerate(_runs(name)):
        run, findings, groups, _ = run_under_fake_nccl(script, tmp_path / f"run{index}", args)
        assert findings == []
        assert run.returncode == 0, run.stderr[-3000:]
        # The shim ran in both ranks and read a group with NCCL in it (GPU tensors go through NCCL).
        assert len(groups) == 2 and all("nccl" in group for group in groups), groups


@pytest.mark.slow
def test_a_sum_on_the_cpu_and_a_load_without_map_location_fail_the_fake_nccl_and_a_cpu_wrap_is_logged(tmp_path):
    """The check can fail: the epoch sums of epoch_loss_and_accuracy built without
    `device=device` (what the emitter writes for a device it cannot name), a script that
    loads a checkpoint without map_location; the wrap of a model never moved and batches
    never moved are logged (a lead for an audit, not a verdict)."""
    [(correct, _)] = _runs("epoch_loss_and_accuracy")
    broken = tmp_path / "sums_on_the_cpu.py"
    broken.write_text(correct.read_text().replace("dtype=torch.float64, device=device", "dtype=torch.float64"))
    run, findings, _, _ = run_under_fake_nccl(broken, tmp_path / "sums")
    assert run.returncode != 0
    assert findings and all("dist.all_reduce handed a CPU tensor" in finding for finding in findings), findings
    run, findings, _, _ = run_under_fake_nccl(DATA / "fake_nccl" / "load_without_map_location.py", tmp_path / "load")
    assert run.returncode != 0
    assert any("torch.load without map_location" in finding for finding in findings), findings
    unmoved = tmp_path / "wrap_on_the_cpu.py"
    unmoved.write_text(correct.read_text().replace("nn.Linear(16, 2)).to(device)", "nn.Linear(16, 2))"))
    run, _, _, wraps = run_under_fake_nccl(unmoved, tmp_path / "wrap")
    assert any("wraps a module with parameters on the CPU" in wrap for wrap in wraps), wraps
    run, _, _, wraps = run_under_fake_nccl(correct, tmp_path / "moved")
    assert run.returncode == 0 and wraps == []
    assert fake_nccl_findings(fake_nccl_records(tmp_path / "moved"), ("mixed",)) == []
    # Batches left on the CPU meet the model on the device: logged as "mixed", as a lead.
    unmoved_batches = tmp_path / "batches_on_the_cpu.py"
    unmoved_batches.write_text(correct.read_text().replace(
        "inputs, targets = inputs.to(device), targets.to(device)", "pass"))
    run_under_fake_nccl(unmoved_batches, tmp_path / "batches")
    mixed = fake_nccl_findings(fake_nccl_records(tmp_path / "batches"), ("mixed",))
    assert any("mixes a CPU tensor with tensors on the device" in line for line in mixed), mixed


def every_runnable_fixture() -> list[str]:
    """Every fixture with a run.json whose output joins a group: single-file and project ones."""
    single = [case.name for case in all_cases() if case.run_spec is not None
              and "WORLD_SIZE" in case.expected.read_text()]
    return single + sorted(path.parent.name for path in (FIXTURES / "projects").glob("*/run.json"))


if __name__ == "__main__":  # an audit by hand: python tests/test_fake_nccl.py NAME... (or --all)
    import tempfile
    for name in every_runnable_fixture() if sys.argv[1:] == ["--all"] else sys.argv[1:]:
        for script, args in _runs(name):
            with tempfile.TemporaryDirectory() as folder:
                run, findings, groups, wraps = run_under_fake_nccl(script, Path(folder), args)
                tail = "" if run.returncode == 0 else run.stderr.strip().splitlines()[-1:]
                mixed = fake_nccl_findings(fake_nccl_records(Path(folder)), ("mixed",))
                print(json.dumps({"name": name, "entry": script.name, "rc": run.returncode, "groups": groups,
                                  "findings": findings, "cpu_wraps": wraps, "mixed": mixed, "tail": tail}),
                      flush=True)
