"""Job state transitions and compare-and-swap updates."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.adapters.in_memory import InMemoryDocuments
from shared.contracts import Job, JobStatus
from shared.errors import ConcurrencyConflict, Conflict, NotFound
from shared.jobs import (
    ALLOWED_TRANSITIONS,
    DocumentJobStore,
    JobRepository,
    Versioned,
    fail,
    transition,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def new_job(status: JobStatus = JobStatus.ACCEPTED) -> Job:
    return Job(
        id="r1",
        tenant_id="t1",
        model="local-analyzer",
        status=status,
        correlation_id="c",
        created_at=NOW,
        updated_at=NOW,
    )


@pytest.mark.parametrize("source", list(JobStatus))
@pytest.mark.parametrize("target", list(JobStatus))
def test_every_transition_is_allowed_or_refused_as_the_table_says(
    source: JobStatus, target: JobStatus
) -> None:
    job = new_job(source)
    if target in ALLOWED_TRANSITIONS[source]:
        moved = transition(job, target, clock=lambda: NOW)
        assert moved.status is target
        assert (moved.completed_at == NOW) is target.is_terminal
    else:
        with pytest.raises(Conflict) as refused:
            transition(job, target)
        assert refused.value.code == (
            "job_terminal" if source.is_terminal else "invalid_transition"
        )


def test_terminal_states_admit_no_transition() -> None:
    for status in JobStatus:
        assert (ALLOWED_TRANSITIONS[status] == frozenset()) is status.is_terminal


def test_fail_records_the_error_as_error_and_last_error() -> None:
    failed = fail(new_job(), "enqueue_failed", "broker down")
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert failed.error.code == "enqueue_failed"
    assert failed.last_error == failed.error


def in_memory_store() -> DocumentJobStore:
    return DocumentJobStore(InMemoryDocuments(), "jobs")


class RacingStore(DocumentJobStore):
    """Lets another writer sneak in before the first ``races`` replaces."""

    def __init__(self, races: int) -> None:
        super().__init__(InMemoryDocuments(), "jobs")
        self.races = races

    def replace(self, job: Job, etag: str) -> str:
        if self.races > 0:
            self.races -= 1
            current = self.load(job.tenant_id, job.id)
            assert current is not None
            bumped = current.job.model_copy(update={"attempts": current.job.attempts + 1})
            super().replace(bumped, current.etag)
        return super().replace(job, etag)


def test_update_rereads_and_reapplies_after_a_lost_race() -> None:
    store = RacingStore(races=2)
    store.create(new_job())
    repository = JobRepository(store)

    updated = repository.update("t1", "r1", lambda job: transition(job, JobStatus.RUNNING))

    assert updated.status is JobStatus.RUNNING
    assert updated.attempts == 2, "the change was applied to the concurrent writer's version"


def test_update_gives_up_after_persistent_races() -> None:
    store = RacingStore(races=100)
    store.create(new_job())
    with pytest.raises(ConcurrencyConflict):
        JobRepository(store).update("t1", "r1", lambda job: transition(job, JobStatus.RUNNING))


def test_missing_and_foreign_jobs_are_not_found() -> None:
    store = in_memory_store()
    store.create(new_job())
    repository = JobRepository(store)
    with pytest.raises(NotFound):
        repository.get("t2", "r1")
    with pytest.raises(NotFound):
        repository.update("t1", "nope", lambda job: job)


class CountingStore(DocumentJobStore):
    """Counts the reads a repository makes."""

    def __init__(self) -> None:
        super().__init__(InMemoryDocuments(), "jobs")
        self.loads = 0

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        self.loads += 1
        return super().load(tenant_id, job_id)


def test_advance_writes_with_the_etag_it_holds_and_reads_nothing() -> None:
    store = CountingStore()
    repository = JobRepository(store)
    created = repository.create(new_job())
    assert created is not None
    assert repository.create(new_job()) is None, "creation is exclusive"

    running = repository.advance(created, lambda job: transition(job, JobStatus.RUNNING))
    done = repository.advance(running, lambda job: transition(job, JobStatus.COMPLETED))

    assert store.loads == 0
    assert repository.get("t1", "r1").status is JobStatus.COMPLETED
    assert done.etag != running.etag != created.etag


def test_advance_from_an_outdated_version_rereads_and_reapplies() -> None:
    store = in_memory_store()
    repository = JobRepository(store)
    created = repository.create(new_job())
    assert created is not None
    repository.update("t1", "r1", lambda job: job.model_copy(update={"attempts": 5}))

    advanced = repository.advance(created, lambda job: transition(job, JobStatus.RUNNING))

    assert (advanced.job.status, advanced.job.attempts) == (JobStatus.RUNNING, 5)
    stored = store.load("t1", "r1")
    assert stored is not None
    assert stored.etag == advanced.etag
