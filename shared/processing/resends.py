"""Sending a job's message again when it seems lost: the job is the truth, the message
only a notification.

A message can be lost while its job waits (a broker restarted without its data, a purge,
a time to live, a queue recreated, a scheduled retry copy lost with its namespace). The
broker cannot be asked whether a message with a given id still exists, so "lost" is
inferred from the job: ``accepted`` (or ``running`` with its lock long gone) and unchanged
for ``JobResend__afterSeconds`` since its last change (or since its ``not_before``), well
above any wait of the lanes (a scheduled retry waits at most RetryMaxSeconds and notes the
job each time; the ordered lane notes it on every try), and above the queues' duplicate
detection window (10 minutes), which would drop a copy with the same message id.

The message is rebuilt from the job record exactly as intake builds it
(``messaging.request_envelope``: the same message id, lane and session, the same
application properties, a new span of the job's trace). If the original was not lost
after all, the copy is harmless: the processor completes a delivery of a finished job as
a duplicate, and a first delivery that meets its job running in another delivery too
(``MessageProcessor._another_delivery_runs``). A resend is counted
(``inferbus.jobs.resent``, by lane) and logged; the job notes it in its ``settlement``
(and a job found ``running`` goes back to ``accepted``: nobody holds it). The job watchdog
decides when and how often (``JobResend__maxAttempts``); it keeps the count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.clock import Clock, utc_now
from shared.contracts import Job, JobStatus
from shared.errors import Conflict
from shared.jobs import LONGEST_LOCK, JobRepository, Versioned, transition
from shared.lanes import lane_of_message
from shared.messaging import MessageSender, OutgoingMessage, request_envelope, request_message_of
from shared.settings import Settings
from shared.tracing import continue_or_start

log = logging.getLogger(__name__)

RESENT_SETTLEMENT = "resent by the job watchdog"


@dataclass(frozen=True)
class ResendPolicy:
    """App settings JobResend__afterSeconds, JobResend__maxAttempts, MaxLockRenewalSeconds."""

    after: timedelta
    max_attempts: int
    max_lock_renewal_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> ResendPolicy:
        return cls(
            after=timedelta(seconds=settings.job_resend.after_seconds),
            max_attempts=settings.job_resend.max_attempts,
            max_lock_renewal_seconds=settings.processing.max_lock_renewal_seconds,
        )

    def quiet_period(self, status: JobStatus) -> timedelta:
        """How long a job in ``status`` stays unchanged before its message counts as lost:
        a running job also until its lock is long gone."""
        if status is JobStatus.RUNNING:
            lock_gone = timedelta(seconds=self.max_lock_renewal_seconds) + LONGEST_LOCK
            return max(self.after, lock_gone)
        return self.after


def resend_due_at(job: Job, policy: ResendPolicy) -> datetime | None:
    """When ``job``'s message counts as lost, or None when it is never resent: ended, in
    the Global Batch lane (staged or submitted: no message carries it any more), without
    an input to rebuild the request from, or due only at or past its deadline (the
    watchdog ends it then)."""
    if job.status not in (JobStatus.ACCEPTED, JobStatus.RUNNING):
        return None
    if job.batch is not None or job.input is None:
        return None
    since = max(job.updated_at, job.not_before) if job.not_before else job.updated_at
    due = since + policy.quiet_period(job.status)
    if job.deadline is not None and due >= job.deadline:
        return None
    return due


def envelope_of(job: Job, now: datetime) -> OutgoingMessage:
    """The job's request message as intake built it: same message id, lane, session and
    properties, carried in a new span of the job's trace (its correlation id)."""
    trace = continue_or_start(f"00-{job.correlation_id}-{'0' * 15}1-01")
    return request_envelope(
        request_message_of(job),  # resend_due_at leaves out jobs without a stored input
        correlation_id=job.correlation_id,
        trace=trace,
        now=now,
        source=job.source,
    )


class JobResender:
    """Sends a job's message again and notes it on the job."""

    def __init__(
        self,
        *,
        sender: MessageSender,
        jobs: JobRepository,
        policy: ResendPolicy,
        count_resent: Callable[[str], None],
        clock: Clock = utc_now,
    ) -> None:
        self._sender = sender
        self._jobs = jobs
        self.policy = policy
        self._count_resent = count_resent
        self._clock = clock

    def resend(self, current: Versioned, attempt: int) -> bool:
        """Send ``current``'s message again (resend number ``attempt``); False when the
        broker did not take it (the watchdog tries again on its next run)."""
        job, now = current.job, self._clock()
        envelope = envelope_of(job, now)
        try:
            self._sender.send(envelope)
        except Exception:
            log.warning("could not resend the message of job %s", job.id, exc_info=True)
            return False
        lane = lane_of_message(envelope).value
        self._count_resent(lane)
        log.warning(
            "job %s resent (attempt %d of %d): %s and unchanged for %ds, lane %s",
            job.id,
            attempt,
            self.policy.max_attempts,
            job.status.value,
            int((now - job.updated_at).total_seconds()),
            lane,
        )
        self._note(current, attempt)
        return True

    def _note(self, current: Versioned, attempt: int) -> None:
        """Note the resend on the job (best effort: the message is what matters). A job
        that moved meanwhile is left as it is: its processor has it."""
        settlement = f"{RESENT_SETTLEMENT} (attempt {attempt} of {self.policy.max_attempts})"

        def change(job: Job) -> Job:
            due = resend_due_at(job, self.policy)
            if due is None or due > self._clock():
                raise Conflict(f"job {job.id} moved since it was read", code="job_moved")
            if job.status is JobStatus.RUNNING:
                return transition(job, JobStatus.ACCEPTED, self._clock, settlement=settlement)
            return job.model_copy(update={"settlement": settlement, "updated_at": self._clock()})

        try:
            self._jobs.advance(current, change)
        except Conflict:
            log.info("job %s moved while its message was resent", current.job.id)
        except Exception:
            log.warning("job %s was resent; noting it failed", current.job.id, exc_info=True)
