"""The dead-letter reconciler's decisions, over the in-memory ports."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from shared.adapters.in_memory import InMemoryDeadLetterQueues
from shared.contracts import InlineText, Job, JobStatus, RequestMessage
from shared.errors import TransientError
from shared.jobs import reopen
from shared.processing.dead_letters.operations import replay_generation
from shared.processing.dead_letters.reconciliation import (
    CHECKPOINT_PREFIX,
    DeadLetterReconciler,
    error_code,
    request_of,
)
from shared.processing.values import DeadLetteredMessage
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
QUEUE = "inference-requests"
TENANT = "t1"


def dead(
    request_id: str = "r1",
    reason: str = "MaxDeliveryCountExceeded",
    *,
    sequence: int = 11,
    message_id: str | None = None,
    description: str = "Message could not be consumed after 10 delivery attempts.",
    body: bytes | None = None,
) -> DeadLetteredMessage:
    document = {"schema": "inferbus.request/v1", "request_id": request_id, "tenant_id": TENANT}
    return DeadLetteredMessage(
        queue=QUEUE,
        sequence_number=sequence,
        message_id=message_id or request_id,
        enqueued_time=NOW - timedelta(minutes=30),
        delivery_count=10,
        reason=reason,
        description=description,
        source=QUEUE,
        body=body if body is not None else json.dumps(document).encode(),
        application_properties={"tenant": TENANT},
    )


class Setup:
    def __init__(self) -> None:
        self.clock = ManualClock(NOW)
        self.wired: Wired = wire(clock=self.clock)
        reconciler = self.wired.services.reconciler
        assert reconciler is not None
        self.reconciler: DeadLetterReconciler = reconciler
        self.queues = cast(InMemoryDeadLetterQueues, self.wired.ports.dead_letter_queues)

    def job(self, request_id: str = "r1", **changes: Any) -> Job:
        fields: dict[str, Any] = {
            "id": request_id,
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "correlation_id": request_id,
            "created_at": NOW - timedelta(minutes=40),
            "updated_at": NOW - timedelta(minutes=30),
            "deadline": NOW + timedelta(hours=1),
            "status": JobStatus.RUNNING,
        }
        job = Job(**{**fields, **changes})
        assert self.wired.services.jobs.create(job) is not None
        return job

    def run(self) -> dict[str, int]:
        outcomes = self.reconciler.reconcile([QUEUE, "inference-priority"]).outcomes
        return {outcome.value: count for outcome, count in outcomes.items()}

    def stored(self, request_id: str = "r1") -> Job:
        return self.wired.services.jobs.get(TENANT, request_id)

    @property
    def failures_published(self) -> list[str]:
        return self.wired.failures_published


@pytest.fixture
def setup() -> Setup:
    return Setup()


def test_a_message_the_broker_dead_lettered_fails_its_job_with_the_reason(setup: Setup) -> None:
    setup.job()
    setup.queues.add(dead())

    assert setup.run() == {"ended-failed": 1}

    job = setup.stored()
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "max_delivery_count_exceeded"
    assert job.error.message.startswith("MaxDeliveryCountExceeded: Message could not be consumed")
    assert job.settlement == f"dead-lettered in {QUEUE} (MaxDeliveryCountExceeded)"
    assert setup.failures_published == ["max_delivery_count_exceeded"]
    assert [m.sequence_number for m in setup.queues.peek(QUEUE)] == [11], "peeked, not taken"


def test_a_second_run_changes_nothing(setup: Setup) -> None:
    setup.job()
    setup.queues.add(dead())
    setup.run()
    before = setup.stored()

    assert setup.run() == {"reconciled-before": 1}
    assert setup.stored() == before
    assert len(setup.failures_published) == 1


def test_a_run_reads_nothing_for_messages_it_reconciled_before(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message reconciled before costs a listing of its own marker name, not a read:
    the markers' names say which messages are done (only the checkpoint is read)."""
    for number in range(5):
        setup.job(f"r{number}")
        setup.queues.add(dead(f"r{number}", sequence=20 + number))
    assert setup.run() == {"ended-failed": 5}
    load = setup.wired.documents.load

    def no_reads(container: str, name: str) -> object:
        if name.startswith(CHECKPOINT_PREFIX):
            return load(container, name)
        raise AssertionError("a reconciled message was read again")

    monkeypatch.setattr(setup.wired.documents, "load", no_reads)
    monkeypatch.setattr(setup.wired.services.jobs, "load", no_reads)
    assert setup.run() == {"reconciled-before": 5}


def test_an_expired_message_expires_its_job(setup: Setup) -> None:
    setup.job(status=JobStatus.ACCEPTED)
    setup.queues.add(dead(reason="TTLExpiredException", description="The message expired."))

    assert setup.run() == {"ended-expired": 1}
    job = setup.stored()
    assert job.status is JobStatus.EXPIRED
    assert job.error is not None
    assert job.error.code == "message_expired"
    assert setup.failures_published == ["message_expired"]


def test_a_job_past_its_deadline_expires_whatever_the_reason(setup: Setup) -> None:
    setup.job(deadline=NOW - timedelta(minutes=1))
    setup.queues.add(dead())

    setup.run()

    job = setup.stored()
    assert job.status is JobStatus.EXPIRED
    assert job.error is not None
    assert job.error.code == "deadline_exceeded"
    assert "MaxDeliveryCountExceeded" in job.error.message


def test_a_finished_job_is_left_alone(setup: Setup) -> None:
    setup.job(status=JobStatus.CANCELLED)
    setup.queues.add(dead())

    assert setup.run() == {"skipped": 1}
    assert setup.stored().status is JobStatus.CANCELLED
    assert setup.failures_published == []
    assert setup.run() == {"reconciled-before": 1}


def test_a_retry_copy_finds_its_job_through_the_body(setup: Setup) -> None:
    setup.job()
    setup.queues.add(dead(message_id="r1:retry:3", reason="MaxRetriesExceeded", sequence=40))

    setup.run()

    job = setup.stored()
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "max_retries_exceeded"


def test_an_unreadable_body_falls_back_on_the_message_id_and_tenant(setup: Setup) -> None:
    setup.job()
    setup.queues.add(dead(message_id="r1:retry:1", reason="InvalidPayload", body=b"\xff"))

    setup.run()

    assert setup.stored().status is JobStatus.FAILED


def test_a_replayed_message_no_longer_speaks_for_its_job(setup: Setup) -> None:
    setup.job()
    item = dead()
    setup.queues.add(item)
    marker = {"message_id": item.message_id, "enqueued_time": item.enqueued_time.isoformat()}  # type: ignore[union-attr]
    setup.wired.documents.put(
        "ledgers", f"sb-replays/{QUEUE}/11.json", {**marker, "status": "sent"}
    )

    assert setup.run() == {"skipped": 1}
    assert setup.stored().status is JobStatus.RUNNING


def test_an_old_entry_does_not_fail_a_job_a_replay_reopened(setup: Setup) -> None:
    failed = setup.job(status=JobStatus.FAILED, error={"code": "x", "message": "y"})
    reopened = reopen(failed, f"replayed from the dead-letter queue of {QUEUE}", setup.clock)
    current = setup.wired.services.jobs.load(TENANT, "r1")
    assert current is not None
    setup.wired.services.jobs.advance(current, lambda job: reopened)
    setup.queues.add(dead(sequence=11))

    assert setup.run() == {"skipped": 1}
    assert setup.stored().status is JobStatus.ACCEPTED

    setup.queues.add(dead(message_id="r1:replay:1", sequence=90))
    assert setup.run() == {"reconciled-before": 1, "ended-failed": 1}
    assert setup.stored().status is JobStatus.FAILED


def test_a_failed_announcement_is_made_by_the_next_run(setup: Setup) -> None:
    setup.job()
    setup.queues.add(dead())
    setup.wired.published.fail_with = TransientError("event grid is down")

    assert setup.run() == {"announce-pending": 1}
    assert setup.stored().status is JobStatus.FAILED

    setup.wired.published.fail_with = None
    assert setup.run() == {"announced-again": 1}
    assert setup.failures_published == ["max_delivery_count_exceeded"]
    assert setup.run() == {"reconciled-before": 1}


def test_a_message_without_a_job_is_noted_once(setup: Setup) -> None:
    setup.queues.add(dead("nobody"))

    assert setup.run() == {"skipped": 1}
    assert setup.run() == {"reconciled-before": 1}


def test_a_producer_message_whose_job_was_never_recorded_gets_an_ended_job(
    setup: Setup,
) -> None:
    """Storage was down on every delivery of a producer's message, so no job was adopted:
    the reconciler records the job already failed, and the status API can tell."""
    request = RequestMessage(
        request_id="p1", tenant_id=TENANT, model="local-analyzer", input=InlineText(text="hi")
    )
    setup.queues.add(dead("p1", body=request.model_dump_json(by_alias=True).encode()))

    assert setup.run() == {"recorded-failed": 1}
    job = setup.stored("p1")
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "max_delivery_count_exceeded"
    assert job.source == "servicebus"
    assert setup.failures_published == ["max_delivery_count_exceeded"]
    assert setup.run() == {"reconciled-before": 1}


def test_an_invalid_payload_without_a_job_records_none(setup: Setup) -> None:
    request = RequestMessage(
        request_id="p2", tenant_id=TENANT, model="local-analyzer", input=InlineText(text="hi")
    )
    body = request.model_dump_json(by_alias=True).encode()
    setup.queues.add(dead("p2", reason="InvalidPayload", body=body))

    assert setup.run() == {"skipped": 1}
    assert setup.wired.services.jobs.find(TENANT, "p2") is None


def test_a_reused_sequence_number_is_a_new_message(setup: Setup) -> None:
    setup.job()
    setup.job("r2")
    setup.queues.add(dead())
    setup.run()
    setup.queues.remove(QUEUE, [11])
    setup.queues.add(dead("r2", sequence=11))

    assert setup.run() == {"ended-failed": 1}
    assert setup.stored("r2").status is JobStatus.FAILED


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("MaxDeliveryCountExceeded", "max_delivery_count_exceeded"),
        ("TTLExpiredException", "ttl_expired_exception"),
        ("PermanentFailure", "permanent_failure"),
        ("", "dead_lettered"),
    ],
)
def test_error_codes_follow_the_reason(reason: str, code: str) -> None:
    assert error_code(reason) == code


def test_copies_name_their_request_and_generation() -> None:
    assert request_of(dead(message_id="r1:replay:2:retry:1", body=b"{}")) == (TENANT, "r1")
    assert replay_generation("r1:replay:2:retry:1") == 2
    assert replay_generation("r1:retry:4") == 0
