"""The ordered lane's retries in place survive an outage as long as the other lanes'.

The other lanes retry by scheduled copies with backoff (MaxRetries 9): at least 917 s
before giving up. The ordered lane retries by redelivery, waiting in place with the
session locked; it used to wait at most 30 s a try (about 215 s in all). Here the waits
are computed from the policy, and a storage outage of 15 minutes on the injected clock is
waited out with the document's steps still completed in order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.adapters.in_memory import (
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.adapters.models.local import LocalModel
from shared.contracts import InlineText, Job, JobStatus, RequestMessage
from shared.errors import TransientError
from shared.events.announcements import Announcer
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.jobs import DocumentJobStore, JobRepository, Versioned
from shared.processing.assembly import lane_processor
from shared.processing.backoff import retry_delay
from shared.processing.deferral import DocumentDeferralLedger
from shared.processing.inbound import InboundMessage
from shared.processing.policy import (
    ORDERED_RETRY_MAX_WAIT_SECONDS,
    ProcessingPolicy,
    ordered_retry_max_wait,
)
from shared.settings import load_settings
from tests.fakes import ManualClock
from tests.support.catalogs import local_catalog, served_models

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
OLD_LIMIT_SECONDS = 215.0  # 5 + 10 + 20 + 6 x 30: the waits capped at 30 s a try


def lowest(low: float, high: float) -> float:
    return low


def shortest_waits(max_retries: int, base: float, cap: float, floor: float, most: float) -> float:
    """The least total wait before the ordered lane gives up: each try waits its backoff
    at the jitter floor, capped by the longest wait in place."""
    return sum(
        min(retry_delay(n, base_seconds=base, cap_seconds=cap, uniform=lowest,
                        floor_fraction=floor), most)
        for n in range(max_retries)
    )  # fmt: skip


def test_the_ordered_lane_survives_at_least_as_long_as_the_scheduled_lanes() -> None:
    settings = load_settings({}, local_settings=None)
    most = ordered_retry_max_wait(settings.processing.max_lock_renewal_seconds)
    retries = settings.retries
    policy = (retries.max_retries, retries.base_seconds, retries.max_seconds)
    floor = retries.jitter_floor

    ordered = shortest_waits(*policy, floor, most)
    scheduled = shortest_waits(*policy, floor, float("inf"))

    assert scheduled >= 917, "the other lanes' guarantee (processing.backoff)"
    assert ordered == scheduled, "the wait in place never cuts the backoff short"
    assert ordered >= 15 * 60
    assert shortest_waits(*policy, floor, 30.0) < OLD_LIMIT_SECONDS, "what it was"


def test_a_wait_in_place_stays_inside_the_lock_keepers_renewals() -> None:
    assert ordered_retry_max_wait(600) == ORDERED_RETRY_MAX_WAIT_SECONDS
    assert ordered_retry_max_wait(300) == 180, "room for the try before renewals stop"
    assert ordered_retry_max_wait(60) == 0


class StorageDownUntil:
    """A job store that fails every call while the clock is before ``until``."""

    def __init__(self, store: DocumentJobStore, clock: ManualClock, until: datetime) -> None:
        self._store, self._clock, self.until = store, clock, until
        self.failed = 0

    def _check(self) -> None:
        if self._clock.now < self.until:
            self.failed += 1
            raise TransientError("storage: ServiceRequestError (connection refused)")

    def create(self, job: Job) -> str | None:
        self._check()
        return self._store.create(job)

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        self._check()
        return self._store.load(tenant_id, job_id)

    def replace(self, job: Job, etag: str) -> str:
        self._check()
        return self._store.replace(job, etag)


def step(request_id: str, sequence: int) -> InboundMessage:
    request = RequestMessage(
        request_id=request_id,
        tenant_id=TENANT,
        model="local-analyzer",
        input=InlineText(text=f"Step {request_id}. Total amount due: 100 EUR."),
        document_id="contract-7",
    )
    return InboundMessage(
        body=request.model_dump_json(by_alias=True).encode(),
        message_id=request_id,
        sequence_number=sequence,
        delivery_count=1,
        enqueued_time=NOW,
        correlation_id=request_id,
        session_id="contract-7",
        content_type="application/json",
        application_properties={"tenant": TENANT, "retry_count": 0},
    )


def run_session(outage: timedelta) -> dict[str, Any]:
    """Two steps of one document in a session: the head is delivered until it is settled
    for good (an abandon brings it back first, its delivery count one higher), as the
    broker delivers a session's messages; every wait moves the injected clock."""
    clock = ManualClock(NOW)
    blobs = InMemoryBlobs()
    documents = InMemoryDocuments(blobs)
    healthy = DocumentJobStore(documents, "jobs")
    for request_id in ("step-1", "step-2"):
        healthy.create(
            Job(id=request_id, tenant_id=TENANT, model="local-analyzer", correlation_id=request_id,
                created_at=NOW, updated_at=NOW, deadline=NOW + timedelta(hours=2),
                document_id="contract-7")
        )  # fmt: skip
    store = StorageDownUntil(healthy, clock, NOW + outage)
    jobs = JobRepository(store, clock=clock)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += timedelta(seconds=seconds)

    settings = load_settings({}, local_settings=None)
    sender = RecordingSender()
    processor = lane_processor(
        policy=ProcessingPolicy(
            "ordered-requests",
            ("local-analyzer",),
            settings.retries.max_retries,
            settings.retries.base_seconds,
            settings.retries.max_seconds,
            ordered=True,
            lane="ordered",
            retry_jitter_floor=settings.retries.jitter_floor,
            ordered_retry_max_wait_seconds=ordered_retry_max_wait(
                settings.processing.max_lock_renewal_seconds
            ),
        ),
        jobs=jobs,
        claim_checks=ClaimChecks(blobs, "inputs", ("inputs",), 10_000),
        models=served_models(LocalModel()),
        announcer=Announcer(RecordingPublisher(), RecordingSender()),
        retry_sender=sender,
        ledger=DocumentDeferralLedger(documents, "ledgers"),
        rules=RequestRules(local_catalog(), 3600, 86_400, producer_tenants=(TENANT,)),
        clock=clock,
        uniform=lowest,  # the worst case: every wait at its jitter floor
        sleep=sleep,
    )
    session = deque([step("step-1", 1), step("step-2", 2)])
    settler = RecordingSettler()
    finished: list[tuple[str, str, datetime]] = []
    while session:
        head = session[0]
        outcome = processor.process(head, settler)
        if outcome == "abandoned":
            session[0] = replace(head, delivery_count=head.delivery_count + 1)
            continue
        session.popleft()
        finished.append((str(head.message_id), outcome, clock.now))
    return {
        "finished": finished,
        "slept": slept,
        "sent": sender.sent,
        "store": store,
        "jobs": JobRepository(healthy),
        "settler": settler,
    }


def test_a_storage_outage_of_fifteen_minutes_is_waited_out_in_order() -> None:
    outage = timedelta(minutes=15)
    run = run_session(outage)

    assert [(name, outcome) for name, outcome, _ in run["finished"]] == [
        ("step-1", "completed"),
        ("step-2", "completed"),
    ]
    _, _, first_done = run["finished"][0]
    assert first_done >= NOW + outage, "step 1 finished only once storage was back"
    assert sum(run["slept"]) > OLD_LIMIT_SECONDS, "well past what the old waits survived"
    assert max(run["slept"]) <= ORDERED_RETRY_MAX_WAIT_SECONDS
    assert run["sent"] == [], "no scheduled copy could overtake the document's next step"
    assert run["store"].failed > 0
    jobs: JobRepository = run["jobs"]
    assert [jobs.get(TENANT, r).status for r in ("step-1", "step-2")] == [JobStatus.COMPLETED] * 2
    settled = [action for action, *_ in run["settler"].actions]
    assert "dead_letter" not in settled
    assert settled[-2:] == ["complete", "complete"]
