"""The ``usage`` command of ``python -m shared.ops``: tokens per day, tenant, model and mode.

    python -m shared.ops usage [--day YYYY-MM-DD | --since YYYY-MM-DD [--until YYYY-MM-DD]]
                               [--tenant T] [--json]

It answers "which tenant spent what" from the stored jobs (``accounting.usage_report``):
one row per UTC day, tenant, model and mode (``queue``: the Service Bus lane, ``batch``:
the Global Batch lane) with the requests that finished with a result and the tokens the
model reported for them, then a totals line. Without dates: today (UTC); ``--since``
alone runs to today. ``--json`` prints the rows, the totals and what was read, for
scripts. Documents that vanished while being read or are not jobs are counted and named
(on stderr for the table), never fatal. A long read tells its progress on stderr every
``usage_report.PROGRESS_EVERY`` documents: stdout carries only the table or the
JSON. Exit codes as every ops command (``ops_help``): 0 done, 2 a bad argument, 3 storage
unavailable.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date
from typing import Any

from shared.accounting.usage import DayRange, UsageCounts, UsageRow
from shared.accounting.usage_report import UsageReader, UsageReport
from shared.clock import Clock, as_utc
from shared.contracts import TENANT_ID_PATTERN
from shared.entrypoints.cli.ops_help import command_parser

ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
COLUMNS = ("day", "tenant", "model", "mode", "requests", "input", "output", "total", "no usage")
NUMBER_COLUMNS = 5  # the right-aligned counts at the end of ``COLUMNS``


def tell_progress(read: int, listed: int) -> None:
    """A progress line on stderr (stdout is the table or the JSON)."""
    print(f"usage: read {read:,} of {listed:,} job documents", file=sys.stderr, flush=True)


def utc_day(text: str) -> date:
    """A ``YYYY-MM-DD`` argument (argparse turns the error into exit 2 with the reason)."""
    if not ISO_DAY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a date in the form YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date: {error}") from error


def tenant_id(text: str) -> str:
    if not TENANT_ID_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tenant id (letters, digits, '_', '.', '-'; at most 128)"
        )
    return text


def chosen_days(args: argparse.Namespace, today: date) -> DayRange:
    """The range the arguments choose; ValueError says what is wrong with them."""
    if args.day is not None:
        if args.since is not None or args.until is not None:
            raise ValueError("--day cannot be combined with --since/--until")
        return DayRange.single(args.day)
    if args.since is None:
        if args.until is not None:
            raise ValueError("--until needs --since")
        return DayRange.single(today)
    return DayRange(args.since, args.until if args.until is not None else today)


def _counts(counts: UsageCounts) -> list[str]:
    """The counts in field order, which is the order of the number columns."""
    return [f"{value:,}" for value in counts.as_json().values()]


def _cells(row: UsageRow) -> list[str]:
    key = row.key
    return [key.day.isoformat(), key.tenant, key.model, key.mode.value, *_counts(row.counts)]


def table(report: UsageReport) -> list[str]:
    """The report as aligned lines: a heading, a row per key and the totals."""
    scope = f"tenant {report.tenant}" if report.tenant else "all tenants"
    lines = [f"token usage {report.days.describe()} (UTC), {scope}"]
    body = [_cells(row) for row in report.rows]
    totals = ["total", "", "", "", *_counts(report.totals)]
    grid = [list(COLUMNS), *body, totals]
    widths = [max(len(cells[i]) for cells in grid) for i in range(len(COLUMNS))]
    text_columns = len(COLUMNS) - NUMBER_COLUMNS

    def line(cells: list[str]) -> str:
        padded = [
            cell.ljust(width) if column < text_columns else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    lines.append(line(list(COLUMNS)))
    lines.extend(line(cells) for cells in body)
    if not body:
        lines.append("(no request finished with a result in this range)")
    lines.append(line(totals))
    return lines


def notes(report: UsageReport) -> list[str]:
    tally = report.documents
    told = [
        f"read {tally.read} of {tally.listed} job documents the index names as ended in "
        f"the range; {tally.unfinished} unfinished again, {tally.ended_without_result} "
        "ended without a result"
    ]
    if tally.vanished:
        told.append(f"{len(tally.vanished)} vanished while being read: {', '.join(tally.vanished)}")
    for item in tally.not_jobs:
        told.append(f"not a job, skipped: {item.name}: {item.reason}")
    return told


def as_json(report: UsageReport) -> dict[str, Any]:
    return {
        "since": report.days.first.isoformat(),
        "until": report.days.last.isoformat(),
        "tenant": report.tenant,
        "rows": [row.as_json() for row in report.rows],
        "totals": report.totals.as_json(),
        "documents": report.documents.as_json(),
    }


def usage_command(args: argparse.Namespace, reader: UsageReader, clock: Clock) -> int:
    try:
        days = chosen_days(args, as_utc(clock()).date())
    except ValueError as error:
        print(f"python -m shared.ops usage: error: {error}", file=sys.stderr)
        return 2
    report = reader.report(days, args.tenant, tell_progress)
    if args.json:
        print(json.dumps(as_json(report), indent=2))
        return 0
    for text in table(report):
        print(text)
    sys.stdout.flush()  # the table first, then the notes, also when both go to one file
    for text in notes(report):
        print(text, file=sys.stderr)
    return 0


def add_usage_command(commands: Any) -> None:
    """Add the ``usage`` command to the root parser's sub-commands (``commands``); it runs
    with a ``UsageReader`` of the job store and the clock (``tools="usage"``)."""
    usage = command_parser(
        commands,
        "usage",
        summary="tokens used per UTC day, tenant, model and mode, from the stored jobs",
        description="Tokens used per UTC day, tenant, model and mode (queue or batch), summed "
        "from the stored jobs that ended with a result. Reads only storage; progress goes "
        "to stderr.",
    )
    usage.set_defaults(tools="usage")
    usage.add_argument(
        "--day",
        type=utc_day,
        metavar="YYYY-MM-DD",
        help="one UTC day (default: today, UTC)",
    )
    usage.add_argument(
        "--since",
        type=utc_day,
        metavar="YYYY-MM-DD",
        help="first UTC day of a range up to --until (default: none, a single day)",
    )
    usage.add_argument(
        "--until",
        type=utc_day,
        metavar="YYYY-MM-DD",
        help="last UTC day of a range, with --since (default: today, UTC)",
    )
    usage.add_argument(
        "--tenant",
        type=tenant_id,
        metavar="TENANT",
        help="only this tenant's requests (default: every tenant)",
    )
    usage.add_argument(
        "--json",
        action="store_true",
        help="rows, totals and the documents read as JSON (default: a table)",
    )
    usage.set_defaults(run=usage_command)
