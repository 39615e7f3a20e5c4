"""Usage, cost and budgets per UTC day, tenant, model and mode, read from the usage ledger.

The ledger (``shared.accounting.ledger``) keeps one document per tenant and UTC month,
``<tenant>/<YYYY-MM>.json`` in the usage container, with each day's answers already
summed per model and lane. A report lists the container (under ``<tenant>/`` when one
tenant is asked), keeps the names whose month overlaps the range, and reads those
documents: O(tenants x months) reads, whatever the number of requests, where summing the
jobs (``usage_report``) reads one document per request.

Besides the rows it tells, per tenant read, what its unanswered requests hold now (the
reservations not lapsed) and, for a tenant with a budget, each budget in its current
period, as the door counts it: the current month's document with its lapsed
reservations dropped first (``first_exceeded`` does the same before it checks). Budgets
exist only for the current UTC month, so they are told only when the range reaches it.

The documents are read concurrently (``READERS`` at a time). A name that is not a
month's document, a document that vanished between listing and reading (the lifecycle
rule deletes old months) or one that is not a valid ``MonthLedger`` is counted and named,
never fatal: one stray blob must not hide every tenant's usage. A storage outage stops
the report (``TransientError``): a partial sum would read as a complete one.
What it answers is in ``ledger_sums``; nothing here imports an SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

from pydantic import ValidationError

from shared.accounting.ledger import (
    LEDGER_SCHEMA,
    MonthLedger,
    budget_uses,
    month_of,
    split_row_key,
)
from shared.accounting.ledger_sums import (
    BudgetState,
    Held,
    LedgerCounts,
    LedgerReport,
    LedgerRow,
    LedgerTally,
    NotALedger,
    months_of,
)
from shared.accounting.reading import load_of_schema, read_in_order
from shared.accounting.tenants import Budget
from shared.accounting.usage import DayRange, UsageKey
from shared.accounting.usage_report import READERS
from shared.clock import Clock, as_utc
from shared.contracts import ProcessingMode
from shared.documents import JsonDocuments

# A month's document sums a month of a tenant's requests: a report reads few of them, so
# progress is told more often than for job documents.
PROGRESS_EVERY: Final = 100
MONTH_DOCUMENT: Final = re.compile(r"^(?P<tenant>[^/]+)/(?P<month>\d{4}-(?:0[1-9]|1[0-2]))\.json$")
BudgetOf = Callable[[str], Budget | None]


@dataclass(frozen=True)
class _Read:
    """One listed document after reading: a month's ledger, or why it is none."""

    name: str
    ledger: MonthLedger | None = None
    vanished: bool = False
    problem: str | None = None


class LedgerReader:
    """Reads the month documents of ``container`` (the usage container) and sums them;
    ``budget_of`` is the tenant catalog's budget of a tenant (None: it has none)."""

    def __init__(
        self,
        documents: JsonDocuments,
        container: str,
        budget_of: BudgetOf,
        clock: Clock,
        readers: int = READERS,
        progress_every: int = PROGRESS_EVERY,
    ) -> None:
        if min(readers, progress_every) < 1:
            raise ValueError(f"readers ({readers}) and progress_every ({progress_every}) "
                             "must be at least 1")  # fmt: skip
        self._documents = documents
        self._container = container
        self._budget_of = budget_of
        self._clock = clock
        self._readers = readers
        self._progress_every = progress_every

    def report(
        self,
        days: DayRange,
        tenant: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> LedgerReport:
        """The usage of ``days`` (of ``tenant``, when given) with what is held now and
        the budgets; ``progress(read, to_read)`` is told every ``progress_every``
        documents read and after the last of a long read."""
        if tenant is not None and (not tenant or "/" in tenant):
            raise ValueError(f"not a tenant id: {tenant!r}")
        now = as_utc(self._clock())
        tally = LedgerTally()
        to_read = self._listed(days, tenant, tally)
        ledgers = self._ledgers(to_read, tally, progress)
        rows = _rows(ledgers, days)
        current = month_of(now)
        first, last = months_of(days)
        budgets_month = current if first <= current <= last else None
        tenants = sorted({ledger.tenant for ledger in ledgers} | ({tenant} if tenant else set()))
        return LedgerReport(
            days=days,
            tenant=tenant,
            rows=rows,
            totals=_total(rows),
            held=_held(ledgers, now),
            budgets=self._budgets(tenants, ledgers, now) if budgets_month else [],
            budgets_month=budgets_month,
            documents=tally,
        )

    def _ledgers(
        self, names: list[str], tally: LedgerTally, progress: Callable[[int, int], None] | None
    ) -> list[MonthLedger]:
        """The valid ledgers among ``names``, the others counted in ``tally``."""
        ledgers: list[MonthLedger] = []
        every, total = self._progress_every, len(names)
        for read, outcome in enumerate(self._read_all(names), start=1):
            if outcome.vanished:
                tally.vanished.append(outcome.name)
            else:
                tally.read += 1
            if outcome.ledger is not None:
                ledgers.append(outcome.ledger)
            elif outcome.problem is not None:
                tally.not_ledgers.append(NotALedger(outcome.name, outcome.problem))
            if progress is not None and (read % every == 0 or (read == total and total >= every)):
                progress(read, total)
        return ledgers

    def _listed(self, days: DayRange, tenant: str | None, tally: LedgerTally) -> list[str]:
        """The names of the month documents overlapping ``days``; other names are
        counted as not ledgers (a month document is all the container should hold)."""
        first, last = months_of(days)
        to_read: list[str] = []
        for name in self._documents.list_names(self._container, f"{tenant}/" if tenant else ""):
            found = MONTH_DOCUMENT.fullmatch(name)
            if found is None:
                tally.not_ledgers.append(NotALedger(name, "not named <tenant>/<YYYY-MM>.json"))
            elif first <= found["month"] <= last:
                tally.listed += 1
                to_read.append(name)
        return to_read

    def _budgets(
        self, tenants: list[str], ledgers: list[MonthLedger], now: datetime
    ) -> list[BudgetState]:
        """Each budget of each of ``tenants`` that has one, over its current month's
        document (an empty month when it has none yet), lapsed reservations dropped."""
        current = month_of(now)
        this_month = {ledger.tenant: ledger for ledger in ledgers if ledger.month == current}
        states: list[BudgetState] = []
        for tenant in tenants:
            budget = self._budget_of(tenant)
            if budget is None:
                continue
            ledger = this_month.get(tenant, MonthLedger(tenant=tenant, month=current))
            ledger = ledger.model_copy(deep=True)
            ledger.lapse(now)
            states.extend(BudgetState.of(tenant, use) for use in budget_uses(budget, ledger, now))
        return states

    def _read_all(self, names: list[str]) -> Iterator[_Read]:
        """Each document read, in listing order (``reading.read_in_order``)."""
        return read_in_order(names, self._read, self._readers, "ledger-read")

    def _read(self, name: str) -> _Read:
        loaded = load_of_schema(self._documents, self._container, name, LEDGER_SCHEMA)
        if loaded.document is None:
            return _Read(name, problem=loaded.problem, vanished=loaded.problem is None)
        try:
            ledger = MonthLedger.model_validate(loaded.document)
        except ValidationError as error:
            return _Read(name, problem=_problem(error))
        mismatch = _mismatch(name, ledger)
        return _Read(name, problem=mismatch) if mismatch else _Read(name, ledger=ledger)


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "document"
    return f"not a valid usage ledger: {where}: {first['msg']}"


def _mismatch(name: str, ledger: MonthLedger) -> str | None:
    """Why ``ledger`` cannot be the document ``name`` names, if it cannot: a tenant or
    month other than its name's, or a row not keyed ``model|mode``."""
    if name != f"{ledger.tenant}/{ledger.month}.json":
        return f"holds tenant {ledger.tenant!r} and month {ledger.month!r}, not its name's"
    for day, by_model in ledger.days.items():
        for key in by_model:
            if split_row_key(key) is None:
                return f"days.{day.isoformat()}: row {key!r} is not keyed model|mode"
    return None


def _rows(ledgers: list[MonthLedger], days: DayRange) -> list[LedgerRow]:
    """The rows of ``ledgers``' days in ``days``, by day, tenant, model and mode."""
    counts: dict[UsageKey, LedgerCounts] = {}
    for ledger in ledgers:
        for day, by_model in ledger.days.items():
            if not days.first <= day <= days.last:
                continue
            for key, row in by_model.items():
                model, mode = split_row_key(key) or (
                    key,
                    ProcessingMode.QUEUE,
                )  # checked on reading
                usage_key = UsageKey(day, ledger.tenant, model, mode)
                counts[usage_key] = counts.get(usage_key, LedgerCounts()).plus(LedgerCounts.of(row))
    return [LedgerRow(key, counts[key]) for key in sorted(counts)]


def _total(rows: list[LedgerRow]) -> LedgerCounts:
    total = LedgerCounts()
    for row in rows:
        total = total.plus(row.counts)
    return total


def _held(ledgers: list[MonthLedger], now: datetime) -> list[Held]:
    """Per tenant, the reservations of the documents read that have not lapsed at
    ``now``: only tenants that hold something (only a budget makes a reservation)."""
    by_tenant: dict[str, Held] = {}
    for ledger in ledgers:
        live = [r for r in ledger.reserved.values() if as_utc(r.until) > now]
        if not live:
            continue
        before = by_tenant.get(ledger.tenant, Held(ledger.tenant, 0, 0, Decimal(0)))
        by_tenant[ledger.tenant] = Held(
            ledger.tenant,
            before.requests + len(live),
            before.tokens + sum(r.tokens for r in live),
            before.cost + sum((r.cost for r in live), Decimal(0)),
        )
    return [by_tenant[tenant] for tenant in sorted(by_tenant)]
