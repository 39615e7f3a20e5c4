"""A tenant's month of spending: what its answers used, and what it has reserved.

One document per tenant and UTC month (``MonthLedger``) is both the usage ledger and
the budget's counter:

- ``days``: per UTC day, one row per model and lane (queue or batch) of what the kept
  answers reported: requests, input and output tokens, cost. A report reads one
  document per tenant and month, whatever the number of jobs: O(new work) to keep,
  O(tenants) to read.
- ``reserved``: the requests admitted against a budget and not answered yet, each with
  its estimate (prompt plus the longest answer it allows) and the day it was admitted.
  A budget counts them as spent, so that requests admitted at once cannot overspend it
  together; the answer replaces the estimate by what it used. A request that ends
  without an answer (failed, expired, cancelled) gives its reservation back; one whose
  ending is not seen lapses once its request can no longer run (``until``).

Everything here is pure: the arithmetic of the document, and the budget's rule
(``first_exceeded``). ``shared.accounting.spending`` keeps the documents in storage.
Amounts are Decimals written as strings, so that a month of sums stays exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.accounting.tenants import Budget
from shared.clock import as_utc
from shared.contracts import Cost, Job, ProcessingMode, TokenUsage
from shared.job_index import finished_at

LEDGER_SCHEMA: Final = "inferbus.usage/v1"
BudgetName = Literal["tokens_per_day", "tokens_per_month", "cost_per_month"]


@dataclass(frozen=True)
class Spend:
    """Tokens and cost (in the model catalog's currency) spent or expected."""

    tokens: int = 0
    cost: Decimal = Decimal(0)

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.tokens + other.tokens, self.cost + other.cost)


def month_of(moment: datetime | date) -> str:
    """The UTC month a moment or day belongs to, as ``YYYY-MM``."""
    day = as_utc(moment).date() if isinstance(moment, datetime) else moment
    return f"{day.year:04d}-{day.month:02d}"


def next_day(moment: datetime) -> datetime:
    """The first instant of the UTC day after ``moment``'s: when a daily budget resets."""
    day = as_utc(moment).date() + timedelta(days=1)
    return datetime.combine(day, time(), UTC)


def next_month(moment: datetime) -> datetime:
    """The first instant of the UTC month after ``moment``'s: when a monthly budget resets."""
    day = as_utc(moment).date()
    first = date(day.year + (day.month == 12), day.month % 12 + 1, 1)
    return datetime.combine(first, time(), UTC)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


def row_key(model: str, mode: ProcessingMode) -> str:
    """How a day's row is keyed in the document: ``model|mode``."""
    return f"{model}|{mode.value}"


def split_row_key(key: str) -> tuple[str, ProcessingMode] | None:
    """The model and mode of a row's key; None when it is not ``model|mode``."""
    model, _, mode = key.rpartition("|")
    try:
        return (model, ProcessingMode(mode)) if model else None
    except ValueError:
        return None


class UsageRow(_Part):
    """What one model's answers on one lane used on one day. ``uncosted``: answers whose
    cost is not known (the alias has no prices, or the answer reported no usage);
    ``without_usage``: answers that reported no tokens, so that neither looks free."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    uncosted: int = 0
    without_usage: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: UsageRow) -> UsageRow:
        return UsageRow(**{name: getattr(self, name) + getattr(other, name)
                           for name in UsageRow.model_fields})  # fmt: skip


class Reservation(_Part):
    """A request admitted against a budget and not answered yet."""

    day: date
    tokens: int
    cost: Decimal = Decimal(0)
    until: datetime  # after this the request cannot run any more: the reservation lapses


class MonthLedger(_Part):
    """One tenant's UTC month (see the module doc); ``rows`` keys are ``model|mode``."""

    schema_: Literal["inferbus.usage/v1"] = Field(LEDGER_SCHEMA, alias="schema")
    tenant: str
    month: str
    days: dict[date, dict[str, UsageRow]] = Field(default_factory=dict)
    reserved: dict[str, Reservation] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # --- reading ----------------------------------------------------------------------

    def rows(self) -> Iterator[tuple[date, str, ProcessingMode, UsageRow]]:
        """Each day's rows, in order, as day, model, mode and counts (a row whose key is
        not ``model|mode`` is left out: the reader that checks documents names it)."""
        for day, by_model in sorted(self.days.items()):
            for key, row in sorted(by_model.items()):
                keyed = split_row_key(key)
                if keyed is not None:
                    yield day, *keyed, row

    def summed(self, day: date | None = None) -> UsageRow:
        """The answers of ``day`` (None: the whole month) in one row."""
        rows = [
            row for when, by_model in self.days.items() if day in (None, when)
            for row in by_model.values()
        ]  # fmt: skip
        return sum(rows, UsageRow())

    def used(self, day: date | None = None) -> Spend:
        """What the answers used on ``day`` (None: the whole month)."""
        summed = self.summed(day)
        return Spend(summed.tokens, summed.cost)

    def held(self, day: date | None = None) -> Spend:
        """What reservations admitted on ``day`` (None: the whole month) hold."""
        held = [r for r in self.reserved.values() if day in (None, r.day)]
        return Spend(sum(r.tokens for r in held), sum((r.cost for r in held), Decimal(0)))

    def spent(self, day: date | None = None) -> Spend:
        """Used and held: what a budget counts."""
        return self.used(day) + self.held(day)

    # --- changing (each returns whether anything changed) -----------------------------

    def reserve(self, request_id: str, reservation: Reservation) -> None:
        self.reserved[request_id] = reservation

    def release(self, request_id: str) -> bool:
        return self.reserved.pop(request_id, None) is not None

    def lapse(self, now: datetime) -> bool:
        """Drop the reservations whose requests can no longer run."""
        lapsed = [rid for rid, r in self.reserved.items() if as_utc(r.until) <= as_utc(now)]
        for request_id in lapsed:
            del self.reserved[request_id]
        return bool(lapsed)

    def add_answer(self, answer: Answer) -> None:
        """Count one kept answer on its day (its reservation, if any, is released)."""
        self.reserved.pop(answer.request_id, None)
        row = self.days.setdefault(answer.day, {}).setdefault(
            row_key(answer.model, answer.mode), UsageRow()
        )
        row.requests += 1
        if answer.usage is None:
            row.without_usage += 1
        else:
            row.input_tokens += answer.usage.input_tokens
            row.output_tokens += answer.usage.output_tokens
        if answer.cost is None:
            row.uncosted += 1
        else:
            row.cost += answer.cost.amount


@dataclass(frozen=True)
class Answer:
    """One kept answer, as the ledger counts it: its day is the UTC day it finished."""

    request_id: str
    model: str
    mode: ProcessingMode
    day: date
    usage: TokenUsage | None
    cost: Cost | None

    @classmethod
    def of(cls, job: Job) -> Answer:
        """The answer a finished ``job`` keeps (its result's usage and cost, none when it
        has no result), on the lane that ran it."""
        result = job.result
        return cls(
            request_id=job.id,
            model=job.model,
            mode=job.mode,
            day=finished_at(job).date(),
            usage=result.usage if result is not None else None,
            cost=result.cost if result is not None else None,
        )


@dataclass(frozen=True)
class Exceeded:
    """The budget a request would pass: its name, period, limit and what is spent, and
    when the period resets (the caller's ``Retry-After``)."""

    budget: BudgetName
    period: str
    limit: float
    spent: float
    resets_at: datetime

    def describe(self) -> str:
        unit = "" if self.budget == "cost_per_month" else " tokens"
        return (
            f"the budget {self.budget} for {self.period} is spent: {_shown(self.spent)} of "
            f"{_shown(self.limit)}{unit}; it resets at {self.resets_at.isoformat()}"
        )


def _shown(amount: float) -> str:
    return f"{amount:,.0f}" if amount == int(amount) else f"{amount:,.4f}".rstrip("0")


@dataclass(frozen=True)
class BudgetUse:
    """How much of one budget is spent in its current period."""

    budget: BudgetName
    period: str
    limit: float
    spent: float
    resets_at: datetime

    @property
    def remaining(self) -> float:
        return max(self.limit - self.spent, 0.0)


def budget_uses(budget: Budget, ledger: MonthLedger, now: datetime) -> list[BudgetUse]:
    """Each budget ``budget`` sets, with what ``ledger`` (``now``'s month) has spent of it."""
    today = as_utc(now).date()
    uses = []
    if budget.tokens_per_day is not None:
        uses.append(BudgetUse("tokens_per_day", today.isoformat(), budget.tokens_per_day,
                              ledger.spent(today).tokens, next_day(now)))  # fmt: skip
    month = ledger.spent()
    if budget.tokens_per_month is not None:
        uses.append(BudgetUse("tokens_per_month", ledger.month, budget.tokens_per_month,
                              month.tokens, next_month(now)))  # fmt: skip
    if budget.cost_per_month is not None:
        uses.append(BudgetUse("cost_per_month", ledger.month, budget.cost_per_month,
                              float(month.cost), next_month(now)))  # fmt: skip
    return uses


def first_exceeded(
    budget: Budget, ledger: MonthLedger, estimate: Spend, now: datetime
) -> Exceeded | None:
    """The first budget that ``estimate`` more would pass, or None when all hold."""
    for use in budget_uses(budget, ledger, now):
        more = float(estimate.cost) if use.budget == "cost_per_month" else estimate.tokens
        if use.spent + more > use.limit:
            return Exceeded(use.budget, use.period, use.limit, use.spent, use.resets_at)
    return None
