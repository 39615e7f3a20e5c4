"""Budgets at the HTTP door and the usage ledger, wired over the in-memory ports: a
request whose estimate would pass its tenant's budget is a 429 ``budget-exceeded`` with
``Retry-After`` to the period's reset and nothing stored; an answer kept is counted in
its tenant's month once, replacing its reservation; several instances over one storage
never admit more than the budget together."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shared.accounting.ledger import Spend
from shared.accounting.spending import RACE_PATIENCE_SECONDS, RACE_STEP_CEILING, TenantSpending
from shared.accounting.tenants import Budget, TenantCatalog, TenantPolicy
from shared.adapters.in_memory import (
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.contracts import Door, InlineText, JobStatus, RequestMessage
from shared.documents import Document, Tags
from shared.errors import ConcurrencyConflict
from shared.events.announcements import Announcer
from shared.events.incoming import event_from_cloudevent
from shared.jobs import DocumentJobStore, JobRepository
from shared.lanes import Lane
from shared.messaging import request_envelope
from shared.processing.endings import Ending, JobEndings
from shared.tracing import continue_or_start
from tests.fakes import ManualClock
from tests.support.events import requested_event
from tests.support.jobs import accepted_job
from tests.support.wiring import Wired, api_request, tenant_catalog, wire

NOW = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
TEXT = "Please summarise this report." * 4  # 116 characters: 29 tokens, 512 for the answer
# The local analyzer's instructions and the text at four characters a token, and the
# default answer allowance: what one request is held at (checked below).
TENANTS = {"tenants": {"trial": {"budget": {"tokens_per_day": 3000}}}}
# A Global Batch deployment for the local analyzer: work in ``mode: batch`` has its lane.
BATCH = {"GlobalBatch__deployments": "local-analyzer=gpt-4o-mini-batch",
         "GlobalBatch__endpoint": "http://127.0.0.1:9"}  # fmt: skip


@pytest.fixture
def wired(tmp_path: Path) -> Wired:
    return wire(ManualClock(NOW), settings=tenant_catalog(tmp_path, TENANTS))


def submit(wired: Wired, tenant: str) -> tuple[int, dict[str, Any]]:
    body = {"model": "local-analyzer", "input": {"text": TEXT}}
    request = api_request("POST", "/v1/requests", body=body, tenant=tenant)
    response = wired.call(wired.http.requests.submit, request)
    return response.status, {**json.loads(response.body), **response.headers}


def month(wired: Wired, tenant: str) -> Any:
    loaded = wired.documents.load(wired.settings.containers.usage, f"{tenant}/2026-12.json")
    return loaded[0] if loaded is not None else None


def process_queue(wired: Wired) -> None:
    for sequence, message in enumerate(list(wired.queue.sent), start=1):
        wired.services.lanes[Lane.STANDARD].processor.process(
            wired.deliver(message, sequence), RecordingSettler()
        )


def test_requests_are_held_until_the_next_would_pass_the_budget_then_429(wired: Wired) -> None:
    answers = [submit(wired, "trial") for _ in range(6)]
    statuses = [status for status, _ in answers]
    held = month(wired, "trial")["reserved"]
    per_request = next(iter(held.values()))["tokens"]

    assert statuses == [202] * (3000 // per_request) + [429] * (6 - 3000 // per_request)
    assert 429 in statuses, "the budget was not reached: raise the requests' count"
    _, problem = answers[-1]
    assert problem["type"] == "urn:inferbus:problem:budget-exceeded"
    assert problem["title"] == "Budget exceeded"
    assert problem["budget"] == {
        "name": "tokens_per_day",
        "period": "2026-12-05",
        "limit": 3000,
        "spent": per_request * len(held),
        "resets_at": "2026-12-06T00:00:00+00:00",
    }
    assert problem["Retry-After"] == str(6 * 3600), "until the UTC day resets"
    assert "tenant 'trial': the budget tokens_per_day for 2026-12-05 is spent" in problem["detail"]


def test_nothing_is_stored_or_sent_for_a_request_over_budget(wired: Wired) -> None:
    while submit(wired, "trial")[0] == 202:
        pass
    sent, stored = len(wired.queue.sent), dict(wired.blobs.stored)

    status, _ = submit(wired, "trial")

    assert status == 429
    assert len(wired.queue.sent) == sent
    assert wired.blobs.stored == stored


def test_a_tenant_without_a_budget_writes_nothing_at_the_door(wired: Wired) -> None:
    assert submit(wired, "contoso")[0] == 202
    assert month(wired, "contoso") is None


def test_answers_replace_reservations_and_every_tenant_is_counted_once(wired: Wired) -> None:
    submit(wired, "trial")
    submit(wired, "contoso")
    process_queue(wired)
    process_queue(wired)  # a redelivery of the same messages counts nothing more

    written = wired.services.spending.flush()

    assert written == 2
    trial, contoso = month(wired, "trial"), month(wired, "contoso")
    assert trial["reserved"] == {}
    for document in (trial, contoso):
        row = document["days"]["2026-12-05"]["local-analyzer|queue"]
        assert row["requests"] == 1
        assert row["input_tokens"] + row["output_tokens"] > 0


def test_an_answer_frees_the_budget_its_estimate_held(wired: Wired) -> None:
    while submit(wired, "trial")[0] == 202:
        pass
    process_queue(wired)
    wired.services.spending.flush()

    assert submit(wired, "trial")[0] == 202, "the answers used less than their estimates"


def test_the_usage_endpoint_shows_the_tenants_answers_and_what_is_left(wired: Wired) -> None:
    submit(wired, "trial")
    process_queue(wired)
    wired.services.spending.flush()
    submit(wired, "trial")  # held, not answered

    response = wired.call(wired.http.usage.get, api_request("GET", "/v1/usage", tenant="trial"))
    view = json.loads(response.body)

    assert response.status == 200
    assert (view["tenant"], view["month"]) == ("trial", "2026-12")
    assert view["today"]["requests"] == view["total"]["requests"] == 1
    assert view["days"][0]["model"] == "local-analyzer"
    assert view["held"]["requests"] == 1
    answered = view["total"]["input_tokens"] + view["total"]["output_tokens"]
    [budget] = view["budgets"]
    assert budget["name"] == "tokens_per_day"
    assert budget["spent"] == answered + view["held"]["tokens"]
    assert budget["remaining"] == 3000 - budget["spent"]


def test_the_usage_endpoint_refuses_a_month_it_cannot_read(wired: Wired) -> None:
    request = api_request("GET", "/v1/usage", tenant="trial", params={"month": "2026-13"})
    response = wired.call(wired.http.usage.get, request)

    assert response.status == 400
    assert (
        "month '2026-13' is not a UTC month written YYYY-MM" in json.loads(response.body)["detail"]
    )


def test_an_event_over_budget_is_recorded_rejected_and_announced(wired: Wired) -> None:
    while submit(wired, "trial")[0] == 202:
        pass
    sent = len(wired.queue.sent)

    outcome = wired.services.event_intake.accept_event(
        event_from_cloudevent(requested_event("trial", "ev-1", model="local-analyzer"))
    )

    assert outcome.status == "accepted", "the event is taken: its request is recorded"
    job = next(job for job in all_jobs(wired, "trial") if job["status"] == "rejected")
    assert job["error"]["code"] == "budget_exceeded"
    assert "tokens_per_day for 2026-12-05 is spent" in job["error"]["message"]
    assert len(wired.queue.sent) == sent, "nothing is run"
    assert wired.failures_published == ["budget_exceeded"]


@pytest.mark.parametrize(
    ("door", "mode"),
    [
        (Door.EVENTGRID, None),
        (Door.WEBHOOK, None),
        (Door.EVENTGRID_PULL, None),
        (Door.EVENTGRID, "batch"),
    ],
)
def test_each_event_door_records_work_over_budget_rejected(
    tmp_path: Path, door: Door, mode: str | None
) -> None:
    wired = wire(ManualClock(NOW), settings={**tenant_catalog(tmp_path, TENANTS), **BATCH})
    while submit(wired, "trial")[0] == 202:
        pass
    sent = len(wired.queue.sent)
    data = {"model": "local-analyzer", **({"mode": mode} if mode else {})}

    outcome = wired.services.event_intake.accept_event(
        event_from_cloudevent(requested_event("trial", "ev-1", **data)), source=door
    )

    job = wired.services.jobs.get("trial", str(outcome.request_id))
    assert (outcome.status, job.status, job.source) == ("accepted", JobStatus.REJECTED, door)
    assert job.mode == (mode or "queue"), "the request is recorded as it was asked"
    assert job.error is not None
    assert job.error.code == "budget_exceeded"
    assert len(wired.queue.sent) == sent, "nothing is run, on no lane"
    assert wired.failures_published == ["budget_exceeded"]


def test_a_document_dropped_over_budget_is_recorded_rejected(wired: Wired) -> None:
    while submit(wired, "trial")[0] == 202:
        pass
    sent = len(wired.queue.sent)
    wired.blobs.upload("incoming", "trial/report.txt", TEXT.encode(), "text/plain", {})

    accepted = wired.services.event_intake.accept_blob("incoming", "trial/report.txt")

    assert (accepted.job.status, accepted.job.source) == (JobStatus.REJECTED, Door.BLOB)
    assert accepted.job.error is not None
    assert accepted.job.error.code == "budget_exceeded"
    assert "tokens_per_day for 2026-12-05 is spent" in accepted.job.error.message
    assert len(wired.queue.sent) == sent
    assert wired.blobs.read("incoming", "trial/report.txt") is not None, "the document stays"
    assert wired.failures_published == ["budget_exceeded"]


def test_a_producers_message_over_budget_is_recorded_rejected_and_completed(
    tmp_path: Path,
) -> None:
    wired = wire(
        ManualClock(NOW), settings={**tenant_catalog(tmp_path, TENANTS), "ProducerTenants": "trial"}
    )
    while submit(wired, "trial")[0] == 202:
        pass
    request = RequestMessage(
        request_id="producer-1", tenant_id="trial", model="local-analyzer",
        input=InlineText(text=TEXT),
    )  # fmt: skip
    message = request_envelope(
        request, correlation_id="c-1", trace=continue_or_start(None), now=NOW
    )
    settler = RecordingSettler()

    outcome = wired.services.lanes[Lane.STANDARD].processor.process(wired.deliver(message), settler)

    assert outcome == "rejected"
    assert settler.actions == [("complete", "producer-1", None, None)]
    job = wired.services.jobs.get("trial", "producer-1")
    assert job.status is JobStatus.REJECTED
    assert job.error is not None
    assert job.error.code == "budget_exceeded"
    assert wired.failures_published == ["budget_exceeded"]


def all_jobs(wired: Wired, tenant: str) -> list[Any]:
    container = wired.settings.containers.jobs
    names = wired.documents.list_names(container, f"{tenant}/")
    return [loaded[0] for name in names if (loaded := wired.documents.load(container, name))]


def test_a_cancelled_request_gives_back_what_it_held(wired: Wired) -> None:
    status, accepted = submit(wired, "trial")
    assert status == 202
    assert len(month(wired, "trial")["reserved"]) == 1
    request_id = accepted["id"]

    cancel = api_request(
        "DELETE", f"/v1/requests/{request_id}", tenant="trial", route_params={"id": request_id}
    )
    assert wired.call(wired.http.requests.cancel, cancel).status == 200
    wired.services.spending.flush()

    assert month(wired, "trial")["reserved"] == {}


@pytest.mark.parametrize("status", [JobStatus.FAILED, JobStatus.EXPIRED])
def test_a_job_ended_without_an_answer_gives_back_what_it_held(status: JobStatus) -> None:
    documents = InMemoryDocuments()
    catalog = TenantCatalog(tenants={"trial": TenantPolicy(budget=Budget(tokens_per_day=10_000))})
    spending = TenantSpending(documents, "usage", catalog, ManualClock(NOW))
    jobs = JobRepository(DocumentJobStore(documents, "jobs"), ManualClock(NOW))
    endings = JobEndings(
        jobs, Announcer(RecordingPublisher(), RecordingSender()), ManualClock(NOW), spending
    )
    job = accepted_job("trial", NOW, deadline=NOW.replace(hour=23))
    jobs.create(job)
    spending.reserve("trial", job.id, Spend(700), NOW.replace(hour=23))

    ended = endings.end_by_id("trial", job.id, Ending(status, "watchdog", "stopped", "none"))
    spending.flush()

    assert ended is not None
    assert ended.status is status
    stored = documents.load("usage", "trial/2026-12.json")
    assert stored is not None
    assert stored[0]["reserved"] == {}, "held only until its deadline otherwise"


class LosingWrites(InMemoryDocuments):
    """The in-memory documents, where another instance wins the next ``losses`` writes."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        if self.losses:
            self.losses -= 1
            raise ConcurrencyConflict(f"{container}/{name} changed since it was read")
        return super().replace(container, name, document, etag, tags)


def racing_spending(documents: LosingWrites, waits: list[float]) -> TenantSpending:
    catalog = TenantCatalog(tenants={"trial": TenantPolicy(budget=Budget(tokens_per_day=10_000))})
    return TenantSpending(
        documents, "usage", catalog, ManualClock(NOW), sleep=waits.append, uniform=max
    )


def test_a_writer_that_keeps_losing_races_keeps_trying_while_its_patience_lasts() -> None:
    documents = LosingWrites(0)
    waits: list[float] = []
    spending = racing_spending(documents, waits)
    spending.reserve("trial", "first", Spend(700), NOW.replace(hour=23))
    documents.losses = 20  # more than a fixed count of twelve tries allowed

    spending.reserve("trial", "second", Spend(700), NOW.replace(hour=23))

    assert documents.losses == 0
    assert len(waits) == 20
    assert sum(waits) < RACE_PATIENCE_SECONDS
    stored = documents.load("usage", "trial/2026-12.json")
    assert stored is not None
    assert set(stored[0]["reserved"]) == {"first", "second"}


def test_a_writer_gives_up_once_it_has_waited_its_patience_and_says_how_long() -> None:
    documents = LosingWrites(0)
    waits: list[float] = []
    spending = racing_spending(documents, waits)
    spending.reserve("trial", "first", Spend(700), NOW.replace(hour=23))
    documents.losses = 1_000

    said = r"trial/2026-12\.json: lost \d+ writes in a row, waiting 5\.\d s between"
    with pytest.raises(ConcurrencyConflict, match=said):
        spending.reserve("trial", "second", Spend(700), NOW.replace(hour=23))

    assert RACE_PATIENCE_SECONDS <= sum(waits) < RACE_PATIENCE_SECONDS + RACE_STEP_CEILING
    assert max(waits) == RACE_STEP_CEILING, "each wait drawn within the doubling step"
