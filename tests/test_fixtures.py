"""The fixtures are the spec: one generic test walks fixtures/<family>/<idiom>/ (DESIGN.md §7)."""
import re
from collections import Counter

import pytest
from fixture_cases import FIXTURES, all_cases, format_diagnostics, slow_unless_sampled
from script_runs import (
    checks_one_writer,
    evaluation_log,
    problems_dcp_checkpoint,
    problems_distributed,
    problems_evaluation_fetches,
    problems_evaluation_lines,
    problems_full_checkpoint,
    problems_one_writer,
    problems_single_process,
    problems_training_fetches,
    run_three_ways,
    writes_env,
)

CASES = all_cases()
RUNNABLE = [case for case in CASES if case.run_spec is not None]


def params(cases):
    """Each case, marked with its strategy when that is not DDP, so that `-k fsdp2` (or
    `-m fsdp2`) picks the FSDP2 fixtures."""
    return [pytest.param(case, marks=[pytest.mark.fsdp2] if case.options.fsdp2 else [], id=case.name)
            for case in cases]


# The fast tier migrates each fixture's input; migrating its expected output too doubles that:
# one fixture in FAST_SAMPLE there, the rest in the slow tier.
def sampled(cases):
    return [pytest.param(*param.values, marks=[*param.marks, *slow_unless_sampled(index)], id=param.id)
            for index, param in enumerate(params(cases))]


def test_every_fixture_sits_in_a_family_under_a_name_of_its_own():
    """A fixture left at fixtures/<idiom>/ would never be run; a name used twice would make
    the ids and `regenerate_fixtures.py NAME` ambiguous."""
    assert len(CASES) > 90
    assert sorted(str(path.parent.relative_to(FIXTURES)) for path in FIXTURES.glob("*/input.py")) == []
    assert sorted(path for path in FIXTURES.glob("*/*/*/input.py")) == []
    assert [name for name, count in Counter(case.name for case in CASES).items() if count > 1] == []


@pytest.mark.parametrize("case", params(CASES[:1]))
def test_a_fixtures_checks_are_grouped_on_one_worker(case, request):
    """Each fixture is migrated once per worker only if xdist keeps its checks together
    (tests/conftest.py); pytest 9.2 silently undid that, and the fast tier ran each
    migration twice."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not distributed with --dist loadgroup")
    assert request.node.nodeid.endswith(f"@case:{case.name}")


@pytest.mark.parametrize("case", params(CASES))
def test_output_matches_expected(case):
    assert case.migrate().code == case.expected.read_text()


@pytest.mark.parametrize("case", params(CASES))
def test_diagnostics_match_expected(case):
    assert format_diagnostics(case.migrate().diagnostics) == case.expected_diagnostics.read_text()


@pytest.mark.parametrize("case", params(CASES))
def test_expected_compiles(case):
    compile(case.expected.read_text(), str(case.expected), "exec")


@pytest.mark.parametrize("case", sampled(CASES))
def test_migrating_expected_changes_nothing(case):
    expected = case.expected.read_text()
    assert case.migrate(expected).code == expected


# torch does not install numpy, and these turn their tensors back into objects with it
# (`broadcast_from_rank0=` of the state-dict API goes through broadcast_object_list; dcp.save
# and dcp.load agree on their plan through gather_object and scatter_object_list).
NEEDS_NUMPY = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
               "broadcast_from_rank0=", "dcp.save", "dcp.load")


@pytest.mark.parametrize("case", params(CASES))
def test_emitted_code_needs_no_numpy(case):
    """Unless ddpify says so (DDP930, --checkpoint dcp): then the numpy calls are DCP's."""
    def calls(text):
        pattern = r"\b({})[(=]".format("|".join(re.escape(name.rstrip("=")) for name in NEEDS_NUMPY))
        return set(re.findall(pattern, text))

    added = calls(case.expected.read_text()) - calls(case.input.read_text())
    if "DDP930" in case.expected_diagnostics.read_text():
        assert added and added <= {"dcp.save", "dcp.load"}
    else:
        assert added == set()


def joins_without_a_backend(text: str) -> int:
    """How many `init_process_group()` calls name no backend. With none named, torch 2.6+
    joins only the accelerator's (NCCL on a GPU machine), so a model the script keeps on the
    CPU fails its DDP wrap there ("No backend type associated with device type cpu"), which no
    CPU run shows (tests/nccl_runs.py found it on a GPU)."""
    return len(re.findall(r"\binit_process_group\(\s*\)", text))


def test_the_no_backend_check_catches_a_bare_join():
    assert joins_without_a_backend("if distributed:\n    dist.init_process_group()\n") == 1
    assert joins_without_a_backend('dist.init_process_group("cpu:gloo,cuda:nccl")\n') == 0


def test_emitted_joins_name_their_backends():
    """Every fixture, single-file and project: ddpify adds no join that names no backend."""
    offenders = []
    for output in sorted(FIXTURES.rglob("*.py")):
        parts = output.relative_to(FIXTURES).parts
        if output.name == "expected.py":
            original = output.with_name("input.py")
        elif parts[0] == "projects" and parts[2] == "expected":
            original = FIXTURES.joinpath("projects", parts[1], "input", *parts[3:])
        else:
            continue
        if joins_without_a_backend(output.read_text()) > joins_without_a_backend(original.read_text()):
            offenders.append("/".join(parts))
    assert offenders == []


@pytest.mark.parametrize("case", params(RUNNABLE))
def test_runnable_fixtures_need_no_numpy(case):
    """The fresh-clone CI installs torch without numpy: a fixture that imports it cannot run
    there (its original fails before anything is compared)."""
    assert not re.search(r"^\s*(import numpy|from numpy)", case.input.read_text(), re.MULTILINE)


def test_each_opt_out_of_the_one_writer_check_gives_its_reason():
    """The slow runs check that no two ranks write one file unless run.json says why not."""
    for case in RUNNABLE:
        checks_one_writer(case.run_spec)


@pytest.mark.slow
@pytest.mark.parametrize("case", params(RUNNABLE))
def test_migrated_script_runs(case, tmp_path):
    spec = case.run_spec
    if "numpy" in spec.get("needs", ()):
        pytest.importorskip("numpy", reason="Distributed Checkpoints need numpy under torchrun (DDP930)")
    for module in set(spec.get("needs", ())) - {"numpy"}:  # the script's own import (Pillow's PIL)
        pytest.importorskip(module, reason=f"the fixture's script imports {module}, which the tests do not install")
    args = spec.get("args", [])
    evaluation = spec.get("evaluation")

    # "evaluation" runs all three under the shim: frozen weights and a fetch log per run.
    # "training_fetches": the torchrun run logs its fetches too, and each training pass must be
    # this rank's share, changing from epoch to epoch (a loader class that shards itself).
    logged = ("original", "single", "torchrun") if evaluation else (
        ("torchrun",) if spec.get("training_fetches") else ())
    # Every run logs the files it writes, and no two ranks may write one file, unless run.json
    # says why not ("one_writer": "reason").
    one_writer = checks_one_writer(spec)
    extra_env = {**spec.get("env", {}), **(writes_env() if one_writer else {})}
    original, single, distributed = run_three_ways(case.input, case.expected, tmp_path, args, logged,
                                                   extra_env=extra_env or None)
    assert problems_single_process(original, single) == []
    assert problems_distributed(original, distributed, spec.get("files", [])) == []
    if one_writer:
        assert problems_one_writer(distributed.workdir) == []
    if case.options.fsdp2:
        # FSDP2 on CPU with Gloo works in torch 2.13 (fully_shard's all-gather and
        # reduce-scatter run on Gloo; init_process_group("gloo"), no extra options): each
        # checkpoint is the full state dict, the original's keys and shapes, not shards.
        assert [problem for name in spec.get("files", []) for problem in problems_full_checkpoint(
            original.workdir / name, distributed.workdir / name)] == []
        # --checkpoint dcp: the path the original saved to is a folder of every rank's shards.
        assert [problem for name in spec.get("dcp", []) for problem in problems_dcp_checkpoint(
            original.workdir / name, distributed.workdir / name)] == []
    if spec.get("training_fetches"):
        assert problems_training_fetches(evaluation_log(distributed.workdir), 2) == []
    # "evaluation_capped": the evaluation stops after its first batches (`zip(range(k), loader)`,
    # `if args.dry_run: break`), so no pass covers the set; the printed figures are the check.
    if evaluation and not spec.get("evaluation_capped"):
        assert problems_evaluation_fetches(evaluation_log(original.workdir), 1) == []
        # "evaluation_whole": each rank evaluates the whole set (fewer batches than ranks, or
        # FSDP2, where evaluation stays whole).
        copies = 2 if spec.get("evaluation_whole") else 1
        assert problems_evaluation_fetches(evaluation_log(distributed.workdir), 2, copies) == []
    if evaluation:
        assert problems_evaluation_lines(original, distributed, evaluation) == []
