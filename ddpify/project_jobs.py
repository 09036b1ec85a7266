"""A training project on the command line: which jobs an entry script brings along, and the
migrated copy of a project tree that `ddpify train.py -o OUT_DIR/` writes.

Each file of a project is still migrated on its own (`jobs.prepare`), its result depending on
the project around it (`ddpify.project`): migrating every file of `files_of(train.py)` gives
the migrated project. This module decides which files those are, under which names they are
shown, and where a copy of the tree goes; it migrates nothing itself.
"""
import ast
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ddpify.diagnostics import Diagnostic, rule_of
from ddpify.emit import ddp
from ddpify.files import SourceError, read_source
from ddpify.jobs import ERROR, NOTEBOOK_SUFFIX, PENDING, TREE, Job, Report, patch_path
from ddpify.options import Options
from ddpify.project import project_root
from ddpify.project_files import files_of
from ddpify.rules import frameworks
from ddpify.selfcheck import _line_map
from ddpify.selfcheck.project import (
    Module,
    capped_shares_measured_elsewhere,
    samplers_never_given_an_epoch,
    shares_measured_elsewhere,
    unwrapped_training,
)
from ddpify.walk import Entry, is_skipped_directory, matches_any


def is_entry_script(entry: Entry) -> bool:
    """A Python file named on the command line: the entry of a project."""
    return entry.explicit and entry.path != "-" and not entry.path.endswith(NOTEBOOK_SUFFIX) \
        and os.path.isfile(entry.path)


def with_project_modules(entries: Sequence[Entry], excludes: Sequence[str] = ()) -> list[Entry]:
    """Each entry script followed by the project modules it imports that are not already
    there (found by import, so not `explicit`: files without torch are skipped unparsed),
    except those `--exclude` leaves out."""
    seen = {os.path.realpath(entry.path) for entry in entries if entry.path != "-"}
    expanded = []
    for entry in entries:
        expanded.append(entry)
        if not is_entry_script(entry):
            continue
        for module in project_modules(entry.path, excludes):
            if os.path.realpath(module) not in seen:
                seen.add(os.path.realpath(module))
                expanded.append(Entry(module, False))
    return expanded


def project_modules(entry: str, excludes: Sequence[str] = ()) -> list[str]:
    """The modules `entry` imports, transitively, named as the entry is (relative to the
    current directory when it is), but those that `--exclude` globs match. None for an entry
    that is already distributed (DDP900): it is left as it is, and so are its modules, which
    belong to its own distributed design (a rank-0 guard or a sampler added there would be
    a second one beside the entry's)."""
    if _already_distributed(entry):
        return []
    shown = (shown_path(entry, module) for module in files_of(entry)[1:])
    return [module for module in shown if not matches_any(module, excludes)]


def _already_distributed(entry: str) -> bool:
    """The entry's own verdict (rules/frameworks.py), when its author distributed it: an
    entry ddpify migrated (its setup, guard helper or teardown in it) still brings its modules,
    so that --check and a second run see them. One that cannot be read or parsed is the
    migration's to report, with its modules as usual."""
    try:
        text = read_source(entry).text
        tree = ast.parse(text)
    except (SourceError, SyntaxError, ValueError):
        return False
    return frameworks.already_distributed(tree, text) is not None and not re.search(ddp.OWN_OUTPUT, text)


def shown_path(entry: str, module: Path) -> str:
    """`proj/utils.py` for a module beside `proj/train.py`: messages name the files of a
    project the way its entry was named."""
    relative = os.path.relpath(module, Path(entry).resolve().parent)
    return os.path.normpath(os.path.join(os.path.dirname(entry), relative))


def extra_changes(reports: Sequence[Report]) -> list[str]:
    """The files other than the entry (the first report) that the migration changes."""
    return [report.path for report in reports[1:] if report.changed]


# -- the migrated copy of a tree -------------------------------------------------------------

def is_directory_output(output: Optional[str]) -> bool:
    """`-o OUT_DIR/`: an existing directory, or a path written with a trailing slash."""
    return output not in (None, "-") and (os.path.isdir(output) or output.endswith(("/", os.sep)))


@dataclass(frozen=True)
class Tree:
    """What `ddpify INPUT -o OUT_DIR/` copies: the input's tree under `root`, its Python
    files to migrate (`migrated`, as shown), and OUT_DIR."""
    root: str
    migrated: tuple[str, ...]
    output: str
    # The script named on the command line (None for a folder): a file that must be Python.
    entry: Optional[str] = None

    @property
    def shown_root(self) -> str:
        """The root as messages name it: relative to the current directory when under it."""
        return patch_path(self.root)

    def target(self, path: str) -> str:
        relative = os.path.relpath(os.path.abspath(path), self.root)
        if relative.split(os.sep, 1)[0] == os.pardir:
            raise SourceError(f"{path}: outside the tree {self.root}: not copied")
        return os.path.join(self.output, relative)


def tree_of(path: str, output: str, walked: Sequence[Entry], excludes: Sequence[str] = ()) -> Tree:
    """A file: its project (the tree under its project root, its imported modules migrated);
    a folder: the folder, every Python file that the walk found migrated. Paths stay as
    given (not resolved), so that a tree reached through a link is copied as it is seen."""
    if os.path.isdir(path):
        return Tree(os.path.abspath(path), tuple(entry.path for entry in walked), output)
    root = os.path.dirname(os.path.abspath(path))
    resolved = Path(path).resolve()
    project = project_root(resolved)
    if project in resolved.parents:
        for _level in range(len(resolved.parent.parts) - len(project.parts)):
            root = os.path.dirname(root)
    return Tree(root, (path, *project_modules(path, excludes)), output, entry=path)


def tree_jobs(tree: Tree, options: Options) -> list[Job]:
    """One job per Python file to migrate, each writing to its place in the copy."""
    return together([Job(path, TREE, options, output=tree.target(path), explicit=path == tree.entry)
                     for path in tree.migrated])


def together(planned: list[Job]) -> list[Job]:
    """The jobs, each told which other files of its project the run migrates as well (a
    helper module there guards its own output, so its callers need not: Project). Only
    the files under the job's project root: one tuple per root, not the whole run per job."""
    by_root: dict[Path, list[str]] = {}
    roots: list[Optional[Path]] = []
    root_of_folder: dict[str, Path] = {}  # (a walk's files share a few folders)
    for job in planned:
        root = None
        if job.path != "-":
            folder = os.path.dirname(os.path.abspath(job.path))
            if folder not in root_of_folder:
                root_of_folder[folder] = project_root(Path(job.path).resolve())
            root = root_of_folder[folder]
        roots.append(root)
        if root is not None:
            by_root.setdefault(root, []).append(job.path)
    shared = {root: tuple(paths) for root, paths in by_root.items()}
    return [job if root is None or len(shared[root]) < 2 else replace(job, rewritten=shared[root])
            for job, root in zip(planned, roots)]


def overlap(tree: Tree) -> Optional[str]:
    """Why OUT_DIR cannot take the copy, when it shares files with the input tree."""
    root, output = os.path.realpath(tree.root), os.path.realpath(tree.output)
    if output == root:
        where = "is the input tree"
    elif output.startswith(root + os.sep):
        where = "is inside the input tree"
    elif root.startswith(output + os.sep):
        where = "holds the input tree"
    else:
        return None
    beside = patch_path(os.path.join(os.path.dirname(tree.root), os.path.basename(tree.root) + "_ddp"))
    return f"-o {tree.output} {where} {tree.shown_root}: give a directory outside it (such as {beside}/)"


def copy_tree(tree: Tree, reports: Sequence[Report]) -> None:
    """Copy every file of the tree that the migration does not write (prepared, nothing
    failed), so that `torchrun OUT_DIR/train.py` runs from the copy. The migrated files are
    the reports' pending writes (`jobs.TREE`), committed after this."""
    written = {os.path.abspath(report.pending.path) for report in reports if report.pending}
    for path in _files_to_copy(tree.root):
        target = tree.target(path)
        if os.path.abspath(target) not in written:
            _copy(path, target)
    for target in written:
        os.makedirs(os.path.dirname(target), exist_ok=True)


def _files_to_copy(root: str) -> Iterable[str]:
    """Every kind of file of the tree: data and configs travel with the code. What a walk
    never enters (version control, caches, virtual environments) stays behind; `.gitignore`
    does not apply, since data folders are often ignored yet needed to run, and neither
    does `--exclude`: an excluded module is copied as it is, not migrated, and still
    imports."""
    for directory, subdirectories, files in os.walk(root):
        kept = []
        for name in sorted(subdirectories):
            path = os.path.join(directory, name)
            if is_skipped_directory(directory, name):
                continue
            if os.path.islink(path):
                yield path  # a linked folder (often the data) is linked again, not copied
            else:
                kept.append(name)
        subdirectories[:] = kept
        for name in sorted(files):
            yield os.path.join(directory, name)


def _copy(source: str, target: str) -> None:
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(source):
            if os.path.lexists(target):
                os.unlink(target)
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
    except OSError as error:
        raise SourceError(f"{target}: cannot copy {source}: {error.strerror or error}") from None


def failed(reports: Sequence[Report]) -> bool:
    return any(report.exit_code == ERROR for report in reports)


def check_project(planned: Sequence[Job], prepared: Sequence[Report]) -> None:
    """The self-check over the whole migrated project (ddpify.selfcheck.project): a project
    that joins a process group and steps an optimizer with no module wrapping a model gets
    DDP911 on the optimizer step's report, and a shuffling DistributedSampler the run added
    that no module gives an epoch gets DDP912 on its report; either then cannot exit 0."""
    modules, originals = [], []
    for job, report in zip(planned, prepared):
        try:
            original = read_source(job.path).text
        except SourceError:
            return
        text = original if report.pending is None else report.pending.data.decode("utf-8", "replace")
        modules.append(Module(report.path, text, frozenset(d.code for d in report.diagnostics), original))
        originals.append(original)
    for code, found in (("DDP911", unwrapped_training(modules)), ("DDP912", samplers_never_given_an_epoch(modules)),
                        ("DDP943", shares_measured_elsewhere(modules)),
                        ("DDP953", capped_shares_measured_elsewhere(modules))):
        if found is None:
            continue
        path, line, detail = found
        index = next(i for i, module in enumerate(modules) if module.path == path)
        report = prepared[index]
        original_line = _line_map(originals[index], modules[index].text)(line)
        message = f"{rule_of(code).summary} (output line {line}): {detail}"
        report.diagnostics = tuple(sorted((*report.diagnostics, Diagnostic(code, original_line, 1, message)),
                                          key=lambda d: (d.line, d.column, d.code)))
        report.exit_code = max(report.exit_code, PENDING)
