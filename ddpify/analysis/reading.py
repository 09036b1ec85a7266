"""analyse(): one traversal of a module (collector.py), then the passes that need all of it."""
import ast
from typing import Optional

import libcst as cst
from libcst.metadata import MetadataWrapper

from ddpify.analysis import names, traversal
from ddpify.analysis.collector import Collector
from ddpify.analysis.control import (
    Facts,
    mark_loops_calling_training_functions,
    note_entries_of_received_dicts,
    note_loaders_from_callers,
    note_models_moved_here,
    reached_when_run,
)
from ddpify.analysis.dataset_reads import class_methods, dataset_reads
from ddpify.analysis.nodes import dotted_name, parameter_names, remember_module_order
from ddpify.analysis.positions import Positions
from ddpify.analysis.values import (
    note_generator_passes_that_train,
    note_helper_output,
    note_loaders_returned_in_a_tuple,
    note_loops_taking_batches_with_next,
)
from ddpify.project import Project


def analyse(wrapper: MetadataWrapper, project: Optional[Project] = None) -> Facts:
    """The facts of one module; `project` tells what the functions of the project's own
    modules that it calls do."""
    collector = Collector(Facts(module=wrapper.module), project or Project())
    traversal.visit(wrapper.module, collector)
    remember_module_order(collector.order, collector.subtree_ends)
    facts = collector.facts
    facts.positions = Positions(wrapper.module)
    facts.parents = collector.parents
    collector.note_element_movers()
    collector.note_factories_returning_moved()
    collector.note_moves_through_lambdas()
    collector.note_weights_drawn_by_functions()
    collector.note_helper_methods()
    collector.note_loaders_from_methods()
    collector.note_loaders_held_by_project_objects()
    collector.note_loaders_made_in_place()
    collector.note_batches_drawn_by_project_objects()
    collector.note_loaders_built_in_place()
    collector.note_models_handed_to_training()
    collector.note_models_building_their_optimizer()
    collector.note_network_reads_written_to_files()
    collector.note_parts_trained_through_their_model()
    collector.note_models_trained_through_a_holder()
    collector.note_models_trained_through_an_alias()
    collector.note_optimizers_that_train()
    if collector.project.reads_modules:
        project = collector.project
        facts.wrapped_in_bases = {
            statement.name.value: project.base_moved_attributes(project.module, statement.name.value)
            for statement in facts.module.body if isinstance(statement, cst.ClassDef)}
    collector.note_dynamic_imports()
    facts.trains = bool(collector.training_tops & reached_when_run(facts, collector.names_in_top))
    if not facts.trains and collector.project.used_elsewhere:
        # A helper module of a project: what other modules import from it runs when their
        # script runs; its training code, the loaders it hands out and its output are
        # migrated here, where they are written.
        facts.library = bool(reached_when_run(facts, collector.names_in_top,
                                              collector.project.used_elsewhere))
        facts.trains = facts.library
    if not facts.trains and collector.training_tops and not collector.project.used_elsewhere \
            and collector.project.in_project_folder:
        # Training code that nothing in this module runs and no module of the project
        # imports (a notebook's helpers, an engine kept for another repository): migrated as
        # a helper module is, for every caller it may have, and reported (DDP918). Not in an
        # installed package, nor through the API without a project: a library stays as it is.
        # Its public names, less what pytest collects (`test_*`, `Test*`): a test module is
        # run by pytest, one process, and stays as it is.
        surface = {statement.name.value for statement in facts.module.body
                   if isinstance(statement, (cst.FunctionDef, cst.ClassDef))
                   and not statement.name.value.startswith(("_", "test", "Test"))}
        facts.library = facts.unseen_callers = bool(
            collector.training_tops & reached_when_run(facts, collector.names_in_top, surface))
        facts.trains = facts.library
    facts.training_calls = collector.training_calls
    facts.optimizers_without_model = [optimizer for optimizer in facts.optimizers_without_model
                                      if not _steps_only_inputs(facts, optimizer)]
    facts.used_elsewhere = collector.project.used_elsewhere
    if facts.library:
        facts.optimizers_without_model = [optimizer for optimizer in facts.optimizers_without_model
                                          if not _over_a_parameter_callers_hand(facts, optimizer)]
    facts.data_parallel_in_project = collector.project.wraps_in_data_parallel()
    facts.freezes_parameters_in_project = collector.project.freezes_parameters()
    if facts.super_init_calls and facts.loader_classes:
        found = collector.project.split_loader_facts()
        if found is None:  # a script alone: its own reads and methods
            tree = ast.parse(facts.module.code)
            found = tuple(("", line) for line in dataset_reads(tree)), frozenset(class_methods(tree))
        facts.loader_dataset_reads, facts.class_methods_in_project = found
    note_entries_of_received_dicts(facts)
    note_helper_output(facts, collector.helper_calls)
    mark_loops_calling_training_functions(facts, collector.training_calls)
    collector.note_generators_over_loaders()
    note_loops_taking_batches_with_next(facts, collector.next_calls, collector.iteration_wrappers)
    note_generator_passes_that_train(facts, collector.next_calls)
    note_loaders_returned_in_a_tuple(facts)
    if facts.library:
        project = collector.project
        facts.read_by_derived_classes = {
            attribute for statement in facts.module.body if isinstance(statement, cst.ClassDef)
            for attribute in project.attributes_read_in_derived(project.module, statement.name.value)}
        facts.inherited_from_parameters = {
            attribute for statement in facts.module.body if isinstance(statement, cst.ClassDef)
            for attribute in project.inherited_attributes_from_parameters(project.module, statement.name.value)}
        note_loaders_from_callers(facts, collector.iteration_wrappers)
        facts.module_attributes = {attribute for statement in facts.module.body if isinstance(statement, cst.ClassDef)
                                   for attribute in project.module_attributes(project.module, statement.name.value)}
        facts.moved_self_attributes = project.moved_self_attributes()
        facts.trained_in_derived = {
            statement.name.value: project.attributes_trained_in_derived(project.module, statement.name.value)
            for statement in facts.module.body if isinstance(statement, cst.ClassDef)}
        note_models_moved_here(facts)
    else:
        # (A script that makes a project's Trainer, which wraps what it keeps: rules/model.py.)
        facts.moved_self_attributes = collector.project.moved_self_attributes()
    if any(facts.calls_named.get(qualified) for qualified in names.SUMMARY_WRITER | names.VISDOM):
        facts.read_by_mixins = {
            attribute for statement in facts.module.body if isinstance(statement, cst.ClassDef)
            for attribute in collector.project.attributes_read_by_mixins(
                collector.project.module, statement.name.value)}
        facts.read_on_objects_elsewhere = collector.project.attributes_read_on_objects(collector.project.module)
    facts.inherited_trackers = {
        statement.name.value: found for statement in facts.module.body
        if isinstance(statement, cst.ClassDef) and statement.bases
        for found in [collector.project.inherited_tracker_attributes(collector.project.module, statement.name.value)]
        if found}
    return facts


def _over_a_parameter_callers_hand(facts: Facts, optimizer: cst.Call) -> bool:
    """Rule: in a helper module, an optimizer whose params are a parameter of its function
    (`optim.Adam(parameters, ...)` in `get_optimizer(config, parameters)`), a function other
    modules import: each caller hands `model.parameters()` there, which names the model it
    wraps (the caller's side, Collector._note_optimizer_made_elsewhere)."""
    function = facts.function_of(optimizer)
    if function is None or function not in facts.module.body or function.name.value not in facts.used_elsewhere:
        return False
    params = [arg.value for arg in optimizer.args if arg.keyword is not None and arg.keyword.value == "params"] or [
        arg.value for arg in optimizer.args[:1] if arg.keyword is None and not arg.star]
    return len(params) == 1 and isinstance(params[0], cst.Name) and params[0].value in parameter_names(function)


def _steps_only_inputs(facts: Facts, optimizer: cst.Call) -> bool:
    """`optimizer_delta = optim.SGD([delta], lr=...)`, stepped only where its backward fills
    the gradient of an input (an attack's perturbation, collector._backward_for_input_gradients):
    it trains no module, so no module is missing a wrap."""
    assign = facts.parents.get(optimizer)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return False
    name = dotted_name(assign.targets[0].target)
    steps = [call for call in facts.nodes_of(cst.Call) if isinstance(call.func, cst.Attribute)
             and call.func.attr.value == "step" and dotted_name(call.func.value) == name
             and facts.function_of(call) is facts.function_of(optimizer)]
    return name is not None and bool(steps) and not any(step in facts.training_calls for step in steps)
