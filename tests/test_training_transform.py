"""The training loop: accumulation and epoch figures, the cases the fixtures do not show."""
from snippets import HEAD, codes

from ddpify.api import migrate_source


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


def test_a_generator_updated_every_nth_batch_is_not_gradient_accumulation():
    """A WGAN trains its critic every batch and its generator every n-th batch: the
    generator's backward goes with its step, so nothing accumulates (was a false DDP404)."""
    source = """\
import torch
from torch.utils.data import DataLoader
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
generator = torch.nn.Linear(1, 1).to(device)
critic = torch.nn.Linear(1, 1).to(device)
optimizer_g = torch.optim.RMSprop(generator.parameters(), lr=5e-5)
optimizer_d = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
for epoch in range(2):
    for i, x in enumerate(loader):
        x = x.float().view(-1, 1).to(device)
        optimizer_d.zero_grad()
        d_loss = critic(generator(x).detach()).mean() - critic(x).mean()
        d_loss.backward()
        optimizer_d.step()
        if i % 5 == 0:
            optimizer_g.zero_grad()
            g_loss = -critic(generator(x)).mean()
            g_loss.backward()
            optimizer_g.step()
"""
    result = migrate_source(source)
    assert "DDP404" not in {d.code for d in result.diagnostics}
    assert "no_sync" not in result.code


def _reduced(increment: str) -> str:
    """The line that reads `figure` back after the epoch's all-reduce, for `figure += increment`
    on a sum that starts from the integer 0."""
    source = HEAD + (
        "for epoch in range(2):\n"
        "    figure = 0\n"
        "    for x, y in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        f"        figure += {increment}\n"
        "    print(figure)\n"
    )
    return next(line.strip() for line in migrate_source(source).code.splitlines()
                if line.strip().startswith("figure = ") and "totals" in line)


def test_a_count_started_from_zero_is_read_back_as_an_int():
    for count in ("(model(x).argmax(1) == y).sum().item()", "y.size(0)", "len(y)", "y.shape[0]",
                  "model(x).argmax(1).eq(y).sum().item()"):
        assert _reduced(count) == "figure = int(totals[0])", count


def test_a_float_sum_started_from_zero_stays_a_float():
    # int() would cut the fraction off the summed loss (printed 1.0625 for 1.17).
    for value in ("loss.item() * x.size(0)", "(loss * y.shape[0]).item()", "loss.item() / len(y)",
                  "(model(x).argmax(1) == y).float().sum().item()"):
        assert _reduced(value) == "figure = totals[0].item()", value


def test_a_division_after_the_name_is_bound_again_is_another_figure():
    # After the epoch loop `total` is an evaluation's own sum: its `/ len(...)` says nothing of
    # the training sum, which is no mean of batch means.
    source = HEAD + (
        "for epoch in range(2):\n"
        "    total = 0.0\n"
        "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss.item()\n"
        "    print(total)\n"
        "total = 0.0\n"
        "for x in loader:\n"
        "    total += 1.0\n"
        "print(total / len(loader))\n"
    )
    code = migrate_source(source).code
    assert "total = totals[0].item()\n" in code
    assert "get_world_size()" not in code


def test_a_mean_taken_after_the_epoch_loop_is_the_mean_of_the_ranks_sums():
    source = HEAD + (
        "for epoch in range(2):\n"
        "    total = 0.0\n"
        "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss.item()\n"
        "print(total / len(loader))\n"
    )
    assert "total = totals[0].item() / dist.get_world_size()" in migrate_source(source).code


def test_a_count_of_this_ranks_batches_or_samples_makes_the_mean_of_the_ranks_sums():
    for before, divisor in (("num_batches = len(loader)\n", "num_batches"), ("", "len(loader.sampler)"),
                            ("n = len(loader.sampler)\n", "n")):
        source = HEAD + before + (
            "for epoch in range(2):\n"
            "    total = 0.0\n"
            "    for x in loader:\n"
            "        loss = model(x).sum()\n"
            "        loss.backward()\n"
            "        optimizer.step()\n"
            "        total += loss.item()\n"
            f"    print(total / {divisor})\n"
        )
        assert "total = totals[0].item() / dist.get_world_size()" in migrate_source(source).code, divisor


def test_a_division_by_the_whole_dataset_takes_the_sum_as_it_is():
    source = HEAD + (
        "for epoch in range(2):\n"
        "    total = 0.0\n"
        "    for x in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss.item() * len(x)\n"
        "    print(total / len(loader.dataset))\n"
    )
    assert "total = totals[0].item()\n" in migrate_source(source).code


def test_an_attribute_set_on_the_model_by_a_helper_is_set_on_the_module():
    source = HEAD + (
        "def reset_state(net):\n"
        "    net.hidden = None\n"
        "for epoch in range(2):\n"
        "    reset_state(model)\n"
        "    model.step_size = 0.1 * epoch\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        optimizer.step()\n"
    )
    code = migrate_source(source).code
    assert 'getattr(net, "module", net).hidden = None' in code
    assert 'getattr(model, "module", model).step_size = 0.1 * epoch' in code
