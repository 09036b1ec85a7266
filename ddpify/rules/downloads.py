"""Rank 0 downloads the data, then one process per other machine, while the others wait (DDP209, DDP212)."""
from collections.abc import Sequence
from typing import Optional

import libcst as cst

from ddpify.analysis import names, shell
from ddpify.analysis.control import Facts
from ddpify.analysis.facts import Statement
from ddpify.analysis.nodes import (
    calls_within,
    dotted_name,
    find_all,
    is_false,
    names_in,
    opens_for_writing,
    string_value,
    target_names,
    targets_bound_in,
)
from ddpify.diagnostics import Rule, Severity
from ddpify.emit.edits import Edits, Insertion
from ddpify.plan import Plan
from ddpify.rules.cases import TRAINING, Emits, Silent
from ddpify.rules.setup import calls_running, group_joined_before

RULES = (
    Rule("DDP209", Severity.EDIT, "rank 0 downloads the dataset, then one process per other machine; the others wait",
         "Every rank would download into the same directory at once and could read a "
         "half-written file. Rank 0 goes first; then local rank 0 of each other machine, which "
         "finds the files where the machines share a file system and fetches its own copy where "
         "they do not (two machines writing one shared file at once could corrupt it); then the rest.",
         "Nothing to do."),
    Rule("DDP212", Severity.WARNING, "dataset download may race between ranks",
         "Every rank downloads into the same directory at once; ddpify could not add the "
         "barrier because the distributed setup is not in scope here.",
         "Download on local rank 0 first: `if local_rank != 0: dist.barrier()` before, and "
         "`if local_rank == 0: dist.barrier()` after."),
)

# Rank 0 goes first; then local rank 0 of each other machine, which finds the files rank 0
# wrote where the machines share a file system (NFS, Lustre) and writes its own where they do
# not; then the rest of each machine. Two machines' local rank 0 writing one shared file at
# once could leave it corrupt. (Rank 0: B1, B2 after; another machine's local rank 0: B1 before,
# B2 after; every other rank: B1, B2 before.)
DOWNLOAD_BEFORE_CODE = """\
if distributed and dist.get_rank() != 0:
    dist.barrier()  # wait while rank 0 downloads the data
    if local_rank != 0:
        dist.barrier()  # then while this machine's local rank 0 does, if its copy is missing
"""


DOWNLOAD_AFTER_CODE = """\
if distributed and dist.get_rank() == 0:
    dist.barrier()  # the data is in place: release the other machines
if distributed and local_rank == 0:
    dist.barrier()  # and on this machine: release its other ranks
"""


# In a helper module, which sees no setup block: the same barriers, asked at run time.
DOWNLOAD_BEFORE_IN_HELPER_CODE = """\
if dist.is_initialized() and dist.get_rank() != 0:
    dist.barrier()  # wait while rank 0 downloads the data
    if int(os.environ.get("LOCAL_RANK", 0)) != 0:
        dist.barrier()  # then while this machine's local rank 0 does, if its copy is missing
"""


DOWNLOAD_AFTER_IN_HELPER_CODE = """\
if dist.is_initialized() and dist.get_rank() == 0:
    dist.barrier()  # the data is in place: release the other machines
if dist.is_initialized() and int(os.environ.get("LOCAL_RANK", 0)) == 0:
    dist.barrier()  # and on this machine: release its other ranks
"""


def plan(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Barriers around each run of statements that download a dataset (`download=True`,
    urlretrieve, unpacking an archive), or call a helper of the script's that does. A tokenizer
    built and saved when its file is missing (`if not path.exists(): ... tokenizer.save(path)
    else: Tokenizer.from_file(path)`) is the same shape: local rank 0 builds and saves it while
    the others wait, then they read the file it wrote (rank 0 alone saving it would leave the
    others reading a half-written file, or none on another machine)."""
    saved = [facts.statement_of(call) for call in tokenizer_saves_where_missing(facts, setup)]
    # (A command that moves or removes what a download unpacked, after it in its block, is part of it.)
    finishing = [facts.statement_of(call) for call in shell.writing_commands(facts.calls_named)
                 if shell.after_a_download(facts.statement_of(call), facts.parents, facts.download_statements)]
    dataset_sites = _download_sites(facts, setup, facts.download_statements + finishing)
    cache_sites = [site for site in _download_sites(facts, setup, _caches_written(facts)) if site not in dataset_sites]
    dataset_sites += cache_sites
    tokenizer_sites = [site for site in _download_sites(facts, setup, saved) if site not in dataset_sites]
    _report_helpers_downloading_before_setup(facts, edits, setup)
    for group in _consecutive_groups(facts, sorted(dataset_sites + tokenizer_sites, key=facts.line_of)):
        first, last = group[0], group[-1]
        tokenizer_only = all(statement in tokenizer_sites for statement in group)
        if _inside_class(facts, first) and (not setup.library or in_a_dataset_downloading_on_request(facts, first)):
            continue
        before, after = DOWNLOAD_BEFORE_CODE, DOWNLOAD_AFTER_CODE
        if setup.library or _in_training_called_after_setup(facts, setup, first):
            # A helper module's loader class or factory, which every rank runs; or a function
            # of the script that trains after it downloads, called once the group exists.
            before, after = DOWNLOAD_BEFORE_IN_HELPER_CODE, DOWNLOAD_AFTER_IN_HELPER_CODE
            edits.imports.add("os")
        elif not setup.sees_setup(facts, first):
            edits.report("DDP212", first)
            continue
        # First of all that goes before the statement: a dataset hoisted out of the loader
        # call (`DataLoader(MNIST(download=True), ...)`) downloads too.
        message = None
        if all(statement in cache_sites for statement in group):
            before = before.replace("downloads the data", "builds the dataset and writes its cache")
            after = after.replace("the data is in place", "the cache is written")
            message = ("rank 0 builds the dataset, which writes its cache, then one process per other machine; "
                       "the others wait, then read it")
        if tokenizer_only:
            before = before.replace("downloads the data", "builds and saves the tokenizer")
            after = after.replace("the data is in place", "the tokenizer's file is in place")
            message = ("rank 0 builds and saves the tokenizer whose file is missing, then one process per other "
                       "machine; the others wait, then read that file")
        early_exits = _early_exits_on_file_tests(facts, first)
        edits.insert_before(early_exits[0] if early_exits else first,
                            Insertion(edits.statements(before), takes_comments=True), first=True)
        for exit_test in early_exits:
            for way_out in _returns_within(exit_test):
                edits.insert_before(way_out, Insertion(edits.statements(after)))
        edits.insert_after(last, edits.statements(after))
        edits.imports.add("dist")
        edits.report("DDP209", first, message)
        _once_per_machine(facts, edits, group, finishing, in_sight=before == DOWNLOAD_BEFORE_CODE)


def _once_per_machine(facts: Facts, edits: Edits, group: Sequence[Statement], finishing: list[Statement],
                      in_sight: bool) -> None:
    """What every rank would run again after the barriers runs on local rank 0 alone; where the
    setup is in sight, so is the folder the download fills made. (In a helper, with the setup out
    of sight, local rank 0 is asked at run time, as its barriers are.)"""
    local_rank_zero = LOCAL_RANK_ZERO if in_sight else LOCAL_RANK_ZERO_IN_HELPER
    for statement in _run_again_by_every_rank(facts, group, {*facts.download_statements, *finishing}):
        edits.guarded.setdefault(statement, local_rank_zero)
    if not in_sight:
        return
    for folder in _folders_made_for(facts, group):
        if folder not in edits.guarded:
            edits.guarded[folder] = LOCAL_RANK_ZERO
            edits.report("DDP209", folder, "the folder the download fills is made once per machine, "
                         "by local rank 0, which downloads into it")


# A folder the download writes into is made once per machine, where the download runs.
LOCAL_RANK_ZERO = "local_rank == 0"
LOCAL_RANK_ZERO_IN_HELPER = 'not dist.is_initialized() or int(os.environ.get("LOCAL_RANK", 0)) == 0'


def _caches_written(facts: Facts) -> list[Statement]:
    """Rule: a Dataset class of the script that writes a file while it is built (its cache:
    `torch.save((self.x, self.y), cache)` where the cache is missing, `np.save`, `open(p, "w")`)
    is built as a download is: by local rank 0 first while the others wait, then by them, who
    find the file there and read it. Built by every rank at once, each would write the cache,
    and a rank could read it half-written."""
    writes = [*facts.save_calls, *(call for qualified in sorted(names.WRITERS_AS_VALUES - {names.TORCH_SAVE})
                                   for call in facts.calls_named.get(qualified, ())),
              *(call for qualified in sorted(names.OPEN) for call in facts.calls_named.get(qualified, ())
                if opens_for_writing(call))]
    building = _methods_building_datasets(facts)
    statements: list[Statement] = []
    for call in writes:
        if facts.function_of(call) in building and facts.statement_of(call) not in statements:
            statements.append(facts.statement_of(call))
    return statements


def _methods_building_datasets(facts: Facts) -> set[cst.FunctionDef]:
    """The `__init__` of each Dataset class of the script, and the methods it calls on itself,
    at any depth (`self.data = self._load_data()` -> `self._save_to_cache(...)`)."""
    building: set[cst.FunctionDef] = set()
    for name in sorted(facts.dataset_classes):
        definition = facts.classes.get(name)
        if definition is None:
            continue
        methods = {statement.name.value: statement for statement in definition.body.body
                   if isinstance(statement, cst.FunctionDef)}
        pending = ["__init__"]
        while pending:
            method = methods.get(pending.pop())
            if method is None or method in building:
                continue
            building.add(method)
            pending.extend(callee[len("self."):] for callee in map(dotted_name, (
                call.func for call in calls_within(method.body))) if callee and callee.startswith("self."))
    return building


def _folders_made_for(facts: Facts, group: Sequence[Statement]) -> list[Statement]:
    """Rule: `os.makedirs(DATA_DIR, exist_ok=True)` above a download into `DATA_DIR` (the
    same name or the same literal path, in the download's block) is made by local rank 0,
    as the download is: made on global rank 0 alone, the folder would be missing on every
    other machine of a multi-node run when its local rank 0 downloads into it. (An output
    folder taken for one by a name both share is only made on each machine too: harmless.)"""
    first = group[0]
    body = list(facts.block_of(first).body)
    if first not in body:
        return []
    used = set().union(*(_path_words(statement) for statement in group))
    earlier = set(body[:body.index(first)])
    found: list[Statement] = []
    for qualified in sorted(names.MAKE_DIRECTORIES):
        for call in facts.calls_named.get(qualified, ()):
            statement = facts.statement_of(call)
            if statement in earlier and call.args and _is_call_line(statement, call) \
                    and _path_words(call.args[0].value) & used:
                found.append(statement)
    return sorted(found, key=facts.line_of)


def _is_call_line(statement: Statement, call: cst.Call) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and statement.body[0].value is call


def _path_words(node: cst.CSTNode) -> set[str]:
    """The names (whole dotted names, not the functions called) and string literals a path is
    made of, or that a download's statements read."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        name = dotted_name(node)
        if name is not None:
            return {name}
    if isinstance(node, cst.SimpleString):
        value = string_value(node)
        return {value} if value else set()
    children = [arg for arg in node.args] if isinstance(node, cst.Call) else node.children
    return set().union(*(_path_words(child) for child in children))


def _report_helpers_downloading_before_setup(facts: Facts, edits: Edits, setup: Plan) -> None:
    """Rule: every barrier runs where the process group exists. A function of another module
    that downloads (`data.prepare_data(root)`) gets barriers that ask at run time whether the
    group is joined; the setup block moves above its calls in the setup's own function
    (setup.py), but a call at module level or in the `__main__` block before that function
    runs finds no group: every rank downloads into the same folder at once (DDP212)."""
    if setup.library:
        return
    for call in facts.helper_download_calls:
        if not group_joined_before(facts, setup, call):
            edits.report("DDP212", call, (
                f"`{edits.code(call.func)}()` downloads data in another module of the project before the "
                "process group is joined: every rank downloads into the same folder at once; call it after "
                "the distributed setup (ddpify then has local rank 0 download while the others wait)"))


def _in_training_called_after_setup(facts: Facts, setup: Plan, statement: Statement) -> bool:
    """`statement` sits in a function that trains, which the setup's scope alone calls (the
    `__main__` block that chose the device, then `main(args)`): no name of the setup reaches
    it, but the process group exists when it runs, so the barriers ask for it at run time."""
    function = facts.function_of(statement)
    calls = facts.calls_of(function)
    return (function in facts.training_functions and not setup.sees_setup(facts, statement)
            and bool(calls) and all(setup.sees_setup(facts, call) for call in calls))


def _download_sites(facts: Facts, setup: Plan, statements: Sequence[Statement]) -> list[Statement]:
    """Each download statement, or, inside a helper that the setup's scope calls, each
    call of that helper. Not the call of a function that also trains (`main(args)` that
    downloads, then trains): the ranks held at a barrier around it would leave local rank 0
    alone in the training's collectives, a hang; the barriers go around the download in
    there (_in_training_called_after_setup). A test of the file system around it (`if not os.path.exists`)
    goes inside the barriers: the ranks that wait see the files once they are there."""
    sites: list[Statement] = []
    for statement in statements:
        function = facts.function_of(statement)
        # A class's code downloads where its caller builds it (`Points(root)`), even where the
        # module-level setup is in sight of the class: barriers in there are skipped below.
        in_class = not setup.library and _inside_class(facts, statement)
        calls = _calls_from_the_setups_scope(facts, setup, function) if in_class or not setup.sees_setup(
            facts, statement) else None
        candidates = [facts.statement_of(call) for call in calls] if calls else [statement]
        for candidate in candidates:
            for site in _around_the_callers_file_tests(facts, setup, _outside_file_tests(facts, candidate)):
                if site not in sites:
                    sites.append(site)
    return sorted(sites, key=facts.line_of)


def _around_the_callers_file_tests(facts: Facts, setup: Plan, site: Statement) -> list[Statement]:
    """Rule: every rank reaches both barriers or none. A function that downloads or unpacks,
    called where a test of the file system says the files are missing (`if not
    os.path.isdir("data/lfw"): extract(archive)`), is skipped by a rank that tests once local
    rank 0 has begun to fill the folder: barriers inside it leave local rank 0 waiting for a
    rank that never comes (a hang, or its barrier paired with the next collective) while that
    rank reads half-written files. The barriers go around each call of the function, outside
    its caller's test, as around a download written inline (a caller up to three calls up);
    not where the function trains or where a call of it is outside this module's view. A test
    in a method of a class: around the call that builds the object, as for a class that
    downloads itself."""
    for _ in range(3):
        function = facts.function_of(site)
        if function is None or function in facts.training_functions or not _is_top_level_of(facts, site, function):
            return [site]
        calls = calls_running(facts, function)
        lifted = [_outside_file_tests(facts, facts.statement_of(call)) for call in calls]
        if not calls or all(outer is facts.statement_of(call) for outer, call in zip(lifted, calls)):
            return [site]
        if any(_inside_class(facts, outer) for outer in lifted):
            # A class's code downloads where its caller builds it (`Points(root)` in a loader
            # call): the barriers go around that call, or stay where they were.
            builds = None if setup.library else _calls_from_the_setups_scope(
                facts, setup, facts.function_of(lifted[0])) if len(lifted) == 1 else None
            return sorted({facts.statement_of(call) for call in builds}, key=facts.line_of) if builds else [site]
        if len(lifted) > 1:
            return sorted(set(lifted), key=facts.line_of)
        site = lifted[0]
    return [site]


def _is_top_level_of(facts: Facts, site: Statement, function: cst.FunctionDef) -> bool:
    """`site` is a statement of the function's own body, run whenever the function is."""
    return facts.parents.get(site) is function.body


def _calls_from_the_setups_scope(facts: Facts, setup: Plan,
                                 function: Optional[cst.FunctionDef]) -> Optional[list[cst.Call]]:
    """The calls, in the setup's scope, that run `function`: its own calls there, or those of
    the functions that call it, up to three calls deep (`Puzzles("data")`, whose `__init__`
    calls `self.download()`). None where a path to it starts outside that scope or passes
    through a function that trains (barriers around a call that trains would leave local
    rank 0 alone in the training's collectives)."""
    sites: list[cst.Call] = []
    frontier, seen = [function], {function}
    for _ in range(3):
        callers: list[Optional[cst.FunctionDef]] = []
        for each in frontier:
            calls = calls_running(facts, each) if each is not None else []
            if not calls or each in facts.training_functions:
                return None
            for call in calls:
                caller = facts.function_of(call)
                # (A method's call of another, `self._cache()`, runs where the object is built,
                # even in a flat script whose setup is in sight of the class.)
                if setup.sees_setup(facts, call) and (setup.library or not _inside_class(facts, call)):
                    sites.append(call)
                elif caller is None or caller in seen:
                    return None
                else:
                    seen.add(caller)
                    callers.append(caller)
        if not callers:
            return sites
        frontier = callers
    return None


# The methods by which a tokenizer writes itself: `tokenizer.save("tokenizer.json")` (the
# `tokenizers` library), `.save_model(folder)` (its vocabulary files), `.save_pretrained(folder)`.
TOKENIZER_SAVING_METHODS = ("save", "save_model", "save_pretrained")


def tokenizer_saves(facts: Facts) -> list[cst.Call]:
    """Rule: a tokenizer made by Hugging Face's `tokenizers` or `transformers` (`Tokenizer(WordLevel(...))`,
    `Tokenizer.from_file(p)`, `ByteLevelBPETokenizer()`, `AutoTokenizer.from_pretrained(name)`),
    held by a name, writes its file with `tokenizer.save(path)` (or `.save_model`/`.save_pretrained`),
    once per rank unless rank 0 alone saves it (side_effects.py), or local rank 0 while the
    others wait where it is saved when its file is missing (tokenizer_saves_where_missing)."""
    makers = {call for qualified, calls in facts.calls_named.items()
              if qualified.split(".", 1)[0] in ("tokenizers", "transformers")
              and any(part.endswith(("Tokenizer", "TokenizerFast")) for part in qualified.split("."))
              for call in calls}
    if not makers:
        return []
    saves: list[cst.Call] = []
    for callee, calls in facts.calls_by_callee.items():
        holder, _, method = callee.rpartition(".")
        if method in TOKENIZER_SAVING_METHODS and holder and any(
                value in makers for value in facts.assigned_values.get(holder, ())):
            saves.extend(call for call in calls if call.args)
    return sorted(saves, key=facts.start_of)


def tokenizer_saves_where_missing(facts: Facts, setup: Plan) -> list[cst.Call]:
    """The tokenizer saves under a test of the file system (`if not path.exists():`) in the
    setup's scope or in a helper it calls: local rank 0 runs them first, the others wait."""
    if setup.library:
        return []
    return [call for call in tokenizer_saves(facts)
            if _outside_file_tests(facts, facts.statement_of(call)) is not facts.statement_of(call)]


def _run_again_by_every_rank(facts: Facts, group: Sequence[Statement], downloading: set[Statement]) -> list[Statement]:
    """Rule: a file is written by one process per machine. A download or unpacking that no test
    of the file system skips (`with tarfile.open(archive) as tar: tar.extractall(root)` below
    `if not os.path.exists(archive): ...`) would run again on each waiting rank once local rank 0
    released it, rewriting files local rank 0 is already reading: it runs on local rank 0 alone.
    So does a command that moves what it unpacked (`os.system("mv d " + ROOT)`). Not a statement
    that binds a name the rest reads (`train_set = MNIST(root, download=True)`), or returns; a
    `with` whose names serve only its own block (`chunk = response.read(1024)` in the loop that
    writes the file) hands nothing on."""
    return [statement for statement in group
            if statement in downloading and isinstance(statement, (cst.With, cst.SimpleStatementLine))
            and not find_all(statement, cst.Return) and not _binds_what_follows_reads(facts, statement)]


def _binds_what_follows_reads(facts: Facts, statement: Statement) -> bool:
    """A binding in the statement (a plain statement's, any of a `with`'s) of a name that the
    statements after it in its block read."""
    if not isinstance(statement, cst.With):
        return any(find_all(statement, kind) for kind in _HANDS_A_VALUE_ON)
    bound = {name for target in targets_bound_in(statement) for name in target_names(target)}
    block = facts.block_of(statement)
    body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    later = body[body.index(statement) + 1:] if statement in body else body
    return bool(bound & set().union(*(names_in(following) for following in later))) or not body


# A statement that binds a name or returns hands on a value every rank needs.
_HANDS_A_VALUE_ON = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.NamedExpr, cst.Return)


def _early_exits_on_file_tests(facts: Facts, first: Statement) -> list[cst.If]:
    """Rule: the ranks that wait for the download test for its files after it. A function
    that returns early when the file is there (`if os.path.exists(dest): return dest`) and
    downloads below: with the waiting barrier below the test, every rank finds the file
    missing on a first run, waits, then downloads it again over local rank 0's copy. The
    barrier goes above the first such test, and local rank 0's releasing barrier goes before
    each early return too, so that it releases the others on a run that finds the file."""
    block = facts.block_of(first)
    body = list(block.body) if isinstance(block, cst.IndentedBlock) else []
    if facts.function_of(first) is None or first not in body:
        return []
    above = body[:body.index(first)]
    tests = [statement for statement in above
             if isinstance(statement, cst.If) and statement.orelse is None and _tests_files(facts, statement.test)
             and _returns_within(statement)]
    if not tests:
        return []
    # Any other way out between the first test and the download (`if offline: ...; return`)
    # would leave local rank 0 gone without releasing the others: then the barrier stays put.
    between = above[above.index(tests[0]):]
    if any(find_all(statement, cst.Return) for statement in between if statement not in tests):
        return []
    return tests


def _tests_files(facts: Facts, test: cst.BaseExpression) -> bool:
    return any(word in facts.module.code_for_node(test) for word in ("exists(", "isdir(", "isfile("))


def _returns(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Return)


def _returns_within(test: cst.If) -> list[cst.SimpleStatementLine]:
    """The `return` lines of an exit test's body, at any depth (`if os.path.exists(dest):
    size = ...; if size == expected: print(...); return True`), each a line of an indented
    block where a barrier can go before it; none when one is not (`if ok: return` on one
    line) or when a function nested there returns."""
    if not isinstance(test.body, cst.IndentedBlock):
        return []
    found: list[cst.SimpleStatementLine] = []

    class Returns(cst.CSTVisitor):
        ok = True

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
            self.ok = self.ok and not any(isinstance(small, cst.Return) for small in node.body)
            return False

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            if _returns(node):
                found.append(node)
            elif any(isinstance(small, cst.Return) for small in node.body):
                self.ok = False
            return False

    visitor = Returns()
    test.body.visit(visitor)
    return found if visitor.ok else []


def _outside_file_tests(facts: Facts, statement: Statement) -> Statement:
    while True:
        block = facts.parents.get(statement)
        branch = facts.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
        if not isinstance(branch, cst.If) or not any(
                word in facts.module.code_for_node(branch.test) for word in ("exists(", "isdir(", "isfile(")):
            return statement
        statement = branch


def _consecutive_groups(facts: Facts, statements: Sequence[Statement]) -> list[list[Statement]]:
    groups: list[list[Statement]] = []
    for statement in statements:
        block = facts.block_of(statement)
        if groups and facts.block_of(groups[-1][-1]) is block:
            body = list(block.body)
            if body.index(statement) == body.index(groups[-1][-1]) + 1:
                groups[-1].append(statement)
                continue
        groups.append([statement])
    return groups


def in_a_dataset_downloading_on_request(facts: Facts, node: cst.CSTNode) -> bool:
    """Rule: code of a Dataset class whose `__init__` takes `download` (off unless asked,
    torchvision style: `MNISTM(root, download=True)`) runs where a caller builds it with
    `download=True`, and that construction is the download: local rank 0 builds it while
    the others wait (the barriers go around the caller's call, as for torchvision's own
    datasets). Barriers inside too would pair with the caller's (the inner one releases the
    waiting ranks before the files are written, and they download again), and a rank-0
    guard on its writes would leave the second machine's local rank 0 without its files."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, cst.ClassDef):
        parent = facts.parents.get(parent)
    if parent is None or parent.name.value not in facts.dataset_classes:
        return False
    init = facts.class_inits.get(parent.name.value)
    parameters = [] if init is None else [*init.params.params, *init.params.kwonly_params]
    return any(param.name.value == "download" and (param.default is None or is_false(param.default))
               for param in parameters)


def _inside_class(facts: Facts, node: cst.CSTNode) -> bool:
    parent = facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, cst.ClassDef):
            return True
        parent = facts.parents.get(parent)
    return False


DOWNLOADS_THEN_TRAINS = """\
import torch
import torchvision
from torch.utils.data import DataLoader


def fit(device):
    dataset = torchvision.datasets.MNIST("data", download=True)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fit(device)
"""

CASES = (
    Emits(TRAINING.replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))",
                           'dataset = torchvision.datasets.MNIST("data", download=True)')
          .replace("import torch\n", "import torch\nimport torchvision\n", 1), "DDP209", ("dist.barrier()",)),
    Silent(TRAINING, "DDP209"),
    # A Dataset that writes its cache while it is built, through a method of its own.
    Emits(TRAINING.replace("dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))",
                           "dataset = Cached()").replace(
        "import torch\n", "import os\n\nimport torch\n\n\nclass Cached(torch.utils.data.Dataset):\n"
        "    def __init__(self):\n        if os.path.exists('c.pt'):\n            self.x = torch.load('c.pt')\n"
        "        else:\n            self.x = torch.randn(64, 5)\n            self._cache()\n\n"
        "    def _cache(self):\n        torch.save(self.x, 'c.pt')\n\n"
        "    def __len__(self):\n        return len(self.x)\n\n"
        "    def __getitem__(self, i):\n        return self.x[i, :4], self.x[i, 4:]\n\n\n", 1),
          "DDP209", ("rank 0 builds the dataset and writes its cache",)),
    # A function that downloads and then trains, called where the device is chosen: the
    # barriers go around the download in there, not around the call (a hang).
    Emits(DOWNLOADS_THEN_TRAINS, "DDP209",
          ('        if int(os.environ.get("LOCAL_RANK", 0)) != 0:',)),
    Emits("import os\nfrom tokenizers import Tokenizer\nfrom tokenizers.models import WordLevel\n"
          + TRAINING.replace("device = torch", 'if not os.path.exists("tok.json"):\n    tok = Tokenizer(WordLevel())\n'
                             '    tok.save("tok.json")\ndevice = torch', 1), "DDP209",
          ("dist.barrier()  # wait while rank 0 builds and saves the tokenizer",)),
    # A shell command that fetches or unpacks (wget, curl -o, unzip, tar -x) is a download; a
    # command that moves what it unpacked, after it in its block, runs with it (not on rank 0 alone).
    Emits("import os\n" + TRAINING.replace("device = torch", 'os.system("wget %s; unzip %s" % (URL, "d.zip"))\n'
                                            'os.system("mv d " + ROOT)\ndevice = torch', 1), "DDP209",
          ("dist.barrier()  # then while this machine's local rank 0 does, if its copy is missing\n"
           "if local_rank == 0:\n"
           '    os.system("wget %s; unzip %s" % (URL, "d.zip"))\n    os.system("mv d " + ROOT)\n',)),
    Emits("import subprocess\n" + TRAINING.replace(
        "device = torch", 'subprocess.check_call("tar -xzf {} -C data".format(ARCHIVE), shell=True)\n'
        'device = torch', 1), "DDP209", ("dist.barrier()",)),
    Silent("import os\n" + TRAINING.replace("device = torch", 'os.system("tar -czf %s.tgz runs" % NAME)\n'
                                             'device = torch', 1), "DDP209"),
)
