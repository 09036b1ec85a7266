"""Every rule leads to a fixture: each code a migration can emit appears in some fixture's
expected.txt (which lists every diagnostic of the run, edits included), or is listed below
with the reason it has none and where it is tested instead.

`grep -rl DDP201 fixtures` then finds the fixtures that show a rule.
"""
import re

from fixture_cases import all_cases

from ddpify.rules.registry import RULES

# Codes without a fixture. Remove a code from here when a fixture shows it (the test below
# fails on a code listed here that a fixture shows); add one only with its reason.
WITHOUT_A_FIXTURE = {
    "DDP951": "self-check: no correct migration shows it (DDP133 broadcasts the copies it checks for); its Flags "
              "cases in selfcheck/rules.py and main's outputs of the model/*starts_from_rank0 and "
              "model/ema_class_keeps_its_copy_as_an_attribute_made_before_the_move fixtures (SUMMARY of copies22) "
              "are the broken outputs it finds",
    "DDP952": "self-check: no correct migration shows it (the guard goes around the whole pruning loop); its "
              "Flags case in selfcheck/rules.py and main's outputs of the checkpoints/*_while_* fixtures "
              "(tests/test_selfcheck.py, test_a_loop_only_rank0_can_end_is_found) are the broken outputs it finds",
    "DDP955": "self-check: no correct migration shows it; its Flags case in selfcheck/rules.py, and main's "
              "outputs of evaluation/accuracy_helper_run_on_validation_and_test_loaders_a_factory_returns and "
              "projects/loader_factory_split_by_train_flag (SUMMARY of newcomer22) are the broken outputs it finds",
    "DDP941": "self-check: no correct migration shows it (ddpify places the barriers it checks for); its Flags "
              "cases in selfcheck/rules.py and main's outputs of the checkpoints/*_reloaded_*, *_read_back_*, "
              "*_removed fixtures (SUMMARY of races21) are the broken outputs it finds",
    "DDP954": "self-check: finds a `.to` of a batch part made of strings or a list, which the placement (DDP016) "
              "no longer writes (main's output of setup/placed_on_gpu_file_names_from_the_dataset_stay_a_list "
              "did); broken placed outputs in tests/test_gpu_placement.py",
    "DDP949": "self-check: finds what the placement (DDP016) let through, which no fixture's placement does; "
              "broken placed outputs in tests/test_gpu_placement.py",
    "DDP956": "self-check: no fixture's output hands a collective a CPU tensor in a group that may be NCCL alone "
              "(every output checked, round 22); Flags cases in selfcheck/rules.py, tests/test_selfcheck_nccl.py",
    "DDP957": "self-check: every torch.load of a fixture's output has a map_location; Flags cases in "
              "selfcheck/rules.py, tests/test_selfcheck_nccl.py",
    "DDP938": "self-check: needs the migration's DDP203 naming the loader, which a Flags case cannot give: "
              "broken outputs of fixtures data/step_* and data/bound_step_* in tests/test_selfcheck.py",
    # Reported where the core could not migrate something, in shapes no fixture holds yet.
    "DDP008": "device compared with a string once the device became a torch.device; a string "
              "device now stays a string (fixture device_string_comparisons), so no test names the code",
    "DDP211": "no epoch loop for set_epoch: tests/test_selfcheck.py, ddpify/rules/epochs.py CASES",
    "DDP212": "download racing between ranks: tests/test_data_transform.py",
    "DDP404": "accumulation that no_sync() cannot wrap: tests/test_training_transform.py",
    # --strategy fsdp2, shapes it cannot migrate: the cases beside the rule (rules/sharding.py
    # CASES, run by tests/test_rule_cases.py).
    "DDP906": "FSDP2 optimizer used before the shard: rules/sharding.py CASES",
    "DDP907": "FSDP2 model state read on rank 0 alone: rules/sharding.py CASES",
    "DDP908": "FSDP2 with recurrent layers: rules/sharding.py CASES",
    "DDP931": "--checkpoint dcp on a checkpoint it cannot follow (full state dicts kept): rules/dcp.py CASES",
    # The self-check (safe mode): reported only when ddpify's own output is wrong; each has
    # a broken output in tests/test_selfcheck.py. DDP911 also catches a shape the rules cannot
    # migrate (no model wrapped at all): fixture helper_modules/optimizer_made_by_helper_module.
    "DDP910": "self-check: tests/test_selfcheck.py",
    "DDP947": "self-check: tests/test_selfcheck.py and its Flags cases in selfcheck/rules.py",
    "DDP953": "self-check: no correct migration shows it (the pass is DDP213, which it is not said beside); its "
              "Flags cases in selfcheck/rules.py, and main's outputs of the projects/training_loss_over_a_few_"
              "batches_* and projects/training_loader_handed_on_by_* fixtures are the broken outputs it finds",
    "DDP912": "self-check: tests/test_selfcheck.py",
    "DDP913": "self-check: tests/test_selfcheck.py",
    "DDP914": "self-check: tests/test_selfcheck.py",
    "DDP915": "self-check: tests/test_selfcheck.py",
    "DDP917": "self-check: tests/test_selfcheck.py",
    "DDP919": "self-check: tests/test_selfcheck.py",
    "DDP922": "self-check: a broken output in selfcheck/rules.py CASES",
    "DDP923": "self-check: tests/test_selfcheck.py",
    "DDP924": "self-check: a broken output in selfcheck/rules.py CASES",
    "DDP935": "self-check: broken outputs in selfcheck/rules.py CASES and tests/test_wrap_dominance.py "
              "(a wrap in one branch, in a helper called in one branch, a move after the wrap in a loop)",
    "DDP927": "self-check: broken outputs in selfcheck/rules.py CASES (a wrap in build_model() before the "
              "caller's move; a wrap in the fresh branch beside a load method)",
    "DDP926": "self-check: a broken output in selfcheck/rules.py CASES (the raw module run beside the wrapper "
              "in the loss); ddpify leaves such calls as written and reports them (DDP116)",
    "DDP925": "self-check: a broken output in selfcheck/rules.py CASES (a model attribute read through the "
              "wrapper); ddpify's own outputs read it through getattr",
    "DDP933": "self-check: a broken output in selfcheck/rules.py CASES",
    "DDP932": "self-check: broken outputs in selfcheck/rules.py CASES and tests/test_selfcheck.py (a teacher "
              "no optimizer steps, wrapped beside or instead of its student); ddpify's own outputs wrap the "
              "module the optimizer steps",
    "DDP928": "self-check: broken outputs in selfcheck/rules.py CASES and tests/test_selfcheck.py (a part "
              "frozen, or the whole model frozen for good, after its wrap); ddpify's own outputs change "
              "requires_grad before the wrap or report it (DDP111)",
    "DDP948": "self-check: a broken output in selfcheck/rules.py CASES (`model = net.to(device)` trained in the "
              "loop while `net` is wrapped after it); ddpify's own outputs wrap the name the loop trains "
              "(fixtures model/compiled_view_of_the_moved_network_trains_and_resumes and its siblings)",
    "DDP929": "self-check: broken outputs in selfcheck/rules.py CASES and tests/test_selfcheck.py (weights "
              "drawn after the wrap); ddpify's own outputs wrap after the draw",
    # A `# ddpify: ignore` comment that silences nothing: tests/test_suppressions.py.
    "DDP920": "unused suppression comment: tests/test_suppressions.py",
    # An entry whose Trainer is a class of another module on one path only: a project.
    "DDP921": "project fixture: projects/trainer_chosen_between_project_and_optional_class",
    "DDP012": "project fixtures (a helper module the script imports): projects/gpu_*_at_import_take*_this_ranks_gpu",
    # A function of another module naming a folder from the clock: a project.
    "DDP315": "project fixture: projects/run_folder_from_clock_in_get_args_before_setup_reported",
    # A rank-aware batch sampler of another module (one in the script makes it DDP900): a project.
    "DDP221": "project fixture: projects/rank_aware_batch_sampler_of_its_own_module",
    # Batches handed to an object a factory of another module makes: a project.
    "DDP937": "project fixture: projects/model_object_picked_by_name_by_a_factory_takes_the_batches_reported",
}

LINE = re.compile(r"^input\.py:\d+:\d+: (DDP\d{3}) ", re.MULTILINE)


def codes_in_fixtures() -> dict:
    """code -> the fixtures (family/idiom) whose expected.txt lists it."""
    shown: dict = {}
    for case in all_cases():
        for code in LINE.findall(case.expected_diagnostics.read_text()):
            shown.setdefault(code, set()).add(case.path)
    return shown


def test_every_rule_has_a_fixture_or_a_reason():
    live = {code for code, rule in RULES.items() if not rule.removed}
    shown = codes_in_fixtures()
    assert sorted(live - set(shown) - set(WITHOUT_A_FIXTURE)) == [], "a rule with neither a fixture nor a reason"
    assert sorted(set(WITHOUT_A_FIXTURE) & set(shown)) == [], "a fixture shows it now: drop it from WITHOUT_A_FIXTURE"
    assert sorted(set(WITHOUT_A_FIXTURE) - live) == [], "not a live rule"


def test_fixtures_list_only_known_rules_and_never_a_removed_one():
    shown = codes_in_fixtures()
    assert sorted(code for code in shown if code not in RULES or RULES[code].removed) == []


def test_expected_txt_lists_edits_too():
    """expected.txt holds every diagnostic, not only those a user sees: the guide's shows its
    setup (DDP001), wrap (DDP101) and sampler (DDP201) beside its DDP206 note."""
    guide = next(case for case in all_cases() if case.name == "guide_image_classifier")
    assert {"DDP001", "DDP101", "DDP201", "DDP206"} <= set(LINE.findall(guide.expected_diagnostics.read_text()))
