"""The ``usage`` command of ``python -m shared.ops``: tokens, cost and budgets per tenant.

    python -m shared.ops usage [--day YYYY-MM-DD | --since YYYY-MM-DD [--until YYYY-MM-DD]]
                               [--tenant T] [--from-jobs] [--json]

It answers "which tenant spent what" for both lanes (``queue``: the Service Bus lane,
``batch``: the Global Batch lane), one row per UTC day, tenant, model and mode, then a
totals line. Without dates: today (UTC); ``--since`` alone runs to today.

By default it reads the usage ledger (``accounting.ledger_report``, printed by
``ledger_usage``): one document per tenant and month, so a report costs O(tenants x
months) reads, never one per request; the rows carry the cost in the catalog's currency
and the answers of unknown cost, and the report goes on with what unanswered requests
hold and each budget's current period. ``--from-jobs`` sums the answers the stored jobs
kept instead (``accounting.usage_report``: one read per request that ended in the
range), to compare with the ledger: the jobs keep every answer, the ledger counts each
a few seconds after it was kept (``Usage__flushSeconds``).

``--json`` prints the report for scripts. Documents that vanished while being read or
are not what they should be are counted and named (on stderr for the table), never
fatal. A long read tells its progress on stderr: stdout carries only the report or the
JSON. Exit codes as every ops command (``ops_help``): 0 done, 2 a bad argument or
setting, 3 storage unavailable.
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
from shared.entrypoints.cli import ledger_usage
from shared.entrypoints.cli.ledger_usage import LedgerUsage
from shared.entrypoints.cli.ops_help import command_parser
from shared.entrypoints.cli.text_table import aligned

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
    lines += aligned([list(COLUMNS), *body, totals], len(COLUMNS) - NUMBER_COLUMNS)
    if not body:
        lines.insert(-1, "(no request finished with a result in this range)")
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
        "source": "jobs",
        "since": report.days.first.isoformat(),
        "until": report.days.last.isoformat(),
        "tenant": report.tenant,
        "rows": [row.as_json() for row in report.rows],
        "totals": report.totals.as_json(),
        "documents": report.documents.as_json(),
    }


def usage_command(args: argparse.Namespace, reader: LedgerUsage | UsageReader, clock: Clock) -> int:
    """Print the report of the range the arguments choose: from the ledger, or from the
    jobs when ``cli.ops`` built a job reader (``--from-jobs``)."""
    try:
        days = chosen_days(args, as_utc(clock()).date())
    except ValueError as error:
        print(f"python -m shared.ops usage: error: {error}", file=sys.stderr)
        return 2
    if isinstance(reader, LedgerUsage):
        ledger = reader.reader.report(days, args.tenant, ledger_usage.tell_progress)
        currency = reader.currency
        if args.json:
            return _json(ledger_usage.as_json(ledger, currency))
        return _text(ledger_usage.printed(ledger, currency), ledger_usage.notes(ledger))
    report = reader.report(days, args.tenant, tell_progress)
    if args.json:
        return _json(as_json(report))
    return _text(table(report), notes(report))


def _json(document: dict[str, Any]) -> int:
    print(json.dumps(document, indent=2))
    return 0


def _text(report: list[str], told: list[str]) -> int:
    for text in report:
        print(text)
    sys.stdout.flush()  # the report first, then the notes, also when both go to one file
    for text in told:
        print(text, file=sys.stderr)
    return 0


def add_usage_command(commands: Any) -> None:
    """Add the ``usage`` command to the root parser's sub-commands (``commands``); it runs
    with the clock and a ``LedgerUsage``, or with ``--from-jobs`` a ``UsageReader`` of the
    job store (``tools="usage"``)."""
    usage = command_parser(
        commands,
        "usage",
        summary="tokens, cost and budgets per UTC day, tenant, model and mode",
        description="Tokens and cost per UTC day, tenant, model and mode (queue or batch) "
        "from the usage ledger, what unanswered requests hold, and each budget in its "
        "current period; with --from-jobs, the tokens summed from the stored jobs that "
        "ended with a result instead. Reads only storage; progress goes to stderr.",
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
        "--from-jobs",
        action="store_true",
        help="sum the answers the stored jobs kept (one read per request), to compare with "
        "the ledger (default: read the usage ledger, one document per tenant and month)",
    )
    usage.add_argument(
        "--json",
        action="store_true",
        help="rows, totals, held requests, budgets and the documents read as JSON "
        "(default: a table)",
    )
    usage.set_defaults(run=usage_command)
