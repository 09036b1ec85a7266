"""Every rule, collected from the units that define and report them.

A unit is a module with `RULES` (its codes, severities and messages) and `CASES` (small
before / no-op cases, run by tests/test_rule_cases.py). `--list-rules`, `--explain`, the
README's rules table and Diagnostic.severity all read RULES here. Code outside the rule units
that the units import (emit, the self-check, suppressions) reaches it through
diagnostics.registry(), which imports this module on first use.
"""
from collections.abc import Iterable
from types import ModuleType

from ddpify import suppressions
from ddpify.diagnostics import Rule
from ddpify.rules import (
    checkpoints,
    data,
    dcp,
    deferred_writes,
    devices,
    downloads,
    early_copies,
    epoch_cut,
    epochs,
    evaluation,
    frameworks,
    full_batches,
    gpu_count_batches,
    gpu_placement,
    hand_batches,
    import_time_devices,
    in_batch,
    lazy_layers,
    loader_dicts,
    loader_workers,
    machine_local,
    method_forwards,
    model,
    part_runs,
    per_rank_stops,
    random_batches,
    rank0_values,
    report_only,
    schedule_length,
    set_order,
    setup,
    sharding,
    shared_names,
    side_effects,
    splits,
    subset_splits,
    training,
    whole_file,
)
from ddpify.rules.cases import Case
from ddpify.selfcheck import rules as selfcheck

UNITS: tuple[ModuleType, ...] = (
    setup, devices, import_time_devices, model, early_copies, method_forwards, lazy_layers, part_runs, sharding, dcp,
    data, deferred_writes, epochs,
    downloads, splits, subset_splits, full_batches, epoch_cut, schedule_length, evaluation, hand_batches, loader_dicts,
    per_rank_stops, loader_workers, random_batches, set_order, side_effects, checkpoints, shared_names, machine_local,
    training, in_batch, rank0_values, report_only, frameworks,
    whole_file, gpu_count_batches, gpu_placement, selfcheck, suppressions,
)


class DuplicateCode(Exception):
    """Two units define the same code: a code names one rule, forever."""


def collect(units: Iterable[ModuleType]) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    owners: dict[str, str] = {}
    for unit in units:
        for rule in unit.RULES:
            if rule.code in rules:
                raise DuplicateCode(f"{rule.code} is defined in both {owners[rule.code]} and {unit.__name__}")
            rules[rule.code] = rule
            owners[rule.code] = unit.__name__
    return dict(sorted(rules.items()))


RULES: dict[str, Rule] = collect(UNITS)


def unit_name(unit: ModuleType) -> str:
    """`ddpify.rules.data` -> data, `ddpify.selfcheck.rules` -> selfcheck."""
    parts = unit.__name__.split(".")
    return parts[-2] if parts[-1] == "rules" else parts[-1]


def cases() -> list[tuple[str, int, Case]]:
    """(unit, index, case) for the CASES of every unit."""
    return [(unit_name(unit), index, case) for unit in UNITS for index, case in enumerate(unit.CASES)]
