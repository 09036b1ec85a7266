"""The verify command line without running any script: usage errors exit 2."""
import importlib.util
import os
from pathlib import Path

from click.testing import CliRunner

from ddpify.verify import command
from ddpify.verify.command import verify_command

GUIDE_BEFORE = os.path.join(os.path.dirname(__file__), "data", "verify_guide_before.py")
ISSUE18 = os.path.join(os.path.dirname(__file__), "data", "issue18")


def invoke(*args):
    return CliRunner().invoke(verify_command, list(args))


def test_help_documents_the_default_stop_and_exit_status():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "--max-epochs" in result.output and "Exit" in result.output


def test_a_missing_script_is_a_usage_error():
    result = invoke("no_such_train.py")
    assert result.exit_code == 2 and "does not exist" in result.output


def test_an_unknown_check_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    result = invoke(str(script), "--checks", "one_writer,speed")
    assert result.exit_code == 2 and "unknown check(s) speed" in result.output


def test_missing_torch_says_how_to_install_it(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    real_find_spec = importlib.util.find_spec
    def find_spec(name, *rest):
        return None if name == "torch" else real_find_spec(name, *rest)

    monkeypatch.setattr(command.importlib.util, "find_spec", find_spec)
    result = invoke(str(script))
    assert result.exit_code == 2 and 'pip install -e ".[verify]"' in result.output


def test_a_script_that_does_not_parse_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\ndef broken(:\n")
    result = invoke(str(script), "-o", str(tmp_path / "train_ddp.py"))
    assert result.exit_code == 2 and "cannot migrate" in result.output


def test_checks_accept_hyphens():
    assert command.parse_checks("one-writer, data_sharded") == ("one_writer", "data_sharded")


# -- strange files and targets (issue 10, item 8): a message and exit 2, never a traceback --

GOOD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


def test_a_latin1_or_binary_script_is_a_message_not_a_traceback(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes("# caf\xe9\n".encode("latin-1") + GOOD.encode())
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\x00\x01torch\xff")
    for script in (latin, binary):
        result = invoke(str(script), "-o", str(tmp_path / "out.py"))
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"cannot migrate {script}: " in result.output
    assert "encoding declaration" in invoke(str(latin)).output
    assert "binary file" in invoke(str(binary)).output


def test_a_declared_latin1_script_is_migrated_in_latin1(tmp_path):
    script = tmp_path / "train.py"
    with open(GUIDE_BEFORE, "rb") as guide:
        script.write_bytes("# -*- coding: latin-1 -*-\n# caf\xe9\n".encode("latin-1") + guide.read())
    target = tmp_path / "train_ddp.py"
    _, changed, _ = command.migrate_into(str(script), str(target))
    assert changed and "# caf\xe9\n".encode("latin-1") in target.read_bytes()


def test_output_into_a_missing_directory_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GOOD)
    result = invoke(str(script), "-o", str(tmp_path / "missing" / "train_ddp.py"))
    assert result.exit_code == 2 and "does not exist" in result.output and "Traceback" not in result.output


def test_an_unwritable_json_target_is_refused_before_anything_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GOOD)
    result = invoke(str(script), "--json", str(tmp_path / "missing" / "report.json"))
    assert result.exit_code == 2 and "--json" in result.output and "does not exist" in result.output
    result = invoke(str(script), "--json", str(script / "report.json"))
    assert result.exit_code == 2 and "--json" in result.output and "Traceback" not in result.output
    result = invoke(str(script), "--json", str(tmp_path))
    assert result.exit_code == 2 and "is a directory" in result.output


def test_a_syntax_error_reads_like_the_migrations(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n\nfor epoch in range(3)\n    pass\n")
    result = invoke(str(script), "-o", str(tmp_path / "train_ddp.py"))
    assert result.exit_code == 2
    assert f"cannot migrate {script}:3:22: syntax error: expected ':'" in result.output


def test_a_crlf_script_is_migrated_with_crlf(tmp_path):
    script = tmp_path / "train.py"
    with open(GUIDE_BEFORE, "rb") as guide:
        script.write_bytes(guide.read().replace(b"\n", b"\r\n"))
    target = tmp_path / "train_ddp.py"
    _, changed, _ = command.migrate_into(str(script), str(target))
    migrated = target.read_bytes()
    assert changed and b"DistributedSampler" in migrated
    assert migrated.count(b"\n") == migrated.count(b"\r\n")


def test_a_file_ddpify_leaves_unchanged_has_nothing_to_verify(tmp_path):
    script = tmp_path / "helpers.py"
    script.write_text("import torch\n\n\ndef norm(x):\n    return torch.linalg.norm(x)\n")
    result = invoke(str(script))
    assert result.exit_code == 0, result.output
    assert f"nothing to verify: ddpify leaves {script} unchanged" in result.output
    same = invoke(str(script), "-o", str(script))
    assert same.exit_code == 0 and "byte-identical" in same.output


def test_nothing_migrated_exits_as_the_migration_does(tmp_path):
    """Issue 18: ddpify leaves a script whose batches are sliced by hand single-process and
    exits 1 (DDP208); verify said "nothing to verify" and exited 0, so a CI step went green."""
    script = os.path.join(ISSUE18, "single_process_slicing.py")
    result = invoke(script)
    assert result.exit_code == 1, result.output
    assert f"nothing to verify: ddpify leaves {script} unchanged (DDP208" in result.output
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(Path(script).read_text())
    result = invoke(str(project / "train.py"), "--project", str(project))
    assert result.exit_code == 1 and "leaves every file of" in result.output, result.output


def test_a_project_entry_must_lie_in_the_project(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GOOD)
    project = tmp_path / "project"
    project.mkdir()
    result = invoke(str(script), "--project", str(project))
    assert result.exit_code == 2 and "is not inside the project folder" in result.output
    result = invoke(str(script), "-o", str(project))
    assert result.exit_code == 2 and "needs --project" in result.output


def test_project_alone_takes_the_entry_s_own_project(tmp_path):
    """`verify train.py --project`: the tree train.py's imports resolve from, migrated as
    `ddpify train.py -o DIR/` writes it; here every file stays as it is."""
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "scale.py").write_text("SCALE = 2\n")
    # (`from pkg.scale import`: run as `python -m pkg.run` from proj, whose tree it is)
    (root / "pkg" / "run.py").write_text(
        "import torch\n\nfrom pkg.scale import SCALE\n\n\ndef norm(x):\n    return SCALE * torch.linalg.norm(x)\n")
    result = invoke(str(root / "pkg" / "run.py"), "--project")
    assert result.exit_code == 0, result.output
    assert f"nothing to verify: ddpify leaves every file of {root} unchanged" in result.output
    missing = invoke(str(root / "pkg" / "run.py"), "--project", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "not a directory" in missing.output
    swapped = invoke("--project", str(root / "pkg" / "run.py"))
    assert swapped.exit_code == 2 and "put --project alone after SCRIPT" in swapped.output


def test_the_verified_tree_is_the_one_ddpify_writes(tmp_path):
    from cli_support import invoke as ddpify
    from test_cli_project import FILES

    root = tmp_path / "proj"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    lines, changed, status, tree_root = command.migrate_project(str(root / "train.py"), str(tmp_path / "verified"))
    assert changed and status == 0 and tree_root == str(root)
    assert any(line.startswith(f"{root / 'pretrain.py'}:") for line in lines)
    assert ddpify(root / "train.py", "-o", f"{tmp_path / 'written'}/").exit_code == 0
    verified = sorted(path.relative_to(tmp_path / "verified") for path in (tmp_path / "verified").rglob("*"))
    written = sorted(path.relative_to(tmp_path / "written") for path in (tmp_path / "written").rglob("*"))
    assert verified == written
    for path in written:
        if (tmp_path / "written" / path).is_file():
            assert (tmp_path / "verified" / path).read_bytes() == (tmp_path / "written" / path).read_bytes()
