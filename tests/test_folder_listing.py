"""ddpify/folder_listing.py: a folder's listing is kept while its mtime stays, and never when
the mtime is recent enough that a second change could have left it where it was."""
import os
import time

from ddpify import folder_listing


def _age(folder, seconds):
    past = time.time_ns() - seconds * 1_000_000_000
    os.utime(folder, ns=(past, past))


def test_a_listing_gives_sorted_entries_and_the_names_asked_for_most(tmp_path):
    (tmp_path / "b.py").write_text("")
    (tmp_path / "a.py").mkdir()  # a folder named like a module: found by glob("*.py"), not a file
    (tmp_path / "README").write_text("")
    (tmp_path / "pkg").mkdir()
    listed = folder_listing.listing(str(tmp_path))
    assert [entry.name for entry in listed.entries] == ["README", "a.py", "b.py", "pkg"]
    assert listed.named_py == ("a.py", "b.py")
    assert listed.python_files == ("b.py",)
    assert listed.folders == ("a.py", "pkg")
    assert folder_listing.listing(str(tmp_path / "missing")).entries == ()


def test_an_entry_added_just_now_is_listed_at_once(tmp_path):
    assert folder_listing.listing(str(tmp_path)).entries == ()
    (tmp_path / "train.py").write_text("")
    assert folder_listing.python_files(str(tmp_path)) == [str(tmp_path / "train.py")]


def test_a_listing_is_kept_while_the_folder_is_unchanged_and_read_again_when_it_changes(tmp_path):
    (tmp_path / "train.py").write_text("")
    _age(tmp_path, 60)
    first = folder_listing.listing(str(tmp_path))
    assert folder_listing.listing(str(tmp_path)) is first  # kept: the stamp is old and has not moved
    (tmp_path / "utils.py").write_text("")
    _age(tmp_path, 30)  # a change moves the mtime (to another old stamp here, so it may be kept)
    assert folder_listing.listing(str(tmp_path)).python_files == ("train.py", "utils.py")


def test_a_recent_stamp_is_never_trusted(tmp_path):
    (tmp_path / "train.py").write_text("")
    first = folder_listing.listing(str(tmp_path))
    assert folder_listing.listing(str(tmp_path)) is not first  # read again: within the racy window
    assert folder_listing.listing(str(tmp_path)) == first
