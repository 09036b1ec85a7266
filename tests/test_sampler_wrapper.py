"""The DistributedSamplerWrapper ddpify emits (rules/data.py) shards what a sampler of the
script's own draws: the ranks together take each drawn index once (padded like
DistributedSampler), the same number each, in a new order every epoch."""
import pytest
import torch
from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler

from ddpify.rules.data import SAMPLER_WRAPPER_HELPER


def _wrapper_class(world_size, rank):
    class OneRankOf(DistributedSampler):
        """DistributedSampler as rank `rank` of `world_size` sees it, without a process group."""

        def __init__(self, dataset, shuffle):
            super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)

    namespace = {"torch": torch, "DistributedSampler": OneRankOf}
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
    subset = list(range(100, 131))  # 31 indices: not a multiple of 2 or 3
    shares = _shares(lambda: SubsetRandomSampler(subset), world_size, epoch=0)
    assert len({len(share) for share in shares}) == 1
    drawn = [index for share in shares for index in share]
    assert set(drawn) == set(subset)
    assert len(drawn) - len(subset) < world_size  # only DistributedSampler's padding repeats


def test_each_epoch_draws_a_new_order_and_every_rank_draws_alike():
    subset = list(range(40))
    first = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=0)
    again = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=0)
    second = _shares(lambda: SubsetRandomSampler(subset), 2, epoch=1)
    assert first == again
    assert first != second


def test_a_weighted_sampler_keeps_its_length_across_the_ranks():
    weights = torch.tensor([0.1] * 90 + [5.0] * 10)
    shares = _shares(lambda: WeightedRandomSampler(weights, num_samples=50, replacement=True), 2, epoch=3)
    assert [len(share) for share in shares] == [25, 25]
    assert sum(index >= 90 for share in shares for index in share) > 25  # the rare class, drawn often
