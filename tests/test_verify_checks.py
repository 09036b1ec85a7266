"""The checks on synthetic event lists: every check passes on good data and fails on bad."""
import random

from ddpify.verify.checks import runs_needed
from ddpify.verify.checks.data_sharded import check_data_sharded
from ddpify.verify.checks.events import line_shape
from ddpify.verify.checks.failed_runs import summarize_stack
from ddpify.verify.checks.full_checkpoint import check_full_checkpoint
from ddpify.verify.checks.handoff import check_handoff, early_reads, handoff_paths
from ddpify.verify.checks.importable import check_importable
from ddpify.verify.checks.multinode_ready import check_multinode_ready
from ddpify.verify.checks.no_leftovers import check_no_leftovers
from ddpify.verify.checks.no_move_after_wrap import check_no_move_after_wrap
from ddpify.verify.checks.one_voice import check_one_voice
from ddpify.verify.checks.one_writer import check_one_writer, one_writer_in
from ddpify.verify.checks.optimizer_sharded import check_optimizer_sharded
from ddpify.verify.checks.params_sharded import check_params_sharded
from ddpify.verify.checks.ranks_agree import check_ranks_agree
from ddpify.verify.checks.result import FAIL, NA, PASS
from ddpify.verify.checks.runs import check_runs
from ddpify.verify.checks.same_as_original import check_same_as_original
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import (
    HANDOFF,
    IMPORT,
    MULTINODE,
    ORIGINAL,
    ORIGINAL_IMPORT,
    SINGLE,
    TORCHRUN,
    RunSet,
)


def make_run(name, events, ok=True, timed_out=False, stacks=None, files=(), world_size=None):
    return RunResult(
        name=name, commands=[], returncodes=[0 if ok else 1], timed_out=timed_out, seconds=1.0,
        world_size=world_size or max(len(events), 1), limit=10.0, events=events, stacks=stacks or {},
        files_created=list(files), script_name="train_ddp.py",
    )


def start(rank, local_rank=0):
    return {"ev": "start", "rank": rank, "local_rank": local_rank, "world_size": 2, "pid": 1, "cuda_devices": 0}


def step(n, digest, checksum=1.0, loader=0, loss=None):
    return {"ev": "step", "n": n, "optimizer": 0, "loader": loader, "checksum": checksum,
            "digest": digest, "loss": loss}


def printed(line, where=None):
    return {"ev": "print", "line": line, "where": where}


def saved(path, module_prefix=False, wrapped=False, scope="cwd"):
    return {"ev": "save", "path": path, "scope": scope, "module_prefix": module_prefix, "wrapped": wrapped}


def training(indices_per_epoch, dataset_len, batch=4, shuffle=True, drop_last=False, complete=True, loader=0,
             replacement=False):
    """A rank's events for a loop that steps once per batch."""
    events, n = [], 0
    for epoch, indices in enumerate(indices_per_epoch):
        events.append({"ev": "iter", "loader": loader, "epoch": epoch, "map_style": True,
                       "dataset_len": dataset_len, "sampler": "X", "shuffle": shuffle,
                       "batch_size": batch, "drop_last": drop_last, "num_workers": 0,
                       "replacement": replacement})
        for first in range(0, len(indices), batch):
            events.append({"ev": "fetch", "loader": loader, "epoch": epoch, "indices": indices[first:first + batch]})
            n += 1
            events.append(step(n, f"d{n}", loader=loader))
        if complete:
            events.append({"ev": "exhausted", "loader": loader, "epoch": epoch})
    return events


def sharded(dataset_len, world_size, epochs, reshuffle=True):
    """What DistributedSampler hands each rank: a permutation (new per epoch), strided."""
    per_rank = {rank: [] for rank in range(world_size)}
    for epoch in range(epochs):
        order = list(range(dataset_len))
        random.Random(epoch if reshuffle else 0).shuffle(order)
        padded = order + order[: (-dataset_len) % world_size]
        for rank in range(world_size):
            per_rank[rank].append(padded[rank::world_size])
    return per_rank


# -- runs ------------------------------------------------------------------------------

STACK = """Timeout (0:00:08)!
Thread 0x00007f3f053fe6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait

Thread 0x00007f3f0708db80 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "train_ddp.py", line 66 in <module>
  File "<frozen runpy>", line 291 in run_path
"""


def test_runs_pass_when_every_run_exits_zero():
    result = check_runs({ORIGINAL: make_run(ORIGINAL, {0: []}), TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})})
    assert result.status == PASS


def test_runs_name_the_hung_ranks_and_where_they_wait():
    events = {0: [start(0)], 1: [start(1), {"ev": "stop", "reason": "max_steps", "steps": 1}]}
    hung = make_run(TORCHRUN, events, ok=False, timed_out=True, stacks={0: STACK})
    result = check_runs({TORCHRUN: hung})
    assert result.status == FAIL
    assert "hung: torchrun" in result.summary
    assert "rank 0 waits at train_ddp.py:66, in barrier (distributed_c10d.py:5356)" in "\n".join(result.evidence)
    assert not any("rank 1" in line for line in result.evidence)


def test_runs_say_a_hang_after_epochs_cut_to_one_batch_may_be_the_cut():
    cut = {"ev": "iter", "loader": 0, "epoch": 2, "cut": True}
    hung = make_run(ORIGINAL, {0: [start(0), cut]}, ok=False, timed_out=True)
    result = check_runs({ORIGINAL: hung})
    assert result.status == FAIL and "rerun with --full-epochs 0" in "\n".join(result.evidence)
    uncut = make_run(ORIGINAL, {0: [start(0), dict(cut, cut=False)]}, ok=False, timed_out=True)
    assert "--full-epochs" not in "\n".join(check_runs({ORIGINAL: uncut}).evidence)


def test_runs_report_a_crash_with_its_error():
    events = {0: [start(0), {"ev": "end", "status": "error", "error": "RuntimeError('boom')"}]}
    result = check_runs({SINGLE: make_run(SINGLE, events, ok=False)})
    assert result.status == FAIL
    assert "RuntimeError('boom')" in "\n".join(result.evidence)


def test_a_crash_that_left_the_other_agent_waiting_is_reported_as_the_crash_not_a_hang():
    """Issue 18: rank 1 raised, rank 0's agent then waited for it until the limit. The
    report names rank 1's error and traceback as the cause, and does not call it a hang."""
    crash = {"ev": "end", "status": "error", "error": "FileNotFoundError: [Errno 2] No such file or directory: "
             "'model.pth'", "where": "quickstart_ddp.py:74", "t": 105.0,
             "traceback": ["quickstart_ddp.py:74 in <module>: model.load_state_dict(torch.load('model.pth'))",
                           "serialization.py:1484 in load"]}
    events = {0: [start(0), {"ev": "end", "status": 0, "t": 106.0}], 1: [start(1, local_rank=0), crash]}
    run = make_run(MULTINODE, events, ok=False, timed_out=True)
    result = check_runs({MULTINODE: run})
    assert result.status == FAIL and "hung" not in result.summary
    assert result.evidence[0] == ("two nodes: rank 1 failed first: FileNotFoundError: [Errno 2] No such file or "
                                  "directory: 'model.pth' (quickstart_ddp.py:74)")
    assert result.evidence[1] == "  | quickstart_ddp.py:74 in <module>: model.load_state_dict(torch.load('model.pth'))"
    ready = check_multinode_ready({MULTINODE: run})
    assert ready.summary.startswith("the two-agent run failed: rank 1 failed first: FileNotFoundError")
    from ddpify.verify.report import run_label, run_to_dict
    assert run_label(run) == "two nodes failed 1.0s"
    assert run_to_dict(run)["first_failure"]["rank"] == 1


def test_the_first_rank_to_fail_is_the_cause_the_others_followed():
    closed = {"ev": "end", "status": "error", "error": "RuntimeError: Connection closed by peer", "t": 9.0}
    raised = {"ev": "end", "status": "error", "error": "ValueError: bad batch", "where": "train_ddp.py:40", "t": 8.0}
    run = make_run(TORCHRUN, {0: [start(0), closed], 1: [start(1), raised]}, ok=False)
    assert run.first_failure() == (1, raised)
    evidence = check_runs({TORCHRUN: run}).evidence
    assert evidence[0] == "torchrun: rank 1 failed first: ValueError: bad batch (train_ddp.py:40)"
    assert "  rank 0: RuntimeError: Connection closed by peer" in evidence


def test_summarize_stack_without_script_frames_names_the_innermost_call():
    assert summarize_stack(STACK, "other.py") == "in barrier (distributed_c10d.py:5356)"


# -- same as original ------------------------------------------------------------------

SEED = {"ev": "seed", "value": 0}


def pair(original_events, single_events):
    return {ORIGINAL: make_run(ORIGINAL, {0: original_events}), SINGLE: make_run(SINGLE, {0: single_events})}


def test_same_as_original_passes_bit_identical_and_within_tolerance():
    identical = check_same_as_original(pair([SEED, step(1, "a", 2.0)], [SEED, step(1, "a", 2.0)]))
    assert identical.status == PASS and "bit-identical" in identical.summary
    close = check_same_as_original(pair([SEED, step(1, "a", 2.0)], [SEED, step(1, "b", 2.0 + 1e-7)]))
    assert close.status == PASS and "within" in close.summary


def test_same_as_original_fails_on_a_different_trajectory():
    result = check_same_as_original(pair([SEED, step(1, "a", 2.0)], [SEED, step(1, "b", 2.5)]))
    assert result.status == FAIL and result.summary.startswith("step 1:")


def test_same_as_original_fails_on_a_different_step_count():
    result = check_same_as_original(pair([SEED, step(1, "a"), step(2, "b")], [SEED, step(1, "a")]))
    assert result.status == FAIL and "2 optimizer steps" in result.summary


def test_same_as_original_fails_when_a_line_goes_missing():
    result = check_same_as_original(pair([SEED, printed("epoch 0: 1.5")], [SEED]))
    assert result.status == FAIL and "'epoch #: #'" in result.summary


def test_same_as_original_is_na_for_an_unseeded_original():
    result = check_same_as_original(pair([step(1, "a", 2.0)], [step(1, "b", 2.5)]))
    assert result.status == NA and "manual_seed" in result.summary


def test_same_as_original_is_na_when_a_run_failed():
    runs = pair([SEED], [SEED])
    runs[SINGLE].returncodes = [1]
    assert check_same_as_original(runs).status == NA


# -- ranks agree -----------------------------------------------------------------------


def test_ranks_agree_passes_on_identical_digests():
    run = make_run(TORCHRUN, {0: [step(1, "a"), step(2, "b")], 1: [step(1, "a"), step(2, "b")]})
    assert check_ranks_agree({TORCHRUN: run}).status == PASS


def test_ranks_agree_fails_when_parameters_diverge():
    run = make_run(TORCHRUN, {0: [step(1, "a"), step(2, "b", 1.0)], 1: [step(1, "a"), step(2, "c", 1.5)]})
    result = check_ranks_agree({TORCHRUN: run})
    assert result.status == FAIL and "after step 2" in result.summary


def test_ranks_agree_fails_on_different_step_counts():
    run = make_run(TORCHRUN, {0: [step(1, "a"), step(2, "b")], 1: [step(1, "a")]})
    assert check_ranks_agree({TORCHRUN: run}).status == FAIL


def test_ranks_agree_is_na_without_steps():
    assert check_ranks_agree({TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})}).status == NA


# -- data sharded ----------------------------------------------------------------------


def sharded_run(per_rank, dataset_len, **options):
    return make_run(TORCHRUN, {rank: training(epochs, dataset_len, **options) for rank, epochs in per_rank.items()})


def test_data_sharded_passes_with_distributed_sampler_and_notes_padding():
    result = check_data_sharded({TORCHRUN: sharded_run(sharded(31, 2, epochs=2), 31)})
    assert result.status == PASS, result.evidence
    assert "order changes" in result.summary and "(2 full epoch(s))" in result.summary
    assert any("1 padding duplicate" in note for note in result.notes)


def test_data_sharded_fails_when_every_rank_sees_everything():
    everything = list(range(16))
    result = check_data_sharded({TORCHRUN: sharded_run({0: [everything], 1: [everything]}, 16)})
    assert result.status == FAIL and "16 samples fetched by more than one rank" in result.summary


def test_data_sharded_fails_on_samples_never_fetched():
    result = check_data_sharded({TORCHRUN: sharded_run({0: [[0, 2, 4, 6]], 1: [[1, 3, 5, 7]]}, 10)})
    assert result.status == FAIL and "2 of 10 samples never fetched" in result.summary


def test_data_sharded_accepts_samples_dropped_by_drop_last():
    run = sharded_run({0: [[0, 2, 4, 6]], 1: [[1, 3, 5, 7]]}, 10, drop_last=True)
    result = check_data_sharded({TORCHRUN: run})
    assert result.status == PASS and any("drop_last" in note for note in result.notes)


def test_data_sharded_ignores_missing_samples_of_an_epoch_cut_short():
    run = sharded_run({0: [[0, 2, 4, 6]], 1: [[1, 3, 5, 7]]}, 100, complete=False)
    assert check_data_sharded({TORCHRUN: run}).status == PASS


def test_data_sharded_fails_when_every_epoch_repeats_the_order():
    run = sharded_run(sharded(32, 2, epochs=2, reshuffle=False), 32)
    result = check_data_sharded({TORCHRUN: run})
    assert result.status == FAIL and "set_epoch was called 0 time(s)" in result.summary


def test_data_sharded_does_not_compare_orders_when_the_original_does_not_shuffle():
    run = sharded_run(sharded(32, 2, epochs=2, reshuffle=False), 32)
    original = make_run(ORIGINAL, {0: training([list(range(32))] * 2, 32, shuffle=False)})
    result = check_data_sharded({ORIGINAL: original, TORCHRUN: run})
    assert result.status == PASS and any("does not shuffle" in note for note in result.notes)


def test_data_sharded_needs_two_epochs_to_compare_orders():
    result = check_data_sharded({TORCHRUN: sharded_run(sharded(32, 2, epochs=1), 32)})
    assert result.status == PASS and any("fewer than 2 epochs" in note for note in result.notes)


def test_data_sharded_only_judges_training_loaders():
    everything = list(range(8))
    evaluation = [{"ev": "fetch", "loader": 1, "epoch": 0, "indices": everything}]
    per_rank = sharded(32, 2, epochs=2)
    run = make_run(TORCHRUN, {rank: training(epochs, 32) + evaluation for rank, epochs in per_rank.items()})
    assert check_data_sharded({TORCHRUN: run}).status == PASS


def _draws_with_replacement(length, epochs, seed=0):
    """What a WeightedRandomSampler with replacement draws: repeats, and some never drawn."""
    generator = random.Random(seed)
    return [[generator.randrange(length) for _ in range(length)] for _ in range(epochs)]


def test_data_sharded_accepts_repeats_and_misses_of_a_sampler_with_replacement_split_between_ranks():
    draws = _draws_with_replacement(40, 2)
    original = make_run(ORIGINAL, {0: training(draws, 40, replacement=True)})
    per_rank = {rank: [draw[rank::2] for draw in draws] for rank in range(2)}
    result = check_data_sharded({ORIGINAL: original, TORCHRUN: sharded_run(per_rank, 40, replacement=True)})
    assert result.status == PASS, result.evidence
    assert any("with replacement" in note for note in result.notes) and "its share" in result.summary


def test_data_sharded_fails_when_every_rank_draws_the_whole_epoch_with_replacement():
    draws = _draws_with_replacement(40, 2)
    original = make_run(ORIGINAL, {0: training(draws, 40, replacement=True)})
    per_rank = {rank: _draws_with_replacement(40, 2, seed=rank + 1) for rank in range(2)}
    result = check_data_sharded({ORIGINAL: original, TORCHRUN: sharded_run(per_rank, 40, replacement=True)})
    assert result.status == FAIL and "more than its share (20) of the 40" in result.summary


def test_data_sharded_is_na_without_training_batches():
    assert check_data_sharded({TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})}).status == NA


# -- one writer ------------------------------------------------------------------------


def test_one_writer_passes_when_only_rank_0_saves():
    run = make_run(TORCHRUN, {0: [saved("ckpt.pth")], 1: []})
    assert check_one_writer({TORCHRUN: run}).status == PASS


def test_one_writer_fails_when_another_rank_writes():
    log = {"ev": "write", "path": "log.txt", "mode": "w", "scope": "cwd"}
    run = make_run(TORCHRUN, {0: [saved("ckpt.pth")], 1: [log]})
    result = check_one_writer({TORCHRUN: run})
    assert result.status == FAIL and result.summary == "rank 1 wrote log.txt"


def test_one_writer_ignores_the_runs_own_home_and_tmpdir():
    scratch = {"ev": "write", "path": "/tmp/ddpify-verify-x/torchrun/tmp/x", "mode": "w", "scope": "run"}
    run = make_run(TORCHRUN, {0: [saved("ckpt.pth")], 1: [scratch]})
    assert check_one_writer({TORCHRUN: run}).status == PASS


def test_one_writer_fails_on_module_prefix_and_on_saving_the_wrapper():
    prefixed = check_one_writer({TORCHRUN: make_run(TORCHRUN, {0: [saved("a.pth", module_prefix=True)], 1: []})})
    assert prefixed.status == FAIL and "'module.'" in prefixed.summary
    wrapper = check_one_writer({TORCHRUN: make_run(TORCHRUN, {0: [saved("m.pt", wrapped=True)], 1: []})})
    assert wrapper.status == FAIL and "wrapper" in wrapper.summary


def test_one_writer_fails_when_rank_0_drops_the_originals_files():
    original = make_run(ORIGINAL, {0: [saved("ckpt.pth")]})
    result = check_one_writer({ORIGINAL: original, TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})})
    assert result.status == FAIL and "rank 0 wrote nothing" in result.summary


def test_one_writer_is_na_when_nothing_is_written():
    assert check_one_writer({TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})}).status == NA


# -- one voice -------------------------------------------------------------------------


def test_line_shape_hides_numbers():
    assert line_shape("epoch 3: loss 0.25, acc 9.5e-01 nan") == "epoch #: loss #, acc # #"


def test_one_voice_passes_when_rank_0_prints_the_originals_lines():
    original = make_run(ORIGINAL, {0: [printed("epoch 0: loss 2.0"), printed("done")]})
    run = make_run(TORCHRUN, {0: [printed("epoch 0: loss 1.9"), printed("done")], 1: []})
    assert check_one_voice({ORIGINAL: original, TORCHRUN: run}).status == PASS


def test_one_voice_fails_when_another_rank_prints_and_names_the_rank_the_line_and_where():
    run = make_run(TORCHRUN, {0: [printed("done")], 1: [printed("done", "train_ddp.py:40")]})
    result = check_one_voice({TORCHRUN: run})
    assert result.status == FAIL and result.summary == "rank 1 printed 1 line(s): 'done' (train_ddp.py:40)"
    loud = make_run(TORCHRUN, {0: [], 1: [], 2: [printed("epoch 1", "t.py:9"), printed("epoch 2", "t.py:9"),
                                                 printed("Saving best..", "t.py:30")]})
    assert check_one_voice({TORCHRUN: loud}).evidence == [
        "rank 2 printed 3 line(s): 'epoch 1' (t.py:9) x2, 'Saving best..' (t.py:30)"]


def test_one_voice_compares_who_prints_not_how_often_a_data_dependent_line_prints():
    """Issue 18: `if acc > best_acc: print("Saving best..")` prints once in the original
    and twice on rank 0 of the 2-rank run, which trains differently: a correct migration."""
    original = make_run(ORIGINAL, {0: [printed("epoch 0: acc 0.9"), printed("Saving best..")]})
    run = make_run(TORCHRUN, {0: [printed("epoch 0: acc 0.88"), printed("Saving best.."),
                                  printed("Saving best..")], 1: []})
    result = check_one_voice({ORIGINAL: original, TORCHRUN: run})
    assert result.status == PASS and result.summary == "only rank 0 printed (3 lines)", result.evidence


def test_one_voice_notes_a_line_rank_0_never_prints():
    original = make_run(ORIGINAL, {0: [printed("step 100: loss 1.0")]})
    result = check_one_voice({ORIGINAL: original, TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})})
    assert result.status == PASS
    assert result.notes == ["printed 1 time(s) by the original, never by rank 0 in the torchrun run: 'step #: loss #'"]


# -- multi-node ready ------------------------------------------------------------------


def test_multinode_ready_passes_on_a_clean_two_agent_run():
    run = make_run(MULTINODE, {0: [start(0), saved("c.pth")], 1: [start(1)]})
    assert check_multinode_ready({MULTINODE: run}).status == PASS


def test_multinode_ready_notes_the_files_the_nodes_hand_each_other():
    """The two agents share a working directory (a cluster's shared filesystem): a file rank
    0 writes and the other node reads passes, with a note that the nodes need one."""
    save = {"ev": "save", "path": "model.pth", "abs": "/run/work/model.pth", "scope": "cwd", "t": 1.0}
    events = {0: [start(0), save, {"ev": "saved", "abs": "/run/work/model.pth", "t_done": 2.0}],
              1: [start(1), {"ev": "read", "path": "model.pth", "abs": "/run/work/model.pth", "t": 3.0}]}
    run = make_run(MULTINODE, events)
    run.workdir = "/run/work"
    result = check_multinode_ready({MULTINODE: run})
    assert result.status == PASS
    assert result.notes == ["rank 0 wrote model.pth and the other node read it: the nodes need a shared "
                            "filesystem (the two agents here share one working directory)"]


def test_multinode_ready_fails_on_what_only_two_nodes_show():
    one_machine = make_run(TORCHRUN, {0: [saved("c.pth")], 1: []})
    two_nodes = make_run(MULTINODE, {0: [start(0), step(1, "a"), saved("c.pth")],
                                     1: [start(1), step(1, "a"), saved("c.pth")]})
    result = check_multinode_ready({TORCHRUN: one_machine, MULTINODE: two_nodes})
    assert result.status == FAIL and result.summary == "one writer: rank 1 wrote c.pth"


def test_each_machine_may_prepare_its_data_before_training():
    """A dataset downloaded by the first process of each machine, before the first step."""
    events = {0: [start(0), saved("data/train.pt"), step(1, "a"), saved("c.pth")],
              1: [start(1), saved("data/train.pt"), step(1, "a")]}
    result = one_writer_in({}, make_run(MULTINODE, events))
    assert result.status == PASS
    assert any("prepared data before training" in line for line in result.notes)
    late = {0: [start(0), step(1, "a")], 1: [start(1), step(1, "a"), saved("data/train.pt")]}
    assert one_writer_in({}, make_run(MULTINODE, late)).status == FAIL


def test_multinode_ready_does_not_repeat_one_machine_failures():
    both = {0: [saved("c.pth")], 1: [saved("c.pth")]}
    runs = {TORCHRUN: make_run(TORCHRUN, both), MULTINODE: make_run(MULTINODE, both)}
    result = check_multinode_ready(runs)
    assert result.status == NA and "one writer" in result.summary


def test_multinode_ready_fails_when_only_the_two_agent_run_fails():
    runs = {TORCHRUN: make_run(TORCHRUN, {0: [], 1: []}), MULTINODE: make_run(MULTINODE, {0: [], 1: []}, ok=False)}
    assert check_multinode_ready(runs).status == FAIL


# -- plumbing --------------------------------------------------------------------------


def test_runs_needed_launch_only_what_the_checks_read():
    assert runs_needed(["runs", "data_sharded"]) == [TORCHRUN]
    assert runs_needed(["runs", "same_as_original"]) == [ORIGINAL, SINGLE]
    assert runs_needed(["runs"]) == [ORIGINAL, SINGLE, TORCHRUN, MULTINODE, IMPORT]


def test_runs_needed_launch_the_import_only_for_importable():
    assert runs_needed(["runs", "importable"]) == [IMPORT]


# -- the end of the script -------------------------------------------------------------

STOP = {"ev": "stop", "reason": "max_epochs", "steps": 4}


def test_a_cap_that_stopped_the_runs_says_what_was_not_exercised():
    runs = {TORCHRUN: make_run(TORCHRUN, {0: [STOP], 1: [STOP]})}
    assert any("--max-epochs stopped the runs" in note for note in check_runs(runs).notes)
    one_writer = check_one_writer(runs)
    assert one_writer.status == NA and one_writer.summary.startswith("not exercised: --max-epochs")


def test_one_writer_names_the_line_and_writes_outside_the_run_directory():
    final = dict(saved("model_final.pth"), where="train_ddp.py:66")
    outside = {"ev": "write", "path": "/data/out.csv", "mode": "w", "scope": "outside", "where": "train_ddp.py:70"}
    run = make_run(TORCHRUN, {0: [final, outside], 1: [final]})
    result = check_one_writer({TORCHRUN: run})
    assert result.status == FAIL and result.summary == "rank 1 wrote model_final.pth (train_ddp.py:66)"
    assert any("/data/out.csv outside the run directory (train_ddp.py:70)" in line for line in result.evidence)


# -- hand-off --------------------------------------------------------------------------


def save_events(t, t_done, path="/run/work/model.pth", where="train_ddp.py:66"):
    """What the probe records: the save as it starts, `saved` when it is done (None: never)."""
    done = [] if t_done is None else [{"ev": "saved", "abs": path, "t_done": t_done}]
    return [dict(saved("model.pth"), abs=path, t=t, where=where), *done]


def read_at(t, path="/run/work/model.pth", where="train_ddp.py:67", error=None):
    event = {"ev": "read", "path": "model.pth", "abs": path, "t": t, "where": where}
    return dict(event, error=error) if error else event


def handoff_runs(rank1_read_at, late=None, **run_options):
    runs = RunSet({TORCHRUN: make_run(TORCHRUN, {0: save_events(10.0, 10.1), 1: [read_at(rank1_read_at)]},
                                             **run_options)}, slow_writes=1.5)
    runs[TORCHRUN].workdir = "/run/work"
    if late is not None:
        runs[HANDOFF] = late
        late.workdir = "/run/work"
    return runs


def test_handoff_fails_on_a_read_before_rank_0_finished_writing():
    result = check_handoff(handoff_runs(10.05, ok=False))
    assert result.status == FAIL
    assert result.summary == ("rank 1 read model.pth at train_ddp.py:67 before rank 0 finished writing it "
                              "at train_ddp.py:66 (no barrier between them)")


def test_handoff_fails_when_only_the_delayed_run_shows_the_early_read():
    # Rank 1's crash ended the run while rank 0 was still in its delayed save.
    late = make_run(HANDOFF, {0: save_events(20.0, None), 1: [read_at(21.7, error="FileNotFoundError: x")]},
                    ok=False)
    result = check_handoff(handoff_runs(10.2, late=late))
    assert result.status == FAIL and "delayed 1.5 s" in result.summary and "FileNotFoundError" in result.summary


def test_handoff_passes_a_read_after_the_write_also_when_delayed():
    late = make_run(HANDOFF, {0: save_events(20.0, 21.6), 1: [read_at(21.7)]})
    result = check_handoff(handoff_runs(10.2, late=late))
    assert result.status == PASS and "model.pth" in result.summary


def test_handoff_accepts_reading_a_file_the_working_copy_held_before_rank_0_rewrites_it():
    runs = handoff_runs(9.0)
    runs[TORCHRUN].copied = ["model.pth", "train_ddp.py"]
    assert not early_reads(runs[TORCHRUN])
    runs[TORCHRUN].copied = ["train_ddp.py"]
    assert early_reads(runs[TORCHRUN])


def test_handoff_is_na_without_files_passed_between_ranks():
    run = make_run(TORCHRUN, {0: save_events(10.0, 10.1), 1: []})
    assert check_handoff({TORCHRUN: run}).status == NA


def test_handoff_paths_are_relative_to_the_working_copy():
    runs = handoff_runs(10.2)
    assert handoff_paths(runs[TORCHRUN]) == ["model.pth"]


# -- no move after wrap ----------------------------------------------------------------

WRAP = {"ev": "wrap", "module": "Net", "where": "train_ddp.py:46"}


def test_no_move_after_wrap_fails_on_a_move_of_the_wrapped_model():
    move = {"ev": "move_after_wrap", "method": "to", "module": "DistributedDataParallel", "where": "train_ddp.py:47"}
    run = make_run(TORCHRUN, {0: [WRAP, move], 1: [WRAP, move]})
    result = check_no_move_after_wrap({TORCHRUN: run})
    assert result.status == FAIL and "(train_ddp.py:47)" in result.summary and len(result.evidence) == 1


def test_no_move_after_wrap_passes_and_is_na_without_a_wrap():
    assert check_no_move_after_wrap({TORCHRUN: make_run(TORCHRUN, {0: [WRAP], 1: [WRAP]})}).status == PASS
    assert check_no_move_after_wrap({TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})}).status == NA


# -- importable ------------------------------------------------------------------------

NAME_ERROR = {"ev": "end", "status": "error", "error": "NameError: name 'is_main' is not defined",
              "where": "train_ddp.py:11"}


def test_importable_fails_when_the_migration_breaks_the_import():
    runs = {IMPORT: make_run(IMPORT, {0: [NAME_ERROR]}, ok=False),
            ORIGINAL_IMPORT: make_run(ORIGINAL_IMPORT, {0: [{"ev": "end", "status": 0}]})}
    result = check_importable(runs)
    assert result.status == FAIL and "NameError" in result.summary and "train_ddp.py:11" in result.summary


def test_importable_is_na_when_the_original_fails_too_and_fails_on_a_process_group():
    runs = {IMPORT: make_run(IMPORT, {0: [NAME_ERROR]}, ok=False),
            ORIGINAL_IMPORT: make_run(ORIGINAL_IMPORT, {0: [NAME_ERROR]}, ok=False)}
    assert check_importable(runs).status == NA
    init = {"ev": "init_pg", "where": "train_ddp.py:20"}
    result = check_importable({IMPORT: make_run(IMPORT, {0: [init, {"ev": "end", "status": 0}]})})
    assert result.status == FAIL and "process group (train_ddp.py:20)" in result.summary


def test_importable_passes_a_clean_import():
    result = check_importable({IMPORT: make_run(IMPORT, {0: [{"ev": "end", "status": 0}]})})
    assert result.status == PASS


# -- no processes left -----------------------------------------------------------------


def test_no_leftovers_fails_on_a_process_that_outlived_its_run():
    run = make_run(TORCHRUN, {0: [], 1: []})
    run.leftovers = [{"pid": 42, "rank": 0, "cmdline": "python -c import time; time.sleep(120)"}]
    result = check_no_leftovers({TORCHRUN: run})
    assert result.status == FAIL and "started by rank 0" in result.summary and "pid 42" in result.summary
    assert check_no_leftovers({TORCHRUN: make_run(TORCHRUN, {0: [], 1: []})}).status == PASS


def test_runs_leave_the_import_and_hand_off_runs_to_their_own_checks():
    runs = {TORCHRUN: make_run(TORCHRUN, {0: [], 1: []}), IMPORT: make_run(IMPORT, {0: []}, ok=False)}
    assert check_runs(runs).status == PASS


# -- --strategy fsdp2 ------------------------------------------------------------------------

def shard_event(module="Block", where="train_ddp.py:40"):
    return {"ev": "shard", "module": module, "where": where}


def shards(local, full=100, params=4, dtensors=4, in_modules=4, optimizer=0):
    return {"ev": "shards", "optimizer": optimizer, "params": params, "dtensor_params": dtensors,
            "in_sharded_modules": in_modules, "sharded_module_params": 4, "local_numel": local, "full_numel": full}


def fsdp2_runs(rank0, rank1, original_saves=(), ok=True):
    return RunSet({ORIGINAL: make_run(ORIGINAL, {0: list(original_saves)}),
                   TORCHRUN: make_run(TORCHRUN, {0: rank0, 1: rank1}, ok=ok)})


def test_params_sharded_passes_when_the_ranks_split_the_parameters():
    result = check_params_sharded(fsdp2_runs([shard_event(), shards(52)], [shard_event(), shards(48)]))
    assert result.status == PASS and result.summary == "the optimizer: rank 0 52%, rank 1 48% of 100 numbers"


def test_params_sharded_fails_without_fully_shard_or_with_whole_parameters():
    never = check_params_sharded(fsdp2_runs([shards(100, dtensors=0)], [shards(100, dtensors=0)]))
    assert never.status == FAIL and "fully_shard was never called" in never.summary
    whole = check_params_sharded(fsdp2_runs([shard_event(), shards(100)], [shard_event(), shards(100)]))
    assert whole.status == FAIL and "rank 0 holds all 100 numbers" in whole.summary
    # The blocks sharded, the root forgotten: each rank holds its half plus the root's whole.
    partial = check_params_sharded(fsdp2_runs([shard_event(), shards(70)], [shard_event(), shards(70)]))
    assert partial.status == FAIL and "hold 140 numbers of the 100" in partial.summary
    assert check_params_sharded(fsdp2_runs([shard_event()], [shard_event()])).status == NA  # no step
    assert check_params_sharded(fsdp2_runs([], [], ok=False)).status == NA


def test_optimizer_sharded_fails_on_an_optimizer_built_before_the_shard():
    good = check_optimizer_sharded(fsdp2_runs([shard_event(), shards(50)], [shard_event(), shards(50)]))
    assert good.status == PASS
    stale = check_optimizer_sharded(fsdp2_runs([shard_event(), shards(100, dtensors=0, in_modules=0)],
                                               [shard_event(), shards(100, dtensors=0, in_modules=0)]))
    assert stale.status == FAIL and "4 of the 4 tensors optimizer 0 steps are not parameters" in stale.summary
    plain = check_optimizer_sharded(fsdp2_runs([shard_event(), shards(60, dtensors=3)], [shard_event(), shards(40)]))
    assert plain.status == FAIL and "1 parameters that are not DTensor shards" in plain.summary
    assert check_optimizer_sharded(fsdp2_runs([shards(100)], [shards(100)])).status == NA  # never sharded


def saved_tensors_event(path, tensors):
    return {"ev": "save", "path": path, "abs": f"/run/{path}", "scope": "cwd", "tensors": tensors}


def test_full_checkpoint_compares_names_shapes_and_kinds_with_the_original():
    full = {"layers.0.weight": [[4, 2], "Tensor"], "head.weight": [[1, 4], "Tensor"]}
    original = [saved_tensors_event("model.pt", full)]
    good = check_full_checkpoint(fsdp2_runs([saved_tensors_event("model.pt", full)], [], original))
    assert good.status == PASS and good.summary.startswith("model.pt: the original's 2 tensors")
    shards_saved = {"layers.0.weight": [[2, 2], "DTensor"], "head.weight": [[1, 4], "DTensor"]}
    sharded = check_full_checkpoint(fsdp2_runs([saved_tensors_event("model.pt", shards_saved)], [], original))
    assert sharded.status == FAIL and "saved as DTensor shards" in sharded.summary
    half = {**full, "layers.0.weight": [[2, 2], "Tensor"]}
    assert "has shape (2, 2), the original's (4, 2)" in check_full_checkpoint(
        fsdp2_runs([saved_tensors_event("model.pt", half)], [], original)).summary
    prefixed = {f"module.{key}": value for key, value in full.items()}
    assert "keys differ" in check_full_checkpoint(
        fsdp2_runs([saved_tensors_event("model.pt", prefixed)], [], original)).summary
    assert "not by rank 0 under torchrun" in check_full_checkpoint(fsdp2_runs([], [], original)).summary
    assert check_full_checkpoint(fsdp2_runs([], [])).status == NA  # the original saves nothing
    # --checkpoint dcp: the path is a folder of shards, by design.
    dcp = [{"ev": "write", "path": "model.pt/.metadata.tmp", "abs": "/run/model.pt/.metadata.tmp", "scope": "cwd"}]
    runs = fsdp2_runs(dcp, [], original)
    runs[TORCHRUN].workdir = "/run"
    assert check_full_checkpoint(runs).status == NA


def test_one_writer_lets_each_rank_write_its_own_dcp_shard_and_no_other_file():
    def write(path):
        return {"ev": "write", "path": path, "abs": f"/run/{path}", "scope": "cwd", "where": "train.py:9", "t": 1.0}

    own = {0: [write("ckpt.pt/__0_0.distcp"), write("ckpt.pt/.metadata.tmp")], 1: [write("ckpt.pt/__1_0.distcp")]}
    assert check_one_writer(RunSet({TORCHRUN: make_run(TORCHRUN, own)})).status == PASS
    other = {0: [write("ckpt.pt/__0_0.distcp")], 1: [write("ckpt.pt/__0_0.distcp")]}
    result = check_one_writer(RunSet({TORCHRUN: make_run(TORCHRUN, other)}))
    assert "rank 1 wrote ckpt.pt/__0_0.distcp" in result.summary
    metadata = {0: [write("ckpt.pt/__0_0.distcp")], 1: [write("ckpt.pt/.metadata.tmp")]}
    assert check_one_writer(RunSet({TORCHRUN: make_run(TORCHRUN, metadata)})).status == FAIL
