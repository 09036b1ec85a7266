"""`--strategy fsdp2` and `--fsdp-blocks` on the command line (issue 19)."""
from cli_support import invoke, write
from fixture_cases import FIXTURES

TRANSFORMER = FIXTURES / "fsdp2" / "transformer_block_list"
CNN = FIXTURES / "fsdp2" / "cnn_blocks_named_by_option"


def test_strategy_fsdp2_writes_the_fixture(tmp_path):
    script = write(tmp_path / "train.py", (TRANSFORMER / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (TRANSFORMER / "expected.py").read_text()


def test_default_strategy_is_ddp(tmp_path):
    script = write(tmp_path / "train.py", (TRANSFORMER / "input.py").read_text())
    result = invoke(script)
    assert result.exit_code == 0, result.stderr
    assert "DDP(model" in result.stdout and "fully_shard" not in result.stdout


def test_no_block_list_is_exit_1_naming_the_model_class(tmp_path):
    script = write(tmp_path / "train.py", (CNN / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2")
    assert result.exit_code == 1
    assert "DDP108" in result.stderr and "`ConvNet`" in result.stderr


def test_fsdp_blocks_names_the_blocks(tmp_path):
    script = write(tmp_path / "train.py", (CNN / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2", "--fsdp-blocks", "stages")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (CNN / "expected.py").read_text()


def test_fsdp_blocks_naming_no_attribute_of_the_class_is_exit_1(tmp_path):
    script = write(tmp_path / "train.py", (CNN / "input.py").read_text())
    result = invoke(script, "--strategy", "fsdp2", "--fsdp-blocks", "layers")
    assert result.exit_code == 1
    assert "`ConvNet` has no attribute `layers`" in result.stderr


def test_unknown_strategy_is_a_usage_error(tmp_path):
    script = write(tmp_path / "train.py", (TRANSFORMER / "input.py").read_text())
    assert invoke(script, "--strategy", "fsdp1").exit_code == 2
