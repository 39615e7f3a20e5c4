"""The job watchdog sends a job's message again when it seems lost (fakes, injected clock).

A job ``accepted`` (or ``running`` with its lock long gone) and unchanged for
JobResend__afterSeconds, its deadline ahead, is resent from its record at most
JobResend__maxAttempts times; the processor treats a copy whose job is already running or
ended as a duplicate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.contracts import BatchMembership, ClaimCheck, Job, JobStatus, ProcessingMode
from shared.events.announcements import Announcer
from shared.job_index import JobIndex
from shared.jobs import transition
from shared.lanes import Lane
from shared.messaging import OutgoingMessage
from shared.processing.endings import JobEndings
from shared.processing.resends import RESENT_SETTLEMENT, JobResender, ResendPolicy
from shared.processing.watchdog import JobWatchdog, WatchdogPolicy
from tests.fakes import ManualClock, broker_down
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
AFTER = timedelta(seconds=1200)


class Setup:
    def __init__(self, max_attempts: int = 2) -> None:
        self.clock = ManualClock(NOW)
        self.wired: Wired = wire(clock=self.clock, JobWatchdogGraceSeconds="900",
                                 JobWatchdogStaleSeconds="90000")  # fmt: skip
        services = self.wired.services
        self.resent_lanes: list[str] = []
        self.resender = JobResender(
            sender=self.wired.queue,
            jobs=services.jobs,
            policy=ResendPolicy(AFTER, max_attempts, max_lock_renewal_seconds=600),
            count_resent=self.resent_lanes.append,
            clock=self.clock,
        )
        self.watchdog = JobWatchdog(
            index=JobIndex(self.wired.documents, self.wired.settings.containers.jobs),
            documents=self.wired.documents,
            checkpoint_container=self.wired.settings.containers.ledgers,
            jobs=services.jobs,
            endings=JobEndings(services.jobs, Announcer(None, None), self.clock),
            policy=WatchdogPolicy(timedelta(seconds=900), timedelta(seconds=90_000)),
            clock=self.clock,
            resender=self.resender,
        )

    def job(self, request_id: str = "r1", **changes: Any) -> Job:
        claim = ClaimCheck(
            blob_uri=f"{self.wired.blobs.account_url}/inputs/{TENANT}/{request_id}",
            sha256="a" * 64,
            size=12,
            media_type="text/plain",
        )
        fields: dict[str, Any] = {
            "id": request_id,
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "correlation_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "created_at": self.clock.now,
            "updated_at": self.clock.now,
            "deadline": self.clock.now + timedelta(hours=2),
            "input": claim,
            "source": "http",
            "metadata": {"document_type": "invoice"},
        }
        job = Job(**{**fields, **changes})
        assert self.wired.services.jobs.create(job) is not None
        return job

    def stored(self, request_id: str = "r1") -> Job:
        return self.wired.services.jobs.get(TENANT, request_id)

    def later(self, **delta: float) -> None:
        self.clock.now += timedelta(**delta)

    @property
    def sent(self) -> list[OutgoingMessage]:
        return self.wired.queue.sent


@pytest.fixture
def setup() -> Setup:
    return Setup()


def test_an_accepted_job_whose_message_is_lost_is_resent_as_intake_sent_it(
    setup: Setup,
) -> None:
    job = setup.job(document_id="contract-7", priority="high")
    setup.later(seconds=1199)
    assert setup.watchdog.watch().outcomes == {"watching": 1}
    assert setup.sent == []

    setup.later(seconds=2)
    assert setup.watchdog.watch().outcomes == {"resent": 1}

    [copy] = setup.sent
    assert copy.message_id == job.id, "the same message id: a duplicate is the processor's"
    assert copy.session_id == "contract-7", "the same session: the document's order"
    assert copy.correlation_id == job.correlation_id
    assert copy.subject == "inferbus.request"
    properties = copy.application_properties
    assert {k: properties[k] for k in ("priority", "model_name", "tenant", "retry_count",
                                       "schema_version", "source", "document_type")} == {
        "priority": "high", "model_name": "local-analyzer", "tenant": TENANT, "retry_count": 0,
        "schema_version": "inferbus.request/v1", "source": "http", "document_type": "invoice",
    }  # fmt: skip
    traceparent = str(properties["traceparent"])
    assert traceparent.split("-")[1] == job.correlation_id, "a new span of the job's trace"
    assert copy.time_to_live is not None
    assert copy.time_to_live <= timedelta(hours=2)
    assert setup.resent_lanes == [Lane.ORDERED.value]
    noted = setup.stored()
    assert noted.status is JobStatus.ACCEPTED
    assert noted.settlement == f"{RESENT_SETTLEMENT} (attempt 1 of 2)"


def test_resends_stop_at_the_most_allowed_and_the_job_then_ends_as_before(
    setup: Setup,
) -> None:
    setup.job(deadline=NOW + timedelta(hours=3))
    for _ in range(2):
        setup.later(seconds=1201)
        assert setup.watchdog.watch().outcomes == {"resent": 1}
    setup.later(seconds=1201)
    assert setup.watchdog.watch().outcomes == {"watching": 1}, "no third resend"
    assert len(setup.sent) == 2
    assert setup.stored().settlement == f"{RESENT_SETTLEMENT} (attempt 2 of 2)"

    setup.later(hours=3)
    assert setup.watchdog.watch().outcomes == {"ended": 1}
    assert setup.stored().status is JobStatus.EXPIRED
    assert len(setup.sent) == 2


def test_a_running_job_is_resent_only_once_its_lock_is_long_gone(setup: Setup) -> None:
    setup.job()
    setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.RUNNING, setup.clock)
    )
    setup.later(seconds=1201)  # past JobResend__afterSeconds, and 600 s + 300 s
    assert setup.watchdog.watch().outcomes == {"resent": 1}
    job = setup.stored()
    assert job.status is JobStatus.ACCEPTED, "nobody holds it: back to accepted"
    assert len(setup.sent) == 1


def test_a_running_job_within_its_lock_renewals_is_not_resent() -> None:
    setup = Setup()
    setup.resender.policy = ResendPolicy(timedelta(seconds=60), 2, max_lock_renewal_seconds=1200)
    setup.job()
    setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.RUNNING, setup.clock)
    )
    setup.later(seconds=1499)  # past afterSeconds, within 1200 s of renewals + a 5-min lock
    assert setup.watchdog.watch().outcomes == {"watching": 1}
    assert setup.sent == []
    setup.later(seconds=2)
    assert setup.watchdog.watch().outcomes == {"resent": 1}


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"deadline": NOW + timedelta(seconds=1200)}, "due only at its deadline"),
        ({"not_before": NOW + timedelta(hours=1)}, "waiting for its not_before"),
        ({"mode": ProcessingMode.BATCH, "batch": BatchMembership(deployment="d")}, "staged"),
        ({"status": JobStatus.COMPLETED}, "finished"),
    ],
)
def test_jobs_that_have_no_lost_message_are_not_resent(
    setup: Setup, changes: dict[str, Any], why: str
) -> None:
    setup.job(**changes)
    setup.later(seconds=1201)
    setup.watchdog.watch()
    assert setup.sent == [], why


def test_a_job_waiting_for_its_not_before_is_resent_only_after_it(setup: Setup) -> None:
    setup.job(not_before=NOW + timedelta(minutes=30))
    setup.later(minutes=30, seconds=1199)
    setup.watchdog.watch()
    assert setup.sent == []
    setup.later(seconds=2)
    assert setup.watchdog.watch().outcomes == {"resent": 1}


def test_a_broker_that_refuses_the_resend_is_tried_again_next_run(setup: Setup) -> None:
    setup.job()
    setup.later(seconds=1201)
    setup.wired.queue.fail_with = broker_down()
    assert setup.watchdog.watch().outcomes == {"resend-failed": 1}
    assert setup.stored().settlement is None, "nothing noted: nothing was sent"
    assert setup.resent_lanes == []

    setup.wired.queue.fail_with = None
    setup.later(minutes=5)
    assert setup.watchdog.watch().outcomes == {"resent": 1}
    assert setup.stored().settlement == f"{RESENT_SETTLEMENT} (attempt 1 of 2)"


def test_a_job_the_processor_moved_meanwhile_is_not_noted() -> None:
    """The note re-checks the fresh job: a processor that took it meanwhile keeps it."""
    setup = Setup()
    setup.job()
    setup.later(seconds=1201)
    current = setup.wired.services.jobs.load(TENANT, "r1")
    assert current is not None
    setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.RUNNING, setup.clock)
    )
    assert setup.resender.resend(current, 1)
    job = setup.stored()
    assert (job.status, job.settlement) == (JobStatus.RUNNING, None)


def test_with_no_resends_allowed_the_watchdog_only_ends_jobs() -> None:
    setup = Setup(max_attempts=0)
    setup.job()
    setup.later(hours=2, minutes=16)
    assert setup.watchdog.watch().outcomes == {"ended": 1}
    assert setup.sent == []
