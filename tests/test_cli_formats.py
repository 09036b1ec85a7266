"""--format github and --format json: what a pull-request review reads."""
import json

import pytest
from cli_support import NEEDS_A_PERSON, NO_TRAINING, guide_text, invoke, write

from ddpify.diagnostics import Diagnostic
from ddpify.formats import github_annotation
from ddpify.rules.registry import RULES


@pytest.fixture
def scripts(tmp_path):
    return (write(tmp_path / "train.py", guide_text()),
            write(tmp_path / "sampler.py", NEEDS_A_PERSON),
            write(tmp_path / "plain.py", NO_TRAINING))


def test_github_annotations(scripts, needs_a_person):
    train, sampler, plain = scripts
    result = invoke("--format", "github", "--check", *scripts)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert all(line.startswith(("::notice ", "::warning ")) for line in lines), lines
    warning = [line for line in lines if line.startswith("::warning ")]
    assert warning == [f"::warning file={sampler},line=7,endLine=7,col=10,title=DDP207::"
                       f"DDP207 {RULES['DDP207'].summary}"]
    # Edits are notices too, so that a pull request shows what changed and where.
    train_notices = [line for line in lines if f"file={train}," in line]
    assert any("title=DDP101::DDP101 " in line for line in train_notices)
    assert any("title=DDP206::DDP206 " in line for line in train_notices)
    assert f"::notice file={plain},line=1,endLine=1,col=1,title=DDP901::" in result.stdout
    # The one-line messages stay on stderr.
    assert f"{train}: not DDP-ready" in result.stderr


def test_github_edit_spans_lines(scripts):
    train = scripts[0]
    lines = invoke("--format", "github", "--check", train).stdout.splitlines()
    spans = [line for line in lines if "title=DDP202" in line]
    assert spans
    line = int(spans[0].split(",line=")[1].split(",")[0])
    end_line = int(spans[0].split(",endLine=")[1].split(",")[0])
    assert end_line > line  # the epoch loop it edits spans several lines


def test_github_error(tmp_path):
    broken = write(tmp_path / "broken.py", "import torch\nx = (\n")
    result = invoke("--format", "github", "--check", broken)
    assert result.exit_code == 2
    assert result.stdout.startswith(f"::error file={broken},title=ddpify::{broken}:")


def test_github_escaping():
    diagnostic = Diagnostic("DDP301", 3, 1, "50% of lines\nand more")
    annotation = github_annotation("dir,with:odd.py", diagnostic)
    assert annotation == ("::notice file=dir%2Cwith%3Aodd.py,line=3,endLine=3,col=1,"
                          "title=DDP301::DDP301 50%25 of lines%0Aand more")


def test_github_with_diff_prints_both(scripts):
    result = invoke("--format", "github", "--diff", scripts[0])
    assert "::notice " in result.stdout
    assert f"--- a/{scripts[0]}" in result.stdout


def test_json_document(scripts, needs_a_person):
    train, sampler, plain = scripts
    result = invoke("--format", "json", "--check", *scripts)
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert [entry["path"] for entry in document["files"]] == [str(train), str(sampler), str(plain)]
    by_path = {entry["path"]: entry for entry in document["files"]}
    assert by_path[str(train)]["status"] == "migrated"
    assert by_path[str(train)]["changed"] is True
    assert by_path[str(train)]["exit_code"] == 1
    assert by_path[str(plain)]["status"] == "unchanged"
    assert document["summary"] == {"files": 3, "migrated": 2, "unchanged": 1, "skipped": 0,
                                   "failed": 0}
    edits = [d for d in by_path[str(train)]["diagnostics"] if d["severity"] == "edit"]
    assert {"DDP001", "DDP101", "DDP201", "DDP202"} <= {d["code"] for d in edits}
    for diagnostic in by_path[str(train)]["diagnostics"]:
        assert set(diagnostic) == {"code", "severity", "line", "end_line", "column", "message", "rule"}
        assert diagnostic["end_line"] >= diagnostic["line"] >= 1
        assert "\n" not in diagnostic["message"]
    warning = [d for d in by_path[str(sampler)]["diagnostics"] if d["severity"] == "warning"]
    assert [d["code"] for d in warning] == ["DDP207"]


def test_json_with_diff_and_error(scripts, tmp_path):
    missing = tmp_path / "missing.py"
    result = invoke("--format", "json", "--diff", scripts[0], missing)
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    first, second = document["files"]
    assert first["diff"].startswith(f"--- a/{scripts[0]}")
    assert second["status"] == "failed"
    assert "no such file" in second["error"]


def test_json_with_output_file(scripts, tmp_path):
    out = tmp_path / "out.py"
    result = invoke("--format", "json", scripts[0], "-o", out)
    document = json.loads(result.stdout)
    assert document["files"][0]["written"] == str(out)
    assert out.exists()
