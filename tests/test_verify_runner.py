"""When the runner runs a torchrun run a second time."""
from ddpify.verify.records import RunResult
from ddpify.verify.runner import GLOO_TEARDOWN_ABORT, aborted_after_finishing


def run(returncode, tail, ranks_ended=(0, 1)):
    events = {rank: [{"ev": "end", "status": 0}] for rank in ranks_ended}
    return RunResult(name="torchrun", commands=[], returncodes=[returncode], timed_out=False,
                     seconds=1.0, world_size=2, events=events, output_tail=tail)


def test_gloo_abort_after_every_rank_finished_is_retried():
    assert aborted_after_finishing(run(1, f"... {GLOO_TEARDOWN_ABORT}\nSignal 6 (SIGABRT)"))


def test_other_failures_are_not_retried():
    assert not aborted_after_finishing(run(0, ""))
    assert not aborted_after_finishing(run(1, "RuntimeError: boom"))
    # A rank that never reached the end failed for real, whatever the exit looked like.
    assert not aborted_after_finishing(run(1, GLOO_TEARDOWN_ABORT, ranks_ended=(0,)))
