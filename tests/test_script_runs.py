"""The checks the fixture runs apply (tests/script_runs.py) must catch broken scripts."""
import json
import socket
import sys
import types
from pathlib import Path

import pytest
from script_runs import (
    IMPORTS_TORCH,
    WRITES_LOG_DIR,
    Run,
    checks_one_writer,
    evaluation_env,
    evaluation_log,
    problems_dcp_checkpoint,
    problems_distributed,
    problems_evaluation_fetches,
    problems_evaluation_lines,
    problems_full_checkpoint,
    problems_one_writer,
    problems_other_ranks_silent,
    problems_single_process,
    problems_training_fetches,
    run_python,
    run_torchrun,
    writes_env,
)

DATA = Path(__file__).resolve().parent / "data"
# Not in data/broken/, which holds guide_after.py variants for `ddpify verify` (test_verify_e2e).
EVAL_DATA = DATA / "eval_check"


def _run(stdout, workdir, returncode=0):
    return Run(returncode, stdout, "", workdir)


def test_single_process_output_must_match_exactly(tmp_path):
    original = _run("epoch 0: loss 2.3000\n", tmp_path)
    assert problems_single_process(original, _run("epoch 0: loss 2.3000\n", tmp_path)) == []
    assert problems_single_process(original, _run("epoch 0: loss 2.2999\n", tmp_path))
    assert problems_single_process(original, _run("", tmp_path, returncode=1))


def test_a_line_printed_by_every_rank_is_caught(tmp_path):
    original = _run("epoch 0: loss 2.3\nepoch 1: loss 2.1\n", tmp_path)
    once = _run("epoch 0: loss 2.4\nepoch 1: loss 2.2\n", tmp_path)
    twice = _run("epoch 0: loss 2.4\nepoch 0: loss 2.5\nepoch 1: loss 2.2\nepoch 1: loss 2.0\n", tmp_path)
    assert problems_distributed(original, once, []) == []
    assert any("printed 4 times under torchrun, 2 in the original" in problem
               for problem in problems_distributed(original, twice, []))


def test_a_line_printed_by_another_rank_is_caught(tmp_path):
    assert problems_other_ranks_silent(Run(0, "epoch 0: loss 2.4\n", "", tmp_path)) == []
    quiet_rank_zero = Run(0, "", "", tmp_path, other_ranks="saved best.pth\n")
    assert problems_other_ranks_silent(quiet_rank_zero) == ["ranks other than 0 printed 1 lines, e.g. 'saved best.pth'"]


@IMPORTS_TORCH
def test_missing_and_wrapped_checkpoints_are_caught(tmp_path):
    import torch

    original = _run("done\n", tmp_path)
    torch.save({"module.weight": torch.zeros(1)}, tmp_path / "wrapped.pth")
    torch.save({"weight": torch.zeros(1)}, tmp_path / "plain.pth")
    assert problems_distributed(original, _run("done\n", tmp_path), ["plain.pth"]) == []
    assert problems_distributed(original, _run("done\n", tmp_path), ["absent.pth"]) == ["absent.pth was not written"]
    assert "module." in problems_distributed(original, _run("done\n", tmp_path), ["wrapped.pth"])[0]
    torch.save({"arch": "DistributedDataParallel", "state_dict": {"weight": torch.zeros(1)}}, tmp_path / "named.pth")
    assert problems_distributed(original, _run("done\n", tmp_path), ["named.pth"]) == [
        "named.pth names the DistributedDataParallel wrapper where the model's class belongs"]



@IMPORTS_TORCH
def test_a_sharded_or_partial_fsdp2_checkpoint_is_caught(tmp_path):
    import torch

    full = {"layers.0.weight": torch.zeros(4, 2), "head.weight": torch.zeros(1, 4)}
    torch.save(full, tmp_path / "original.pt")
    torch.save({"model": full}, tmp_path / "nested.pt")
    torch.save(full, tmp_path / "good.pt")
    # One rank's shard: half of the rows.
    torch.save({"layers.0.weight": torch.zeros(2, 2), "head.weight": torch.zeros(1, 4)}, tmp_path / "shard.pt")
    torch.save({"layers.0.weight": torch.zeros(4, 2)}, tmp_path / "partial.pt")
    assert problems_full_checkpoint(tmp_path / "original.pt", tmp_path / "good.pt") == []
    assert "shape (2, 2)" in problems_full_checkpoint(tmp_path / "original.pt", tmp_path / "shard.pt")[0]
    assert "keys differ" in problems_full_checkpoint(tmp_path / "original.pt", tmp_path / "partial.pt")[0]
    assert "keys differ" in problems_full_checkpoint(tmp_path / "original.pt", tmp_path / "nested.pt")[0]
    assert "not written" in problems_full_checkpoint(tmp_path / "original.pt", tmp_path / "missing.pt")[0]
    # Optimizer state: by index in the original, by parameter name under FSDP2; as many numbers.
    by_index = {"state": {0: {"exp_avg": torch.zeros(4, 2)}}, "param_groups": [{"params": [0]}]}
    by_name = {"state": {"layers.0.weight": {"exp_avg": torch.zeros(4, 2)}}, "param_groups": [{"params": ["w"]}]}
    half = {"state": {"layers.0.weight": {"exp_avg": torch.zeros(2, 2)}}, "param_groups": [{"params": ["w"]}]}
    torch.save({"model": full, "optimizer": by_index}, tmp_path / "original_with_optimizer.pt")
    torch.save({"model": full, "optimizer": by_name}, tmp_path / "by_name.pt")
    torch.save({"model": full, "optimizer": half}, tmp_path / "half.pt")
    assert problems_full_checkpoint(tmp_path / "original_with_optimizer.pt", tmp_path / "by_name.pt") == []
    assert "4 numbers" in problems_full_checkpoint(tmp_path / "original_with_optimizer.pt", tmp_path / "half.pt")[0]


@IMPORTS_TORCH
def test_a_dcp_checkpoint_of_other_tensors_or_fewer_ranks_is_caught(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp

    model = {"layers.0.weight": torch.zeros(4, 2), "head.weight": torch.zeros(1, 4)}
    torch.save({"epoch": 1, "model": model}, tmp_path / "original.pt")
    # As a group of one (no process group): one rank's shard file, and no numpy needed.
    dcp.save({"epoch": 1, "model": model}, checkpoint_id=tmp_path / "good", no_dist=True)
    partial = {"head.weight": torch.zeros(1, 4)}
    half = {**model, "layers.0.weight": torch.zeros(2, 2)}
    dcp.save({"epoch": 1, "model": partial}, checkpoint_id=tmp_path / "partial", no_dist=True)
    dcp.save({"epoch": 1, "model": half}, checkpoint_id=tmp_path / "half", no_dist=True)
    assert problems_dcp_checkpoint(tmp_path / "original.pt", tmp_path / "good", world_size=1) == []
    assert "from 1 of 2 ranks" in problems_dcp_checkpoint(tmp_path / "original.pt", tmp_path / "good")[0]
    assert "tensors differ" in problems_dcp_checkpoint(tmp_path / "original.pt", tmp_path / "partial", 1)[0]
    assert "holds shape (2, 2)" in problems_dcp_checkpoint(tmp_path / "original.pt", tmp_path / "half", 1)[0]
    assert "no .metadata" in problems_dcp_checkpoint(tmp_path / "original.pt", tmp_path / "original.pt", 1)[0]


@IMPORTS_TORCH
def test_a_pickled_ddp_wrapper_is_caught_and_a_whole_model_of_the_scripts_own_class_is_read(
        tmp_path, monkeypatch):
    import torch

    class ScriptModel(torch.nn.Module):
        """A model class the checking process cannot import, as a script's own class would be."""

        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    original = _run("done\n", tmp_path)
    # Pickled as a class of a module that is gone when the checkpoint is read (the script).
    script = types.ModuleType("the_training_script")
    script.ScriptModel = ScriptModel
    monkeypatch.setitem(sys.modules, "the_training_script", script)
    # (Defined here, with torch imported: pickle finds it by this name in that module.)
    ScriptModel.__module__, ScriptModel.__qualname__ = "the_training_script", "ScriptModel"
    model = ScriptModel()
    torch.save({"epoch": 1, "model": model}, tmp_path / "whole.pth")
    # A port of its own: other pytest-xdist workers run torchrun and group tests meanwhile.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        torch.save({"epoch": 1, "model": wrapped}, tmp_path / "wrapper.pth")
    finally:
        torch.distributed.destroy_process_group()
    monkeypatch.delitem(sys.modules, "the_training_script")
    assert problems_distributed(original, _run("done\n", tmp_path), ["whole.pth"]) == []
    assert problems_distributed(original, _run("done\n", tmp_path), ["wrapper.pth"]) == [
        "wrapper.pth holds a pickled DistributedDataParallel wrapper"]

@pytest.mark.slow
def test_a_real_script_that_prints_on_every_rank_fails_the_run_checks(tmp_path):
    original = run_python(DATA / "verify_guide_before.py", tmp_path / "original")
    broken = run_torchrun(DATA / "broken" / "print_every_rank.py", tmp_path / "broken")
    problems = problems_distributed(original, broken, [])
    assert any("times under torchrun" in problem for problem in problems), problems


@pytest.mark.slow
def test_a_file_every_rank_writes_is_caught_and_rank_zeros_alone_passes(tmp_path):
    """The one-writer check: the shim logs each rank's writes (an audit hook, so torch.save's
    own open counts), and a path two ranks wrote is a problem."""
    broken = run_torchrun(DATA / "broken" / "final_save_every_rank.py", tmp_path / "broken", env=writes_env())
    problems = problems_one_writer(broken.workdir)
    assert any("written by ranks ['0', '1']" in problem for problem in problems), problems
    correct = run_torchrun(DATA / "verify_guide_after.py", tmp_path / "correct", env=writes_env())
    assert correct.returncode == 0, correct.stderr
    assert problems_one_writer(correct.workdir) == []


def test_the_one_writer_check_is_on_unless_a_reason_opts_out():
    assert checks_one_writer({}) and checks_one_writer({"one_writer": True})
    assert not checks_one_writer({"one_writer": "each rank writes its own log file"})
    for unexplained in (False, "", None):
        with pytest.raises(ValueError):
            checks_one_writer({"one_writer": unexplained})


def test_the_one_writer_check_passes_a_run_that_wrote_nothing_and_fails_one_never_logged(tmp_path):
    """The shim makes each process's log at start: an empty log is a run that wrote no file;
    no log at all is a run the shim never saw, which must not pass for one that wrote none."""
    assert problems_one_writer(tmp_path) == [f"no write log under {tmp_path}: the one-writer shim did not run"]
    (tmp_path / WRITES_LOG_DIR).mkdir()
    (tmp_path / WRITES_LOG_DIR / "writes-0-11.log").write_text("")
    (tmp_path / WRITES_LOG_DIR / "writes-1-12.log").write_text("")
    assert problems_one_writer(tmp_path) == []


# -- the evaluation check: frozen weights, fetch log (tests/eval_site/sitecustomize.py) -------

EVALUATION = "^Test set:"


def test_evaluation_lines_must_equal_the_originals(tmp_path):
    original = _run("epoch 0: loss 2.3\nTest set: loss 1.2086, accuracy 20/51\n", tmp_path)
    same = _run("epoch 0: loss 2.6\nTest set: loss 1.2086, accuracy 20/51\n", tmp_path)
    share = _run("epoch 0: loss 2.6\nTest set: loss 1.1900, accuracy 11/51\n", tmp_path)
    twice = _run("Test set: loss 1.2086, accuracy 20/51\n" * 2, tmp_path)
    assert problems_evaluation_lines(original, same, EVALUATION) == []
    assert problems_evaluation_lines(original, share, EVALUATION)
    assert "2 printed, 1 expected" in problems_evaluation_lines(original, twice, EVALUATION)[0]
    nothing = _run("epoch 0: loss 2.3\n", tmp_path)
    assert "printed no line matching" in problems_evaluation_lines(nothing, nothing, EVALUATION)[0]


def _fetch_log(log_dir, rank, passes):
    """passes: (pass number, grad, [batches of indices]) for rank's fetch log over 10 samples."""
    log_dir.mkdir(exist_ok=True)
    with open(log_dir / f"fetch-{rank}-{100 + rank}.jsonl", "a") as log:
        for number, grad, batches in passes:
            for batch in batches:
                record = {"rank": rank, "key": ["TensorDataset", 10], "pass": number, "grad": grad, "indices": batch}
                log.write(json.dumps(record) + "\n")


def test_an_evaluation_pass_covering_the_set_once_passes(tmp_path):
    _fetch_log(tmp_path, 0, [(1, True, [[0, 1, 2, 3, 4, 5]]), (2, False, [[0, 1, 2, 3], [8, 9]])])
    _fetch_log(tmp_path, 1, [(1, True, [[5, 6, 7, 8, 9, 0]]), (2, False, [[4, 5, 6, 7]])])
    assert problems_evaluation_fetches(tmp_path, 2) == []  # the padded training pass is no concern


def test_duplicated_and_missed_evaluation_indices_are_caught(tmp_path):
    _fetch_log(tmp_path, 0, [(1, False, [[0, 2, 4, 6, 8]]), (2, False, [[0, 1, 2, 3]])])
    _fetch_log(tmp_path, 1, [(1, False, [[1, 3, 5, 7, 9, 0]]), (2, False, [[4, 5, 6, 7]])])
    assert problems_evaluation_fetches(tmp_path, 2) == [
        "evaluation pass 1 over TensorDataset of 10: 1 indices fetched more than once across ranks, e.g. 0 (2 times)",
        "evaluation pass 2 over TensorDataset of 10: 2 of 10 indices never fetched, e.g. 8",
    ]


def test_a_whole_set_on_every_rank_is_caught_unless_expected(tmp_path):
    _fetch_log(tmp_path, 0, [(1, False, [list(range(10))])])
    _fetch_log(tmp_path, 1, [(1, False, [list(range(10))])])
    assert "10 indices fetched more than once" in problems_evaluation_fetches(tmp_path, 2)[0]
    assert problems_evaluation_fetches(tmp_path, 2, copies=2) == []
    _fetch_log(tmp_path, 1, [(2, False, [list(range(9))])])
    _fetch_log(tmp_path, 0, [(2, False, [list(range(10))])])  # in pass 2 rank 1 misses index 9
    assert problems_evaluation_fetches(tmp_path, 2, copies=2) == [
        "evaluation pass 2 over TensorDataset of 10: 1 indices fetched fewer than 2 times, e.g. 9"]


def test_no_evaluation_pass_and_ranks_outside_the_world_are_caught(tmp_path):
    assert "no evaluation pass" in problems_evaluation_fetches(tmp_path / "absent", 1)[0]
    _fetch_log(tmp_path, 0, [(1, True, [list(range(10))])])
    assert "no evaluation pass" in problems_evaluation_fetches(tmp_path, 1)[0]
    _fetch_log(tmp_path, 1, [(2, False, [list(range(10))])])
    assert problems_evaluation_fetches(tmp_path, 1) == ["a fetch log from rank 1, outside a world of 1"]


def test_a_sharded_training_loader_with_set_epoch_passes(tmp_path):
    _fetch_log(tmp_path, 0, [(1, True, [[3, 8, 1], [6, 0]]), (2, True, [[9, 2, 5], [7, 4]]), (3, False, [[0, 1]])])
    _fetch_log(tmp_path, 1, [(1, True, [[5, 2, 9], [4, 7]]), (2, True, [[0, 6, 1], [8, 3]])])
    assert problems_training_fetches(tmp_path, 2) == []


def test_a_training_loader_left_whole_on_every_rank_is_caught(tmp_path):
    _fetch_log(tmp_path, 0, [(1, True, [[3, 8, 1, 6, 0], [9, 2, 5, 7, 4]])])
    _fetch_log(tmp_path, 1, [(1, True, [[5, 2, 9, 4, 3], [0, 6, 1, 8, 7]])])
    assert problems_training_fetches(tmp_path, 2) == [
        "training pass 1 over TensorDataset of 10: rank 0 fetched 10 samples, more than its share of 5: "
        "the loader is not sharded",
        "training pass 1 over TensorDataset of 10: rank 1 fetched 10 samples, more than its share of 5: "
        "the loader is not sharded",
    ]


def test_a_distributed_sampler_without_set_epoch_is_caught(tmp_path):
    _fetch_log(tmp_path, 0, [(1, True, [[3, 8, 1, 6, 0]]), (2, True, [[3, 8, 1, 6, 0]])])
    _fetch_log(tmp_path, 1, [(1, True, [[5, 2, 9, 4, 7]]), (2, True, [[5, 2, 9, 4, 7]])])
    assert problems_training_fetches(tmp_path, 2) == [
        "2 training passes over TensorDataset of 10: rank 0 fetched the same order in each (set_epoch never called?)",
        "2 training passes over TensorDataset of 10: rank 1 fetched the same order in each (set_epoch never called?)",
    ]
    assert "no training pass" in problems_training_fetches(tmp_path / "absent", 2)[0]


@pytest.mark.slow
def test_the_shim_freezes_weights_and_leaves_loaders_alone(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SHIM_PROBE)
    run = run_python(script, tmp_path / "run", env=evaluation_env(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    assert run.lines == ["lengths 3 3 2", "frozen True", "batches [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]"]
    assert problems_evaluation_fetches(evaluation_log(run.workdir), 1) == []


# A range and a list as sampler=, len() of loaders, and an optimizer with a scheduler.
SHIM_PROBE = """
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(10.0).unsqueeze(1))
loaders = [DataLoader(data, batch_size=4), DataLoader(data, batch_size=4, sampler=range(10)),
           DataLoader(data, batch_size=5, sampler=list(range(10)))]
print("lengths", *map(len, loaders))
model = torch.nn.Linear(1, 1)
before = [p.detach().clone() for p in model.parameters()]
optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
for (x,) in loaders[1]:
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    scheduler.step()
print("frozen", all(torch.equal(a, b) for a, b in zip(before, model.parameters())))
with torch.no_grad():
    print("batches", [x.squeeze(1).long().tolist() for (x,) in loaders[0]])
"""


@pytest.fixture(scope="module")
def evaluated_once(tmp_path_factory):
    """The correct script under plain python with the shim: the one-process figures."""
    workdir = tmp_path_factory.mktemp("evaluation") / "original"
    return run_python(EVAL_DATA / "correct.py", workdir, env=evaluation_env(workdir))


def _torchrun_with_shim(script, workdir):
    return run_torchrun(script, workdir, env=evaluation_env(workdir))


@pytest.mark.slow
def test_a_correct_sharded_evaluation_passes_the_evaluation_checks(evaluated_once, tmp_path):
    assert evaluated_once.returncode == 0, evaluated_once.stderr
    assert problems_evaluation_fetches(evaluation_log(evaluated_once.workdir), 1) == []
    distributed = _torchrun_with_shim(EVAL_DATA / "correct.py", tmp_path / "torchrun")
    assert distributed.returncode == 0, distributed.stderr
    assert problems_evaluation_fetches(evaluation_log(distributed.workdir), 2) == []
    assert problems_evaluation_lines(evaluated_once, distributed, EVALUATION) == []


@pytest.mark.slow
def test_a_padding_evaluation_sampler_fails_the_fetch_check(tmp_path):
    distributed = _torchrun_with_shim(EVAL_DATA / "broken_padded_sampler.py", tmp_path / "torchrun")
    assert distributed.returncode == 0, distributed.stderr
    problems = problems_evaluation_fetches(evaluation_log(distributed.workdir), 2)
    # DistributedSampler pads 51 samples to 52 by repeating index 0, in both evaluation passes.
    assert problems and all("1 indices fetched more than once across ranks, e.g. 0 (2 times)" in problem
                            for problem in problems), problems


@pytest.mark.slow
def test_figures_not_gathered_fail_the_evaluation_lines_check(evaluated_once, tmp_path):
    distributed = _torchrun_with_shim(EVAL_DATA / "broken_not_gathered.py", tmp_path / "torchrun")
    assert distributed.returncode == 0, distributed.stderr
    assert problems_evaluation_fetches(evaluation_log(distributed.workdir), 2) == []  # sharded right
    problems = problems_evaluation_lines(evaluated_once, distributed, EVALUATION)
    assert problems and "evaluation lines differ under torchrun" in problems[0], problems


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")
def test_fork_server_has_no_more_threads_than_torch_itself_starts(tmp_path):
    """Forking copies only the calling thread: a thread the server's imports started would be
    missing, holding whatever lock it held, in every run. The server may have only the native
    threads that `import torch` alone starts, in the same environment."""
    import subprocess

    from script_runs import _environment, _fork_server

    (tmp_path / "noop.py").write_text("")
    server = _fork_server()
    server.run(tmp_path / "noop.py", [], tmp_path, _environment(), 60)  # up and serving
    bare = subprocess.run([sys.executable, "-c", "import os, torch; print(len(os.listdir('/proc/self/task')))"],
                          capture_output=True, text=True, check=True, env=_environment())
    assert len(list(Path(f"/proc/{server._process.pid}/task").iterdir())) == int(bare.stdout)
