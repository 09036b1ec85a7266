"""The DistributedSamplerWrapper ddpify emits (rules/data.py) shards what a sampler of the
script's own draws: the ranks together take each drawn index once (padded like
DistributedSampler), the same number each, in a new order every epoch."""
import itertools

import pytest
from script_runs import IMPORTS_TORCH

from ddpify.rules.data import SAMPLER_WRAPPER_HELPER

# torch is imported in the tests, not when the module is collected (script_runs.IMPORTS_TORCH).
pytestmark = IMPORTS_TORCH


def _wrapper_class(world_size, rank):
    import torch
    from torch.utils.data.distributed import DistributedSampler

    class OneRankOf(DistributedSampler):
        """DistributedSampler as rank `rank` of `world_size` sees it, without a process group."""

        def __init__(self, dataset, shuffle):
            super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)

    namespace = {"torch": torch, "itertools": itertools, "DistributedSampler": OneRankOf}
    exec(SAMPLER_WRAPPER_HELPER, namespace)
    return namespace["DistributedSamplerWrapper"]


def _shares(make_sampler, world_size, epoch):
    shares = []
    for rank in range(world_size):
        wrapper = _wrapper_class(world_size, rank)(make_sampler())
        wrapper.set_epoch(epoch)
        shares.append(list(wrapper))
        assert len(wrapper) == len(shares[-1])
    return shares


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_ranks_split_one_draw_of_a_subset_sampler(world_size):
    from torch.utils.data import SubsetRandomSampler

    subset = list(range(100, 131))  # 31 indices: not a multiple of 2 or 3
    shares = _shares(lambda: SubsetRandomSampler(subset), world_size, epoch=0)
    assert len({len(share) for share in shares}) == 1
    drawn = [index for share in shares for index in share]
    assert set(drawn) == set(subset)
    assert len(drawn) - len(subset) < world_size  # only DistributedSampler's padding repeats


def test_each_epoch_draws_a_new_order_and_every_rank_draws_alike():
    from torch.utils.data import SubsetRandomSampler

    subset = list(range(40))
    first = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=0)
    again = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=0)
    second = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=1)
    assert first == again
    assert first != second


def test_a_weighted_sampler_keeps_its_length_across_the_ranks():
    import torch
    from torch.utils.data import WeightedRandomSampler

    weights = torch.tensor([0.1] * 90 + [5.0] * 10)
    shares = _shares(lambda: WeightedRandomSampler(weights, num_samples=50, replacement=True), 2, epoch=3)
    assert [len(share) for share in shares] == [25, 25]
    assert sum(index >= 90 for share in shares for index in share) > 25  # the rare class, drawn often


def test_a_sampler_drawing_more_than_memory_holds_is_read_as_it_draws():
    """`RandomSampler(data, replacement=True, num_samples=10**12)`, a step loop's endless
    stream: each rank takes its first indices without the whole draw being made first."""
    import torch
    from torch.utils.data import RandomSampler

    shares = []
    for rank in range(2):
        wrapper = _wrapper_class(2, rank)(RandomSampler(range(10), replacement=True, num_samples=10**12))
        wrapper.set_epoch(0)
        shares.append(list(itertools.islice(iter(wrapper), 100)))
    whole = RandomSampler(range(10), replacement=True, num_samples=200)
    whole.generator = torch.Generator().manual_seed(0)
    drawn = list(whole)
    assert shares == [drawn[0::2], drawn[1::2]]


def test_fewer_indices_than_ranks_are_padded_by_further_draws():
    from torch.utils.data import SubsetRandomSampler

    shares = _shares(lambda: SubsetRandomSampler([7]), 3, epoch=0)
    assert shares == [[7], [7], [7]]
