"""How the job watchdog's work goes: the job index, the checkpoint, runs cut short.

Over the in-memory ports, with the watchdog built directly so that the tests count the
job documents it reads (``CountingDocuments``) and set how long a run may take.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryDocuments, RecordingPublisher, RecordingSender
from shared.contracts import BatchMembership, InlineText, Job, JobStatus, ProcessingMode
from shared.documents import Document
from shared.errors import TransientError
from shared.events.announcements import FAILED, Announcer
from shared.job_index import STATE, IndexState, JobIndex, index_tags, job_name
from shared.jobs import DocumentJobStore, JobRepository, transition
from shared.processing.endings import JobEndings
from shared.processing.resends import JobResender, ResendPolicy
from shared.processing.watchdog import (
    CHECKPOINT,
    SAVE_EVERY,
    SETTLEMENT,
    JobWatchdog,
    WatchdogPolicy,
    ending_for,
)
from tests.fakes import ManualClock

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
JOBS = "jobs"
LEDGER = "ledger"
GRACE = timedelta(seconds=900)
STALE = timedelta(hours=2)


class CountingDocuments(InMemoryDocuments):
    """In-memory documents that note every job document read and every listing; after
    ``fail_after`` job reads, reading a job fails (storage went away mid-run), and with
    ``killed_on_failure`` nothing is written after that (the process died there)."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs_read: list[str] = []
        self.listings = 0
        self.fail_after: int | None = None
        self.killed_on_failure = False
        self.dead = False
        # Seconds the job reads took: each one takes one (see ``Setup.elapsed``).
        self.seconds = 0.0

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        if container == JOBS:
            if self.fail_after is not None and len(self.jobs_read) >= self.fail_after:
                self.dead = self.killed_on_failure
                raise RuntimeError("storage went away")
            self.jobs_read.append(name)
            self.seconds += 1
        return super().load(container, name)

    def put(self, container: str, name: str, document: Document) -> str:
        if self.dead:
            return "lost with the process"
        return super().put(container, name, document)

    def list_names(self, container: str, prefix: str) -> list[str]:
        self.listings += 1
        return super().list_names(container, prefix)

    def list_modified(self, container: str, prefix: str) -> list[tuple[str, datetime]]:
        self.listings += 1
        return super().list_modified(container, prefix)


class Setup:
    def __init__(self, max_run: timedelta = timedelta(minutes=4), max_resends: int = 2) -> None:
        self.clock = ManualClock(NOW)
        self.documents = CountingDocuments()
        self.jobs = JobRepository(DocumentJobStore(self.documents, JOBS), self.clock)
        self.published = RecordingPublisher()
        self.sender = RecordingSender()
        self.endings = JobEndings(self.jobs, Announcer(self.published, None), self.clock)
        self.policy = WatchdogPolicy(GRACE, STALE, max_run=max_run)
        self.resend_policy = ResendPolicy(timedelta(seconds=1200), max_resends, 600)
        self.watchdog = JobWatchdog(
            index=JobIndex(self.documents, JOBS),
            documents=self.documents,
            checkpoint_container=LEDGER,
            jobs=self.jobs,
            endings=self.endings,
            policy=self.policy,
            clock=self.clock,
            resender=JobResender(
                sender=self.sender,
                jobs=self.jobs,
                policy=self.resend_policy,
                count_resent=lambda lane: None,
                clock=self.clock,
            ),
            elapsed=self.elapsed,
        )

    def elapsed(self) -> float:
        """The run's monotonic clock: every job read takes one second, nothing else."""
        return self.documents.seconds

    def job(self, request_id: str, **changes: Any) -> str:
        """Record a job; its document's name."""
        fields: dict[str, Any] = {
            "id": request_id,
            "tenant_id": TENANT,
            "model": "local-analyzer",
            "correlation_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "input": InlineText(text="Invoice 12: 300 EUR due."),
            "created_at": self.clock.now,
            "updated_at": self.clock.now,
            "deadline": self.clock.now + timedelta(hours=2),
        }
        assert self.jobs.create(Job(**{**fields, **changes})) is not None
        return job_name(TENANT, request_id)

    def jobs_named(self, count: int, prefix: str = "job", **changes: Any) -> list[str]:
        return [self.job(f"{prefix}-{n:04d}", **changes) for n in range(count)]

    def later(self, **delta: float) -> None:
        self.clock.now += timedelta(**delta)

    def checkpoint(self) -> Document:
        found = InMemoryDocuments.load(self.documents, LEDGER, CHECKPOINT)
        assert found is not None, "no checkpoint was written"
        return found[0]

    def reads(self) -> list[str]:
        """The job documents read since the last call."""
        read, self.documents.jobs_read = self.documents.jobs_read, []
        return read


def test_a_run_out_of_time_leaves_its_progress_and_the_next_run_continues() -> None:
    setup = Setup(max_run=timedelta(seconds=60))
    names = setup.jobs_named(100)  # unfinished, due only at their deadline in two hours
    setup.later(minutes=16)

    first = setup.watchdog.watch()
    read_first = setup.reads()
    assert first.finished is False, "60 s of one-second reads cannot cover 100 jobs"
    assert 60 <= first.read <= 61
    assert len(read_first) == first.read
    assert first.outcomes == {"watching": first.read}
    assert set(setup.checkpoint()["pending"]) == set(read_first), "its progress is saved"

    setup.later(minutes=1)  # nothing read is due again yet (to be resent at 20 minutes)
    second = setup.watchdog.watch()
    read_second = setup.reads()
    assert second.finished is True
    assert set(read_second).isdisjoint(read_first), "what was examined is not read again"
    assert sorted(read_first + read_second) == names, "the rest is read"
    assert set(setup.checkpoint()["pending"]) == set(names)

    setup.later(minutes=1)
    third = setup.watchdog.watch()
    assert (third.open, third.read, third.finished) == (100, 0, True)
    assert setup.reads() == []


def test_a_run_given_the_time_reads_every_job_due() -> None:
    """The same jobs as above, within ``max_run``: one run reads them all."""
    setup = Setup(max_run=timedelta(seconds=101))
    names = setup.jobs_named(100)
    setup.later(minutes=16)

    report = setup.watchdog.watch()
    assert (report.read, report.finished) == (100, True)
    assert sorted(setup.reads()) == names


def test_a_run_killed_midway_keeps_what_it_saved_every_save_every_reads() -> None:
    assert SAVE_EVERY == 100
    setup = Setup()
    names = setup.jobs_named(250)
    setup.later(minutes=16)
    setup.documents.fail_after = 150
    setup.documents.killed_on_failure = True

    with pytest.raises(RuntimeError, match="storage went away"):
        setup.watchdog.watch()
    read_first = setup.reads()
    assert len(read_first) == 150
    assert sorted(setup.checkpoint()["pending"]) == sorted(read_first[:SAVE_EVERY]), (
        "saved after the first 100 reads, not after the 150th"
    )

    setup.documents.fail_after = None
    setup.documents.dead = False
    setup.later(minutes=1)
    second = setup.watchdog.watch()
    read_second = setup.reads()
    assert second.read == 150, "at most SAVE_EVERY reads are repeated"
    assert set(read_second).isdisjoint(read_first[:SAVE_EVERY])
    assert set(read_first[SAVE_EVERY:]) <= set(read_second)
    assert sorted(setup.checkpoint()["pending"]) == names


def test_a_run_that_fails_midway_saves_what_it_did_before_failing() -> None:
    setup = Setup()
    names = setup.jobs_named(250)
    setup.later(minutes=16)
    setup.documents.fail_after = 150

    with pytest.raises(RuntimeError, match="storage went away"):
        setup.watchdog.watch()
    read_first = setup.reads()
    assert sorted(setup.checkpoint()["pending"]) == sorted(read_first)

    setup.documents.fail_after = None
    setup.later(minutes=1)
    second = setup.watchdog.watch()
    assert second.read == 100, "only the jobs never read are read"
    assert set(setup.reads()).isdisjoint(read_first)
    assert sorted(setup.checkpoint()["pending"]) == names


@pytest.mark.parametrize("finished", [10, 1_000])
def test_a_run_reads_the_open_jobs_whatever_the_finished_jobs_retained(finished: int) -> None:
    setup = Setup()
    overdue = setup.jobs_named(5, prefix="open", deadline=NOW + timedelta(minutes=10))
    setup.jobs_named(finished, prefix="done", status=JobStatus.COMPLETED)
    setup.later(hours=1)

    report = setup.watchdog.watch()

    assert (report.open, report.read) == (5, 5)
    assert report.outcomes == {"ended": 5}
    assert sorted(setup.reads()) == overdue, "no finished job is read"
    assert setup.documents.listings == 0, "the jobs container is not listed"
    assert all(setup.jobs.get(TENANT, f"open-{n:04d}").status is JobStatus.EXPIRED
               for n in range(5))  # fmt: skip

    setup.reads()
    setup.later(hours=6)
    assert setup.watchdog.watch().read == 0
    assert setup.reads() == []


def test_a_job_that_ends_by_itself_is_forgotten_at_the_next_run() -> None:
    setup = Setup()
    finishing = setup.job("finishing")
    staying = setup.job("staying")
    setup.later(seconds=1201)  # their messages count as lost: both are resent
    assert setup.watchdog.watch().outcomes == {"resent": 2}
    before = setup.checkpoint()
    assert set(before["pending"]) == {finishing, staying}
    assert before["resent"] == {finishing: 1, staying: 1}

    setup.jobs.update(TENANT, "finishing",
                      lambda job: transition(job, JobStatus.RUNNING, setup.clock))  # fmt: skip
    setup.jobs.update(TENANT, "finishing",
                      lambda job: transition(job, JobStatus.COMPLETED, setup.clock))  # fmt: skip
    setup.reads()
    setup.later(minutes=1)

    report = setup.watchdog.watch()
    assert (report.open, report.read) == (1, 0), "the finished job is not even read"
    assert setup.reads() == []
    after = setup.checkpoint()
    assert set(after["pending"]) == {staying}, "forgotten from the pending jobs"
    assert after["resent"] == {staying: 1}, "and from the resend counts"
    assert after["pending"][staying] == before["pending"][staying]


def test_a_checkpoint_of_the_previous_version_is_still_read() -> None:
    setup = Setup()
    watched = setup.job("watched", deadline=NOW + timedelta(hours=3))
    resent_twice = setup.job("resent-twice", deadline=NOW + timedelta(hours=3))
    setup.job("unannounced", deadline=NOW + timedelta(minutes=5))
    setup.later(minutes=30)
    overdue = setup.jobs.load(TENANT, "unannounced")
    assert overdue is not None
    ended = setup.endings.end(overdue, ending_for(overdue.job, setup.policy))
    assert ended is not None  # ended by the previous version, its announcement failed
    assert ended.settlement == SETTLEMENT
    setup.reads()
    due = NOW + timedelta(hours=3) + GRACE
    previous: Document = {
        "through": (NOW + timedelta(minutes=20)).isoformat(),
        "pending": {watched: due.isoformat()},
        "unannounced": [job_name(TENANT, "unannounced")],
        "resent": {resent_twice: 2},
    }
    setup.documents.put(LEDGER, CHECKPOINT, previous)

    report = setup.watchdog.watch()

    assert report.outcomes == {"announced-again": 1, "watching": 1}
    assert [e.type for e in setup.published.published].count(FAILED) == 1
    announced, *examined = setup.reads()
    assert announced == job_name(TENANT, "unannounced")  # found again to announce it
    assert examined == [resent_twice], "the pending job is read only when due"
    assert setup.sender.sent == [], "its two resends count: no third"
    saved = setup.checkpoint()
    assert saved["pending"][watched] == due.isoformat()
    assert saved["resent"] == {resent_twice: 2}
    assert saved["unannounced"] == []


def test_a_job_the_index_still_shows_open_after_it_went_into_a_batch_is_left_alone() -> None:
    """The index is updated shortly after a write: a job read as submitted to a Global
    Batch is left to its control plane and not remembered."""
    setup = Setup()
    in_a_batch = BatchMembership(deployment="d", submission_id="s1", batch_id="batch_1")
    name = setup.job("batched", deadline=None, mode=ProcessingMode.BATCH,
                     status=JobStatus.RUNNING, batch=in_a_batch)  # fmt: skip
    job = setup.jobs.get(TENANT, "batched")
    assert index_tags(job)[STATE] == IndexState.IN_A_BATCH
    setup.documents.blobs.tags[(JOBS, name)] = {**index_tags(job), STATE: IndexState.OPEN}
    setup.later(days=3)

    report = setup.watchdog.watch()

    assert report.outcomes == {"in-a-batch": 1}
    assert setup.jobs.get(TENANT, "batched").status is JobStatus.RUNNING
    assert name not in setup.checkpoint()["pending"]


def test_jobs_never_read_come_before_jobs_read_again_when_time_is_short() -> None:
    """Resends failing while the broker is away keep their jobs due at every run; a run
    out of time must still reach the jobs it has never read."""
    setup = Setup(max_run=timedelta(seconds=5))
    first_batch = setup.jobs_named(6, prefix="a")
    setup.later(minutes=21)  # past the resend delay: each job's message seems lost
    setup.sender.fail_with = TransientError("the broker is away")

    first = setup.watchdog.watch()
    assert first.outcomes == {"resend-failed": first.read}
    assert sorted(setup.reads()) == first_batch
    late = setup.jobs_named(3, prefix="b", created_at=NOW, updated_at=NOW)

    second = setup.watchdog.watch()
    read_second = setup.reads()
    assert second.finished is False
    assert read_second[:3] == late, "the jobs never read are read first"
    assert set(read_second[3:]) <= set(first_batch)
