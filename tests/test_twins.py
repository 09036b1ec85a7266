"""A twin fixed by hand and marked so (issue 18, item 6): kept until its source changes."""
import pytest
from cli_support import NEEDS_A_PERSON, invoke, snapshot, write

from ddpify.twins import marker_line, source_hash

HAND_FIX = "# the sampler made rank-aware by hand\n"


@pytest.fixture
def pair(tmp_path, needs_a_person):
    """train.py, whose migration needs a person (DDP207), and a twin a person fixed."""
    source = write(tmp_path / "train.py", NEEDS_A_PERSON)
    twin = tmp_path / "train_ddp.py"
    assert invoke("--twin", source).exit_code == 1
    return source, twin


def _mark(twin, line):
    write(twin, line + "\n" + twin.read_text() + HAND_FIX)


def _all_checks(source, twin):
    """--twin, --twin --check and --check -o: what a hook or CI runs."""
    return [invoke("--twin", source), invoke("--twin", "--check", source),
            invoke("--check", source, "-o", twin)]


def test_marked_twin_is_kept_while_its_source_is_unchanged(pair):
    source, twin = pair
    _mark(twin, marker_line(str(source), source.read_text()))
    before = snapshot(twin)
    for result in _all_checks(source, twin):
        assert result.exit_code == 0, result.stderr
        assert "DDP207" not in result.stderr  # the person answered it in the twin
    assert snapshot(twin) == before


def test_source_changed_since_the_hand_edit_fails_and_keeps_the_twin(pair):
    source, twin = pair
    _mark(twin, marker_line(str(source), source.read_text()))
    old = source_hash(source.read_text())
    write(source, NEEDS_A_PERSON.replace("range(2)", "range(3)"))
    before = snapshot(twin)
    for result in _all_checks(source, twin):
        assert result.exit_code == 1
        assert f"{twin}: hand-edited for an older {source} (sha256:{old})" in result.stderr
        assert marker_line(str(source), source.read_text()) in result.stderr  # what to write
    assert snapshot(twin) == before  # --twin never overwrites a person's twin

    _mark(twin, marker_line(str(source), source.read_text()))  # brought up to date
    assert [r.exit_code for r in _all_checks(source, twin)] == [0, 0, 0]


def test_marker_without_hash_says_which_line_to_write(pair):
    source, twin = pair
    _mark(twin, "# ddpify: hand-edited")
    result = invoke("--twin", "--check", source)
    assert result.exit_code == 1
    assert f"make the marker read `{marker_line(str(source), source.read_text())}`" in result.stderr


def test_line_endings_do_not_change_the_hash(tmp_path):
    assert source_hash("a\r\nb\r\n") == source_hash("a\nb\n") != source_hash("a\nc\n")


def test_unmarked_hand_edit_is_stale_and_the_message_says_what_to_run(pair):
    source, twin = pair
    write(twin, twin.read_text() + HAND_FIX)
    result = invoke("--check", source, "-o", twin)
    assert result.exit_code == 1
    assert f"run ddpify {source} -o {twin} (a twin fixed by hand: add `# ddpify: hand-edited`" in result.stderr
