"""How reports are printed: `text` for people, `github` annotations for pull requests, `json`.

text:   diagnostics and messages on stderr (`path:line:col: severity: DDPnnn message`, the
        severity as mypy and compilers print it, so that a note does not read like the
        warnings that set exit 1), migrated code and diffs on stdout.
github: one workflow command per diagnostic on stdout (`::warning file=…,line=…::DDPnnn …`):
        warnings for what needs a person, notices for notes and for every edit, so that a
        pull request shows what ddpify changed and where; errors as `::error`.
json:   one document on stdout with every file, diagnostic and edit.
"""
import json
import sys
from collections.abc import Sequence
from typing import Callable

import click

from ddpify import __version__
from ddpify.diagnostics import Diagnostic, Severity, rule_of
from ddpify.jobs import FAILED, MIGRATED, SKIPPED, UNCHANGED, Report, visible

FORMATS = ("text", "github", "json")


class Printer:
    """Prints each report as it arrives, in input order; `finish` prints what ends the run."""

    def __init__(self, verbose: bool = False, quiet: bool = False,
                 before_output: Callable[[], None] = lambda: None) -> None:
        self.verbose, self.quiet = verbose, quiet
        # Called before anything is printed, e.g. to clear a progress bar.
        self.before_output = before_output

    def report(self, report: Report) -> None:
        raise NotImplementedError

    def finish(self, reports: Sequence[Report], summary: str) -> None:
        if summary and not self.quiet:
            self.before_output()
            click.echo(summary, err=True)

    def _payload(self, report: Report) -> None:
        if report.diff:
            click.echo(report.diff, nl=False)
        if report.stdout:
            sys.stdout.flush()
            sys.stdout.buffer.write(report.stdout)
            sys.stdout.flush()


class TextPrinter(Printer):
    def report(self, report: Report) -> None:
        messages = [text_line(report.path, diagnostic) for diagnostic in report.diagnostics
                    if visible(diagnostic, self.verbose, self.quiet)]
        if report.error:
            messages.append(f"ddpify: error: {report.error}")
            if self.verbose and report.details:
                messages.append(report.details.rstrip("\n"))
        messages.extend(report.notes)
        if messages or report.diff or report.stdout:
            self.before_output()
        for message in messages:
            click.echo(message, err=True)
        self._payload(report)


def text_line(path: str, diagnostic: Diagnostic) -> str:
    """What a person reads. Fixtures' expected.txt keep Diagnostic.format, without the
    severity: the registry already says it there."""
    return (f"{path}:{diagnostic.line}:{diagnostic.column}: {diagnostic.severity.value}: "
            f"{diagnostic.code} {diagnostic.message}")


class GithubPrinter(Printer):
    """GitHub Actions workflow commands; see "Workflow commands for GitHub Actions"."""

    def report(self, report: Report) -> None:
        annotations = [github_annotation(report.path, d) for d in report.diagnostics]
        if report.error:
            annotations.append(f"::error file={_property(report.path)},title=ddpify::"
                               f"{_data(report.error)}")
        notes = report.notes
        if annotations or notes or report.diff or report.stdout:
            self.before_output()
        for annotation in annotations:
            click.echo(annotation)
        for note in notes:
            click.echo(note, err=True)
        self._payload(report)


def github_annotation(path: str, diagnostic: Diagnostic) -> str:
    level = "warning" if diagnostic.severity is Severity.WARNING else "notice"
    end_line = max(diagnostic.end_line, diagnostic.line)
    return (f"::{level} file={_property(path)},line={diagnostic.line},endLine={end_line},"
            f"col={diagnostic.column},title={diagnostic.code}::"
            f"{_data(f'{diagnostic.code} {diagnostic.message}')}")


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


class JsonPrinter(Printer):
    """Nothing until the end: one document, so that the output always parses."""

    def report(self, report: Report) -> None:
        if report.stdout:
            self._payload(report)

    def finish(self, reports: Sequence[Report], summary: str) -> None:
        document = {
            "version": __version__,
            "files": [report_as_dict(report) for report in reports],
            "summary": counts(reports),
        }
        self.before_output()
        click.echo(json.dumps(document, indent=2))
        super().finish(reports, summary)


def report_as_dict(report: Report) -> dict:
    entry = {
        "path": report.path,
        "status": report.status,
        "changed": report.changed,
        "exit_code": report.exit_code,
        "written": report.written,
        "error": report.error,
        "notes": list(report.notes),
        "diagnostics": [diagnostic_as_dict(d) for d in report.diagnostics],
    }
    if report.diff:
        entry["diff"] = report.diff
    return entry


def diagnostic_as_dict(diagnostic: Diagnostic) -> dict:
    return {
        "code": diagnostic.code,
        "severity": diagnostic.severity.value,
        "line": diagnostic.line,
        "end_line": max(diagnostic.end_line, diagnostic.line),
        "column": diagnostic.column,
        "message": diagnostic.message,
        "rule": rule_of(diagnostic.code).summary,
    }


def counts(reports: Sequence[Report]) -> dict[str, int]:
    statuses: list[str] = [report.status for report in reports]
    return {"files": len(statuses), **{status: statuses.count(status)
                                       for status in (MIGRATED, UNCHANGED, SKIPPED, FAILED)}}


def summary_line(reports: Sequence[Report], writes: bool) -> str:
    """`N files: X migrated, Y unchanged, Z skipped, W failed`, for runs of several files."""
    if len(reports) < 2:
        return ""
    n = counts(reports)
    migrated = f"{n[MIGRATED]} migrated" if writes else f"{n[MIGRATED]} to migrate"
    return (f"{n['files']} files: {migrated}, {n[UNCHANGED]} unchanged, "
            f"{n[SKIPPED]} skipped, {n[FAILED]} failed")


def printer(name: str, **kwargs) -> Printer:
    return {"text": TextPrinter, "github": GithubPrinter, "json": JsonPrinter}[name](**kwargs)
