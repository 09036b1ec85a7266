"""`model = torch.compile(model)` under --strategy fsdp2 (DDP110): each block is compiled
before its shard, as torchtitan does, and the root is not; checked on a real torchrun run
with compile on (the generic fixture run turns compile off: on the CPU it takes minutes)."""
import re

import pytest
from fixture_cases import FIXTURES
from script_runs import run_torchrun

COMPILED = FIXTURES / "fsdp2" / "compiled_blocks"


def forward_lines(source: str) -> dict[str, int]:
    """The line of each class's forward, by class name."""
    lines, found, current = source.splitlines(), {}, None
    for number, line in enumerate(lines, start=1):
        match = re.match(r"class (\w+)", line)
        current = match.group(1) if match else current
        if line.strip().startswith("def forward("):
            found[current] = number
    return found


def test_each_block_is_compiled_before_its_shard_and_the_root_only_as_a_group_of_one():
    expected = (COMPILED / "expected.py").read_text()
    assert "for block in model.blocks:\n            block.compile()" in expected
    assert expected.index("block.compile()") < expected.index("fully_shard(block)")
    assert "    if not distributed:  # as a group of one; under torchrun each block was compiled\n" \
           "        model = torch.compile(model)\n" in expected


@pytest.mark.slow
def test_torchrun_traces_the_block_once_and_never_the_root(tmp_path):
    run = run_torchrun(COMPILED / "expected.py", tmp_path / "torchrun", timeout=600, env={"TORCH_LOGS": "dynamo"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.lines[-1].startswith("epoch 2: loss ")
    lines = forward_lines((COMPILED / "expected.py").read_text())
    traced = re.findall(r"\[rank(\d)\].*torchdynamo start tracing forward \S+:(\d+)", run.stderr)
    # One graph per rank, the block's, shared by the three blocks (no recompile), none of the root.
    block = str(lines["ResidualBlock"])
    assert sorted(traced) == [("0", block), ("1", block)], run.stderr[-3000:]
