"""The README is for newcomers: its rules table matches the registry, and the basics are there."""
import os
import re
import shlex
import shutil
from pathlib import Path

from regenerate_readme_rules import row

from ddpify.rules.registry import RULES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_rules_table_lists_every_rule_with_its_summary():
    for rule in RULES.values():
        assert row(rule) in README, f"README rules table lacks or misstates {rule.code}"


def test_rules_table_lists_no_unknown_rule():
    codes = {line.split("|")[1].strip() for line in README.splitlines() if line.startswith("| DDP")}
    assert codes == set(RULES)


# -- first contact (issue 10, item 11) ------------------------------------------------------

def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def test_quick_start_installs_torch_before_running_the_result():
    quick_start = _section("Try it on the shipped example")
    install = quick_start.index('pip install "torch==2.13.0" -e .')
    assert install < quick_start.index("torchrun")


def test_sections_a_newcomer_looks_for():
    for title in ("What it does not do", "Safety", "Exit codes"):
        assert _section(title)
    not_done = _section("What it does not do")
    for word in ("Accelerate", "FSDP", "DeepSpeed", "Lightning", "Horovod", ".ipynb",
                 "A project is migrated module by module", "runs your code"):
        assert word in not_done, word
    assert "| 130 |" in _section("Exit codes")


def test_every_fixture_path_the_readme_names_exists():
    """Fixtures moved into family folders (fixtures/<family>/<idiom>/): the README's commands
    and excerpts must name where they are now."""
    paths = set(re.findall(r"\bfixtures/[\w./]+\.py\b", README))
    assert paths, "the README names no fixture"
    assert sorted(path for path in paths if not (ROOT / path).is_file()) == []


def test_the_full_test_run_time_is_stated():
    assert re.search(r"full run takes about \d+ minutes", _section("Run the tests"))


# -- launch on a cluster (issue 18, item 10) ----------------------------------------------

def _fenced_after(text: str, marker: str) -> str:
    """The first fenced block after `marker`, without its fences."""
    start = text.index("```", text.index(marker))
    body = text.index("\n", start) + 1
    return text[body:text.index("```", body)]


def _launch_mismatches(section: str, folder: Path) -> list:
    """Runs the section's `ddpify launch` command in folder, beside the quick start's
    train_ddp.py (the guide fixture, migrated); returns the files whose excerpt differs."""
    from click.testing import CliRunner

    from ddpify.cli import main

    command = shlex.split(_fenced_after(section, "For the quick start"))
    assert command[:2] == ["ddpify", "launch"]
    names = re.findall(r"^`(train_ddp\.[a-z.]+)`:", section, flags=re.MULTILINE)
    assert sorted(names) == ["train_ddp.pytorchjob.yaml", "train_ddp.sbatch", "train_ddp.torchrun.sh"]
    shutil.copy(ROOT / "fixtures" / "guide" / "guide_image_classifier" / "expected.py", folder / "train_ddp.py")
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(main, command[1:])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return [name for name in names if (folder / name).read_text() != _fenced_after(section, f"`{name}`:")]


def test_launch_files_in_the_readme_are_what_the_command_beside_them_writes(tmp_path):
    assert _launch_mismatches(_section("Launch on a cluster: `ddpify launch`"), tmp_path) == []


def test_launch_excerpt_check_catches_a_stale_excerpt(tmp_path):
    section = _section("Launch on a cluster: `ddpify launch`")
    stale = section.replace("--nproc-per-node=8", "--nproc-per-node=4", 1)
    assert _launch_mismatches(stale, tmp_path) == ["train_ddp.torchrun.sh"]


# -- repository basics (issue 18, item 9) ---------------------------------------------------

def test_license_file_matches_setup_cfg():
    setup = (ROOT / "setup.cfg").read_text()
    assert re.search(r"^license = MIT$", setup, re.MULTILINE)
    assert re.search(r"^license_files = LICENSE$", setup, re.MULTILINE)
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in license_text


def test_changelog_has_an_entry_for_this_version():
    from ddpify import __version__

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n")
    assert f"\n## {__version__}\n" in changelog and "\n## Unreleased\n" in changelog


def test_platform_notes_say_what_verify_needs():
    platforms = _section("Platforms")
    for word in ("Linux", "macOS", "Windows", "prctl", "/proc", "killpg", "WSL"):
        assert word in platforms, word


def test_quick_start_makes_a_virtual_environment_inside_the_clone():
    quick_start = _section("Try it on the shipped example")
    clone = quick_start.index("git clone ")
    enter = quick_start.index("&& cd ddpify")
    venv = quick_start.index("python3 -m venv .venv && . .venv/bin/activate")
    install = quick_start.index('pip install "torch==2.13.0" -e .')
    assert clone < enter < venv < install


# -- projects (issue 20) -------------------------------------------------------------------

def test_the_project_example_is_the_fixtures_own_helper_module():
    """The before/after excerpt of the Projects section is `data.py` of the project fixture it
    names, as it is and as ddpify migrates it (tests/test_project_fixtures.py)."""
    section = _section("Projects")
    fixture = ROOT / "fixtures" / "projects" / "loaders_from_helper_module"
    before = _fenced_after(section, "Before:")
    after = _fenced_after(section, "after (")
    assert before in (fixture / "input" / "data.py").read_text()
    assert after in (fixture / "expected" / "data.py").read_text()
