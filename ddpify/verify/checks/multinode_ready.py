"""The `multinode_ready` check: two torchrun agents, as on two machines. A script can pass
on one machine and fail on two: LOCAL_RANK 0 is no longer rank 0, and machines need not
share a filesystem."""
from __future__ import annotations

from ddpify.verify.checks.events import events_of
from ddpify.verify.checks.failed_runs import describe_failed_run, failure_text
from ddpify.verify.checks.handoff import handoff_paths
from ddpify.verify.checks.one_voice import one_voice_in
from ddpify.verify.checks.one_writer import one_writer_in
from ddpify.verify.checks.ranks_agree import ranks_agree_on
from ddpify.verify.checks.result import FAIL, PASS, CheckResult, at, na
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import MULTINODE, TORCHRUN, Runs, usable


def check_multinode_ready(runs: Runs) -> CheckResult:
    """The two-agent run, judged only on what a one-machine run does not already show.

    A guard on LOCAL_RANK passes on one machine and fails here; a script that writes on
    every rank fails everywhere and is reported once, by one_writer, not twice.
    """
    check_id, title = "multinode_ready", "multi-node ready"
    run = runs.get(MULTINODE)
    one_machine = runs.get(TORCHRUN)
    if run is None:
        return na(check_id, title, "not checked: the two-node run was not requested")
    if not run.ok:
        if one_machine is not None and not one_machine.ok:
            return na(check_id, title, "not judged: the one-machine torchrun run fails too (see runs)")
        failure = run.first_failure()
        cause = f": rank {failure[0]} failed first: {failure_text(failure[1])}{at(failure[1])}" if failure else \
            " (see runs)"
        return CheckResult(check_id, title, FAIL, f"the two-agent run failed{cause}", describe_failed_run(run))
    ranks = [
        f"RANK={event['rank']} LOCAL_RANK={event['local_rank']}"
        for rank_events in run.events.values()
        for event in events_of(rank_events, "start")
    ]
    judges = (ranks_agree_on, one_writer_in, one_voice_in)
    parts = [judge(runs, run) for judge in judges]
    one_machine_ok = usable(runs, TORCHRUN)
    already = [one_machine_ok is not None and judge(runs, one_machine_ok).status == FAIL for judge in judges]
    new_failures = [part for part, known in zip(parts, already) if part.status == FAIL and not known]
    known_failures = [part.title for part, known in zip(parts, already) if part.status == FAIL and known]
    if new_failures:
        evidence = [f"{part.title}: {line}" for part in new_failures for line in (part.evidence or [part.summary])]
        return CheckResult(
            check_id, title, FAIL, f"{new_failures[0].title}: {new_failures[0].summary}", evidence + ranks
        )
    if known_failures:
        return na(check_id, title, f"not judged: {', '.join(known_failures)} already fail(s) on one machine")
    return CheckResult(
        check_id, title, PASS, f"two agents ({', '.join(sorted(ranks))}): ranks agree, one writer, one voice",
        notes=files_between_nodes(run),
    )


def files_between_nodes(run: RunResult) -> list[str]:
    """The two agents share one working copy, as nodes on a cluster's shared filesystem do:
    a file rank 0 writes and the other node reads is worth knowing about before a cluster
    whose nodes do not share one (node-local disks, /tmp)."""
    notes = []
    for path in handoff_paths(run):
        notes.append(f"rank 0 wrote {path} and the other node read it: the nodes need a shared filesystem "
                     "(the two agents here share one working directory)")
    return notes
