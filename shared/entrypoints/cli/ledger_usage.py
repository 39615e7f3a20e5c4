"""The ``usage`` command's report from the usage ledger: the table, held, budgets, JSON.

``usage`` reads the ledger by default (``accounting.ledger_report``): one document per
tenant and month. This module prints what it read: a row per UTC day, tenant, model and
mode with its tokens and cost, a totals line, what unanswered requests hold now, and
each budget of the tenants read in its current period. ``--json`` gives the same facts
for scripts, amounts of money as strings (exact decimals, as the ledger keeps them).

Amounts are printed from their Decimals with six places (``COST_PLACES``), rounded half
to even: a millionth of a currency unit is finer than any currency's smallest unit, and
still shows the cost of one small request (100 tokens at 0.15 per million tokens is
0.000015), while ten places (the ledger's) would make every column four digits wider
for nothing an operator can pay. No amount goes through a float.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from shared.accounting.ledger_report import LedgerReader
from shared.accounting.ledger_sums import (
    BudgetState,
    LedgerCounts,
    LedgerReport,
    LedgerRow,
    months_of,
)
from shared.entrypoints.cli.text_table import aligned

COST_PLACES: Final = 6
COLUMNS: Final = ("day", "tenant", "model", "mode", "requests", "input", "output", "total",
                  "no usage", "cost", "uncosted")  # fmt: skip
TEXT_COLUMNS: Final = 4  # day, tenant, model, mode; the counts and amounts follow
BUDGET_COLUMNS: Final = ("tenant", "budget", "period", "unit", "limit", "spent", "remaining",
                         "resets at")  # fmt: skip


@dataclass(frozen=True)
class LedgerUsage:
    """What the ledger report is read and printed with: the reader, and the model
    catalog's currency (None when no alias has prices: every answer is then uncosted)."""

    reader: LedgerReader
    currency: str | None


def money(amount: Decimal) -> str:
    """An amount with ``COST_PLACES`` places and thousands separators, from the Decimal."""
    return format(amount, f",.{COST_PLACES}f")


def tell_progress(read: int, listed: int) -> None:
    """A progress line on stderr (stdout is the report or the JSON)."""
    print(f"usage: read {read:,} of {listed:,} usage documents", file=sys.stderr, flush=True)


def _counts(counts: LedgerCounts) -> list[str]:
    whole = (counts.requests, counts.input_tokens, counts.output_tokens, counts.total_tokens,
             counts.requests_without_usage)  # fmt: skip
    return [*(f"{value:,}" for value in whole), money(counts.cost), f"{counts.uncosted:,}"]


def _cells(row: LedgerRow) -> list[str]:
    key = row.key
    return [key.day.isoformat(), key.tenant, key.model, key.mode.value, *_counts(row.counts)]


def table(report: LedgerReport, currency: str | None) -> list[str]:
    """The rows as aligned lines: a heading, the columns, a row per key and the totals."""
    scope = f"tenant {report.tenant}" if report.tenant else "all tenants"
    heading = [f"usage {report.days.describe()} (UTC), {scope}, from the usage ledger"]
    columns = [*COLUMNS[:-2], f"cost ({currency})" if currency else "cost", COLUMNS[-1]]
    body = [_cells(row) for row in report.rows]
    totals = ["total", "", "", "", *_counts(report.totals)]
    lines = aligned([columns, *body, totals], TEXT_COLUMNS)
    if not body:
        lines.insert(1, "(no answer was counted in this range)")
    return heading + lines


def held(report: LedgerReport, currency: str | None) -> list[str]:
    """What the unanswered requests of the tenants read hold now, one line each."""
    unit = f" {currency}" if currency else ""
    return [
        f"held now: {item.tenant}: {item.requests:,} unanswered "
        f"request{'' if item.requests == 1 else 's'}, "
        f"{item.tokens:,} tokens, {money(item.cost)}{unit}"
        for item in report.held
    ]


def _budget_cells(state: BudgetState, currency: str | None) -> list[str]:
    amounts = (state.limit, state.spent, state.remaining)
    if state.budget == "cost_per_month":
        unit, shown = currency or "cost", [money(amount) for amount in amounts]
    else:
        unit, shown = "tokens", [f"{int(amount):,}" for amount in amounts]
    resets = state.resets_at.strftime("%Y-%m-%d %H:%M UTC")
    return [state.tenant, state.budget, state.period, unit, *shown, resets]


def budgets(report: LedgerReport, currency: str | None) -> list[str]:
    """The budgets section: each budget of the tenants read in its current period."""
    if report.budgets_month is None:
        first, last = months_of(report.days)
        return [f"budgets: told for the current month only; the range ({first} to {last}) "
                "does not reach it"]  # fmt: skip
    if not report.budgets:
        return [f"budgets ({report.budgets_month}): none of the tenants read has a budget"]
    rows = [_budget_cells(state, currency) for state in report.budgets]
    heading = f"budgets ({report.budgets_month}; spent counts answers and held requests)"
    return [heading, *aligned([list(BUDGET_COLUMNS), *rows], 4)]


def notes(report: LedgerReport) -> list[str]:
    """What was read, for stderr: the documents, and those skipped with why."""
    tally = report.documents
    first, last = months_of(report.days)
    told = [f"read {tally.read} of {tally.listed} usage documents of the months {first} to "
            f"{last}"]  # fmt: skip
    if tally.vanished:
        told.append(f"{len(tally.vanished)} vanished while being read: {', '.join(tally.vanished)}")
    told.extend(f"not a usage ledger, skipped: {item.name}: {item.reason}"
                for item in tally.not_ledgers)  # fmt: skip
    return told


def as_json(report: LedgerReport, currency: str | None) -> dict[str, Any]:
    return {
        "source": "ledger",
        "since": report.days.first.isoformat(),
        "until": report.days.last.isoformat(),
        "tenant": report.tenant,
        "currency": currency,
        "rows": [row.as_json() for row in report.rows],
        "totals": report.totals.as_json(),
        "held": [item.as_json() for item in report.held],
        "budgets_month": report.budgets_month,
        "budgets": [state.as_json() for state in report.budgets],
        "documents": report.documents.as_json(),
    }


def printed(report: LedgerReport, currency: str | None) -> list[str]:
    """The whole text report for stdout: the table, what is held, the budgets."""
    return [*table(report, currency), "", *held(report, currency), *budgets(report, currency)]
