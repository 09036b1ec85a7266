"""The verdict for people (a short table on stdout) and for machines (--json)."""
from __future__ import annotations

import json

from ddpify.verify.checks.failed_runs import failure_text, hung
from ddpify.verify.checks.result import FAIL
from ddpify.verify.records import RunResult
from ddpify.verify.run_set import RUN_TITLES
from ddpify.verify.session import Report

STATUS_LABELS = {"pass": "pass", "fail": "FAIL", "n/a": "n/a"}


def run_label(run: RunResult) -> str:
    title = RUN_TITLES.get(run.name, run.name)
    if run.name in ("torchrun", "handoff"):
        title += f" x{run.world_size}"
    verdict = "ok" if run.ok else ("hung" if hung(run) else "failed")
    return f"{title} {verdict} {run.seconds:.1f}s"


def render_text(report: Report) -> str:
    lines = [f"ddpify verify: {report.original} -> {report.migrated}"]
    limits = []
    if report.settings.full_epochs:
        limits.append(f"{report.settings.full_epochs} full epochs, then one batch per epoch")
    if report.settings.max_steps:
        limits.append(f"max {report.settings.max_steps} steps")
    if report.settings.max_epochs:
        limits.append(f"max {report.settings.max_epochs} epochs")
    limits.append(f"timeout {report.settings.timeout:g}s per run")
    device = "GPU/NCCL" if report.use_gpus else "CPU/Gloo"
    lines.append(f"runs ({device}, {', '.join(limits)}): " + " | ".join(map(run_label, report.runs.values())))
    lines.append("")
    width = max(len(check.title) for check in report.checks)
    for check in report.checks:
        lines.append(f"  {check.title:<{width}}  {STATUS_LABELS[check.status]:<4}  {check.summary}")
        if check.status == FAIL:
            lines.extend(f"  {'':<{width}}        - {line}" for line in check.evidence if line != check.summary)
        lines.extend(f"  {'':<{width}}        note: {note}" for note in check.notes)
    lines.append("")
    failed = [check.title for check in report.checks if check.status == FAIL]
    applicable = [check for check in report.checks if check.status != "n/a"]
    if failed:
        lines.append(f"FAILED: {', '.join(failed)} ({report.seconds:.1f}s)")
    else:
        lines.append(f"verified: all {len(applicable)} applicable checks pass ({report.seconds:.1f}s)")
    lines.extend(report.notes)
    return "\n".join(lines)


def run_to_dict(run: RunResult) -> dict:
    return {
        "name": run.name,
        "title": RUN_TITLES.get(run.name, run.name),
        "ok": run.ok,
        "returncodes": run.returncodes,
        "timed_out": run.timed_out,
        "seconds": round(run.seconds, 3),
        "world_size": run.world_size,
        "backends": run.backends(),
        "unfinished_ranks": run.unfinished_ranks() if run.timed_out else [],
        "commands": run.commands,
        "files_created": run.files_created,
        "leftovers": run.leftovers,
        "output_tail": "" if run.ok else run.output_tail,
        "first_failure": first_failure_to_dict(run),
    }


def first_failure_to_dict(run: RunResult) -> dict | None:
    """The rank that failed first, the cause of the run's failure (None: none failed)."""
    failure = run.first_failure()
    if failure is None:
        return None
    rank, event = failure
    return {"rank": rank, "error": failure_text(event),
            "where": event.get("where"), "traceback": event.get("traceback", [])}


def to_dict(report: Report) -> dict:
    return {
        "ok": report.ok,
        "original": report.original,
        "migrated": report.migrated,
        "nproc": report.nproc,
        "device": "gpu" if report.use_gpus else "cpu",
        "max_steps": report.settings.max_steps,
        "max_epochs": report.settings.max_epochs,
        "full_epochs": report.settings.full_epochs,
        "timeout": report.settings.timeout,
        "seconds": round(report.seconds, 3),
        "runs": [run_to_dict(run) for run in report.runs.values()],
        "checks": [
            {
                "id": check.id,
                "title": check.title,
                "status": check.status,
                "summary": check.summary,
                "evidence": check.evidence,
                "notes": check.notes,
            }
            for check in report.checks
        ],
    }


def write_json(report: Report, path: str) -> None:
    with open(path, "w", encoding="utf-8") as output:
        json.dump(to_dict(report), output, indent=2)
        output.write("\n")

