"""Every row of the outcome table (docs/processing.md), with in-memory fakes of our ports."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import (
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.adapters.models.local import LocalModel
from shared.contracts import ClaimCheck, InlineText, Job, JobStatus, RequestMessage
from shared.errors import (
    CapacityExhausted,
    InvalidModelOutput,
    PermanentError,
    TransientError,
)
from shared.events.announcements import Announcer
from shared.inference import InferenceInput, ModelAnswer
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.jobs import DocumentJobStore, JobRepository, Versioned
from shared.processing.assembly import lane_processor
from shared.processing.backoff import retry_delay
from shared.processing.deferral import DocumentDeferralLedger
from shared.processing.inbound import InboundMessage
from shared.processing.outcomes import Unsettled
from shared.processing.policy import ProcessingPolicy
from shared.processing.settlement import NotedSettler
from shared.processing.values import DeferredEntry
from shared.settings import Settings
from tests.fakes import broker_down
from tests.support.catalogs import local_catalog, served_models

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
TEXT = b"Invoice 17. Total amount due: 300 EUR. Payment within 30 days."


@dataclass
class ScriptedModel:
    """Raises the scripted errors in order, then answers with the local analyzer."""

    errors: list[Exception] = field(default_factory=list)
    calls: int = 0
    system: str = "inferbus.local"
    before_return: Callable[[], None] | None = None  # e.g. storage goes down meanwhile

    def infer(self, request: InferenceInput) -> ModelAnswer:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        if self.before_return is not None:
            self.before_return()
        return LocalModel(refusal_terms=("forbidden",)).infer(request)


@dataclass
class Harness:
    blobs: InMemoryBlobs = field(default_factory=InMemoryBlobs)
    sender: RecordingSender = field(default_factory=RecordingSender)
    topic: RecordingSender = field(default_factory=RecordingSender)
    events: RecordingPublisher = field(default_factory=RecordingPublisher)
    settler: RecordingSettler = field(default_factory=RecordingSettler)
    model: ScriptedModel = field(default_factory=ScriptedModel)
    max_retries: int = 3
    ordered: bool = False
    producer_tenants: tuple[str, ...] = (TENANT,)  # direct producers may name it
    slept: list[float] = field(default_factory=list)
    while_sleeping: Callable[[], None] | None = None  # e.g. intake records the job meanwhile

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.while_sleeping is not None:
            self.while_sleeping()

    def __post_init__(self) -> None:
        documents = InMemoryDocuments(self.blobs)
        self.store = DocumentJobStore(documents, "jobs")
        self.ledger = DocumentDeferralLedger(documents, "ledgers")
        self.jobs = JobRepository(self.store, clock=lambda: NOW)
        self.processor = lane_processor(
            policy=ProcessingPolicy(
                "inference-requests",
                ("local-analyzer",),
                self.max_retries,
                2.0,
                60.0,
                api_base_url="https://app.example",
                ordered=self.ordered,
            ),
            jobs=self.jobs,
            claim_checks=ClaimChecks(self.blobs, "inputs", ("inputs",), 10_000),
            models=served_models(self.model),
            announcer=Announcer(self.events, self.topic),
            retry_sender=self.sender,
            ledger=self.ledger,
            rules=RequestRules(
                local_catalog(),
                default_deadline_seconds=3600,
                max_deadline_seconds=86_400,
                producer_tenants=self.producer_tenants,
            ),
            clock=lambda: NOW,
            uniform=lambda low, high: high,  # worst case of the jitter: deterministic
            sleep=self.sleep,
        )

    def job(self, request_id: str = "r1", **changes: Any) -> Job:
        fields: dict[str, Any] = {
            "id": request_id,
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "correlation_id": "corr",
            "created_at": NOW - timedelta(minutes=1),
            "updated_at": NOW - timedelta(minutes=1),
            "deadline": NOW + timedelta(hours=1),
        }
        job = Job(**{**fields, **changes})
        self.store.create(job)
        return job

    def claim_check(self, request_id: str = "r1", content: bytes = TEXT) -> ClaimCheck:
        name = f"{TENANT}/{request_id}"
        self.blobs.upload("inputs", name, content, "text/plain", {})
        return ClaimCheck(
            blob_uri=f"{self.blobs.account_url}/inputs/{name}",
            sha256=hashlib.sha256(content).hexdigest(),
            size=len(content),
            media_type="text/plain",
        )

    def status(self, request_id: str = "r1") -> JobStatus:
        return self.jobs.get(TENANT, request_id).status

    def ledger_entry(self, sequence: int) -> DeferredEntry:
        (entry,) = [
            e
            for e in self.ledger.due("inference-requests", NOW + timedelta(days=365))
            if e.sequence_number == sequence
        ]
        return entry


def message(
    body: bytes | dict[str, Any], *, retry_count: Any = None, sequence: int = 7, **props: Any
) -> InboundMessage:
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    properties: dict[Any, Any] = {"tenant": TENANT, **props}
    if retry_count is not None:
        properties["retry_count"] = retry_count
    return InboundMessage(
        body=raw,
        message_id="r1",
        sequence_number=sequence,
        delivery_count=1,
        enqueued_time=NOW,
        correlation_id="corr",
        session_id="doc-1",
        subject="inferbus.request",
        content_type="application/json",
        application_properties=properties,
    )


def request_body(h: Harness, request_id: str = "r1", **changes: Any) -> dict[str, Any]:
    request = RequestMessage(
        request_id=request_id,
        tenant_id=TENANT,
        model="local-analyzer",
        input=h.claim_check(request_id),
    )
    return {**request.model_dump(mode="json", by_alias=True), **changes}


@pytest.fixture
def h() -> Harness:
    return Harness()


# --- rows of the table -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\xff not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        ({"schema": "inferbus.request/v9", "request_id": "r1"}, "unknown schema"),
        ({"schema": "inferbus.request/v1", "request_id": "r1"}, "does not match"),
    ],
)
def test_unreadable_payloads_are_dead_lettered_and_their_job_failed(
    h: Harness, body: Any, why: str
) -> None:
    h.job()
    assert h.processor.process(message(body), h.settler) == "dead-lettered"
    action, _, reason, description = h.settler.actions[0]
    assert (action, reason) == ("dead_letter", "InvalidPayload")
    assert why in str(description)
    assert h.status() is JobStatus.FAILED


def test_unknown_model_is_invalid_payload(h: Harness) -> None:
    h.job()
    h.processor.process(message(request_body(h, model="gpt-9")), h.settler)
    assert h.settler.actions[0][2] == "InvalidPayload"
    assert "unknown model 'gpt-9'" in str(h.settler.actions[0][3])
    assert h.status() is JobStatus.FAILED


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.FAILED])
def test_a_terminal_job_means_a_duplicate_delivery_completed_unchanged(
    h: Harness, status: JobStatus
) -> None:
    h.job(status=status)
    assert h.processor.process(message(request_body(h)), h.settler) == "duplicate"
    assert h.settler.actions == [("complete", "r1", None, None)]
    assert h.status() is status
    assert h.model.calls == 0


def test_past_its_deadline_completes_and_expires_the_job(h: Harness) -> None:
    h.job(deadline=NOW - timedelta(seconds=1))
    assert h.processor.process(message(request_body(h)), h.settler) == "expired"
    assert h.settler.actions == [("complete", "r1", None, None)]
    assert h.status() is JobStatus.EXPIRED
    assert [e.type for e in h.events.published] == ["com.inferbus.InferenceFailed"]


def test_not_yet_due_is_deferred_after_its_ledger_entry_is_written(h: Harness) -> None:
    h.job()
    due = NOW + timedelta(minutes=5)
    assert (
        h.processor.process(message(request_body(h, not_before=due.isoformat())), h.settler)
        == "deferred"
    )
    assert h.settler.actions == [("defer", "r1", None, None)]
    entry = h.ledger_entry(7)
    assert (entry.request_id, entry.due_at, entry.reason) == ("r1", due, "not_before")
    assert h.status() is JobStatus.ACCEPTED


def test_an_unfinished_prerequisite_defers_and_a_failed_one_dead_letters(h: Harness) -> None:
    h.job("first")
    h.job()
    assert h.processor.process(message(request_body(h, after="first")), h.settler) == "deferred"
    assert h.ledger_entry(7).reason == "after"

    h.jobs.update(TENANT, "first", lambda j: j.model_copy(update={"status": JobStatus.FAILED}))
    h.processor.process(message(request_body(h, after="first")), h.settler)
    assert h.settler.actions[-1][:3] == ("dead_letter", "r1", "PermanentFailure")
    assert h.status() is JobStatus.FAILED


def test_a_completed_prerequisite_lets_the_step_run(h: Harness) -> None:
    h.job("first", status=JobStatus.COMPLETED)
    h.job()
    assert h.processor.process(message(request_body(h, after="first")), h.settler) == "completed"


@pytest.mark.parametrize("damage", ["missing", "tampered"])
def test_a_bad_claim_check_is_dead_lettered(h: Harness, damage: str) -> None:
    h.job()
    body = request_body(h)
    if damage == "missing":
        h.blobs.delete("inputs", f"{TENANT}/r1")
    else:
        h.blobs.upload("inputs", f"{TENANT}/r1", b"tampered", "text/plain", {})
    h.processor.process(message(body), h.settler)
    assert h.settler.actions[0][:3] == ("dead_letter", "r1", "ClaimCheckInvalid")
    assert h.status() is JobStatus.FAILED
    assert h.jobs.get(TENANT, "r1").error.code == "claim_check_invalid"  # type: ignore[union-attr]


def test_a_refusal_is_a_completed_result(h: Harness) -> None:
    h.job()
    body = request_body(h)
    body["input"] = h.claim_check(content=b"this text holds a forbidden word").model_dump()
    assert h.processor.process(message(body), h.settler) == "refused"
    assert h.settler.actions == [("complete", "r1", None, None)]
    job = h.jobs.get(TENANT, "r1")
    assert job.status is JobStatus.COMPLETED
    assert job.result is not None
    assert job.result.summary()["outcome"] == "refused"
    assert job.result is not None
    assert job.result.outcome == "refused"
    assert job.result.refusal is not None
    assert job.result.refusal["category"] == "configured_term"


def test_transient_failure_with_retries_left_schedules_a_copy_then_completes(h: Harness) -> None:
    h.job()
    h.model.errors = [TransientError("429", retry_after=90)]
    original = message(request_body(h), retry_count=1, document_type="invoice")
    assert h.processor.process(original, h.settler) == "retry-scheduled"

    assert h.settler.actions == [("complete", "r1", None, None)]
    copy = h.sender.sent[0]
    assert copy.message_id == "r1:retry:2"
    assert copy.body == original.body
    assert copy.correlation_id == "corr"
    assert copy.session_id == "doc-1"
    assert copy.subject == "inferbus.request"
    assert copy.application_properties["retry_count"] == 2
    assert copy.application_properties["document_type"] == "invoice"
    assert copy.scheduled_enqueue_time == NOW + timedelta(seconds=90), "Retry-After is the floor"
    job = h.jobs.get(TENANT, "r1")
    assert job.status is JobStatus.ACCEPTED
    assert job.attempts == 1
    assert job.last_error is not None
    assert job.last_error.code == "transient"


def test_backoff_grows_exponentially_up_to_the_cap_without_retry_after(h: Harness) -> None:
    h.job()
    h.model.errors = [TransientError("503")]
    h.processor.process(message(request_body(h), retry_count=2), h.settler)
    assert h.sender.sent[0].scheduled_enqueue_time == NOW + timedelta(seconds=8)  # 2 * 2**2


def test_retry_count_is_read_from_bytes_keys_and_values(h: Harness) -> None:
    h.job()
    h.model.errors = [TransientError("503")]
    inbound = message(request_body(h))
    inbound.application_properties.clear()
    inbound.application_properties.update({"tenant": TENANT, "retry_count": "3"})
    h.processor.process(inbound, h.settler)
    assert h.settler.actions[0][2] == "MaxRetriesExceeded"


def test_transient_failure_with_retries_exhausted_is_dead_lettered(h: Harness) -> None:
    h.job()
    h.model.errors = [TransientError("429 again")]
    h.processor.process(message(request_body(h), retry_count=3), h.settler)
    action, _, reason, description = h.settler.actions[0]
    assert (action, reason) == ("dead_letter", "MaxRetriesExceeded")
    assert "429 again" in str(description)
    assert h.status() is JobStatus.FAILED
    assert h.sender.sent == []


def test_when_rescheduling_fails_the_message_is_abandoned(h: Harness) -> None:
    h.job()
    h.model.errors = [TransientError("429")]
    h.sender.fail_with = broker_down()
    assert h.processor.process(message(request_body(h)), h.settler) == "abandoned"
    assert h.settler.actions == [("abandon", "r1", None, None)]
    assert not h.status().is_terminal


def test_permanent_failure_is_dead_lettered(h: Harness) -> None:
    h.job()
    h.model.errors = [PermanentError("model rejected the document")]
    h.processor.process(message(request_body(h)), h.settler)
    assert h.settler.actions[0][:3] == ("dead_letter", "r1", "PermanentFailure")
    assert h.status() is JobStatus.FAILED


def test_an_answer_that_breaks_its_schema_is_tried_again_within_its_small_bound(
    h: Harness,
) -> None:
    h.job()
    invalid = "the model's answer does not match the output schema of task 't': result.x: bad"
    for retry_count in (0, 1):  # InvalidOutputRetries: 2
        h.model.errors = [InvalidModelOutput(invalid)]
        outcome = h.processor.process(message(request_body(h), retry_count=retry_count), h.settler)
        assert outcome == "retry-scheduled"
    job = h.jobs.get(TENANT, "r1")
    assert job.last_error is not None
    assert job.last_error.code == "invalid_model_output"

    h.model.errors = [InvalidModelOutput(invalid)]
    outcome = h.processor.process(message(request_body(h), retry_count=2), h.settler)

    assert outcome == "dead-lettered"
    action, _, reason, description = h.settler.actions[-1]
    assert (action, reason, description) == ("dead_letter", "PermanentFailure", invalid)
    failed = h.jobs.get(TENANT, "r1")
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert (failed.error.code, failed.error.message) == ("invalid_model_output", invalid)
    assert h.model.calls == 3, "three answers, then the job ends: no crash loop"


def test_no_capacity_in_time_reschedules_without_spending_an_attempt(h: Harness) -> None:
    h.job()
    h.model.errors = [CapacityExhausted("no capacity within 300s", retry_after=40)]
    original = message(request_body(h), retry_count=2)

    assert h.processor.process(original, h.settler) == "capacity-wait"

    assert h.settler.actions == [("complete", "r1", None, None)]
    copy = h.sender.sent[0]
    assert copy.application_properties["retry_count"] == 2, "not an attempt"
    assert copy.application_properties["outage_retry_count"] == 1
    assert copy.message_id == "r1:retry:2:outage:1"
    assert copy.scheduled_enqueue_time == NOW + timedelta(seconds=40)
    job = h.jobs.get(TENANT, "r1")
    assert job.status is JobStatus.ACCEPTED
    assert job.last_error is not None
    assert job.last_error.code == "capacity_exhausted"


def test_waiting_for_capacity_never_goes_past_the_deadline(h: Harness) -> None:
    h.job()
    h.model.errors = [CapacityExhausted("no capacity", retry_after=7200)]
    deadline = NOW + timedelta(minutes=10)
    body = request_body(h, deadline=deadline.isoformat())

    assert h.processor.process(message(body), h.settler) == "capacity-wait"

    assert h.sender.sent[0].scheduled_enqueue_time == deadline, "then it expires, as any"


def test_an_unexpected_exception_abandons_only_that_message(h: Harness) -> None:
    h.job()
    h.model.errors = [ZeroDivisionError("bug")]
    assert h.processor.process(message(request_body(h)), h.settler) == "abandoned"
    assert h.settler.actions == [("abandon", "r1", None, None)]


def test_success_persists_publishes_then_completes(h: Harness) -> None:
    h.job()
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert (
        h.processor.process(message(request_body(h), traceparent=trace), h.settler) == "completed"
    )
    assert h.events.published[0].extensions["traceparent"] == trace
    assert h.topic.sent[0].application_properties["traceparent"] == trace
    assert h.settler.actions == [("complete", "r1", None, None)]
    job = h.jobs.get(TENANT, "r1")
    assert job.status is JobStatus.COMPLETED
    assert job.result is not None
    analysis = job.result.analysis
    assert analysis is not None
    assert analysis.document_type == "invoice"
    assert job.result is not None
    assert job.result.summary()["document_type"] == "invoice"
    assert [e.type for e in h.events.published] == ["com.inferbus.InferenceCompleted"]
    assert h.events.published[0].subject == f"/tenants/{TENANT}/models/local-analyzer/requests/r1"
    topic = h.topic.sent[0]
    assert topic.application_properties["outcome"] == "completed"
    assert topic.application_properties["document_type"] == "invoice"
    assert topic.message_id == h.events.published[0].id
    result_url = "https://app.example/api/v1/requests/r1/result"
    assert h.events.published[0].data["result_url"] == result_url


def test_a_publication_failure_is_retried_and_the_retry_reuses_the_stored_result(
    h: Harness,
) -> None:
    h.job()
    h.events.fail_with = TransientError("Event Grid answered 503")
    first = message(request_body(h))
    assert h.processor.process(first, h.settler) == "retry-scheduled"
    assert h.model.calls == 1
    assert h.status() is JobStatus.COMPLETED, "the result is stored before it is announced"
    assert h.events.published == []

    h.events.fail_with = None
    assert h.processor.process(message(request_body(h), retry_count=1), h.settler) == "duplicate"
    assert h.model.calls == 1, "the stored result is published, the model is not run again"
    assert [e.type for e in h.events.published] == ["com.inferbus.InferenceCompleted"]
    assert h.events.published[0].data["document_type"] == "invoice"
    assert h.status() is JobStatus.COMPLETED


def test_an_announcement_that_keeps_failing_dead_letters_but_keeps_the_result(
    h: Harness,
) -> None:
    h.job()
    h.events.fail_with = TransientError("Event Grid answered 503")
    exhausted = message(request_body(h), retry_count=h.max_retries)
    assert h.processor.process(exhausted, h.settler) == "dead-lettered"
    action, _, reason, description = h.settler.actions[0]
    assert (action, reason) == ("dead_letter", "MaxRetriesExceeded")
    assert "result is stored" in str(description)
    assert h.status() is JobStatus.COMPLETED
    assert h.topic.sent == [], "no InferenceFailed for a request that has its result"


def test_a_message_without_a_job_records_it_from_the_message_and_runs(h: Harness) -> None:
    """Intake sends before it records the job, and direct producers never record one."""
    arriving = message(request_body(h), source="http")
    assert h.processor.process(arriving, h.settler) == "completed"
    job = h.jobs.get(TENANT, "r1")
    assert (job.status, job.source, job.correlation_id) == (JobStatus.COMPLETED, "http", "corr")
    assert job.created_at == NOW
    direct = message(request_body(h, request_id="r2"))
    assert h.processor.process(direct, h.settler) == "completed"
    assert h.jobs.get(TENANT, "r2").source == "servicebus"


def test_only_a_redelivery_of_completed_work_announces_it_again(h: Harness) -> None:
    """A lock lost after the result was stored must not lose the announcement; a second
    message for the same request is a duplicate whose original announced."""
    h.job()
    assert h.processor.process(message(request_body(h)), h.settler) == "completed"
    assert len(h.events.published) == 1

    assert h.processor.process(message(request_body(h)), h.settler) == "duplicate"
    assert len(h.events.published) == 1
    redelivered = replace(message(request_body(h)), delivery_count=2)
    assert h.processor.process(redelivered, h.settler) == "duplicate"
    assert [e.id for e in h.events.published[1:]] == [h.events.published[0].id]
    assert h.model.calls == 1


# --- the queue door: a producer's message meets the doors' rules ---------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"model": "gpt-9"}, "unknown model"),
        ({"parameters": {"simulate": "transient"}}, "fault injection"),
        ({"parameters": {f"p{i}": i for i in range(33)}}, "at most 32"),
        ({"metadata": {"bad key!": "v"}}, "metadata keys"),
        ({"input": {"text": "x" * 300_000}}, "claim check"),
        ({"input": {"text": ""}}, "1 to"),
        ({"deadline": (NOW + timedelta(days=2)).isoformat()}, "at most 86400 s"),
        (
            {
                "not_before": (NOW + timedelta(hours=2)).isoformat(),
                "deadline": (NOW + timedelta(hours=1)).isoformat(),
            },
            "not_before must be earlier",
        ),
        ({"document_id": "doc-1", "after": "r0"}, "cannot also set after"),
    ],
)
def test_a_direct_message_that_breaks_a_door_rule_is_dead_lettered_with_the_rule(
    h: Harness, changes: dict[str, Any], words: str
) -> None:
    body = {**request_body(h), **changes}
    assert h.processor.process(message(body), h.settler) == "dead-lettered"
    ((action, _, reason, description),) = h.settler.actions
    assert (action, reason) == ("dead_letter", "InvalidPayload")
    assert words in str(description)
    assert h.model.calls == 0


def test_a_refused_direct_message_leaves_a_failed_job_for_the_status_api(h: Harness) -> None:
    body = {**request_body(h), "parameters": {"simulate": "transient"}}
    h.processor.process(message(body), h.settler)
    job = h.jobs.get(TENANT, "r1")
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "invalid_request"
    assert "parameters.simulate" in job.error.message
    assert [e.type for e in h.events.published] == ["com.inferbus.InferenceFailed"]


def test_a_claim_check_outside_the_tenant_is_refused_before_any_read(h: Harness) -> None:
    other = h.claim_check("r9")
    foreign = other.model_copy(update={"blob_uri": other.blob_uri.replace("/t1/", "/t2/")})
    body = {**request_body(h), "input": foreign.model_dump(mode="json")}
    assert h.processor.process(message(body), h.settler) == "dead-lettered"
    assert "must start with the caller's tenant 't1/'" in str(h.settler.actions[0][3])


def test_a_tenant_producers_may_not_name_gets_no_job() -> None:
    h = Harness(producer_tenants=("t2",))
    inline = InlineText(text="Invoice 8. Total amount due: 40 EUR.").model_dump(mode="json")
    body = {**request_body(h), "input": inline}  # a producer's: no claim check of a door
    assert h.processor.process(message(body), h.settler) == "dead-lettered"
    assert "ProducerTenants" in str(h.settler.actions[0][3])
    assert h.jobs.find(TENANT, "r1") is None
    assert h.events.published == []


def test_a_direct_message_without_a_deadline_gets_the_default_one(h: Harness) -> None:
    assert h.processor.process(message(request_body(h)), h.settler) == "completed"
    assert h.jobs.get(TENANT, "r1").deadline == NOW + timedelta(seconds=3600)


# --- the ordered lane: retries keep the document's order ----------------------------------


def test_an_ordered_message_is_retried_in_place_after_its_backoff() -> None:
    h = Harness(ordered=True)
    h.model.errors = [TransientError("model busy")]
    assert h.processor.process(message(request_body(h)), h.settler) == "abandoned"
    assert h.settler.actions == [("abandon", "r1", None, None)]
    assert h.sender.sent == [], "no scheduled copy could overtake the document's next step"
    assert h.slept == [2.0], "the first retry's backoff (base 2 s, worst-case jitter)"
    assert h.status() is JobStatus.ACCEPTED


def test_an_ordered_message_gives_up_by_its_delivery_count() -> None:
    h = Harness(ordered=True)
    h.model.errors = [TransientError("model busy")]
    tired = replace(message(request_body(h)), delivery_count=4)  # 3 tries before: MaxRetries
    assert h.processor.process(tired, h.settler) == "dead-lettered"
    assert h.settler.actions[0][2] == "MaxRetriesExceeded"
    assert h.status() is JobStatus.FAILED


def test_an_ordered_message_cannot_be_deferred() -> None:
    h = Harness(ordered=True)
    h.job()
    later = (NOW + timedelta(minutes=5)).isoformat()
    assert h.processor.process(message(request_body(h, not_before=later)), h.settler) == (
        "dead-lettered"
    )
    assert "cannot wait for not_before" in str(h.settler.actions[0][3])


# --- storage and broker outages outside the model run ---------------------------------------


class FlakyStore:
    """A job store whose reads or writes fail while ``down`` (an outage of storage)."""

    def __init__(self, store: DocumentJobStore, fail_reads: bool, fail_writes: bool) -> None:
        self._store = store
        self.fail_reads = fail_reads
        self.fail_writes = fail_writes

    def create(self, job: Job) -> str | None:
        return self._store.create(job)

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        if self.fail_reads:
            raise TransientError("reading jobs/t1/r1.json: storage is unreachable")
        return self._store.load(tenant_id, job_id)

    def replace(self, job: Job, etag: str) -> str:
        if self.fail_writes:
            raise TransientError("updating jobs/t1/r1.json: storage answered 503")
        return self._store.replace(job, etag)


@pytest.mark.parametrize(
    ("fail_reads", "fail_writes"), [(True, False), (False, True)], ids=["lookup", "first-write"]
)
def test_a_storage_outage_outside_the_model_run_schedules_a_retry(
    h: Harness, fail_reads: bool, fail_writes: bool
) -> None:
    h.job()
    flaky = FlakyStore(h.store, fail_reads, fail_writes)
    h.jobs._store = flaky  # the repository the processor holds

    assert h.processor.process(message(request_body(h)), h.settler) == "retry-scheduled"

    assert h.settler.actions == [("complete", "r1", None, None)]
    (copy,) = h.sender.sent
    assert copy.message_id == "r1:retry:0:outage:1"
    assert copy.application_properties["retry_count"] == 0, "the model's budget is untouched"
    assert copy.application_properties["outage_retry_count"] == 1
    assert copy.scheduled_enqueue_time == NOW + timedelta(seconds=2)
    assert h.model.calls == 0

    flaky.fail_reads = flaky.fail_writes = False
    retried = replace(
        message(request_body(h), retry_count=0, outage_retry_count=1), message_id=copy.message_id
    )
    assert h.processor.process(retried, h.settler) == "completed"
    assert h.status() is JobStatus.COMPLETED


def test_an_outage_does_not_use_the_retry_budget_of_the_model(h: Harness) -> None:
    """A request that already met model faults up to MaxRetries still waits out a storage
    outage: only its deadline bounds the wait."""
    h.job()
    h.jobs._store = FlakyStore(h.store, fail_reads=True, fail_writes=False)
    body = request_body(h, deadline=(NOW + timedelta(hours=1)).isoformat())
    tired = message(body, retry_count=h.max_retries, outage_retry_count=7)

    assert h.processor.process(tired, h.settler) == "retry-scheduled"
    (copy,) = h.sender.sent
    assert copy.application_properties["retry_count"] == h.max_retries
    assert copy.application_properties["outage_retry_count"] == 8
    assert copy.message_id == "r1:retry:3:outage:8"


def test_an_outage_copy_of_a_request_that_completed_announces_it_again(h: Harness) -> None:
    """The result was stored, then the host died before announcing it, and the redelivery
    met a storage outage: the outage copy (first delivery, retry_count 0) still announces."""
    h.job()
    assert h.processor.process(message(request_body(h)), h.settler) == "completed"
    h.topic.sent.clear()

    copy = message(request_body(h), retry_count=0, outage_retry_count=1)
    assert h.processor.process(copy, h.settler) == "duplicate"
    assert len(h.topic.sent) == 1


def test_without_a_deadline_the_default_one_from_the_outage_start_bounds_the_wait(
    h: Harness,
) -> None:
    """A producer's message may carry no deadline: DefaultDeadlineSeconds (3600 here) after
    the outage was first met bounds it, carried from copy to copy in ``outage_since``."""
    h.job()
    h.jobs._store = FlakyStore(h.store, fail_reads=True, fail_writes=False)

    assert h.processor.process(message(request_body(h)), h.settler) == "retry-scheduled"
    (copy,) = h.sender.sent
    assert copy.application_properties["outage_since"] == NOW.isoformat()

    recent = (NOW - timedelta(seconds=3599)).isoformat()
    waiting = message(request_body(h), outage_retry_count=30, outage_since=recent)
    assert h.processor.process(waiting, h.settler) == "retry-scheduled"
    assert h.sender.sent[1].application_properties["outage_since"] == recent

    too_long = (NOW - timedelta(seconds=3600)).isoformat()
    endless = message(request_body(h), outage_retry_count=31, outage_since=too_long)
    assert h.processor.process(endless, h.settler) == "dead-lettered"
    assert h.settler.actions[-1][2] == "MaxRetriesExceeded"
    assert len(h.sender.sent) == 2


def test_storage_failing_around_the_model_run_is_an_outage_too(h: Harness) -> None:
    h.job()
    flaky = FlakyStore(h.store, fail_reads=False, fail_writes=False)
    h.jobs._store = flaky
    h.model.before_return = lambda: setattr(flaky, "fail_writes", True)

    assert h.processor.process(message(request_body(h), retry_count=1), h.settler) == (
        "retry-scheduled"
    )
    (copy,) = h.sender.sent
    assert copy.application_properties["retry_count"] == 1
    assert copy.application_properties["outage_retry_count"] == 1


def test_an_outage_past_the_deadline_is_dead_lettered_for_the_reconciler(h: Harness) -> None:
    """Storage still down at the deadline: the message goes to the dead-letter queue, and
    nothing is announced (the job cannot be read; the reconciler ends it later)."""
    h.job()
    h.jobs._store = FlakyStore(h.store, fail_reads=True, fail_writes=False)
    late = request_body(h, deadline=(NOW - timedelta(seconds=1)).isoformat())

    assert h.processor.process(message(late, outage_retry_count=4), h.settler) == "dead-lettered"
    action, _, reason, description = h.settler.actions[0]
    assert (action, reason) == ("dead_letter", "MaxRetriesExceeded")
    assert "unavailable past the deadline" in str(description)
    assert h.sender.sent == []
    assert h.topic.sent == []
    assert h.events.published == []


def test_giving_up_announces_only_a_failure_it_recorded(h: Harness) -> None:
    """A stale retry copy of a request that completed meanwhile gives up: the job keeps
    its result and no contradictory InferenceFailed is published."""
    h.job(status=JobStatus.COMPLETED)
    request = RequestMessage.model_validate(request_body(h))
    spent = message(request_body(h), retry_count=h.max_retries)
    outcome = h.processor._admission._outcomes.settle(
        Unsettled(spent, NotedSettler(h.settler), TransientError("gave up"), request)
    )
    assert outcome == "dead-lettered"
    assert h.status() is JobStatus.COMPLETED
    assert h.topic.sent == []
    assert h.events.published == []


def test_a_storage_outage_with_the_broker_down_too_abandons(h: Harness) -> None:
    h.job()
    h.jobs._store = FlakyStore(h.store, fail_reads=True, fail_writes=False)
    h.sender.fail_with = broker_down()

    assert h.processor.process(message(request_body(h)), h.settler) == "abandoned"
    assert h.settler.actions == [("abandon", "r1", None, None)]


def test_a_broker_error_while_settling_is_not_retried_by_a_copy(h: Harness) -> None:
    """Once a settlement was attempted the message may be settled: a copy could run the
    request twice, so the failure abandons (or lets the lock lapse) instead. The job had
    ended: the message is left to its next delivery (``unsettled``), not an error."""
    h.job(status=JobStatus.COMPLETED)

    class FailingComplete(RecordingSettler):
        def complete(self, message: InboundMessage) -> None:
            raise broker_down()

    settler = FailingComplete()
    assert h.processor.process(message(request_body(h)), settler) == "unsettled"
    assert h.sender.sent == []
    assert settler.actions == [("abandon", "r1", None, None)]


def test_the_default_retry_budget_outlasts_a_ten_minute_outage() -> None:
    settings = Settings()
    ceilings = [
        min(settings.retries.max_seconds, settings.retries.base_seconds * 2**n)
        for n in range(settings.retries.max_retries)
    ]
    least = sum(
        retry_delay(
            n,
            base_seconds=settings.retries.base_seconds,
            cap_seconds=settings.retries.max_seconds,
            uniform=lambda low, high: low,
            floor_fraction=settings.retries.jitter_floor,
        )
        for n in range(settings.retries.max_retries)
    )
    assert least == sum(ceilings) * settings.retries.jitter_floor
    assert least > 600, f"the retries of a request may all fall inside {least:.0f}s"
    assert settings.retries.max_retries < 10, "below the queues' maxDeliveryCount (infra catalog)"


@dataclass
class LockLostSettler(RecordingSettler):
    """A broker restarted under the delivery: every settlement of it fails."""

    def complete(self, message: InboundMessage) -> None:
        super().complete(message)
        raise RuntimeError("MessageLockLostError: the lock on the message is lost")

    def abandon(self, message: InboundMessage) -> None:
        super().abandon(message)
        raise RuntimeError("MessageLockLostError: the lock on the message is lost")


def test_a_lost_lock_on_a_message_whose_job_ended_is_one_info_line(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The result is stored and announced, then completing the message fails (a broker
    restart took its lock): not an error. Its next delivery completes it as a duplicate."""
    h.job()
    settler = LockLostSettler()
    with caplog.at_level(logging.DEBUG, logger="shared.processing"):
        outcome = h.processor.process(message(request_body(h)), settler)

    assert outcome == "unsettled"
    assert h.status() is JobStatus.COMPLETED
    assert [a for a, *_ in settler.actions] == ["complete", "abandon"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    told = [r.getMessage() for r in caplog.records if "already ended" in r.getMessage()]
    assert len(told) == 1, told
    assert "r1" in told[0]
    assert "MessageLockLostError" in told[0]
    redelivered = replace(message(request_body(h)), delivery_count=2)
    assert h.processor.process(redelivered, h.settler) == "duplicate"


def test_a_failed_settlement_of_a_job_still_open_is_one_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Deferring fails (the lock is gone): the message comes back when its lock lapses,
    and is handled again as any redelivery is. One WARNING line, no error."""
    h.job(not_before=None)
    settler = LockLostSettler()
    body = request_body(h, not_before=(NOW + timedelta(minutes=5)).isoformat())
    settler.defer = settler.complete  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="shared.processing"):
        outcome = h.processor.process(message(body), settler)

    assert outcome == "unsettled"
    assert h.status() is JobStatus.ACCEPTED
    assert [a for a, *_ in settler.actions] == ["complete", "abandon"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "comes back when its lock lapses" in warned[0]


def test_a_lost_lock_after_a_retry_copy_was_scheduled_is_one_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The model throttled, the retry copy is scheduled, then completing the original
    fails (a broker restart took its lock): the copy carries the work on, the original
    comes back when its lock lapses. One WARNING line, no error."""
    h.job()
    h.model.errors = [TransientError("throttled (429)", retry_after=1)]
    settler = LockLostSettler()
    with caplog.at_level(logging.INFO, logger="shared.processing"):
        outcome = h.processor.process(message(request_body(h)), settler)

    assert outcome == "unsettled"
    assert len(h.sender.sent) == 1, "the retry copy went out before the complete failed"
    assert [a for a, *_ in settler.actions] == ["complete", "abandon"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
