"""The verify command line without running any script: usage errors exit 2."""
import importlib.util

from click.testing import CliRunner

from ddpify.verify import command
from ddpify.verify.command import verify_command


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
    assert result.exit_code == 2 and "pip install ddpify[verify]" in result.output


def test_a_script_that_does_not_parse_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\ndef broken(:\n")
    result = invoke(str(script), "-o", str(tmp_path / "train_ddp.py"))
    assert result.exit_code == 2 and "cannot migrate" in result.output


def test_checks_accept_hyphens():
    assert command.parse_checks("one-writer, data_sharded") == ("one_writer", "data_sharded")
