"""A migrated module imports as cleanly as its original: no NameError from a setup that
lives under the __main__ guard, and no process group joined at import (DESIGN §2.8)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixture_cases import all_cases
from script_runs import run_forked

GUARDED = [case for case in all_cases()
           if case.run_spec is not None and "__name__ ==" in case.input.read_text()]

IMPORT = """\
import runpy, sys
import torch.distributed as dist
runpy.run_path(sys.argv[1], run_name="imported_by_a_test")
print("initialized" if dist.is_initialized() else "single process")
"""


def import_in_a_world_of_one(script, workdir):
    env = dict(os.environ, WORLD_SIZE="1", RANK="0", LOCAL_RANK="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29555", CUDA_VISIBLE_DEVICES="")
    if os.environ.get("DDPIFY_TESTS_NO_FORK"):
        return subprocess.run([sys.executable, "-c", IMPORT, str(script)], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=120)
    importer = workdir / "import_it.py"
    importer.write_text(IMPORT)
    # The module's own folder first on the path, as `import` from beside it would have it.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(script).parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return run_forked(importer, [str(script)], workdir, env)


@pytest.mark.slow
@pytest.mark.parametrize("case", GUARDED, ids=lambda case: case.name)
def test_migrated_module_imports_like_the_original(case, tmp_path):
    (tmp_path / "original").mkdir()
    (tmp_path / "migrated").mkdir()
    migrated = import_in_a_world_of_one(case.expected, tmp_path / "migrated")
    if migrated.returncode != 0:
        # Only a failure the original does not share counts (a script that parses its
        # arguments at import fails either way); importing the original costs a process.
        original = import_in_a_world_of_one(case.input, tmp_path / "original")
        if original.returncode != 0:
            pytest.skip(f"the original does not import: {original.stderr[-200:]}")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    assert migrated.stdout.splitlines()[-1] == "single process"


def test_the_check_catches_a_setup_that_only_exists_under_the_guard(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import torch.distributed as dist\n"
        "if __name__ == '__main__':\n    distributed = False\n"
        "if distributed:\n    dist.destroy_process_group()\n")
    assert import_in_a_world_of_one(broken, tmp_path).returncode != 0
