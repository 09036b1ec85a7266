"""The DatasetSplit ddpify emits (rules/subset_splits.py) for a SubsetRandomSampler's split read
through `loader.dataset`: the split's samples by position for a DistributedSampler, the dataset's
own attributes read through, and nothing that breaks pickling (DataLoader workers) or copies."""
import copy
import pickle

import pytest
from script_runs import IMPORTS_TORCH

from ddpify.rules.subset_splits import SPLIT_HELPER

# torch is imported in the tests, not when the module is collected (script_runs.IMPORTS_TORCH).
pytestmark = IMPORTS_TORCH


class Labelled:
    """A dataset with attributes of its own, as torchvision's have (`classes`, `transform`)."""

    def __init__(self, n):
        self.classes = ["a", "b"]
        self.items = list(range(n))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index] * 10


def _split_class():
    from torch.utils.data import Subset

    # Defined in this module, as the emitted class is in the script's: pickle finds it by name.
    namespace = {"Subset": Subset, "__name__": __name__}
    exec(SPLIT_HELPER, namespace)
    globals()["DatasetSplit"] = namespace["DatasetSplit"]
    return namespace["DatasetSplit"]


def test_the_ranks_take_the_split_once_by_position():
    from torch.utils.data.distributed import DistributedSampler

    indices = [7, 3, 11, 5, 0]
    split = _split_class()(Labelled(12), indices)
    drawn = []
    for rank in range(2):
        sampler = DistributedSampler(split, num_replicas=2, rank=rank, shuffle=True)
        sampler.set_epoch(1)
        drawn += [split[position] for position in sampler]
    assert set(drawn) == {index * 10 for index in indices}
    assert len(drawn) == 6  # one padding repeat: 5 samples on 2 ranks


def test_the_datasets_attributes_read_through_and_the_subsets_own_stay():
    dataset = Labelled(4)
    split = _split_class()(dataset, [1, 2])
    assert split.classes is dataset.classes
    assert split.dataset is dataset and list(split.indices) == [1, 2]
    assert len(split) == 2
    with pytest.raises(AttributeError):
        split.missing  # noqa: B018 (the read is the test)


def test_it_pickles_and_copies_for_loader_workers():
    split = _split_class()(Labelled(6), [5, 0])
    for twin in (pickle.loads(pickle.dumps(split)), copy.deepcopy(split), copy.copy(split)):
        assert [twin[0], twin[1]] == [50, 0]
        assert twin.classes == ["a", "b"]
