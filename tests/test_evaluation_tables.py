"""Tables an evaluation loop fills, the cases the fixtures do not show: which are summed
across ranks (the loader sharded) and which keep the whole set on every rank (DDP203)."""
from snippets import HEAD

from ddpify.api import migrate_source

EVALUATION = HEAD + """val_loader = DataLoader(list(range(40)), batch_size=4)
for epoch in range(2):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
    {table} = {start}
    hits = 0
    with torch.no_grad():
        for x in val_loader:
            hits += (model(x) > 0).sum().item()
            {update}
    print(hits, {table})
"""


def _migrated(table: str, start: str, update: str) -> tuple[str, set[str]]:
    result = migrate_source(EVALUATION.format(table=table, start=start, update=update))
    return result.code, {d.code for d in result.diagnostics}


def test_a_matrix_of_zeros_written_out_is_summed_across_ranks():
    code, found = _migrated("confusion", "[[0, 0], [0, 0]]", "confusion[0][1] += 1")
    assert "DDP203" not in found
    assert "confusion = [[sum(cells) for cells in zip(*rows)]" in code


def test_a_table_that_does_not_start_at_zero_stays_whole():
    # Summed across ranks, each rank's starting 1 would be counted once per rank.
    for start in ("[1] * 3", "[[1] * 2 for _ in range(2)]", "{c: 1 for c in range(2)}"):
        update = "counts[0][1] += 1" if start.startswith("[[") else "counts[0] += 1"
        code, found = _migrated("counts", start, update)
        assert "DDP203" in found, start
        assert "evaluation_shard" not in code, start


def test_an_item_of_an_outer_value_updated_in_place_keeps_the_whole_set():
    for start, update in (("{0: [], 1: []}", "groups[0].append(x.sum().item())"),
                          ("{}", "groups.setdefault(0, []).append(1)"),
                          ("[[0] * 2] * 2", "groups[0][1] += 1")):
        code, found = _migrated("groups", start, update)
        assert "DDP203" in found, update
        assert "evaluation_shard" not in code, update


def test_a_table_read_only_after_the_epoch_loop_is_still_gathered():
    # The next epoch starts the table afresh, but the code after the epoch loop reads the last one.
    source = EVALUATION.format(table="confusion", start="[[0] * 2 for _ in range(2)]",
                               update="confusion[1][0] += 1").replace("    print(hits, confusion)\n", "")
    code = migrate_source(source + "print(confusion)\n").code
    assert "confusion = [[sum(cells)" in code
