"""Ending a job from outside the pipeline: the reconciler, the watchdog, the sweeper.

The processor ends a job while it holds the request's message. The three maintenance
paths end jobs whose message is gone (dead-lettered, vanished, expired) or stuck, so
they race nothing but each other and a late processor. Every ending is therefore a
compare-and-swap on the job's ETag whose change re-checks, on the fresh document, that
the ending still applies: a job that a late delivery finished, a caller cancelled, or a
replay reopened and restarted meanwhile is left as it is.

The announcement (``InferenceFailed``) is built from the job itself, because the request
message may be unreadable (or gone). It carries the same deterministic event id as the
processor's, so a consumer drops a second announcement of the same failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared.accounting.spending import TenantSpending
from shared.clock import Clock, utc_now
from shared.contracts import Job, JobError, JobStatus
from shared.errors import Conflict, NotFound
from shared.events.announcements import Announcement, Announcer
from shared.jobs import JobRepository, Versioned, transition

log = logging.getLogger(__name__)

# The job error codes of the maintenance paths (docs/processing.md lists them).
DEADLINE_EXCEEDED = "deadline_exceeded"
MESSAGE_EXPIRED = "message_expired"
STALE_JOB = "stale_job"
DEFERRED_MESSAGE_LOST = "deferred_message_lost"


@dataclass(frozen=True)
class Ending:
    """How a job ends: ``failed`` or ``expired``, with the error its caller reads."""

    status: JobStatus
    code: str
    message: str
    settlement: str

    def apply(self, job: Job, clock: Clock) -> Job:
        """``job`` ended this way (Conflict when it is terminal already)."""
        error = JobError(code=self.code, message=self.message)
        return transition(
            job, self.status, clock, error=error, last_error=error, settlement=self.settlement
        )


class JobEndings:
    """Ends jobs by compare-and-swap and announces the ending."""

    def __init__(
        self,
        jobs: JobRepository,
        announcer: Announcer,
        clock: Clock = utc_now,
        spending: TenantSpending | None = None,
    ) -> None:
        self._jobs = jobs
        self._announcer = announcer
        self._clock = clock
        self._spending = spending

    def end(
        self,
        current: Versioned,
        ending: Ending,
        still_applies: Callable[[Job], bool] = lambda job: True,
    ) -> Job | None:
        """End the job read as ``current``; None when it is terminal already or
        ``still_applies`` says no for the document as it is when written."""

        def change(job: Job) -> Job:
            if not job.status.is_terminal and not still_applies(job):
                raise Conflict(f"job {job.id} is being worked on", code="job_active")
            return ending.apply(job, self._clock)

        try:
            ended = self._jobs.advance(current, change).job
        except (Conflict, NotFound) as reason:
            log.info("job %s not ended (%s)", current.job.id, reason)
            return None
        if self._spending is not None and ended.result is None:  # no answer: give back
            self._spending.release(ended.tenant_id, ended.id, ended.created_at)
        return ended

    def end_by_id(self, tenant_id: str, request_id: str, ending: Ending) -> Job | None:
        """``end`` for a job known by its ids; None when there is no such job."""
        current = self._jobs.load(tenant_id, request_id)
        if current is None or current.job.status.is_terminal:
            return None
        return self.end(current, ending)

    def announce(self, job: Job, properties: Mapping[str, object] | None = None) -> None:
        """Publish ``InferenceFailed`` for an ended job; raises TransientError when the
        event channels cannot take it now (the caller keeps what it needs to try again).
        ``properties``: the request message's, whose trace context the event continues."""
        properties = properties or {}
        traceparent = properties.get("traceparent")
        tracestate = properties.get("tracestate")
        self._announcer.announce(
            Announcement(
                request_id=job.id,
                tenant_id=job.tenant_id,
                model=job.model,
                outcome=job.status.value,
                priority=job.priority.value,
                error_code=job.error.code if job.error else None,
                traceparent=traceparent if isinstance(traceparent, str) else None,
                tracestate=tracestate if isinstance(tracestate, str) else None,
                correlation_id=job.correlation_id,
            )
        )
