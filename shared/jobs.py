"""The job lifecycle: allowed transitions and compare-and-swap updates.

A job document is changed by many hands (intake, the processor, a cancelling caller,
the deferred sweeper), each possibly running twice because delivery is at-least-once.
Every change therefore goes through ``JobRepository.update``: read with its ETag, apply a
pure change, write only if nobody wrote in between, and retry on a lost race. A
transition out of a terminal state is refused, which is what makes duplicate deliveries
harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from shared.clock import Clock, utc_now
from shared.contracts import Job, JobError, JobStatus
from shared.documents import JsonDocuments
from shared.errors import ConcurrencyConflict, Conflict, NotFound, PermanentError
from shared.job_index import index_tags, job_name

log = logging.getLogger(__name__)

ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.ACCEPTED: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.COMPLETED,
            JobStatus.FAILED,
            JobStatus.EXPIRED,
            JobStatus.CANCELLED,
        }
    ),
    # RUNNING -> RUNNING: a redelivery (lost lock, abandon) attempts the same work again.
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.ACCEPTED,
            JobStatus.COMPLETED,
            JobStatus.FAILED,
            JobStatus.EXPIRED,
            JobStatus.CANCELLED,
        }
    ),
    JobStatus.COMPLETED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.EXPIRED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
    # Recorded so from the start (``rejected``): it never ran and never will.
    JobStatus.REJECTED: frozenset(),
}


def transition(job: Job, target: JobStatus, clock: Clock = utc_now, **changes: Any) -> Job:
    """Return ``job`` moved to ``target`` with ``changes`` applied, or raise Conflict.

    Terminal states are final: a second delivery of finished work cannot reopen it.
    """
    if target not in ALLOWED_TRANSITIONS[job.status]:
        raise Conflict(
            f"job {job.id} is {job.status.value} and cannot become {target.value}",
            code="job_terminal" if job.status.is_terminal else "invalid_transition",
        )
    now = clock()
    updates: dict[str, Any] = {"status": target, "updated_at": now, **changes}
    if target.is_terminal:
        updates.setdefault("completed_at", now)
    return job.model_copy(update=updates)


def fail(job: Job, code: str, message: str, clock: Clock = utc_now, **changes: Any) -> Job:
    """Move a job to ``failed`` with an error the caller can read."""
    error = JobError(code=code, message=message)
    return transition(job, JobStatus.FAILED, clock, error=error, last_error=error, **changes)


def rejected(job: Job, code: str, message: str, clock: Clock = utc_now) -> Job:
    """``job`` (not stored yet) recorded as ``rejected`` at its door, with the reason: the
    one way into that state, which no transition reaches."""
    now = clock()
    error = JobError(code=code, message=message)
    return job.model_copy(
        update={"status": JobStatus.REJECTED, "error": error, "updated_at": now,
                "completed_at": now},
    )  # fmt: skip


# An operator's replay of a dead-lettered request (``processing.dead_letters.operations``) is the
# one way back out of a terminal state: only the failures the dead-lettering recorded.
REOPENABLE = frozenset({JobStatus.FAILED, JobStatus.EXPIRED})


def reopen(job: Job, settlement: str, clock: Clock = utc_now) -> Job:
    """Return a failed or expired ``job`` moved back to ``accepted`` (its ``last_error``
    kept for the record), or raise Conflict. Never used by the processor: a duplicate
    delivery still meets a final state."""
    if job.status not in REOPENABLE:
        raise Conflict(
            f"job {job.id} is {job.status.value} and cannot be reopened",
            code="job_not_reopenable",
        )
    return job.model_copy(
        update={
            "status": JobStatus.ACCEPTED,
            "updated_at": clock(),
            "completed_at": None,
            "error": None,
            "settlement": settlement,
        }
    )


# Service Bus's longest lock duration: a lock renewed last at some moment has lapsed this
# long after it, whatever the entity's lock duration.
LONGEST_LOCK = timedelta(minutes=5)


def held_by_a_delivery(job: Job, now: datetime, max_lock_renewal_seconds: float) -> bool:
    """Whether a ``running`` job may still be in the hands of the delivery that moved it
    to running: it changed less than MaxLockRenewalSeconds (how long a lock is kept) plus
    the longest lock duration ago. Past that, its lock is long gone and nobody runs it."""
    if job.status is not JobStatus.RUNNING:
        return False
    return now - job.updated_at < timedelta(seconds=max_lock_renewal_seconds) + LONGEST_LOCK


@dataclass(frozen=True)
class Versioned:
    """A job as stored, with the ETag its next write must match."""

    job: Job
    etag: str


class JobStore(Protocol):
    """Durable job documents keyed by tenant and id (``DocumentJobStore``)."""

    def create(self, job: Job) -> str | None:
        """Store a new job; its ETag, or None when one with the same id already exists."""
        ...

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        """The stored job and its ETag, or None."""
        ...

    def replace(self, job: Job, etag: str) -> str:
        """Overwrite if the ETag still matches (else ConcurrencyConflict); the new ETag."""
        ...


class DocumentJobStore:
    """Implements ``JobStore`` as ``<JobsContainer>/<tenant>/<request_id>.json`` documents.

    The tenant prefix keeps tenants apart by construction and lets lifecycle rules or
    operators act per tenant. Every write carries the job's index tags (``job_index``),
    in the same request.
    """

    def __init__(self, documents: JsonDocuments, container: str) -> None:
        self._documents = documents
        self._container = container

    def create(self, job: Job) -> str | None:
        document = job.model_dump(mode="json", by_alias=True)
        name = job_name(job.tenant_id, job.id)
        return self._documents.create(self._container, name, document, index_tags(job))

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            return None
        found = self._documents.load(self._container, job_name(tenant_id, job_id))
        if found is None:
            return None
        document, etag = found
        if document.get("schema") != "inferbus.job/v1":
            raise PermanentError(f"job {job_id} has unknown schema {document.get('schema')!r}")
        return Versioned(Job.model_validate(document), etag)

    def replace(self, job: Job, etag: str) -> str:
        document = job.model_dump(mode="json", by_alias=True)
        name = job_name(job.tenant_id, job.id)
        return self._documents.replace(self._container, name, document, etag, index_tags(job))


class JobRepository:
    """Use-case facing access to jobs: lookups scoped to a tenant and CAS updates.

    Storage round trips are the cost of a request (each is a network call to Blob
    storage), so a caller that already holds a job's ETag, from the read or write before,
    passes the ``Versioned`` job to ``advance`` instead of having it read again.
    """

    MAX_CAS_ATTEMPTS = 8

    def __init__(self, store: JobStore, clock: Clock = utc_now) -> None:
        self._store = store
        self.clock = clock

    def create(self, job: Job) -> Versioned | None:
        """Store a new job exclusively; None when the id is taken."""
        etag = self._store.create(job)
        return Versioned(job, etag) if etag is not None else None

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        return self._store.load(tenant_id, job_id)

    def find(self, tenant_id: str, job_id: str) -> Job | None:
        found = self._store.load(tenant_id, job_id)
        return found.job if found else None

    def get(self, tenant_id: str, job_id: str) -> Job:
        """The job, or NotFound: unknown ids and other tenants' ids look the same."""
        job = self.find(tenant_id, job_id)
        if job is None:
            raise NotFound(f"no request {job_id}")
        return job

    def update(self, tenant_id: str, job_id: str, change: Callable[[Job], Job]) -> Job:
        """Apply ``change`` atomically with respect to concurrent writers.

        ``change`` may raise (for example Conflict from ``transition``) to abort; it is
        called again with the fresh document after a lost race, so it must be pure.
        """
        return self._update(tenant_id, job_id, change).job

    def advance(self, current: Versioned, change: Callable[[Job], Job]) -> Versioned:
        """``update`` starting from a job already read (one write when nobody raced)."""
        updated = change(current.job)
        try:
            return Versioned(updated, self._store.replace(updated, current.etag))
        except ConcurrencyConflict:
            log.info("job %s changed since it was read; rereading", current.job.id)
        return self._update(current.job.tenant_id, current.job.id, change)

    def _update(self, tenant_id: str, job_id: str, change: Callable[[Job], Job]) -> Versioned:
        for attempt in range(1, self.MAX_CAS_ATTEMPTS + 1):
            current = self._store.load(tenant_id, job_id)
            if current is None:
                raise NotFound(f"no request {job_id}")
            updated = change(current.job)
            try:
                etag = self._store.replace(updated, current.etag)
            except ConcurrencyConflict:
                log.info("job %s changed concurrently, retrying (attempt %d)", job_id, attempt)
                continue
            return Versioned(updated, etag)
        raise ConcurrencyConflict(f"job {job_id} kept changing; gave up after retries")
