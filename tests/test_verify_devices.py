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
    with pytest.raises(SystemExit, match="not runnable fixtures: nope"):
        bench_verify_gpu.runnable_cases(selected=["guide_image_classifier", "nope"])
