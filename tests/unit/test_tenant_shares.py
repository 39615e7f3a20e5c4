"""Tenants' fair shares of a deployment (``shared.inference.tenant_shares``, the gate's
order, ``shared.processing.fair_turns``): whose call goes next, whose message goes back to
the queue for its turn, and that nothing is read or written for a message sent back."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.in_memory import RecordingSettler
from shared.contracts import JobStatus, Priority
from shared.inference.capacity import Booking, BudgetedModel, DeploymentGate
from shared.inference.catalog import Capacity
from shared.inference.tenant_shares import SERVED_RATE_SECONDS, TenantShares
from shared.lanes import Lane
from shared.messaging import PACED
from shared.processing.inbound import FAIR_SHARE_WAITS
from tests.support.wiring import Wired, api_request, tenant_catalog, wire

WEIGHTS = {"support": 3.0, "marketing": 1.0}


def weights(tenant: str) -> float:
    return WEIGHTS.get(tenant, 1.0)


class MovableClock:
    """The app's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += timedelta(seconds=seconds)


# --- whose call goes next ------------------------------------------------------------------


def test_the_tenant_served_least_for_its_weight_goes_next() -> None:
    shares = TenantShares(weights)
    shares.activate("support", set())
    shares.activate("marketing", {"support"})
    order = []
    for _ in range(8):
        tenant = shares.next_tenant({"support", "marketing"})
        shares.admitted(tenant, 1_000, now=0.0)
        order.append(tenant)
    assert order.count("support") == 6, order  # 3:1 of the tokens
    assert order.count("marketing") == 2, order


def test_a_tenant_that_starts_waiting_gets_no_credit_for_its_silence() -> None:
    shares = TenantShares()
    shares.activate("marketing", set())
    for _ in range(50):
        shares.admitted("marketing", 1_000, now=0.0)
    shares.activate("support", {"marketing"})
    # It takes the smallest virtual time of those waiting: no debt, no credit.
    assert shares.virtual_time("support") == shares.virtual_time("marketing")
    shares.admitted("support", 1_000, now=0.0)
    shares.forget_idle({"marketing"})
    assert shares.next_tenant({"support", "marketing"}) == "marketing"


def test_an_idle_tenant_is_forgotten_once_the_others_pass_it() -> None:
    shares = TenantShares()
    shares.activate("a", set())
    shares.admitted("a", 100, now=0.0)
    shares.activate("b", {"a"})
    shares.admitted("b", 1_000, now=0.0)
    shares.forget_idle({"b"})  # a waits no more, and b is ahead of it
    assert shares.virtual_time("a") == pytest.approx(1_100)  # as new: at the floor


# --- whose message waits in the broker -----------------------------------------------------


def test_a_tenant_holding_its_horizon_sends_its_next_message_back() -> None:
    shares = TenantShares()
    rates, horizon = (100.0, 500.0), 10.0  # here 100 tokens a second: 1,000 may be held
    shares.admitted("support", 50, now=0.0)  # another tenant was served here just now
    assert shares.book("marketing", 600, rates, horizon, now=0.0) == 0
    assert shares.book("marketing", 400, rates, horizon, now=0.0) == 0
    back = shares.book("marketing", 500, rates, horizon, now=0.0)
    # What it holds clears in 10 s; the message comes back with half the horizon to go.
    assert back == pytest.approx(1_000 / 100 - horizon / 2)
    # The next one comes back behind it, spaced at the deployment's rate: a backlog returns
    # a little at a time, and never later than the deployment could serve it.
    assert shares.book("marketing", 500, rates, horizon, now=0.0) == pytest.approx(back + 1.0)
    shares.release("marketing", 1_000)
    assert shares.book("marketing", 500, rates, horizon, now=1.0) == 0


def test_a_tenant_alone_is_never_sent_back() -> None:
    shares = TenantShares()
    for _ in range(10):
        assert shares.book("marketing", 1_000, (100.0, 100.0), 5.0, now=0.0) == 0
    shares.admitted("support", 50, now=0.0)
    assert shares.book("marketing", 1_000, (100.0, 100.0), 5.0, now=1.0) > 0
    # Once the other tenant has been gone a while, the backlog goes on unhindered.
    assert shares.book("marketing", 1_000, (100.0, 100.0), 5.0, now=20.0) == 0


def test_two_bursts_intake_paces_here_are_not_sent_back_but_beside_a_trickle_one_is() -> None:
    shares = TenantShares(weights)
    rates, horizon = (100.0, 100.0), 5.0
    for _ in range(20):  # both tenants' bursts, scheduled by weight
        shares.release_delay("support", 500, rates[1], horizon, now=0.0)
        shares.release_delay("marketing", 500, rates[1], horizon, now=0.0)
    shares.admitted("marketing", 50, now=0.0)
    for _ in range(10):  # a batch of support's brings more than its horizon: kept
        assert shares.book("support", 500, rates, horizon, now=0.0) == 0
    # A tenant intake does not pace here (a trickle, a producer) still takes its turn.
    shares.admitted("trial", 50, now=0.0)
    assert shares.book("support", 500, rates, horizon, now=0.0) > 0


def test_where_no_intake_runs_messages_marked_paced_say_the_bursts_are_paced() -> None:
    shares = TenantShares(weights)  # a processing instance: its intake paced nothing
    rates, horizon = (100.0, 100.0), 5.0
    shares.book("marketing", 500, rates, horizon, now=0.0, paced=True)
    shares.admitted("marketing", 50, now=0.0)
    for _ in range(10):
        assert shares.book("support", 500, rates, horizon, now=0.0, paced=True) == 0
    # Unmarked, the same batch is beside a tenant that is paced: its excess goes back.
    unpaced = TenantShares(weights)
    unpaced.book("marketing", 500, rates, horizon, now=0.0, paced=True)
    unpaced.admitted("marketing", 50, now=0.0)
    backs = [unpaced.book("support", 500, rates, horizon, now=0.0) for _ in range(10)]
    assert any(back > 0 for back in backs)


def test_a_message_larger_than_the_horizon_goes_when_its_tenant_holds_nothing() -> None:
    shares = TenantShares()
    assert shares.book("a", 50_000, (100.0, 100.0), 10.0, now=0.0) == 0


def test_a_tenant_rate_is_its_weight_or_what_the_others_leave() -> None:
    shares = TenantShares(weights)
    shares.book("support", 100, (1_000.0, 1_000.0), 10.0, now=0.0)
    shares.book("marketing", 100, (1_000.0, 1_000.0), 10.0, now=0.0)
    # Neither served anything lately: each has what the other leaves, all of it.
    assert shares.tenant_rate("marketing", 1_000.0, now=0.0) == pytest.approx(1_000.0)
    # support takes 600 tokens a second: marketing has its weight's quarter or the rest.
    shares.admitted("support", int(600 * SERVED_RATE_SECONDS), now=0.0)
    assert shares.tenant_rate("marketing", 1_000.0, now=0.0) == pytest.approx(400.0)
    shares.admitted("support", int(600 * SERVED_RATE_SECONDS), now=0.0)
    assert shares.tenant_rate("marketing", 1_000.0, now=0.0) == pytest.approx(250.0)


def test_a_tenant_with_messages_sent_back_keeps_its_weights_part_from_the_others() -> None:
    shares = TenantShares(weights)
    rates = (1_000.0, 1_000.0)
    shares.book("support", 100, rates, 10.0, now=0.0)
    shares.book("marketing", 100, rates, 10.0, now=0.0)
    shares.admitted("support", int(500 * SERVED_RATE_SECONDS), now=0.0)
    # support took half and asks for no more: marketing may take the other half.
    assert shares.tenant_rate("marketing", 1_000.0, now=0.0) == pytest.approx(500.0)
    shares.book("support", 9_000, rates, 10.0, now=0.0)
    assert shares.book("support", 1_000, rates, 10.0, now=0.0) > 0  # support wants more
    # Now marketing gets its weight's quarter, not the half support left it lately.
    assert shares.tenant_rate("marketing", 1_000.0, now=0.0) == pytest.approx(250.0)


def test_intake_releases_a_tenants_burst_at_the_deployments_rate() -> None:
    shares = TenantShares()
    rate, horizon = 100.0, 10.0
    delays = [shares.release_delay("marketing", 500, rate, horizon, now=0.0) for _ in range(6)]
    # What starts within 10 s reaches the queue at once; the rest follows, 5 s a request.
    assert delays == pytest.approx([0.0, 0.0, 0.0, 5.0, 10.0, 15.0])
    # Another tenant's request goes at once, whatever the first one's burst.
    assert shares.release_delay("support", 500, rate, horizon, now=0.0) == 0.0
    # Later, what has gone at the rate no longer counts.
    assert shares.release_delay("marketing", 500, rate, horizon, now=30.0) == pytest.approx(0.0)


# --- the gate's order ----------------------------------------------------------------------


def admitted_order(budget: DeploymentGate, calls: list[tuple[str, Priority]]) -> list[str]:
    """The tenants in the order the gate admitted ``calls`` (1,000 tokens each), all
    waiting before the first goes."""
    budget.throttled(retry_after=1.0)  # paused: every call waits until all are in line
    order: list[str] = []
    lock = threading.Lock()

    def call(tenant: str, priority: Priority) -> None:
        budget.acquire(1_000, priority, 30.0, tenant=tenant)
        with lock:
            order.append(tenant)

    threads = [threading.Thread(target=call, args=called) for called in calls]
    for thread in threads:
        thread.start()
        time.sleep(0.01)  # in this order
    for thread in threads:
        thread.join(10)
    return order


def test_the_gate_serves_waiting_tenants_by_weight_not_by_arrival() -> None:
    budget = DeploymentGate("gpt", Capacity(600_000), weight_of=weights)  # 10,000 tokens/s
    calls = [("marketing", Priority.NORMAL)] * 8 + [("support", Priority.NORMAL)] * 8
    order = admitted_order(budget, calls)
    assert order[:8].count("support") == 6, order  # 3:1, though marketing came first
    assert len(order) == 16


def test_priority_still_goes_first_among_tenants() -> None:
    budget = DeploymentGate("gpt", Capacity(600_000))
    calls = [("marketing", Priority.NORMAL)] * 3 + [("support", Priority.LOW)]
    calls += [("marketing", Priority.HIGH)]
    order = admitted_order(budget, calls)
    assert order[0] == "marketing", order  # its high-priority call
    assert order[-1] == "support", order


# --- messages sent back for their turn -----------------------------------------------------


@pytest.fixture
def fair(tmp_path: Path) -> Wired:
    catalog = tmp_path / "models.json"
    capacity = {"tokens_per_minute": 60_000}  # 1,000 tokens a second
    catalog.write_text(
        json.dumps({"models": {"local-analyzer": {"provider": "local", "capacity": capacity}}})
    )
    settings = tenant_catalog(tmp_path, {"tenants": {"support": {"weight": 3}}})
    return wire(settings=settings, ModelCatalog=str(catalog))


def submit(wired: Wired, tenant: str, **fields: Any) -> str:
    document = {"model": "local-analyzer", "input": {"text": "Invoice 12: 300 EUR."}, **fields}
    request = api_request("POST", "/v1/requests", body=document, tenant=tenant)
    response = wired.call(wired.http.requests.submit, request)
    assert response.status == 202, response.body
    created: dict[str, Any] = json.loads(response.body)
    return str(created["id"])


def gate_of(wired: Wired) -> DeploymentGate:
    client = wired.services.models["local-analyzer"].client
    assert isinstance(client, BudgetedModel)
    return client.gate


def storage_calls(wired: Wired, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call to the app's storage from now on, by name (documents and blobs)."""
    calls: list[str] = []
    for port, names in (
        (wired.documents, ("load", "create", "replace", "put", "delete")),
        (wired.blobs, ("info", "read", "read_chunks", "write", "upload")),
    ):
        for name in names:
            original = getattr(port, name)

            def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
                calls.append(_name)
                return _original(*args)

            monkeypatch.setattr(port, name, counted)
    return calls


def test_a_message_past_its_tenants_share_goes_back_unread_and_comes_back(
    fair: Wired, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = gate_of(fair).book("marketing", 50_000, 10.0)  # a message of marketing holds 50 s
    assert isinstance(held, Booking)
    assert isinstance(gate_of(fair).book("support", 100, 10.0), Booking)  # and one of support
    marketing = submit(fair, "marketing")
    support = submit(fair, "support")
    jobs = fair.services.http.requests.jobs
    processor = fair.services.lanes[Lane.STANDARD].processor
    settler = RecordingSettler()
    first, second = (fair.deliver(message, n) for n, message in enumerate(fair.queue.sent, 1))
    calls = storage_calls(fair, monkeypatch)

    assert processor.process(first, settler) == "fair-share-wait"
    assert calls == [], "nothing is read or written for a message sent back"
    assert settler.actions == [("complete", first.message_id, None, None)]
    copy = fair.queue.sent[-1]
    assert copy.application_properties[FAIR_SHARE_WAITS] == 1
    assert copy.application_properties["retry_count"] == 0
    assert copy.message_id == f"{first.message_id}:retry:0:outage:0:turn:1"
    assert copy.scheduled_enqueue_time is not None
    job = jobs.get("marketing", marketing)
    assert job.status is JobStatus.ACCEPTED
    assert job.attempts == 0

    # Another tenant's message, behind it in the queue, runs at once.
    assert processor.process(second, settler) == "completed"
    assert jobs.get("support", support).status is JobStatus.COMPLETED

    # Once marketing's held work ends, the copy runs, and its booking is released after it.
    gate_of(fair).release(held)
    assert processor.process(fair.deliver(copy, 3), settler) == "completed"
    assert jobs.get("marketing", marketing).status is JobStatus.COMPLETED
    assert gate_of(fair).book("marketing", 1_000, 10.0) == Booking("marketing", 1_000)


def test_the_ordered_lane_and_high_priority_never_go_back(fair: Wired) -> None:
    gate_of(fair).book("marketing", 50_000, 10.0)
    gate_of(fair).book("support", 100, 10.0)  # contended: a standard message would go back
    submit(fair, "marketing")
    standard = fair.queue.sent[-1]
    settler = RecordingSettler()
    processor = fair.services.lanes[Lane.STANDARD].processor
    assert processor.process(fair.deliver(standard), settler) == "fair-share-wait"
    submit(fair, "marketing", priority="high")
    submit(fair, "marketing", document_id="contract-7")
    by_lane = {Lane.PRIORITY: fair.queue.sent[-2], Lane.ORDERED: fair.queue.sent[-1]}
    for lane, message in by_lane.items():
        processor = fair.services.lanes[lane].processor
        assert processor.process(fair.deliver(message), settler) == "completed", lane


def test_intake_paces_a_tenants_burst_into_the_standard_lane_only(fair: Wired) -> None:
    burst = 60  # about 21,000 tokens: 21 s of the deployment
    for _ in range(burst):
        submit(fair, "marketing", input={"text": "Invoice 12: 300 EUR. " * 47})
    submit(fair, "support")
    submit(fair, "marketing", priority="high")
    submit(fair, "marketing", document_id="contract-7")
    sent = fair.queue.sent
    marketing = [message.scheduled_enqueue_time for message in sent[:burst]]
    assert marketing[0] is None, "the first requests reach the queue at once"
    later = [due for due in marketing if due is not None]
    assert len(later) >= 20, "the rest of the burst is scheduled"
    assert later == sorted(later), "in the order it arrived, spaced at the deployment's rate"
    assert [message.scheduled_enqueue_time for message in sent[burst:]] == [None, None, None]


def test_two_bursts_reach_the_queue_by_weight_and_the_rest_comes_sooner_once_one_is_out(
    tmp_path: Path,
) -> None:
    clock = MovableClock()
    catalog = tmp_path / "models.json"
    capacity = {"tokens_per_minute": 60_000}  # 1,000 tokens a second
    catalog.write_text(
        json.dumps({"models": {"local-analyzer": {"provider": "local", "capacity": capacity}}})
    )
    settings = tenant_catalog(tmp_path, {"tenants": {"support": {"weight": 3}}})
    wired = wire(clock, settings=settings, ModelCatalog=str(catalog))
    burst = 40  # each about 350 tokens: 28 s of the deployment for both bursts
    for _ in range(burst):
        for tenant in ("support", "marketing"):
            submit(wired, tenant, input={"text": "Invoice 12: 300 EUR. " * 47})
    due: dict[str, list[float]] = {"support": [], "marketing": []}
    for message in wired.queue.sent:
        at = message.scheduled_enqueue_time
        seconds = 0.0 if at is None else (at - clock()).total_seconds()
        due[str(message.application_properties["tenant"])].append(seconds)
        assert message.application_properties.get(PACED) is (True if at else None)
    last_support = max(due["support"])
    scheduled = {tenant: sum(0 < d <= last_support for d in dues) for tenant, dues in due.items()}
    share = scheduled["support"] / (scheduled["support"] + scheduled["marketing"])
    assert share == pytest.approx(0.75, abs=0.05), scheduled
    assert max(due["marketing"]) > 2 * last_support, "marketing's rest, at its quarter"

    clock.advance(last_support + 1)  # support's burst is all in the queue
    deadline = time.monotonic() + 10
    while not wired.queue.cancelled and time.monotonic() < deadline:
        time.sleep(0.1)  # the app looks once a second
    moved = [m for m in wired.queue.live() if ":release:" in m.message_id]
    assert moved, "marketing's scheduled rest is sent sooner"
    assert len(wired.queue.cancelled) == len(moved), "and each earlier copy called back"
    latest = max(m.scheduled_enqueue_time or clock() for m in moved)
    assert (latest - clock()).total_seconds() < max(due["marketing"]) - last_support - 1
    ids = {m.message_id.split(":release:")[0] for m in wired.queue.live()}
    assert len(ids) == len(wired.queue.live()) == 2 * burst, "one message per request"


def test_a_message_sent_back_joins_the_end_of_its_tenants_line() -> None:
    shares = TenantShares()
    rates, horizon = (100.0, 100.0), 10.0
    for _ in range(6):  # intake released 30 s of marketing's work, 20 s of it scheduled
        shares.release_delay("marketing", 500, 100.0, horizon, now=0.0)
    shares.admitted("support", 50, now=0.0)
    assert shares.book("marketing", 1_000, rates, horizon, now=0.0) == 0
    back = shares.book("marketing", 500, rates, horizon, now=0.0)
    assert back == pytest.approx(30.0 - horizon / 2), "behind what intake released"


def test_a_tenant_beside_another_backlog_only_is_not_sent_back() -> None:
    shares = TenantShares(weights)
    rates, horizon = (100.0, 100.0), 5.0
    shares.admitted("support", 50, now=0.0)
    shares.book("marketing", 500, rates, horizon, now=0.0)
    assert shares.book("marketing", 500, rates, horizon, now=0.0) > 0  # past its share
    # support, beside marketing whose messages are being sent back, is not sent back.
    shares.book("support", 500, rates, horizon, now=0.0)
    assert shares.book("support", 5_000, rates, horizon, now=0.0) == 0


def gold_and_bronze() -> TenantShares:
    return TenantShares(weight_of=lambda tenant: 3.0 if tenant == "gold" else 1.0)


def test_a_tenant_holding_nothing_yields_to_a_tenant_holding_work_that_stands_behind() -> None:
    shares = gold_and_bronze()
    rates, horizon = (100.0, 100.0), 5.0
    shares.admitted("gold", 300, now=0.0)  # 100 a weight
    shares.admitted("bronze", 900, now=0.0)  # 900 a weight: far ahead of gold
    assert shares.book("gold", 150, rates, horizon, now=0.0) == 0  # gold holds work here

    back = shares.book("bronze", 400, rates, horizon, now=0.0)
    shares.release("gold", 150)
    alone = shares.book("bronze", 400, rates, horizon, now=0.0)

    assert back > 0, "bronze stands ahead for its weight while gold holds work: gold's turn"
    assert alone == 0, "once gold holds nothing here, a tenant holding nothing books"


def test_a_tenant_read_less_often_than_its_weights_part_keeps_its_message() -> None:
    shares = gold_and_bronze()
    rates, horizon = (100.0, 100.0), 5.0
    shares.admitted("gold", 900, now=0.0)  # 300 a weight
    shares.admitted("bronze", 100, now=0.0)  # 100 a weight: behind gold
    for _ in range(10):  # bronze's messages come here often, and none is sent back
        assert shares.book("bronze", 100, rates, horizon, now=0.0) == 0
        shares.release("bronze", 100)
    assert shares.book("bronze", 100, rates, horizon, now=0.0) == 0  # bronze holds work

    # bronze holds work and stands behind gold, but gold's messages come here less often
    # than its weight's part: the gate serves bronze's call first, and gold's message,
    # sent back, would go behind everything else in the queue.
    assert shares.book("gold", 400, rates, horizon, now=0.0) == 0


def test_two_producers_bursts_read_in_equal_parts_are_served_by_weight() -> None:
    """Batches of eight messages, gold's and bronze's in turn (two bursts sent straight to
    the queue, as the processors read them): the messages booked are served in the gate's
    order, the batch ends when they are, and the ones sent back are left to the queue."""
    shares = gold_and_bronze()
    rates, horizon, tokens = (300.0, 600.0), 5.0, 300
    served = {"gold": 0, "bronze": 0}
    now = 0.0
    for _ in range(60):
        booked = [
            tenant
            for tenant in ["gold", "bronze"] * 4
            if shares.book(tenant, tokens, rates, horizon, now=now) == 0
        ]
        while booked:
            tenant = shares.next_tenant(set(booked))
            booked.remove(tenant)
            shares.admitted(tenant, tokens, now)
            now += tokens / rates[0]
            shares.release(tenant, tokens)
            served[tenant] += tokens

    share = served["gold"] / sum(served.values())
    assert 0.7 <= share <= 0.8, f"gold's share {share:.2f}, for a weight of 3 against 1"
