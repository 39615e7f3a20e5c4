"""``GET /api/v1/usage``: a tenant's own tokens, cost and budgets.

The caller's tenant (as every request endpoint resolves it) reads its month document of
the usage ledger (``shared.accounting.spending``): one storage read, whatever the number
of its requests. The answer is the month's answers by day, model and lane, their totals
(and today's, for the current month), what its unanswered requests hold against its
budgets, and each budget of the tenant catalog in its current period with what remains.
Answers counted in the last few seconds (``Usage__flushSeconds``) may not show yet; they
still count against the budgets at their estimates (``held``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from shared.accounting.ledger import MonthLedger, UsageRow, budget_uses, month_of
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import Budget
from shared.clock import Clock, utc_now
from shared.contracts import (
    BudgetView,
    HeldView,
    UsageRowView,
    UsageTotals,
    UsageView,
)
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.errors import FieldError, InvalidInput
from shared.intake.tenancy import CallerTenancy

MONTH: Final = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


@dataclass(frozen=True)
class UsageEndpoint:
    """``/api/v1/usage`` over the tenants' month documents; ``currency``: the model
    catalog's (None when no alias has prices)."""

    spending: TenantSpending
    tenancy: CallerTenancy
    currency: str | None
    clock: Clock = utc_now

    def get(self, request: ApiRequest) -> ApiResponse:
        """The caller's usage of ``?month=YYYY-MM`` (the current UTC month by default)."""
        tenant = self.tenancy.tenant_of(request.headers)
        now = self.clock()
        current = month_of(now)
        month = request.params.get("month") or current
        if not MONTH.match(month):
            raise InvalidInput(
                f"month '{month}' is not a UTC month written YYYY-MM",
                (FieldError("month", "expected YYYY-MM, such as 2026-12"),),
            )
        ledger = self.spending.month(tenant, month)
        budget = self.spending.budget_of(tenant) if month == current else None
        view = usage_view(ledger, budget, now, self.currency, current=month == current)
        return json_response(200, view.model_dump(mode="json"))


def usage_view(
    ledger: MonthLedger, budget: Budget | None, now: datetime, currency: str | None, current: bool
) -> UsageView:
    """The answer for ``ledger``: totals, rows, what is held and, for the current month,
    today and the budgets' uses at ``now``."""
    rows = [
        UsageRowView(day=day, model=model, mode=mode, **_totals(row).model_dump())
        for day, model, mode, row in ledger.rows()
    ]
    held = ledger.held()
    return UsageView(
        tenant=ledger.tenant,
        month=ledger.month,
        currency=currency,
        today=_totals(ledger.summed(now.date())) if current else None,
        total=_totals(ledger.summed()),
        held=HeldView(requests=len(ledger.reserved), tokens=held.tokens, cost=held.cost),
        days=rows,
        budgets=[
            BudgetView(
                name=use.budget,
                period=use.period,
                limit=use.limit,
                spent=use.spent,
                remaining=use.remaining,
                resets_at=use.resets_at,
            )
            for use in (budget_uses(budget, ledger, now) if budget is not None else [])
        ],
    )


def _totals(row: UsageRow) -> UsageTotals:
    return UsageTotals(
        requests=row.requests,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        cost=row.cost,
        uncosted=row.uncosted,
    )
