"""`# ddpify: ignore[CODE]` comments (issue 18, item 5): what they silence, and DDP920."""
from cli_support import FIXTURES, invoke, write

from ddpify.api import migrate_source
from ddpify.diagnostics import Diagnostic
from ddpify.options import Options
from ddpify.suppressions import apply

# DDP208 and DDP904 at line 17 (the `for i in range(0, len(X), batch_size)` loop).
UNSEEDED = (FIXTURES / "hand_batches" / "manual_batch_slicing_unseeded_reported" / "input.py").read_text()
LOOP = "    for i in range(0, len(X), batch_size):\n"


def _with_comment(comment: str) -> str:
    assert LOOP in UNSEEDED
    return UNSEEDED.replace(LOOP, LOOP.rstrip("\n") + f"  {comment}\n")


def _codes(diagnostics):
    return [(d.code, d.line) for d in diagnostics]


def test_codes_on_the_line_silence_those_codes_only():
    result = migrate_source(_with_comment("# ddpify: ignore[DDP208]"))
    assert _codes(result.diagnostics) == [("DDP904", 17)]
    commented = _with_comment("# ddpify: ignore[DDP208, ddp904]")
    silenced = migrate_source(commented)
    assert silenced.diagnostics == () and silenced.unused_suppressions == ()
    assert silenced.code == commented  # reporting only: still left single-process


def test_bare_comment_and_prefix_silence_every_matching_code():
    assert migrate_source(_with_comment("# ddpify: ignore")).diagnostics == ()
    assert migrate_source(_with_comment("# noqa  # ddpify: ignore[DDP2,DDP9]")).diagnostics == ()


def test_text_that_is_no_comment_silences_nothing():
    text = _with_comment("").replace(LOOP, '    note = "# ddpify: ignore"\n' + LOOP)
    assert {d.code for d in migrate_source(text).diagnostics} == {"DDP208", "DDP904"}


def test_statement_first_line_covers_its_other_lines():
    code = ("total = compute(  # ddpify: ignore[DDP207]\n"
            "    a,\n"
            "    sampler=s,\n"
            ")\n"
            "for x in y:\n"
            "    pass  # ddpify: ignore[DDP205]\n")
    on_third_line = Diagnostic("DDP207", 3, 5, "existing sampler= left as is")
    in_loop_body = Diagnostic("DDP205", 5, 1, "IterableDataset ...")
    filtered = apply(code, [on_third_line, in_loop_body])
    # The call's first line covers line 3; a comment in a loop's body does not cover its header.
    assert filtered.kept == (in_loop_body,)
    assert _codes(filtered.unused) == [("DDP920", 6)]


def test_unused_suppressions_say_why():
    code = ("x = 1  # ddpify: ignore\n"
            "y = 2  # ddpify: ignore[DDP208,DDP301,DDP2O8,DDP006]\n")
    messages = [d.message for d in apply(code, []).unused]
    assert messages == [
        "unused suppression: nothing is reported here",
        "unused suppression: no DDP208 diagnostic on this line or its statement",
        "unused suppression: DDP301 is a rewrite, which a comment does not stop",
        "unused suppression: DDP2O8 is no rule code (see ddpify --list-rules)",
        "unused suppression: DDP006 is retired and never reported",
    ]


def test_ignore_option_does_not_make_a_comment_unused():
    result = migrate_source(_with_comment("# ddpify: ignore[DDP208]"), Options(ignore=("DDP2",)))
    assert result.unused_suppressions == ()


def test_command_line_exit_codes(tmp_path):
    script = write(tmp_path / "train.py", _with_comment("# ddpify: ignore[DDP208,DDP904]"))
    assert invoke(script).exit_code == 0
    assert invoke("--check", script).exit_code == 0  # left single-process: nothing to change

    stale = write(tmp_path / "stale.py", _with_comment("# ddpify: ignore[DDP208,DDP904,DDP205]"))
    written = invoke(stale)
    assert written.exit_code == 0 and "DDP920" not in written.stderr  # migrating never fails on it
    checked = invoke("--check", stale)
    assert checked.exit_code == 1
    assert f"{stale}:17:45: warning: DDP920 unused suppression: no DDP205" in checked.stderr
    assert invoke("--check", "--ignore", "DDP920", stale).exit_code == 0


def test_explain_mentions_the_comment():
    text = invoke("--explain", "DDP208").stdout
    assert "# ddpify: ignore[DDP208]" in text and "DDP920" in text
    assert "ddpify: ignore" not in invoke("--explain", "DDP101").stdout  # an edit: no comment stops it
