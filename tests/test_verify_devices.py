"""Which devices verify's runs get (GPU machines are not at hand here: the choice is tested,
the GPU runs themselves are benchmarks/bench_verify_gpu.py's job)."""
import sys
from pathlib import Path

import pytest

from ddpify.verify.session import DeviceError, choose_devices

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_verify_gpu  # noqa: E402


def test_no_gpu_means_two_ranks_of_gloo_on_the_cpu():
    plan = choose_devices("auto", [], None)
    assert (plan.nproc, plan.use_gpus, plan.plain_gpus, plan.torchrun_gpus, plan.node_gpus) == (2, False, [], [], None)
    assert plan.note is None


def test_a_gpu_per_rank_means_nccl_one_rank_per_gpu():
    plan = choose_devices("auto", ["0", "1", "2", "3"], None)
    assert (plan.nproc, plan.use_gpus, plan.torchrun_gpus, plan.plain_gpus, plan.node_gpus) == (
        4, True, ["0", "1", "2", "3"], ["0"], ["0", "1"])
    assert choose_devices("auto", ["4", "7"], 2).torchrun_gpus == ["4", "7"]


def test_one_gpu_runs_the_plain_runs_there_and_torchrun_on_the_cpu():
    plan = choose_devices("auto", ["0"], None)
    assert (plan.nproc, plan.use_gpus, plan.plain_gpus, plan.torchrun_gpus) == (2, False, ["0"], [])
    assert "Gloo on the CPU" in plan.note
    assert not choose_devices("auto", ["0", "1"], 3).use_gpus


def test_device_cpu_hides_every_gpu():
    plan = choose_devices("cpu", ["0", "1"], None)
    assert (plan.nproc, plan.use_gpus, plan.plain_gpus, plan.torchrun_gpus, plan.node_gpus) == (2, False, [], [], None)


def test_device_cuda_needs_a_gpu_per_rank():
    with pytest.raises(DeviceError, match="no GPU"):
        choose_devices("cuda", [], None)
    with pytest.raises(DeviceError, match="2 ranks need 2 GPUs"):
        choose_devices("cuda", ["0"], None)
    assert choose_devices("cuda", ["0", "1"], None).use_gpus


def test_the_gpu_benchmark_verifies_each_runnable_fixture_against_its_expected_output(tmp_path):
    cases = bench_verify_gpu.runnable_cases()
    names = [case.name for case in cases]
    assert "guide_image_classifier" in names and "no_training_code" not in names  # no run.json there
    mnist = next(case for case in cases if case.name == "mnist_style_main")
    argv = bench_verify_gpu.verify_argv(mnist, "cuda", str(tmp_path / "r.json"), 60)
    assert argv[argv.index("-o") + 1].endswith("mnist_style_main/expected.py")
    assert argv[argv.index("--device") + 1] == "cuda" and argv[-2:] == ["--", "--save-model"]
    assert argv[argv.index("--nproc") + 1] == "2"
    with pytest.raises(SystemExit, match="not runnable fixtures: nope"):
        bench_verify_gpu.runnable_cases(selected=["guide_image_classifier", "nope"])


def test_the_gpu_check_chooses_nccl_with_a_gpu_per_rank_and_says_what_it_skips():
    assert bench_verify_gpu.choose_mode("auto", ["0", "1", "2", "3"]).device == "cuda"
    one = bench_verify_gpu.choose_mode("auto", ["0"])
    assert one.device == "auto" and not one.skip and "NCCL SKIPPED" in one.title
    assert bench_verify_gpu.choose_mode("cuda", ["0"]).skip
    assert bench_verify_gpu.choose_mode("cpu", ["0", "1"]).device == "cpu"
    pairs = bench_verify_gpu.choose_mode("auto", ["0", "1", "2", "3"])
    assert [bench_verify_gpu.case_gpus(pairs, index) for index in range(3)] == ["0,1", "2,3", "0,1"]


def test_the_gpu_check_without_a_gpu_prints_a_clear_skip_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(bench_verify_gpu, "visible_gpu_ids", lambda: [])
    monkeypatch.setattr(bench_verify_gpu, "run_case", lambda *args: pytest.fail("ran a case"))
    assert bench_verify_gpu.main([]) == 0
    assert capsys.readouterr().out.startswith("ddpify verify, GPU path: SKIP: no GPU visible")


def test_the_gpu_check_prints_one_table():
    mode = bench_verify_gpu.choose_mode("auto", ["0", "1"])
    outcomes = [bench_verify_gpu.Outcome("guide_image_classifier", 0, 41.5, [], "cuda", "nccl"),
                bench_verify_gpu.Outcome("amp_clip_accumulation", 1, 50.0, ["ranks_agree"], "cuda", "nccl")]
    lines = bench_verify_gpu.render(mode, outcomes, 60.0, 4).splitlines()
    assert lines[0] == "ddpify verify, GPU path: 2 GPUs: torchrun with NCCL, one GPU per rank"
    assert lines[1].split() == ["case", "exit", "seconds", "plain", "torchrun", "failed", "checks"]
    assert lines[3].split() == ["amp_clip_accumulation", "1", "50.0", "cuda", "nccl", "ranks_agree"]
    assert lines[-1] == "2 cases, 1 failing, 60s wall with -j 4 (budget 300s)"
    assert set(bench_verify_gpu.GPU_CASES) <= {case.name for case in bench_verify_gpu.runnable_cases()}
