"""A tenant's month of spending, as pure arithmetic: the budgets' rule, reservations and
their lapse, answers counted per day, model and lane, and the document's JSON form."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from shared.accounting.ledger import (
    Answer,
    MonthLedger,
    Reservation,
    Spend,
    budget_uses,
    first_exceeded,
    month_of,
    next_day,
    next_month,
)
from shared.accounting.tenants import Budget
from shared.contracts import Cost, ProcessingMode
from tests.support.jobs import usage

NOW = datetime(2026, 12, 31, 22, 30, tzinfo=UTC)
TODAY = NOW.date()
LATER = NOW + timedelta(hours=1)


def answer(request_id: str, day: date = TODAY, cost: str | None = "0.0015", **kw: object) -> Answer:
    return Answer(
        request_id=request_id,
        model=str(kw.get("model", "gpt-5.1")),
        mode=ProcessingMode(str(kw.get("mode", "queue"))),
        day=day,
        usage=usage(100, 50) if kw.get("usage", True) else None,
        cost=Cost(amount=Decimal(cost), currency="USD") if cost is not None else None,
    )


def held(tokens: int, cost: str = "0", day: date = TODAY, until: datetime = LATER) -> Reservation:
    return Reservation(day=day, tokens=tokens, cost=Decimal(cost), until=until)


def test_periods_reset_at_the_next_utc_day_and_month() -> None:
    assert month_of(NOW) == "2026-12"
    assert next_day(NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_month(NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_month(datetime(2026, 3, 5, tzinfo=UTC)) == datetime(2026, 4, 1, tzinfo=UTC)


def test_a_budget_counts_answers_and_reservations_and_refuses_what_would_pass_it() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.add_answer(answer("a"))  # 150 tokens today
    ledger.reserve("b", held(700))
    budget = Budget(tokens_per_day=1000)

    assert first_exceeded(budget, ledger, Spend(150), NOW) is None  # 150 + 700 + 150 = 1000
    refused = first_exceeded(budget, ledger, Spend(151), NOW)

    assert refused is not None
    assert (refused.budget, refused.period, refused.spent) == ("tokens_per_day", "2026-12-31", 850)
    assert refused.resets_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert "tokens_per_day for 2026-12-31 is spent: 850 of 1,000 tokens" in refused.describe()


def test_yesterday_counts_for_the_month_but_not_for_today() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.add_answer(answer("old", day=TODAY - timedelta(days=1)))
    budget = Budget(tokens_per_day=200, tokens_per_month=250)

    assert first_exceeded(budget, ledger, Spend(100), NOW) is None
    monthly = first_exceeded(budget, ledger, Spend(101), NOW)
    assert monthly is not None
    assert monthly.budget == "tokens_per_month"
    assert monthly.period == "2026-12"


def test_a_cost_budget_counts_the_catalog_currency_exactly() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    for index in range(10):
        ledger.add_answer(answer(f"r{index}", cost="0.1"))  # 1.0, exact in Decimal
    budget = Budget(cost_per_month=1.5)

    assert ledger.used().cost == Decimal("1.0")
    assert first_exceeded(budget, ledger, Spend(1, Decimal("0.5")), NOW) is None
    refused = first_exceeded(budget, ledger, Spend(1, Decimal("0.51")), NOW)
    assert refused is not None
    assert refused.budget == "cost_per_month"


def test_an_answer_replaces_its_reservation_and_is_counted_by_model_and_lane() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.reserve("a", held(812, "0.01"))
    ledger.add_answer(answer("a"))
    ledger.add_answer(answer("b", mode="batch", cost=None))
    ledger.add_answer(answer("c", usage=False, cost=None))

    assert ledger.reserved == {}
    rows = ledger.days[TODAY]
    assert rows["gpt-5.1|queue"].requests == 2
    assert rows["gpt-5.1|queue"].tokens == 150, "an answer without usage adds no tokens"
    assert rows["gpt-5.1|queue"].without_usage == 1
    assert rows["gpt-5.1|queue"].uncosted == 1
    assert rows["gpt-5.1|batch"].uncosted == 1
    assert ledger.spent() == Spend(300, Decimal("0.0015"))


def test_a_reservation_lapses_when_its_request_can_no_longer_run() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.reserve("gone", held(500, until=NOW - timedelta(seconds=1)))
    ledger.reserve("live", held(300))

    assert ledger.lapse(NOW)
    assert list(ledger.reserved) == ["live"]
    assert not ledger.lapse(NOW), "nothing left to lapse"


def test_budget_uses_say_what_is_left_of_each_budget() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.add_answer(answer("a"))
    uses = budget_uses(Budget(tokens_per_day=1000, cost_per_month=2), ledger, NOW)

    assert [(u.budget, u.spent, u.remaining) for u in uses] == [
        ("tokens_per_day", 150, 850),
        ("cost_per_month", 0.0015, 1.9985),
    ]


def test_the_document_keeps_decimals_exact_through_json() -> None:
    ledger = MonthLedger(tenant="trial", month="2026-12")
    ledger.add_answer(answer("a", cost="0.0000000001"))
    ledger.reserve("b", held(10, "0.3"))

    written = json.loads(json.dumps(ledger.model_dump(mode="json", by_alias=True)))
    read = MonthLedger.model_validate(written)

    assert written["schema"] == "inferbus.usage/v1"
    assert written["days"]["2026-12-31"]["gpt-5.1|queue"]["cost"] == "1E-10"
    assert read == ledger
    assert read.spent().cost == Decimal("0.3000000001")
