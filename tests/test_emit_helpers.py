"""The helpers ddpify puts above a module's code are emitted only when the code calls them
(emit/edits.py): a rule may ask for one (the `is_main_process()` guard) whose call another
edit then leaves out, and an unused helper is noise a reviewer has to read."""
import libcst as cst

from ddpify.emit.edits import _called_helpers


def _statements(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(code).body)


def test_a_helper_called_directly_or_through_another_is_kept_and_an_unused_one_dropped() -> None:
    prelude = _statements(
        "def is_main_process():\n    return True\n\n\n"
        "def evaluation_shard(ds):\n    return None\n\n\n"
        "def evaluation_share(loader):\n    return evaluation_shard(loader.dataset)\n"
    )
    code = _statements("loader = evaluation_share(loader)\n")
    kept = [cst.ensure_type(helper, cst.FunctionDef).name.value for helper in _called_helpers(prelude, code)]
    assert kept == ["evaluation_shard", "evaluation_share"]


def test_a_helper_handed_on_as_a_value_is_kept() -> None:
    prelude = _statements("def seed_worker(worker_id):\n    pass\n")
    code = _statements("loader = DataLoader(ds, worker_init_fn=seed_worker)\n")
    assert len(_called_helpers(prelude, code)) == 1
