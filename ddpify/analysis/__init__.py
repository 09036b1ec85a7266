"""Read-only facts about one module, gathered in one traversal (collector.py).

The rules never re-derive these facts: they plan edits keyed by the very nodes this
package recorded, and one transformer applies them (emit/edits.py). Modules, bottom up:
nodes (readers of single nodes), facts (the record), navigation, values, control (queries
over the record, each class extending the one below), collector (the traversal),
figures (what an evaluation computes).
"""
from typing import TYPE_CHECKING, Optional

from libcst.metadata import MetadataWrapper, PositionProvider

from ddpify.analysis.collector import ITERATION_WRAPPERS, Collector
from ddpify.analysis.control import Facts, mark_loops_calling_training_functions, reached_when_run
from ddpify.analysis.facts import Block, BlockItem, DeviceAssignment, Holder, Loader, Model, Statement
from ddpify.analysis.nodes import calls_within, dotted_name, is_fixed_gpu, returned_name, statements_in, string_value
from ddpify.analysis.values import note_helper_output, note_loops_taking_batches_with_next

if TYPE_CHECKING:  # project.py reads other modules with analysis.effects: no import cycle
    from ddpify.project import Project

__all__ = [
    "ITERATION_WRAPPERS", "Block", "BlockItem", "DeviceAssignment", "Facts", "Holder", "Loader", "Model",
    "Statement", "analyse", "calls_within", "dotted_name", "is_fixed_gpu", "returned_name", "statements_in",
    "string_value",
]


def analyse(wrapper: MetadataWrapper, project: Optional["Project"] = None) -> Facts:
    """The facts of one module; `project` tells what the functions of the project's own
    modules that it calls do."""
    if project is None:
        from ddpify.project import Project
        project = Project()
    collector = Collector(Facts(module=wrapper.module), project)
    wrapper.visit(collector)
    facts = collector.facts
    # Already computed for the visit: resolve() hands back the cached maps.
    facts.positions = wrapper.resolve(PositionProvider)
    facts.parents = collector.parents
    facts.trains = bool(collector.training_tops & reached_when_run(facts.module, collector.names_in_top))
    facts.training_calls = collector.training_calls
    collector.note_helper_methods()
    note_helper_output(facts, collector.helper_calls)
    mark_loops_calling_training_functions(facts, collector.training_calls)
    note_loops_taking_batches_with_next(facts, collector.next_calls, collector.iteration_wrappers)
    return facts
