"""Safe mode (DESIGN.md §2, item 10): ddpify re-reads its own output and refuses exit 0 when it
cannot show the contract's properties there.

Like black's safe mode, it is a second opinion that shares nothing with the first: the transforms
read the script with libcst and ddpify.analysis; this reads the original and the output with the
stdlib `ast` and a few simple, conservative rules (DDP910-DDP917, DDP919, DDP922-DDP929, DDP932,
DDP933, DDP935, DDP939, DDP941, DDP947-DDP949, DDP951-DDP957). What it cannot show is a warning
naming the line of the original where the defect is (the output line is in the message), so the run
exits 1 and the file is still written.
"""
import ast
import difflib
from collections.abc import Iterable, Sequence
from typing import Callable, Optional

from ddpify.diagnostics import Diagnostic, rule_of
from ddpify.selfcheck.aliases import aliases_trained_around_the_wrap, wrappers_moved_through_an_alias
from ddpify.selfcheck.capped_gathers import gathered_capped_figures
from ddpify.selfcheck.capped_shares import capped_share_figures
from ddpify.selfcheck.dominance import wraps_off_the_training_path
from ddpify.selfcheck.early_copies import copies_never_synced
from ddpify.selfcheck.file_races import file_races
from ddpify.selfcheck.gathers import misplaced_gathers
from ddpify.selfcheck.guarded_exits import loops_ended_by_rank0_alone
from ddpify.selfcheck.loaders import LEFT_WHOLE_CODES, NO_EPOCH_LOOP_CODES, unsharded_loaders
from ddpify.selfcheck.models import (
    DROPPED_MOVE_CODES,
    attributes_read_through_the_wrapper,
    deleted_moves,
    misplaced_wraps,
    own_model_unwrapped,
    parts_run_beside_the_wrapper,
    requires_grad_changed_after_the_wrap,
    trained_but_unwrapped,
    training_without_a_wrap,
    weights_drawn_after_the_wrap,
    wrapper_handed_to_an_exporter,
    wraps_across_methods,
)
from ddpify.selfcheck.names import names_read_unbound
from ddpify.selfcheck.nccl_tensors import cpu_tensors_in_collectives, loads_without_map_location
from ddpify.selfcheck.output import (
    draws_on_rank0_only,
    moves_on_rank0,
    shared_work_on_rank0,
    unguarded_output,
    wrapped_forwards_on_rank0,
)
from ddpify.selfcheck.rank_decisions import decisions_on_per_rank_values
from ddpify.selfcheck.setup import (
    allocated_before_the_device_is_set,
    asked_before_the_group,
    device_types_changed,
    gpu_indices_left,
    joined_twice,
    joins_on_import,
)
from ddpify.selfcheck.shared_figures import ungathered_share_figures
from ddpify.selfcheck.source import Source
from ddpify.selfcheck.trained import untrained_wraps
from ddpify.selfcheck.twice_gathered import figures_gathered_twice

# Diagnostics that say a model was left unwrapped on purpose: the self-check does not say it again.
UNWRAPPED_CODES = ("DDP903", "DDP117")
# Diagnostics that say a decision is taken on a per-rank value (DDP939 does not say it again there).
DIVERGENCE_REPORTED = ("DDP902", "DDP408", "DDP416", "DDP945", "DDP420")


def check(original: str, migrated: str, diagnostics: Iterable[Diagnostic],
          original_tree: Optional[ast.Module] = None) -> list[Diagnostic]:
    """The self-check's diagnostics for `migrated`, ddpify's output for `original`, given the
    diagnostics of the migration (which explain deliberate choices: DDP106, DDP203, ...).
    `original_tree`: the original's `ast` tree, where the caller has it already."""
    diagnostics = list(diagnostics)
    before, after = Source(original, original_tree), Source(migrated)
    dropped_moves = _lines_of(diagnostics, DROPPED_MOVE_CODES)
    loaders_left_whole = _lines_of(diagnostics, LEFT_WHOLE_CODES)
    to_original = _line_map(original, migrated)
    # DDP910 is found in the original (the move is missing from the output); the rest in the output.
    in_original = list(deleted_moves(before, after, dropped_moves, to_original))
    in_output = [
        *misplaced_wraps(after),
        *untrained_wraps(after),
        *aliases_trained_around_the_wrap(after),
        *wrappers_moved_through_an_alias(after),
        *wraps_off_the_training_path(after),
        *wraps_across_methods(after),
        *requires_grad_changed_after_the_wrap(after),
        *weights_drawn_after_the_wrap(after),
        *training_without_a_wrap(after, any(d.code in UNWRAPPED_CODES for d in diagnostics)),
        *own_model_unwrapped(after, any(d.code in UNWRAPPED_CODES for d in diagnostics)),
        *wrapper_handed_to_an_exporter(after),
        *attributes_read_through_the_wrapper(after),
        *parts_run_beside_the_wrapper(after),
        *unsharded_loaders(before, after, loaders_left_whole,
                           any(d.code in NO_EPOCH_LOOP_CODES for d in diagnostics),
                           frozenset(_lines_of(diagnostics, ("DDP203",)))),
        *unguarded_output(after),
        *shared_work_on_rank0(after),
        *wrapped_forwards_on_rank0(after),
        *moves_on_rank0(after),
        *draws_on_rank0_only(after),
        *joins_on_import(before, after),
        *joined_twice(before, after),
        *device_types_changed(before, after),
        *gpu_indices_left(before, after),
        *allocated_before_the_device_is_set(after),
        *asked_before_the_group(after),
        *names_read_unbound(before, original, after, migrated),
        *misplaced_gathers(after),
        *ungathered_share_figures(after),
        *decisions_on_per_rank_values(after),
        *file_races(after),
        *loops_ended_by_rank0_alone(after),
        *gathered_capped_figures(after),
        *cpu_tensors_in_collectives(after),
        *loads_without_map_location(after),
        *copies_never_synced(after),
        *capped_share_figures(after),
        *figures_gathered_twice(after),
    ]
    # A fixed GPU the migration already reported where it is (DDP003) is not counted twice.
    # Likewise a part of the model whose requires_grad changes after its wrap (DDP111).
    # Likewise a pass over a training loader's share the migration reported (DDP213).
    reported = {"DDP924": _lines_of(diagnostics, ("DDP003",)), "DDP928": _lines_of(diagnostics, ("DDP111",)),
                "DDP943": _lines_of(diagnostics, ("DDP213",)), "DDP953": _lines_of(diagnostics, ("DDP213",)),
                "DDP939": _lines_of(diagnostics, DIVERGENCE_REPORTED)}
    found = [Diagnostic(code, line, 1, f"{rule_of(code).summary}: {detail}") for code, line, detail in in_original]
    found += [Diagnostic(code, to_original(line), 1, f"{rule_of(code).summary} (output line {line}): {detail}")
              for code, line, detail in in_output if to_original(line) not in reported.get(code, ())]
    # A writer the migration reported it could not put on rank 0 (DDP307, `with h5py.File(p,
    # "a") as store:` around the training; DDP936, a lambda whose copy returns its path) is the
    # write found here again: said once.
    writers_reported = _lines_of(diagnostics, ("DDP307", "DDP936"))
    found = [d for d in found if not (d.code == "DDP913" and d.line in writers_reported)]
    # A part of the model the migration left running on the wrapper and reported (DDP116), or a
    # model it reported training around its wrapper (DDP903), is found here again: said once.
    parts_reported = _lines_of(diagnostics, ("DDP116", "DDP903"))
    found = [d for d in found if not (d.code in ("DDP925", "DDP926") and d.line in parts_reported)]
    # A frozen module wrapped (DDP911, DDP raises at the wrap) is also one no optimizer steps
    # (DDP932): said once, as the error it raises.
    refused_wraps = {d.line for d in found if d.code == "DDP911"}
    found = [d for d in found if not (d.code == "DDP932" and d.line in refused_wraps)]
    # A model the migration (DDP903, DDP119) or the line-order check (DDP911) already said is
    # wrapped in the wrong place is the path found here again: said once.
    said = " ".join(d.message for d in [*diagnostics, *found]
                    if d.code in ("DDP903", "DDP119", "DDP911")).split("`")[1::2]
    found = [d for d in found if not (d.code == "DDP935" and _named_in(d.message.split("`")[1], said))]
    return sorted(set(found), key=lambda d: (d.line, d.code, d.message))


def check_distributed(original: str, original_tree: Optional[ast.Module] = None) -> list[Diagnostic]:
    """What the self-check still finds in a file ddpify leaves unchanged because it is
    already distributed (DDP900): a trained model that no DDP call wraps."""
    return [Diagnostic(code, line, 1, detail)
            for code, line, detail in trained_but_unwrapped(Source(original, original_tree))]


def _named_in(model: str, quoted: Sequence[str]) -> bool:
    """`model` is one of the quoted names, or what one of them calls or reads (`model(x)`)."""
    return any(code == model or code.startswith((f"{model}(", f"{model}.")) for code in quoted)


def _lines_of(diagnostics: Sequence[Diagnostic], codes: tuple[str, ...]) -> set:
    return {line for d in diagnostics if d.code in codes
            for line in range(d.line, max(d.end_line, d.line) + 1)}


def _line_map(original: str, migrated: str) -> Callable[[int], int]:
    """Output line -> the original line it came from, or for inserted code the original line
    just before it: diagnostics are printed against the input file. The diff is computed on
    the first call only (most outputs need no line mapped)."""
    blocks: list = []

    def to_original(line: int) -> int:
        if not blocks:
            matcher = difflib.SequenceMatcher(None, original.splitlines(), migrated.splitlines(), autojunk=False)
            blocks.extend(matcher.get_opcodes())
        index = line - 1
        for tag, start, end, out_start, out_end in blocks:
            if out_start <= index < out_end:
                if tag == "equal":
                    return start + index - out_start + 1
                # Replaced lines: the one at the same offset; inserted ones: the line before.
                return max(1, min(start + index - out_start + 1, end))
        return max(1, original.count("\n"))

    return to_original
