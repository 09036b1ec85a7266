"""The training loop: accumulation and epoch figures, the cases the fixtures do not show."""
from ddpify.api import migrate_source
from snippets import HEAD, codes


def test_step_condition_computed_from_the_loss_is_reported_as_rank_divergent():
    source = HEAD + (
        "for i, x in enumerate(loader):\n"
        "    loss = model(x).sum()\n"
        "    loss.backward()\n"
        "    if loss.item() < 1:\n"
        "        optimizer.step()\n"
    )
    assert "DDP902" in codes(source)
    assert "no_sync" not in migrate_source(source).code


def test_step_behind_a_flag_is_not_accumulation():
    source = HEAD + (
        "for i, x in enumerate(loader):\n"
        "    loss = model(x).sum()\n"
        "    loss.backward()\n"
        "    if args.update:\n"
        "        optimizer.step()\n"
    )
    assert not set(codes(source)) & {"DDP401", "DDP404", "DDP902"}
    assert "no_sync" not in migrate_source(source).code


def test_unconditional_step_gets_no_no_sync():
    source = HEAD + "for x in loader:\n    model(x).sum().backward()\n    optimizer.step()\n"
    assert "no_sync" not in migrate_source(source).code


def test_counts_not_used_after_the_loop_are_not_reduced():
    source = HEAD + (
        "for epoch in range(2):\n"
        "    seen = 0\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        optimizer.step()\n"
        "        seen += 1\n"
    )
    assert "all_reduce" not in migrate_source(source).code


def test_break_on_a_reduced_epoch_figure_is_not_reported():
    source = HEAD + (
        "for epoch in range(2):\n"
        "    total = 0.0\n"
        "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss.item()\n"
        "    if total / len(loader) < 0.1:\n"
        "        break\n"
    )
    assert "DDP902" not in codes(source)
    assert "dist.all_reduce(totals)" in migrate_source(source).code
