"""The emitted `every_rank` helper (emit/collectives.py): every rank's value, in rank order,
with its tensors back as they were sent (dtype, shape) on this rank's own device of their
type, and no torch.save on the way: a save on every rank reads as every rank writing a
checkpoint, to the reader of the script and to a checker that watches torch.save."""
import io
import pickle

import torch
import torch.distributed as dist

from ddpify.emit.collectives import HELPER


def _every_rank(tmp_path, monkeypatch):
    def no_save(*args, **kwargs):
        raise AssertionError("every_rank called torch.save")

    monkeypatch.setattr(torch, "save", no_save)
    namespace = {"dist": dist, "io": io, "pickle": pickle, "torch": torch}
    exec(HELPER, namespace)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    return namespace["every_rank"]


def test_values_and_tensors_come_back_as_sent_without_a_save(tmp_path, monkeypatch):
    try:
        every_rank = _every_rank(tmp_path, monkeypatch)
        sent = {"loss": 1.25, "correct": torch.tensor(7), "sums": torch.tensor([0.1, 0.2], dtype=torch.float64),
                "none": torch.zeros(0, 3), "flags": [torch.tensor([True, False]), (3, "a")],
                "half": torch.ones(2, 2, dtype=torch.bfloat16, requires_grad=True)}
        [back] = every_rank(sent)
    finally:
        dist.destroy_process_group()
    assert back["loss"] == 1.25 and back["flags"][1] == (3, "a")
    for key in ("correct", "sums", "none", "half"):
        assert back[key].dtype == sent[key].dtype and back[key].shape == sent[key].shape
        assert torch.equal(back[key], sent[key].detach())
    assert torch.equal(back["flags"][0], sent["flags"][0])
    assert not back["half"].requires_grad
