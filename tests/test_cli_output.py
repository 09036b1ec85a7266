"""What the command line says (issue 18, item 8): severities, what was written, the rules."""
import json

from cli_support import NEEDS_A_PERSON, guide_text, invoke, needs_a_person, write  # noqa: F401

from ddpify import project
from ddpify.api import migrate_source
from ddpify.rules.registry import RULES


def test_text_output_shows_each_diagnostics_severity(tmp_path, needs_a_person):  # noqa: F811
    train = write(tmp_path / "train.py", guide_text())
    sampler = write(tmp_path / "sampler.py", NEEDS_A_PERSON)
    result = invoke("--check", "-v", train, sampler)
    lines = result.stderr.splitlines()
    assert any(line.startswith(f"{sampler}:7:10: warning: DDP207 ") for line in lines), lines
    assert any(line.startswith(f"{train}:") and ": info: DDP206 " in line for line in lines), lines
    assert any(line.startswith(f"{train}:") and ": edit: DDP101 " in line for line in lines), lines


def test_output_file_is_named_once_written(tmp_path):
    source = write(tmp_path / "train.py", guide_text())
    out = tmp_path / "train_ddp.py"
    result = invoke(source, "-o", out)
    assert result.exit_code == 0
    assert f"{out}: written from {source}" in result.stderr.splitlines()


def test_check_says_how_to_see_why(tmp_path):
    source = write(tmp_path / "train.py", guide_text())
    result = invoke("--check", "--quiet", source)
    assert result.stderr.splitlines() == [
        f"{source}: not DDP-ready: ddpify would rewrite it (ddpify --diff {source} shows how)"]


def test_rules_are_listed_in_code_order_as_text_and_json():
    text_codes = [line.split()[0] for line in invoke("--list-rules").stdout.splitlines()]
    assert text_codes == sorted(RULES)
    document = json.loads(invoke("--list-rules", "--format", "json").stdout)
    assert [rule["code"] for rule in document["rules"]] == sorted(RULES)
    by_code = {rule["code"]: rule for rule in document["rules"]}
    assert by_code["DDP208"]["severity"] == "warning" and by_code["DDP208"]["fix"]
    assert [code for code, rule in by_code.items() if rule["status"] == "removed"] == ["DDP006", "DDP311"]
    # "retired" came before "status"; tools may still read it.
    assert [code for code, rule in by_code.items() if rule["retired"]] == ["DDP006", "DDP311"]


def test_removed_rule_says_so():
    assert invoke("--explain", "DDP006").stdout.startswith("DDP006 (warning, removed): ")
    assert "Retired: never reported" in invoke("--explain", "DDP006").stdout
    assert "DDP006  removed  " in invoke("--list-rules").stdout


def test_stdin_filename_names_the_buffer(tmp_path):
    result = invoke("-", "--stdin-filename", "src/train.py", input=NEEDS_A_PERSON)
    assert result.exit_code in (0, 1)
    assert "DistributedDataParallel" in result.stdout
    assert "src/train.py:" in result.stderr and "<stdin>" not in result.stderr
    usage = invoke(write(tmp_path / "train.py", guide_text()), "--stdin-filename", "x.py")
    assert usage.exit_code == 2 and "give - as a path" in usage.stderr


def test_stdin_filename_reads_the_helper_modules_beside_it(tmp_path):
    write(tmp_path / "report.py", "def show(loss):\n    print(loss)\n")
    script = guide_text().replace("import torch\n", "import torch\nimport report\n", 1)
    script = script.replace("print(", "report.show(", 1)
    named = invoke("-", "--stdin-filename", tmp_path / "train.py", input=script)
    beside = write(tmp_path / "train.py", script)
    alone = invoke("-", input=script)
    # (`ddpify train.py` itself refuses to print one file: report.py changes too.)
    expected = migrate_source(script, project=project.read(str(beside), script)).code
    assert named.stdout == expected != alone.stdout  # the helper was read


def test_check_of_a_folder_of_notebooks_says_nothing_was_checked(tmp_path):
    (tmp_path / "notebooks").mkdir()
    write(tmp_path / "notebooks" / "train.ipynb", "{}")
    result = invoke("--check", tmp_path / "notebooks")
    assert result.exit_code == 0
    assert (f"no Python file to check under {tmp_path / 'notebooks'}: nothing was checked: its 1 notebook "
            "is not read") in result.stderr
    write(tmp_path / "notebooks" / "util.py", "x = 1\n")
    assert "nothing was checked" not in invoke("--check", tmp_path / "notebooks").stderr
