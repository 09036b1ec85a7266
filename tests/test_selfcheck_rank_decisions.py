"""Self-check DDP939 (ddpify/selfcheck/rank_decisions.py): a decision every rank must take alike,
read from a value each rank computes on its own. Each case is a fixture's expected output, silent
as it is, and found once the collective that makes the ranks agree is taken out of it."""
import re
from pathlib import Path

import pytest

from ddpify.diagnostics import Diagnostic
from ddpify.selfcheck import check

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# (fixture, what makes the ranks agree in its expected output, the same output without it)
STRIPPED = [
    # A stop on the last batch's loss read in the epoch loop's test (DDP419).
    ("numerics/stop_when_the_last_batch_loss_is_below_a_threshold", "rank0_value(loss.item())", "loss.item()"),
    ("numerics/while_loop_trains_until_the_loss_is_below_eps", "rank0_value(loss.item())", "loss.item()"),
    ("numerics/stop_on_the_last_loss_kept_by_the_batch_loop", "rank0_value(last_loss)", "last_loss"),
    ("numerics/while_loop_trains_until_the_time_budget_is_spent", "rank0_value(time.monotonic() - started)",
     "time.monotonic() - started"),
    # Epoch sums training.py all-reduces: the mean loss, the running accuracy, a meter.
    ("numerics/target_on_the_epoch_mean_loss_stops_every_rank", "dist.all_reduce(totals)", "pass"),
    ("numerics/running_training_accuracy_target_stops_every_rank", "dist.all_reduce(totals)", "pass"),
    ("numerics/early_stop_on_average_meter_in_epoch_loop", "dist.all_reduce(totals)", "pass"),
    # A budget on rank 0's clock, broadcast.
    ("numerics/wall_clock_budget_break", "dist.broadcast(decision, src=0)", "pass"),
    # What a function that trains returns, taken as rank 0's (DDP415): a tuple, a list fed, a name.
    ("numerics/stop_when_train_function_result_is_small", "rank0_value(run_epoch())", "run_epoch()"),
    ("numerics/loss_history_appended_from_the_train_function_decides_a_stop",
     "rank0_value(train_epoch(model, loader, optimizer))", "train_epoch(model, loader, optimizer)"),
    ("numerics/early_stop_on_loss_a_train_function_returns",
     "rank0_value(train_one_epoch(model, loader, optimizer, device))",
     "train_one_epoch(model, loader, optimizer, device)"),
    # A plateau scheduler stepped on the mean over the ranks (DDP409).
    ("numerics/plateau_scheduler_on_last_batch_loss", "mean_over_ranks(loss)", "loss"),
]


def _case(name):
    folder = FIXTURES / name
    diagnostics = []
    for line in (folder / "expected.txt").read_text().splitlines():
        found = re.match(r"[^:]+:(\d+):(\d+): (DDP\d+) (.*)", line)
        if found:
            diagnostics.append(Diagnostic(found[3], int(found[1]), int(found[2]), found[4]))
    return (folder / "input.py").read_text(), (folder / "expected.py").read_text(), diagnostics


def _found(original, migrated, diagnostics):
    return [d for d in check(original, migrated, diagnostics) if d.code == "DDP939"]


@pytest.mark.parametrize(("name", "agreed", "per_rank"), STRIPPED, ids=[case[0].split("/")[1] for case in STRIPPED])
def test_the_decision_is_found_once_the_ranks_no_longer_agree(name, agreed, per_rank):
    original, expected, diagnostics = _case(name)
    assert _found(original, expected, diagnostics) == []
    assert agreed in expected, "the expected output changed: strip its collective anew"
    assert len(_found(original, expected.replace(agreed, per_rank, 1), diagnostics)) == 1


def test_a_decision_the_migration_reported_is_not_said_twice():
    original, expected, diagnostics = _case("numerics/while_loop_trains_until_the_loss_is_below_eps")
    broken = expected.replace("rank0_value(loss.item())", "loss.item()")
    line = next(d.line for d in diagnostics if d.code == "DDP419")
    reported = [Diagnostic("DDP902", line, 1, "rank-divergent control flow may hang a collective")]
    assert _found(original, broken, reported) == []


LOOP = '''import time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")


def reduce_mean(tensor):
    reduced = tensor.detach().clone()
    dist.all_reduce(reduced)
    return reduced / dist.get_world_size()


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
best, bad, start = 1e9, 0, time.time()
for epoch in range(30):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
{decision}
'''


@pytest.mark.parametrize("decision", [
    "    if loss < 0.1:\n        break",
    "    scheduler.step(loss.item())",
    "    for group in optimizer.param_groups:\n        group['lr'] = 0.1 * loss.item()",
    "    if loss.item() < best:\n        best, bad = loss.item(), 0\n    else:\n        bad += 1\n"
    "    if bad >= 3:\n        break",
    "    if loss.item() < best:\n        best = loss.item()\n        torch.save(model.state_dict(), 'b.pt')\n"
    "    else:\n        model.load_state_dict(torch.load('b.pt'))",
    "    if time.time() - start > 60:\n        break",
    "    if loss.item() > best:\n        scheduler.step()",
    "        if loss.item() < 0.05:\n            break",
])
def test_each_kind_of_decision_on_this_ranks_batches_is_found(decision):
    assert len(_found("", LOOP.format(decision=decision), [])) == 1


@pytest.mark.parametrize("decision", [
    # Alike on every rank: the epoch, a constant, a figure gathered or taken from rank 0.
    "    if epoch == 10:\n        break",
    "    reduced = loss.detach().clone()\n    dist.all_reduce(reduced)\n"
    "    if reduced.item() / 2 < 0.1:\n        break",
    "    if every_rank(loss.item())[0] < 0.1:\n        break",
    "    if reduce_mean(loss).item() < 0.1:\n        break",
    # The size of a batch: each rank's sampler hands it batches of the same sizes.
    "        if x.shape[0] < 8:\n            break",
    # Printed only, or stopping nothing that trains.
    "    if loss.item() < 0.1:\n        print('low')",
])
def test_a_decision_every_rank_takes_alike_is_not_found(decision):
    assert _found("", LOOP.format(decision=decision), []) == []


def test_a_skip_of_the_backward_on_this_ranks_loss_is_found_and_one_after_it_is_not():
    before = LOOP.format(decision="").replace(
        "        optimizer.zero_grad()\n",
        "        if loss.item() > 10:\n            continue\n        optimizer.zero_grad()\n")
    after = LOOP.format(decision="        if loss.item() > 10:\n            continue\n        print(loss.item())")
    assert len(_found("", before, [])) == 1
    assert _found("", after, []) == []
