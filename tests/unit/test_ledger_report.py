"""The usage ledger's report: month documents listed and read through the document ports
(rows per UTC day, tenant, model and mode with their cost, what is held now, each budget
in its current period), strays named, an outage fatal; and the ``usage`` ops command that
prints it by default."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared.accounting.ledger import Answer, MonthLedger, Reservation, Spend, UsageRow
from shared.accounting.ledger_report import LedgerReader
from shared.accounting.ledger_sums import BudgetState, Held, LedgerCounts
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import Budget, TenantCatalog, TenantPolicy
from shared.accounting.usage import DayRange, UsageKey
from shared.adapters.in_memory import InMemoryDocuments
from shared.contracts import Cost, ProcessingMode, TokenUsage
from shared.documents import Document
from shared.entrypoints.cli.ops import LedgerStorage, main
from shared.errors import TransientError
from tests.fakes import ManualClock
from tests.support.documents import ReadCounting
from tests.support.jobs import usage
from tests.support.wiring import tenant_catalog, wire

NOW = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
TODAY = NOW.date()
QUEUE, BATCH = ProcessingMode.QUEUE, ProcessingMode.BATCH
CONTAINER = "usage"
TRIAL = Budget(tokens_per_day=3000, tokens_per_month=50_000, cost_per_month=20.0)
CATALOG = TenantCatalog(tenants={"trial": TenantPolicy(budget=TRIAL)})
_ids = itertools.count(1)


def answer(
    day: date,
    tokens: TokenUsage | None,
    cost: str | None,
    *,
    model: str = "gpt-4o-mini",
    mode: ProcessingMode = QUEUE,
) -> Answer:
    amount = Cost(amount=Decimal(cost), currency="USD") if cost is not None else None
    return Answer(f"r-{next(_ids)}", model, mode, day, tokens, amount)


def spending(documents: InMemoryDocuments, clock: ManualClock) -> TenantSpending:
    return TenantSpending(documents, CONTAINER, CATALOG, clock)


def counted(documents: InMemoryDocuments, tenant: str, *answers: Answer) -> None:
    """``answers`` counted in ``tenant``'s months as the processors count them."""
    clock = ManualClock(NOW)
    books = spending(documents, clock)
    for one in answers:
        books.record(tenant, datetime.combine(one.day, datetime.min.time(), UTC), one)
    books.flush()


def reader(
    documents: InMemoryDocuments, clock: ManualClock | None = None, progress_every: int = 100
) -> LedgerReader:
    return LedgerReader(
        documents,
        CONTAINER,
        lambda tenant: CATALOG.policy(tenant).budget,
        clock or ManualClock(NOW),
        progress_every=progress_every,
    )


def rows_of(report: Any) -> dict[UsageKey, LedgerCounts]:
    return {row.key: row.counts for row in report.rows}


# --- the rows -------------------------------------------------------------------------------


def test_rows_per_day_tenant_model_and_mode_carry_tokens_and_the_exact_cost() -> None:
    documents = ReadCounting()
    counted(
        documents,
        "acme",
        answer(TODAY, usage(1200, 34), "0.0002004"),
        answer(TODAY, usage(800, 66), "0.0001596"),
        answer(TODAY, usage(98_765, 4321), "0.0174073500", mode=BATCH),
        answer(TODAY, None, None),
    )
    counted(documents, "globex", answer(TODAY, usage(10, 5), None, model="local-analyzer"))
    documents.read_names.clear()  # the writer's own reads

    report = reader(documents).report(DayRange.single(TODAY))

    assert rows_of(report) == {
        UsageKey(TODAY, "acme", "gpt-4o-mini", BATCH): LedgerCounts(
            1, 98_765, 4321, 103_086, 0, Decimal("0.0174073500"), 0
        ),
        UsageKey(TODAY, "acme", "gpt-4o-mini", QUEUE): LedgerCounts(
            3, 2000, 100, 2100, 1, Decimal("0.0003600"), 1
        ),
        UsageKey(TODAY, "globex", "local-analyzer", QUEUE): LedgerCounts(
            1, 10, 5, 15, 0, Decimal(0), 1
        ),
    }
    assert report.totals == LedgerCounts(5, 100_775, 4426, 105_201, 1, Decimal("0.01776735"), 2)
    assert (report.documents.listed, report.documents.read) == (2, 2)
    assert sorted(documents.read_names) == ["acme/2026-12.json", "globex/2026-12.json"]


def test_only_the_months_of_the_range_are_read_and_only_its_days_are_rows() -> None:
    documents = ReadCounting()
    counted(
        documents,
        "acme",
        answer(date(2026, 10, 31), usage(1, 1), "0.1"),
        answer(date(2026, 11, 29), usage(2, 2), "0.2"),
        answer(date(2026, 11, 30), usage(3, 3), "0.3"),
        answer(date(2026, 12, 1), usage(4, 4), "0.4"),
        answer(date(2026, 12, 2), usage(5, 5), "0.5"),
    )
    documents.read_names.clear()  # the writer's own reads

    report = reader(documents).report(DayRange(date(2026, 11, 30), date(2026, 12, 1)))

    assert [(row.key.day, row.counts.total_tokens) for row in report.rows] == [
        (date(2026, 11, 30), 6),
        (date(2026, 12, 1), 8),
    ]
    assert report.totals.cost == Decimal("0.7")
    assert sorted(documents.read_names) == ["acme/2026-11.json", "acme/2026-12.json"]


def test_one_tenant_lists_only_its_own_documents() -> None:
    documents = ReadCounting()
    for tenant in ("acme", "acme-two", "globex"):
        counted(documents, tenant, answer(TODAY, usage(1, 1), "0.01"))
    documents.read_names.clear()  # the writer's own reads

    report = reader(documents).report(DayRange.single(TODAY), tenant="acme")

    assert {row.key.tenant for row in report.rows} == {"acme"}
    assert documents.read_names == ["acme/2026-12.json"]
    assert report.documents.listed == 1


def test_strays_are_named_and_skipped_and_the_rest_is_counted() -> None:
    documents = ReadCounting()
    counted(documents, "acme", answer(TODAY, usage(5, 5), "0.5"))
    documents.put(CONTAINER, "notes.txt", {"hello": "world"})
    documents.put(CONTAINER, "acme/2026-13.json", {"schema": "inferbus.usage/v1"})
    documents.put(CONTAINER, "other/2026-12.json", {"schema": "inferbus.job/v1"})
    documents.put(CONTAINER, "broken/2026-12.json", {"schema": "inferbus.usage/v1", "days": 1})
    elsewhere = MonthLedger(tenant="globex", month="2026-12").model_dump(mode="json", by_alias=True)
    documents.put(CONTAINER, "moved/2026-12.json", elsewhere)
    odd = MonthLedger(tenant="odd", month="2026-12", days={TODAY: {"gpt-4o-mini": UsageRow()}})
    documents.put(CONTAINER, "odd/2026-12.json", odd.model_dump(mode="json", by_alias=True))
    documents.blobs.write(
        CONTAINER, "torn/2026-12.json", b'{"schema": "inf', "application/json", {}
    )

    report = reader(documents).report(DayRange.single(TODAY))

    assert report.totals.total_tokens == 10
    reasons = {item.name: item.reason for item in report.documents.not_ledgers}
    assert reasons["notes.txt"] == "not named <tenant>/<YYYY-MM>.json"
    assert reasons["acme/2026-13.json"] == "not named <tenant>/<YYYY-MM>.json"
    assert reasons["other/2026-12.json"] == "schema 'inferbus.job/v1', not 'inferbus.usage/v1'"
    assert reasons["broken/2026-12.json"].startswith("not a valid usage ledger: ")
    assert reasons["moved/2026-12.json"] == (
        "holds tenant 'globex' and month '2026-12', not its name's"
    )
    assert (
        reasons["odd/2026-12.json"] == "days.2026-12-05: row 'gpt-4o-mini' is not keyed model|mode"
    )
    assert reasons["torn/2026-12.json"] == "not JSON"
    assert len(reasons) == 7
    assert (report.documents.listed, report.documents.read) == (6, 6)


class Vanishing(InMemoryDocuments):
    """A listing that still names a document deleted since (the lifecycle rule's)."""

    def list_names(self, container: str, prefix: str) -> list[str]:
        return sorted([*super().list_names(container, prefix), "gone/2026-12.json"])


def test_a_document_that_vanished_after_the_listing_is_named() -> None:
    documents = Vanishing()
    counted(documents, "acme", answer(TODAY, usage(5, 5), "0.5"))

    report = reader(documents).report(DayRange.single(TODAY))

    assert report.documents.vanished == ["gone/2026-12.json"]
    assert (report.documents.listed, report.documents.read) == (2, 1)
    assert report.totals.requests == 1


class Failing(InMemoryDocuments):
    """Storage down for one document once ``down`` is set."""

    down = False

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        if self.down and name == "globex/2026-12.json":
            raise TransientError(f"reading {container}/{name}: ServiceRequestError")
        return super().load(container, name)


def test_a_storage_outage_stops_the_report() -> None:
    documents = Failing()
    for tenant in ("acme", "globex", "initech"):
        counted(documents, tenant, answer(TODAY, usage(1, 1), "0.01"))
    documents.down = True

    with pytest.raises(TransientError, match=r"globex/2026-12\.json"):
        reader(documents).report(DayRange.single(TODAY))


def test_many_documents_read_concurrently_tell_their_progress() -> None:
    documents = InMemoryDocuments()
    for n in range(25):
        counted(documents, f"t{n:02d}", answer(TODAY, usage(n, 1), "0.001"))
    told: list[tuple[int, int]] = []

    report = reader(documents, progress_every=10).report(
        DayRange.single(TODAY), progress=lambda read, of: told.append((read, of))
    )

    assert told == [(10, 25), (20, 25), (25, 25)]
    assert report.totals == LedgerCounts(25, sum(range(25)), 25, sum(range(25)) + 25, 0,
                                         Decimal("0.025"), 0)  # fmt: skip


# --- what is held, and the budgets ---------------------------------------------------------


def test_held_counts_the_reservations_not_lapsed_and_budgets_count_answers_and_held() -> None:
    documents = InMemoryDocuments()
    clock = ManualClock(NOW - timedelta(hours=2))
    books = spending(documents, clock)
    books.reserve("trial", "lapsing", Spend(700, Decimal("0.3")), NOW - timedelta(minutes=1))
    books.reserve("trial", "running", Spend(500, Decimal("0.2")), NOW + timedelta(hours=1))
    books.record("trial", NOW, answer(TODAY, usage(900, 100), "1.25"))
    books.record("trial", NOW, answer(TODAY - timedelta(days=1), usage(2000, 0), "0.5"))
    books.flush()

    report = reader(documents).report(DayRange.single(TODAY))

    assert report.held == [Held("trial", 1, 500, Decimal("0.2"))]
    assert report.budgets_month == "2026-12"
    spent = {state.budget: (state.limit, state.spent, state.remaining) for state in report.budgets}
    assert spent == {
        "tokens_per_day": (Decimal(3000), Decimal(1500), Decimal(1500)),
        "tokens_per_month": (Decimal(50_000), Decimal(3500), Decimal(46_500)),
        "cost_per_month": (Decimal(20), Decimal("1.95"), Decimal("18.05")),
    }
    assert {state.resets_at for state in report.budgets} == {
        datetime(2026, 12, 6, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    }


def test_a_tenant_asked_without_a_document_this_month_has_its_budgets_untouched() -> None:
    report = reader(InMemoryDocuments()).report(DayRange.single(TODAY), tenant="trial")

    assert (report.rows, report.held) == ([], [])
    assert [(s.budget, s.spent, s.remaining) for s in report.budgets] == [
        ("tokens_per_day", Decimal(0), Decimal(3000)),
        ("tokens_per_month", Decimal(0), Decimal(50_000)),
        ("cost_per_month", Decimal(0), Decimal(20)),
    ]


def test_budgets_are_told_only_when_the_range_reaches_the_current_month() -> None:
    documents = InMemoryDocuments()
    counted(documents, "trial", answer(date(2026, 11, 3), usage(5, 5), "0.5"))

    november = reader(documents).report(DayRange(date(2026, 11, 1), date(2026, 11, 30)))

    assert november.totals.requests == 1
    assert (november.budgets_month, november.budgets) == (None, [])


def test_a_tenant_without_a_budget_has_no_budget_and_holds_nothing() -> None:
    documents = InMemoryDocuments()
    counted(documents, "acme", answer(TODAY, usage(5, 5), "0.5"))

    report = reader(documents).report(DayRange.single(TODAY))

    assert (report.budgets, report.held) == ([], [])


def test_a_budget_state_keeps_a_ten_place_cost_exact() -> None:
    state = BudgetState("t", "cost_per_month", "2026-12", Decimal(20), Decimal("1.2345678901"), NOW)
    assert state.as_json()["spent"] == "1.2345678901"
    assert state.as_json()["remaining"] == "18.7654321099"


# --- the ops command ------------------------------------------------------------------------


def ledger_of(documents: InMemoryDocuments, currency: str | None = "USD") -> LedgerStorage:
    return LedgerStorage(
        documents, CONTAINER, lambda t: CATALOG.policy(t).budget, currency, ManualClock(NOW)
    )


def run(
    storage: LedgerStorage, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    code = main(["usage", *argv], ledger=lambda: storage)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def stored() -> InMemoryDocuments:
    """Today's answers of two tenants, one with a budget and a request held."""
    documents = InMemoryDocuments()
    counted(documents, "acme", answer(TODAY, usage(1200, 34), "0.0002004"),
            answer(TODAY, None, None, mode=BATCH))  # fmt: skip
    books = spending(documents, ManualClock(NOW))
    books.reserve("trial", "held", Spend(541, Decimal("0.00033")), NOW + timedelta(hours=1))
    books.record("trial", NOW, answer(TODAY, usage(900, 100), "0.0012345678"))
    books.flush()
    documents.put(CONTAINER, "stray.json", {})
    return documents


def test_the_command_prints_the_table_with_cost_then_held_and_budgets(
    stored: InMemoryDocuments, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(ledger_of(stored), capsys)

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "usage 2026-12-05 (UTC), all tenants, from the usage ledger"
    assert lines[1].split() == [
        *"day tenant model mode requests input output total no usage".split(),
        "cost", "(USD)", "uncosted",
    ]  # fmt: skip
    assert lines[2].split() == "2026-12-05 acme gpt-4o-mini batch 1 0 0 0 1 0.000000 1".split()
    assert lines[3].split() == (
        "2026-12-05 acme gpt-4o-mini queue 1 1,200 34 1,234 0 0.000200 0".split()
    )
    assert (
        lines[4].split()
        == "2026-12-05 trial gpt-4o-mini queue 1 900 100 1,000 0 0.001235 0".split()
    )
    assert len({len(line) for line in lines[1:6]}) == 1  # the numbers are right-aligned
    assert lines[5].split() == ["total", "3", "2,100", "134", "2,234", "1", "0.001435", "1"]
    assert lines[6] == ""
    assert lines[7] == "held now: trial: 1 unanswered request, 541 tokens, 0.000330 USD"
    assert lines[8] == "budgets (2026-12; spent counts answers and held requests)"
    assert lines[9].split() == "tenant budget period unit limit spent remaining resets at".split()
    assert [line.split() for line in lines[10:]] == [
        "trial tokens_per_day 2026-12-05 tokens 3,000 1,541 1,459 2026-12-06 00:00 UTC".split(),
        "trial tokens_per_month 2026-12 tokens 50,000 1,541 48,459 2027-01-01 00:00 UTC".split(),
        "trial cost_per_month 2026-12 USD 20.000000 0.001565 19.998435 2027-01-01 00:00 UTC"
        .split(),
    ]  # fmt: skip
    assert err.splitlines() == [
        "read 2 of 2 usage documents of the months 2026-12 to 2026-12",
        "not a usage ledger, skipped: stray.json: not named <tenant>/<YYYY-MM>.json",
    ]


def test_the_json_gives_rows_totals_held_budgets_and_documents_with_exact_amounts(
    stored: InMemoryDocuments, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(ledger_of(stored), capsys, "--tenant", "trial", "--json")

    assert code == 0
    document = json.loads(out)
    assert {key: document[key] for key in ("source", "since", "until", "tenant", "currency")} == {
        "source": "ledger",
        "since": "2026-12-05",
        "until": "2026-12-05",
        "tenant": "trial",
        "currency": "USD",
    }
    assert document["rows"] == [
        {
            "day": "2026-12-05",
            "tenant": "trial",
            "model": "gpt-4o-mini",
            "mode": "queue",
            "requests": 1,
            "input_tokens": 900,
            "output_tokens": 100,
            "total_tokens": 1000,
            "requests_without_usage": 0,
            "cost": "0.0012345678",
            "uncosted": 0,
        }
    ]
    assert document["totals"]["cost"] == "0.0012345678"
    assert document["held"] == [
        {"tenant": "trial", "requests": 1, "tokens": 541, "cost": "0.00033"}
    ]
    assert document["budgets_month"] == "2026-12"
    assert document["budgets"][0] == {
        "tenant": "trial",
        "budget": "tokens_per_day",
        "period": "2026-12-05",
        "limit": 3000,
        "spent": 1541,
        "remaining": 1459,
        "resets_at": "2026-12-06T00:00:00+00:00",
    }
    assert document["budgets"][2]["spent"] == "0.0015645678"
    assert document["documents"] == {"listed": 1, "read": 1, "vanished": [], "not_ledgers": []}


def test_without_prices_the_heading_names_no_currency(
    stored: InMemoryDocuments, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(ledger_of(stored, currency=None), capsys, "--tenant", "acme")

    assert code == 0
    assert out.splitlines()[1].split()[-2:] == ["cost", "uncosted"]
    assert "budgets (2026-12): none of the tenants read has a budget" in out


def test_a_range_before_the_current_month_says_why_no_budget_is_told(
    stored: InMemoryDocuments, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(ledger_of(stored), capsys, "--day", "2026-11-30")

    assert code == 0
    assert "(no answer was counted in this range)" in out
    assert out.splitlines()[-1] == (
        "budgets: told for the current month only; the range (2026-11 to 2026-11) does not reach it"
    )


def test_an_outage_exits_3_and_prints_no_partial_report(capsys: pytest.CaptureFixture[str]) -> None:
    documents = Failing()
    for tenant in ("acme", "globex"):
        counted(documents, tenant, answer(TODAY, usage(1, 1), "0.01"))
    documents.down = True

    code, out, err = run(ledger_of(documents), capsys)

    assert (code, out) == (3, "")
    assert err.startswith("unavailable: reading usage/globex/2026-12.json")


def test_a_long_read_tells_its_progress_on_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    documents = InMemoryDocuments()
    for n in range(101):
        counted(documents, f"t{n:03d}", answer(TODAY, usage(1, 1), "0.01"))

    code, out, err = run(ledger_of(documents), capsys, "--json")

    assert code == 0
    assert json.loads(out)["totals"]["requests"] == 101
    assert [line for line in err.splitlines() if line.startswith("usage: read")] == [
        "usage: read 100 of 101 usage documents",
        "usage: read 101 of 101 usage documents",
    ]


def test_the_app_wiring_reads_its_ledger_with_its_tenant_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given the app's services, the command reads their usage container with their
    tenant catalog's budgets: what the doors reserve and the processors count."""
    budgets = {"tenants": {"trial": {"budget": {"tokens_per_day": 3000}}}}
    wired = wire(ManualClock(NOW), settings=tenant_catalog(tmp_path, budgets))
    books = wired.services.spending
    books.reserve("trial", "held", Spend(541, Decimal(0)), NOW + timedelta(hours=1))
    books.record("trial", NOW, answer(TODAY, usage(90, 10), None, model="local-analyzer"))
    books.flush()

    code = main(["usage", "--json"], lambda: wired.services)

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["currency"] is None  # the shorthand catalog has no prices
    assert [(row["tenant"], row["total_tokens"], row["uncosted"]) for row in document["rows"]] == [
        ("trial", 100, 1)
    ]
    assert [(b["budget"], b["spent"]) for b in document["budgets"]] == [("tokens_per_day", 641)]


def test_the_month_document_of_another_reservation_is_held_too() -> None:
    """A request admitted on the last day of a month holds in that month's document."""
    documents = InMemoryDocuments()
    ledger = MonthLedger(tenant="trial", month="2026-11")
    ledger.reserve(
        "late", Reservation(day=date(2026, 11, 30), tokens=10, until=NOW + timedelta(days=1))
    )
    documents.put(CONTAINER, "trial/2026-11.json", ledger.model_dump(mode="json", by_alias=True))

    report = reader(documents).report(DayRange(date(2026, 11, 30), TODAY))

    assert report.held == [Held("trial", 1, 10, Decimal(0))]
