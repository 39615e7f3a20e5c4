"""The job watchdog's decisions, over the in-memory ports (the jobs' clock is the test's).

The watchdog finds the open jobs through the job index (their ``updated_at``), so what
counts is each job's own last change, and a finished job is never read.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.contracts import BatchMembership, Job, JobStatus, ProcessingMode
from shared.errors import ConfigurationError
from shared.events.announcements import Announcer
from shared.jobs import transition
from shared.processing.endings import Ending, JobEndings
from shared.processing.watchdog import JobWatchdog, WatchdogPolicy, due_at
from shared.settings import load_settings
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
GRACE = timedelta(seconds=900)


class Setup:
    def __init__(self) -> None:
        self.clock = ManualClock(NOW)
        self.wired: Wired = wire(
            clock=self.clock, JobWatchdogGraceSeconds="900", JobWatchdogStaleSeconds="7200"
        )
        watchdog = self.wired.services.watchdog
        assert watchdog is not None
        self.watchdog: JobWatchdog = watchdog

    def job(self, request_id: str = "r1", **changes: Any) -> Job:
        fields: dict[str, Any] = {
            "id": request_id,
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "correlation_id": request_id,
            "created_at": self.clock.now,
            "updated_at": self.clock.now,
            "deadline": self.clock.now + timedelta(minutes=10),
        }
        job = Job(**{**fields, **changes})
        assert self.wired.services.jobs.create(job) is not None
        return job

    def stored(self, request_id: str = "r1") -> Job:
        return self.wired.services.jobs.get(TENANT, request_id)

    def later(self, **delta: float) -> None:
        self.clock.now += timedelta(**delta)

    @property
    def failures_published(self) -> list[str]:
        return self.wired.failures_published


@pytest.fixture
def setup() -> Setup:
    return Setup()


def test_a_job_long_past_its_deadline_expires(setup: Setup) -> None:
    setup.job()
    setup.later(minutes=10 + 15, seconds=1)

    report = setup.watchdog.watch()

    assert report.outcomes == {"ended": 1}
    job = setup.stored()
    assert job.status is JobStatus.EXPIRED
    assert job.error is not None
    assert job.error.code == "deadline_exceeded"
    assert setup.failures_published == ["deadline_exceeded"]


def test_a_job_within_the_grace_period_is_left_to_its_processor(setup: Setup) -> None:
    setup.job()
    setup.later(minutes=20)  # past the deadline, within the grace period
    running = setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.RUNNING, setup.clock)
    )
    setup.later(minutes=10)

    assert setup.watchdog.watch().read == 0, "written within the grace period: not even read"
    assert setup.stored() == running

    setup.later(minutes=6)
    assert setup.watchdog.watch().outcomes == {"ended": 1}
    assert setup.stored().status is JobStatus.EXPIRED


def test_an_unfinished_job_is_read_again_only_when_due(setup: Setup) -> None:
    setup.job(deadline=NOW + timedelta(hours=2))
    setup.later(minutes=16)

    assert setup.watchdog.watch().outcomes == {"watching": 1}
    setup.later(minutes=5)
    assert setup.watchdog.watch().read == 0
    setup.later(hours=2)
    assert setup.watchdog.watch().outcomes == {"ended": 1}


def test_finished_jobs_are_never_read(setup: Setup) -> None:
    setup.job(status=JobStatus.COMPLETED)
    setup.later(minutes=16)

    first = setup.watchdog.watch()
    assert (first.open, first.read, first.outcomes) == (0, 0, {}), "not open: not read"
    setup.later(hours=5)
    assert setup.watchdog.watch().read == 0
    assert setup.stored().status is JobStatus.COMPLETED
    assert setup.failures_published == []


def test_a_job_the_processor_finishes_leaves_the_watch(setup: Setup) -> None:
    setup.job(deadline=NOW + timedelta(hours=1))
    setup.later(minutes=16)
    setup.watchdog.watch()
    setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.COMPLETED, setup.clock)
    )
    setup.later(minutes=16)

    after = setup.watchdog.watch()
    assert (after.open, after.read, after.outcomes) == (0, 0, {}), "it left the open set"
    setup.later(hours=2)
    assert setup.watchdog.watch().read == 0
    assert setup.stored().status is JobStatus.COMPLETED
    assert setup.failures_published == []


def test_a_job_without_a_deadline_fails_when_stale(setup: Setup) -> None:
    setup.job(deadline=None)
    setup.later(hours=1)
    assert setup.watchdog.watch().outcomes == {"watching": 1}

    setup.later(hours=1, seconds=1)
    assert setup.watchdog.watch().outcomes == {"ended": 1}
    job = setup.stored()
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "stale_job"


def test_a_write_between_read_and_ending_wins(setup: Setup) -> None:
    """The compare-and-swap re-checks the fresh job: a processor that moved it wins."""
    setup.job()
    setup.later(minutes=30)
    stale = setup.wired.services.jobs.load(TENANT, "r1")
    assert stale is not None
    setup.wired.services.jobs.update(
        TENANT, "r1", lambda job: transition(job, JobStatus.RUNNING, setup.clock)
    )
    policy = WatchdogPolicy(GRACE, timedelta(hours=2))
    ending = Ending(JobStatus.EXPIRED, "deadline_exceeded", "late", "ended by the job watchdog")

    endings = JobEndings(setup.wired.services.jobs, Announcer(None, None), setup.clock)

    ended = endings.end(stale, ending, lambda fresh: due_at(fresh, policy) <= setup.clock.now)

    assert ended is None
    assert setup.stored().status is JobStatus.RUNNING


def test_a_failed_announcement_is_made_by_the_next_run(setup: Setup) -> None:
    setup.job()
    setup.later(minutes=26)
    setup.wired.published.fail_with = RuntimeError("event grid is down")
    assert setup.watchdog.watch().outcomes == {"announce-failed": 1}
    assert setup.stored().status is JobStatus.EXPIRED

    setup.wired.published.fail_with = None
    setup.later(minutes=5)
    assert setup.watchdog.watch().outcomes == {"announced-again": 1}
    assert setup.failures_published == ["deadline_exceeded"]


def test_the_grace_period_covers_a_locked_model_call() -> None:
    with pytest.raises(ConfigurationError, match="JobWatchdogGraceSeconds"):
        load_settings(
            {"JobWatchdogGraceSeconds": "60", "MaxLockRenewalSeconds": "600"},
            local_settings=None,
        )


def test_a_job_in_a_global_batch_submission_is_left_to_its_control_plane(setup: Setup) -> None:
    in_a_batch = BatchMembership(deployment="d", submission_id="s1", batch_id="batch_1")
    setup.job("batched", deadline=None, mode=ProcessingMode.BATCH, status=JobStatus.RUNNING,
              batch=in_a_batch)  # fmt: skip
    setup.job("waiting", deadline=None, mode=ProcessingMode.BATCH,
              batch=BatchMembership(deployment="d"))  # fmt: skip
    setup.later(days=3)  # a quota wait and two expired 24-hour windows

    report = setup.watchdog.watch()
    assert (report.open, report.read) == (1, 1), "the submitted job is not even read"
    assert report.outcomes == {"ended": 1}
    assert setup.stored("batched").status is JobStatus.RUNNING
    waiting = setup.stored("waiting")  # staged, never submitted: the watch still applies
    assert waiting.status is JobStatus.FAILED
    assert waiting.error is not None
    assert waiting.error.code == "stale_job"
