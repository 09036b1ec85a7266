"""Files in and out: encodings, line endings, atomic writes, and sources of every shape."""
import os

import pytest
from cli_support import NO_TRAINING, guide_text, invoke, migrated, write

from ddpify import files
from ddpify.files import SourceError, decode, source_of_twin, twin_of, write_atomically

# -- atomic writes -------------------------------------------------------------------------

def test_write_atomically_replaces_in_one_step(tmp_path, monkeypatch):
    target = write(tmp_path / "out.py", "old\n")
    renames = []
    real_replace = os.replace

    def spy(source, destination):
        # At the moment of the rename the new bytes are complete in a temporary file
        # beside the target, and the target still holds the old ones.
        assert os.path.dirname(source) == str(tmp_path)
        with open(source, "rb") as written:
            assert written.read() == b"new\n"
        assert target.read_bytes() == b"old\n"
        renames.append((source, destination))
        real_replace(source, destination)

    monkeypatch.setattr(files.os, "replace", spy)
    write_atomically(str(target), b"new\n")
    assert target.read_bytes() == b"new\n"
    assert len(renames) == 1
    assert sorted(os.listdir(tmp_path)) == ["out.py"]


def test_failed_write_leaves_target_and_no_temporary(tmp_path, monkeypatch):
    target = write(tmp_path / "out.py", "old\n")

    def fail(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", fail)
    # The message names the target, never the temporary file.
    with pytest.raises(SourceError, match=r"out\.py: cannot write: No space left on device$"):
        write_atomically(str(target), b"new\n")
    assert target.read_bytes() == b"old\n"
    assert sorted(os.listdir(tmp_path)) == ["out.py"]


def test_new_file_gets_umask_permissions(tmp_path):
    target = tmp_path / "new.py"
    write_atomically(str(target), b"x = 1\n")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask


def test_write_into_missing_directory(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        write_atomically(str(tmp_path / "missing" / "out.py"), b"")
    assert not (tmp_path / "missing").exists()


# -- decoding the way Python does ----------------------------------------------------------

def test_decode_bom():
    assert decode(b"\xef\xbb\xbfx = 1\n", "a.py").encoding == "utf-8-sig"


def test_decode_declared_latin1():
    source = decode(b"# -*- coding: latin-1 -*-\n# caf\xe9\n", "a.py")
    assert source.encoding == "iso-8859-1"
    assert "caf\u00e9" in source.text


def test_decode_keeps_crlf():
    assert decode(b"x = 1\r\ny = 2\r\n", "a.py").text == "x = 1\r\ny = 2\r\n"


def test_decode_unknown_declared_encoding():
    with pytest.raises(SourceError, match="a.py"):
        decode(b"# -*- coding: klingon -*-\nx = 1\n", "a.py")


def test_twin_names():
    assert twin_of("train.py") == "train_ddp.py"
    assert twin_of("src/train.py") == "src/train_ddp.py"
    assert source_of_twin("src/train_ddp.py") == "src/train.py"
    assert source_of_twin("src/train.py") == "src/train.py"


# -- round trips through the command line ----------------------------------------------------

def _round_trip(tmp_path, data: bytes):
    """-o, stdout and -i on the same bytes; all three must agree."""
    source = tmp_path / "train.py"
    source.write_bytes(data)
    out = tmp_path / "out.py"
    result = invoke(source, "-o", out)
    assert result.exit_code in (0, 1), result.stderr
    in_place = tmp_path / "in_place.py"
    in_place.write_bytes(data)
    assert invoke("-i", in_place).exit_code in (0, 1)
    assert in_place.read_bytes() == out.read_bytes()
    return out.read_bytes()


@pytest.mark.parametrize("newline", ["\r\n", "\n"])
def test_unchanged_file_is_byte_exact(tmp_path, newline):
    data = NO_TRAINING.replace("\n", newline).encode()
    assert _round_trip(tmp_path, data) == data


def test_crlf_training_script_keeps_crlf(tmp_path):
    data = guide_text().replace("\n", "\r\n").encode()
    output = _round_trip(tmp_path, data)
    assert output != data
    assert output.count(b"\r\n") == output.count(b"\n")  # no bare \n crept in
    assert output.replace(b"\r\n", b"\n").decode() == migrated(guide_text())


def test_bom_is_kept(tmp_path):
    data = b"\xef\xbb\xbf" + guide_text().encode()
    output = _round_trip(tmp_path, data)
    assert output.startswith(b"\xef\xbb\xbf")
    assert output[3:].decode() == migrated(guide_text())


def test_bom_dropped_on_stdout_only(tmp_path):
    source = tmp_path / "train.py"
    source.write_bytes(b"\xef\xbb\xbf" + guide_text().encode())
    assert invoke(source).stdout_bytes == migrated(guide_text()).encode()


def test_unchanged_bom_file_is_byte_exact(tmp_path):
    data = b"\xef\xbb\xbf" + NO_TRAINING.encode()
    assert _round_trip(tmp_path, data) == data


def test_latin1_declared_training_script(tmp_path):
    text = "# -*- coding: latin-1 -*-\n# Entra\u00eenement: \u00e9poques\n" + guide_text()
    output = _round_trip(tmp_path, text.encode("latin-1"))
    with pytest.raises(UnicodeDecodeError):
        output.decode("utf-8")
    assert output.decode("latin-1") == migrated(text)


def test_latin1_unchanged_is_byte_exact(tmp_path):
    data = ("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + NO_TRAINING).encode("latin-1")
    assert _round_trip(tmp_path, data) == data


def test_tabs_for_indentation(tmp_path):
    text = guide_text().replace("    ", "\t")
    compile(text, "tabs.py", "exec")
    output = _round_trip(tmp_path, text.encode()).decode()
    assert output == migrated(text)
    compile(output, "tabs_ddp.py", "exec")
    assert "\tfor inputs, targets in train_loader:" in output


def test_no_newline_at_end(tmp_path):
    text = guide_text().rstrip("\n")
    output = _round_trip(tmp_path, text.encode()).decode()
    compile(output, "out.py", "exec")


@pytest.mark.parametrize("helpers", [
    150,
    pytest.param(3000, marks=pytest.mark.slow),  # 12,000 lines: about 30 s
])
def test_very_long_file(tmp_path, helpers):
    functions = "".join(f"\n\ndef helper_{i}(x):\n    return x * {i} + torch.ones(1)\n"
                        for i in range(helpers))
    text = guide_text().replace("\n\nclass MyModel", functions + "\n\nclass MyModel", 1)
    source = write(tmp_path / "long.py", text)
    out = tmp_path / "out.py"
    assert invoke(source, "-o", out).exit_code == 0
    output = out.read_text()
    assert output == migrated(text)
    compile(output, "out.py", "exec")
    assert output.count("def helper_") == helpers
    assert functions in output  # untouched code stays byte-identical


def test_deeply_nested_code(tmp_path):
    depth = 60
    nested = "".join("    " * level + f"if x > {level}:\n" for level in range(depth))
    nested += "    " * depth + "x = torch.zeros(1)\n"
    text = guide_text() + "\n\ndef deep(x):\n" + "".join("    " + line + "\n" for line in nested.splitlines())
    compile(text, "deep.py", "exec")
    output = _round_trip(tmp_path, text.encode()).decode()
    compile(output, "out.py", "exec")
    assert "".join("    " + line + "\n" for line in nested.splitlines()) in output


def test_deeply_nested_expression(tmp_path):
    text = "import torch\n\nx = " + "(" * 150 + "1" + ")" * 150 + "\n"
    compile(text, "deep.py", "exec")
    source = write(tmp_path / "deep.py", text)
    result = invoke("--check", source)
    assert result.exit_code in (0, 2)
    if result.exit_code == 2:  # a parser limit is a clear error, never a traceback
        assert result.stderr.startswith("ddpify: error:")
