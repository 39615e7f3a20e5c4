"""What a report of the usage ledger holds: rows, totals, held requests, budgets.

The values ``ledger_report.LedgerReader`` answers and the ops command prints: a row's
sums per UTC day, tenant, model and mode, what a tenant's unanswered requests hold, one
budget in its current period, and what became of the documents listed. Amounts stay
Decimals (the ledger's, exact); as JSON they are strings, since a JSON number is a
double, which does not keep a large sum of ten-place amounts exact. Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from decimal import Decimal

from shared.accounting.ledger import BudgetName, BudgetUse, UsageRow, month_of
from shared.accounting.usage import DayRange, UsageKey


@dataclass(frozen=True)
class LedgerCounts:
    """One row's sums. ``total_tokens`` is input plus output (the ledger keeps no
    reported total); ``cost`` is in the model catalog's currency, exact; ``uncosted``
    counts the answers whose cost is not known, so that they do not look free."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    requests_without_usage: int = 0
    cost: Decimal = Decimal(0)
    uncosted: int = 0

    def plus(self, other: LedgerCounts) -> LedgerCounts:
        return LedgerCounts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def of(cls, row: UsageRow) -> LedgerCounts:
        return cls(
            requests=row.requests,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            total_tokens=row.tokens,
            requests_without_usage=row.without_usage,
            cost=row.cost,
            uncosted=row.uncosted,
        )

    def as_json(self) -> dict[str, object]:
        """Counts as numbers, the cost as a string: a JSON number is a double, which does
        not keep a large sum of ten-place amounts exact."""
        return {**asdict(self), "cost": str(self.cost)}


@dataclass(frozen=True)
class LedgerRow:
    key: UsageKey
    counts: LedgerCounts

    def as_json(self) -> dict[str, object]:
        key = self.key
        where = {"day": key.day.isoformat(), "tenant": key.tenant, "model": key.model}
        return {**where, "mode": key.mode.value, **self.counts.as_json()}


@dataclass(frozen=True)
class Held:
    """What one tenant's unanswered requests hold against its budgets now."""

    tenant: str
    requests: int
    tokens: int
    cost: Decimal

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "cost": str(self.cost)}


@dataclass(frozen=True)
class BudgetState:
    """One budget of one tenant in its current period: ``spent`` counts the answers and
    the requests held. Amounts are Decimals (tokens are whole), for exact printing."""

    tenant: str
    budget: BudgetName
    period: str
    limit: Decimal
    spent: Decimal
    resets_at: datetime

    @property
    def remaining(self) -> Decimal:
        return max(self.limit - self.spent, Decimal(0))

    @classmethod
    def of(cls, tenant: str, use: BudgetUse) -> BudgetState:
        # repr is the shortest text that reads back as the same float: a cost summed to
        # ten places (under 15 significant digits) comes back as its Decimal.
        return cls(tenant, use.budget, use.period, Decimal(repr(use.limit)),
                   Decimal(repr(use.spent)), use.resets_at)  # fmt: skip

    def as_json(self) -> dict[str, object]:
        def amount(value: Decimal) -> int | str:
            return str(value) if self.budget == "cost_per_month" else int(value)

        return {
            "tenant": self.tenant,
            "budget": self.budget,
            "period": self.period,
            "limit": amount(self.limit),
            "spent": amount(self.spent),
            "remaining": amount(self.remaining),
            "resets_at": self.resets_at.isoformat(),
        }


@dataclass(frozen=True)
class NotALedger:
    name: str
    reason: str


@dataclass
class LedgerTally:
    """What the report did with the names the listing gave: ``listed`` are the month
    documents whose month overlaps the range."""

    listed: int = 0
    read: int = 0
    vanished: list[str] = field(default_factory=list)
    not_ledgers: list[NotALedger] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LedgerReport:
    """``budgets_month``: the current UTC month the budgets are told for, None when the
    range does not reach it (no budget is told then)."""

    days: DayRange
    tenant: str | None
    rows: list[LedgerRow]
    totals: LedgerCounts
    held: list[Held]
    budgets: list[BudgetState]
    budgets_month: str | None
    documents: LedgerTally


def months_of(days: DayRange) -> tuple[str, str]:
    """The first and last UTC month ``days`` touch (``YYYY-MM`` compare as text)."""
    return month_of(days.first), month_of(days.last)
