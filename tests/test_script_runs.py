"""The checks the fixture runs apply (tests/script_runs.py) must catch broken scripts."""
from pathlib import Path

import pytest
import torch

from script_runs import Run, problems_distributed, problems_single_process, run_python, run_torchrun

DATA = Path(__file__).resolve().parent / "data"


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


def test_missing_and_wrapped_checkpoints_are_caught(tmp_path):
    original = _run("done\n", tmp_path)
    torch.save({"module.weight": torch.zeros(1)}, tmp_path / "wrapped.pth")
    torch.save({"weight": torch.zeros(1)}, tmp_path / "plain.pth")
    assert problems_distributed(original, _run("done\n", tmp_path), ["plain.pth"]) == []
    assert problems_distributed(original, _run("done\n", tmp_path), ["absent.pth"]) == ["absent.pth was not written"]
    assert "module." in problems_distributed(original, _run("done\n", tmp_path), ["wrapped.pth"])[0]


@pytest.mark.slow
def test_a_real_script_that_prints_on_every_rank_fails_the_run_checks(tmp_path):
    original = run_python(DATA / "verify_guide_before.py", tmp_path / "original")
    broken = run_torchrun(DATA / "broken" / "print_every_rank.py", tmp_path / "broken")
    problems = problems_distributed(original, broken, [])
    assert any("times under torchrun" in problem for problem in problems), problems
