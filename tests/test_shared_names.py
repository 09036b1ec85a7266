"""Names made from the clock or a random draw: shared from rank 0 only where they name files."""
from snippets import HEAD, codes

from ddpify.api import migrate_source


def test_a_clock_used_for_timing_is_left_alone():
    source = "import time\n" + HEAD + (
        "start = time.time()\nfor x in loader:\n    optimizer.step()\nprint(time.time() - start)\n")
    assert "chosen_by_rank_0" not in migrate_source(source).code
    assert "DDP310" not in codes(source)


def test_a_folder_named_from_the_clock_is_rank_0s():
    source = "import os\nimport uuid\n" + HEAD + (
        "run = f'runs/{uuid.uuid4().hex}'\nos.makedirs(run, exist_ok=True)\n"
        "for x in loader:\n    optimizer.step()\ntorch.save(model.state_dict(), os.path.join(run, 'm.pt'))\n")
    assert "run = chosen_by_rank_0(f'runs/{uuid.uuid4().hex}')" in migrate_source(source).code
    assert "DDP310" in codes(source)
