"""`ddpify verify` on real scripts: the good ones pass, each broken one fails one check.

Each broken script in tests/data/broken/ is guide_after.py with one bug. Its case runs only
the checks it needs (and so only the runs those read), to keep the suite fast; the good
scripts run the full default verification.
"""
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpify.verify.checks import CHECK_IDS, default_checks
from ddpify.verify.command import verify_command

HERE = os.path.dirname(__file__)
DATA = os.path.join(HERE, "data")
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
GUIDE_BEFORE = os.path.join(DATA, "verify_guide_before.py")
GUIDE_AFTER = os.path.join(DATA, "verify_guide_after.py")

MAIN_BEFORE = os.path.join(DATA, "verify_main_before.py")
TRANSFORMER = os.path.join(FIXTURES, "fsdp2", "transformer_block_list")
FSDP2 = ["--strategy", "fsdp2", "--original", os.path.join(TRANSFORMER, "input.py")]

# broken script -> (checks to run, the one check that must fail, words its summary holds, options)
# The original is the guide script unless the options name another with --original.
BROKEN = {
    "final_save_every_rank": ("one_writer", "one_writer", "rank 1 wrote model_final.pth "
                              "(final_save_every_rank.py:66)", []),
    "final_save_wrapper": ("one_writer", "one_writer", "saved model_final.pth with keys starting with 'module.' "
                           "(final_save_wrapper.py:67)", []),
    "handoff_no_barrier": ("handoff", "handoff", "rank 1 read model.pth at handoff_no_barrier.py:68 before rank 0 "
                           "finished writing it at handoff_no_barrier.py:67", []),
    "move_after_wrap": ("no_move_after_wrap", "no_move_after_wrap", ".to() on the DDP model after the wrap "
                        "(move_after_wrap.py:47)", []),
    "artifacts_every_rank": ("one_writer", "one_writer", "rank 1 wrote train.log (artifacts_every_rank.py:35)", []),
    "leaves_child_process": ("no_leftovers", "no_leftovers", "a process started by rank 0 was still running", []),
    "import_name_error": ("importable", "importable", "NameError: name 'is_main' is not defined "
                          "(import_name_error.py:11)", ["--original", MAIN_BEFORE]),
    "no_set_epoch": ("data_sharded", "data_sharded", "same order in epoch 0 and epoch 1", []),
    "no_sampler": ("data_sharded", "data_sharded", "fetched by more than one rank", []),
    "no_ddp_wrap": ("ranks_agree,data_sharded", "ranks_agree", "parameters differ between ranks", []),
    "save_every_rank": ("one_writer", "one_writer", "rank 1 wrote checkpoint_0.pth", []),
    "save_wrapper_state_dict": ("one_writer", "one_writer", "keys starting with 'module.'", []),
    "print_every_rank": ("one_voice", "one_voice", "rank 1 printed", []),
    "rank0_collective_hang": ("ranks_agree", "runs", "hung: torchrun", ["--timeout", "30"]),
    "local_rank_guard": ("one_writer,one_voice,multinode_ready", "multinode_ready", "rank 1 wrote", []),
    "reseeds_differently": ("same_as_original", "same_as_original", "step 1: parameter sum", []),
    # --strategy fsdp2: the transformer fixture's migration, each with one bug.
    "fsdp2_optimizer_before_shard": ("optimizer_sharded", "optimizer_sharded", "rank 0: 29 of the 29 tensors "
                                     "optimizer 0 steps are not parameters of the sharded model", FSDP2),
    "fsdp2_root_not_sharded": ("params_sharded", "params_sharded", "some parameters are kept whole", FSDP2),
    "fsdp2_sharded_state_dict": ("full_checkpoint", "full_checkpoint", "saved as DTensor shards", FSDP2),
}


FSDP2_CHECKS = sorted(set(default_checks("fsdp2")) - set(default_checks("ddp")))


def verify(tmp_path, *args):
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(verify_command, ["--json", str(report_path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    report = json.loads(report_path.read_text())
    return result, report, {check["id"]: check for check in report["checks"]}


def test_every_check_has_a_broken_script_that_it_catches():
    caught = {failing for _, failing, _, _ in BROKEN.values()}
    assert caught == set(CHECK_IDS)
    assert sorted(BROKEN) == sorted(name[:-3] for name in os.listdir(os.path.join(DATA, "broken")))


@pytest.mark.slow
def test_the_guide_script_passes_every_check(tmp_path):
    result, report, checks = verify(tmp_path, GUIDE_BEFORE, "-o", GUIDE_AFTER)
    assert result.exit_code == 0, result.output
    assert report["ok"] and [run["name"] for run in report["runs"]] == ["original", "single", "torchrun", "multinode"]
    # The guide script hands no file from rank to rank and has no __main__ guard to import by.
    assert {check_id: check["status"] for check_id, check in checks.items()} == {
        **{check_id: "pass" for check_id in default_checks("ddp")}, "handoff": "n/a", "importable": "n/a"
    }
    assert "verified: all 9 applicable checks pass" in result.stdout
    # The third epoch is cut to one batch per rank, and the script runs to its end.
    assert "same as original    pass  33 steps" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_script_fails_exactly_its_check(tmp_path, monkeypatch, name):
    # The runs' directories go under tmp_path, so that processes left there can be found.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    selected, failing, words, options = BROKEN[name]
    original = options[options.index("--original") + 1] if "--original" in options else GUIDE_BEFORE
    options = [option for option in options if option not in ("--original", original)]
    broken = os.path.join(DATA, "broken", f"{name}.py")
    result, report, checks = verify(tmp_path, original, "-o", broken, "--checks", selected, *options)
    assert result.exit_code == 1, result.output
    failed = [check_id for check_id, check in checks.items() if check["status"] == "fail"]
    if failing == "handoff" and failed == ["runs", "handoff"]:
        # Rank 0 lost the race even without the delay: the torchrun run itself failed.
        assert "see hand-off" in "\n".join(checks["runs"]["evidence"]), result.output
    else:
        assert failed == [failing], result.output
    assert words in checks[failing]["summary"], result.output
    others = {check_id: check["status"] for check_id, check in checks.items() if check_id not in failed}
    if failing == "runs":
        assert set(others.values()) <= {"n/a"}
        assert f"rank 0 waits at {name}.py:66, in barrier" in "\n".join(checks["runs"]["evidence"])
        assert not processes_in(tmp_path), "a hung run left processes behind"
    elif failing == "importable":
        assert others == {"runs": "n/a"}, result.output
    else:
        assert set(others.values()) <= {"pass"}, result.output
    assert not processes_in(tmp_path), "verify left a process behind"


def processes_in(directory):
    """Processes whose working directory lies under `directory`."""
    from ddpify.verify.reaper import parent_links

    found = []
    for pid in parent_links():
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(directory)):
                found.append(pid)
        except OSError:
            continue
    return found


def fixture_arguments(case):
    with open(os.path.join(FIXTURES, case, "run.json")) as run_json:
        return json.load(run_json).get("args", [])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["data/mnist_style_main", "side_effects/file_writes_and_run_dir"],
                         ids=os.path.basename)
def test_a_fixture_migrated_by_ddpify_passes(tmp_path, case):
    """-o names a file that does not exist yet: ddpify migrates into it, then verifies.

    The two-node run is left out here; the guide script above covers it.
    """
    migrated = tmp_path / "train_ddp.py"
    script = os.path.join(FIXTURES, case, "input.py")
    result, report, checks = verify(
        tmp_path, script, "-o", str(migrated), "--skip-multinode", "--", *fixture_arguments(case)
    )
    assert result.exit_code == 0, result.output
    assert "DistributedSampler" in migrated.read_text()
    assert "multinode_ready" not in checks and checks["ranks_agree"]["status"] == "pass"


@pytest.mark.slow
def test_an_fsdp2_migration_passes_the_sharding_checks(tmp_path):
    """`verify --strategy fsdp2` migrates to FSDP2 and adds its three checks to the others."""
    migrated = tmp_path / "train_fsdp2.py"
    result, report, checks = verify(tmp_path, os.path.join(TRANSFORMER, "input.py"), "-o", str(migrated),
                                    "--strategy", "fsdp2", "--skip-multinode")
    assert result.exit_code == 0, result.output
    assert migrated.read_text() == Path(TRANSFORMER, "expected.py").read_text()
    assert {check_id: checks[check_id]["status"] for check_id in FSDP2_CHECKS} == dict.fromkeys(FSDP2_CHECKS, "pass")
    assert checks["params_sharded"]["summary"] == "the optimizer: rank 0 50%, rank 1 50% of 7,648 numbers"
    assert checks["full_checkpoint"]["summary"].startswith("transformer.pt: the original's 29 tensors")


@pytest.mark.slow
def test_a_multi_file_project_is_migrated_and_run_as_a_whole(tmp_path):
    """train.py imports model.py beside it: both are migrated into -o, and each run gets a
    copy of the whole folder (the copy's model.py is the one imported, not the original's)."""
    project = os.path.join(DATA, "verify_project")
    migrated = tmp_path / "migrated"
    result, report, checks = verify(tmp_path, os.path.join(project, "train.py"), "--project", project,
                                    "-o", str(migrated), "--checks", "ranks_agree,one_writer")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(migrated)) == ["model.py", "train.py"]
    assert "DistributedSampler" in (migrated / "train.py").read_text()
    torchrun = next(run for run in report["runs"] if run["name"] == "torchrun")
    assert torchrun["files_created"] == ["regressor.pt"]
    assert torchrun["commands"][0][-1] == "train.py"
    assert checks["one_writer"]["summary"] == "only rank 0 wrote files: regressor.pt"


@pytest.mark.slow
def test_project_alone_verifies_the_entry_s_own_project(tmp_path):
    """`--project` without a folder: the tree train.py's imports resolve from, migrated as
    `ddpify train.py -o DIR/` writes it."""
    project = tmp_path / "project"
    shutil.copytree(os.path.join(DATA, "verify_project"), project)
    migrated = tmp_path / "migrated"
    result, report, checks = verify(tmp_path, str(project / "train.py"), "--project", "-o", str(migrated),
                                    "--checks", "ranks_agree,one_writer")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(migrated)) == ["model.py", "train.py"]
    assert checks["one_writer"]["summary"] == "only rank 0 wrote files: regressor.pt"


# -- issue 18: scripts shaped like a new user's ------------------------------------------

ISSUE18 = os.path.join(DATA, "issue18")


@pytest.mark.slow
def test_a_line_printed_when_accuracy_improves_is_not_a_second_voice(tmp_path):
    """`if acc > best_acc: print("Saving best..")` prints once in the original and twice on
    rank 0 of the 2-rank run, which trains with a global batch twice as large."""
    result, report, checks = verify(tmp_path, os.path.join(ISSUE18, "best_only_print.py"), "--checks", "one_voice")
    assert result.exit_code == 0, result.output
    assert checks["one_voice"]["status"] == "pass", result.output


@pytest.mark.slow
def test_two_nodes_share_a_filesystem_so_a_reload_of_rank_0s_save_works(tmp_path):
    """Shaped like PyTorch's quickstart: rank 0 saves model.pth, every rank reloads it."""
    result, report, checks = verify(tmp_path, os.path.join(ISSUE18, "reload_after_save.py"),
                                    "--checks", "multinode_ready")
    assert result.exit_code == 0, result.output
    assert checks["multinode_ready"]["notes"] == [
        "rank 0 wrote model.pth and the other node read it: the nodes need a shared filesystem "
        "(the two agents here share one working directory)"]


@pytest.mark.slow
def test_a_crash_on_one_node_is_reported_with_its_traceback_not_as_a_hang(tmp_path):
    """Each node makes the output folder (LOCAL_RANK 0) without exist_ok: the second one
    raises FileExistsError while the first node's agent would wait for it until the limit."""
    broken = os.path.join(ISSUE18, "per_node_output_dir.py")
    result, report, checks = verify(tmp_path, GUIDE_BEFORE, "-o", broken, "--checks", "multinode_ready")
    assert result.exit_code == 1, result.output
    runs = checks["runs"]
    assert "hung" not in runs["summary"], result.output
    assert re.fullmatch(r"two nodes: rank [01] failed first: FileExistsError: \[Errno 17\] File exists: "
                        r"'runs/exp1' \(per_node_output_dir.py:19\)", runs["evidence"][0]), result.output
    assert runs["evidence"][1] == '  | per_node_output_dir.py:19 in <module>: os.makedirs("runs/exp1")'
    assert "failed first: FileExistsError" in checks["multinode_ready"]["summary"]
    two_nodes = report["runs"][0]
    assert not two_nodes["timed_out"] and two_nodes["seconds"] < 100, two_nodes
