"""Rank-0 side effects: the cases the fixtures do not show."""
from snippets import HEAD, codes

from ddpify.api import migrate_source


def test_reading_a_file_is_not_guarded():
    source = HEAD + 'with open("labels.txt") as f:\n    names = f.read().split()\n'
    result = migrate_source(source)
    assert 'if is_main:\n    with open("labels.txt")' not in result.code
    assert "DDP302" not in codes(source)


def test_writer_passed_to_a_function_that_logs_is_made_on_rank_0_only():
    source = HEAD + (
        "from torch.utils.tensorboard import SummaryWriter\n"
        "writer = SummaryWriter()\n"
        "def log(writer, value):\n    writer.add_scalar('x', value)\n"
        "for x in loader:\n    optimizer.step()\n    log(writer, 1.0)\n"
    )
    assert "DDP307" not in codes(source)
    code = migrate_source(source).code
    assert "writer = SummaryWriter() if is_main else None" in code
    assert "def log(writer, value):\n    if is_main:\n        writer.add_scalar('x', value)" in code
    assert "    log(writer, 1.0)\n" in code


def test_writer_passed_to_a_function_that_does_more_is_left_on_every_rank():
    source = HEAD + (
        "from torch.utils.tensorboard import SummaryWriter\n"
        "writer = SummaryWriter()\n"
        "def log(writer, value):\n    print(writer.log_dir, value)\n"
        "for x in loader:\n    optimizer.step()\n    log(writer, 1.0)\n"
    )
    assert "DDP307" in codes(source)
    assert "if is_main:\n    writer = SummaryWriter()" not in migrate_source(source).code


def test_print_that_runs_the_model_runs_it_on_every_rank_first():
    source = HEAD + "for x in loader:\n    optimizer.step()\nprint(model(torch.ones(1)))\n"
    assert "DDP308" in codes(source)
    assert "model_value = model(torch.ones(1))\nif is_main:\n    print(model_value)" in migrate_source(source).code


def test_a_model_run_inside_a_comprehension_stays_on_every_rank():
    source = HEAD + "for x in loader:\n    optimizer.step()\nprint([model(torch.ones(1)) for _ in range(2)])\n"
    assert "print([model(torch.ones(1)) for _ in range(2)])" in migrate_source(source).code
    assert "if is_main:\n    print([model" not in migrate_source(source).code


def test_tqdm_with_disable_is_left_alone():
    source = HEAD + "from tqdm import tqdm\nfor x in tqdm(loader, disable=True):\n    optimizer.step()\n"
    assert "tqdm(loader, disable=True)" in migrate_source(source).code
