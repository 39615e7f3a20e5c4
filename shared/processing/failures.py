"""The unhappy rows of the outcome table: retries with backoff, failed jobs, failure events.

``MessageProcessor`` decides which row a message falls into; this module carries out the
rows that end in a scheduled retry or a dead letter. Marking the job failed and
announcing ``InferenceFailed`` are best-effort there: the dead-letter queue, with its
reason and description, is the record that cannot be lost.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta

from shared.clock import Clock, utc_now
from shared.contracts import JobError, JobStatus, RequestMessage
from shared.errors import ClaimCheckInvalid, PermanentError, PlatformUnavailable, TransientError
from shared.events.announcements import Announcer, announcement_for
from shared.jobs import JobRepository, fail, transition
from shared.messaging import MessageSender, OutgoingMessage
from shared.processing.backoff import retry_delay
from shared.processing.inbound import InboundMessage
from shared.processing.ports import Settler
from shared.processing.retries import retry_copy
from shared.processing.settlement import MAX_DESCRIPTION_CHARS, DeadLetterReason, Outcome

log = logging.getLogger(__name__)

# The longest an ordered (session) message waits in place in one delivery before it is
# tried again: its session stays locked meanwhile (the lock keeper renews it), holding up
# that document only. It stays inside the invocation's limits with room for the try
# itself: host.json's functionTimeout (10 min) and MaxLockRenewalSeconds (600 s), past
# which the lock keeper stops renewing. Above the largest jitter floor of the default
# backoff (300 s), so the ordered lane waits out as long an outage as the other lanes.
ORDERED_RETRY_MAX_WAIT_SECONDS = 420.0
# What a try may take besides the wait, within MaxLockRenewalSeconds.
ORDERED_TRY_ALLOWANCE_SECONDS = 120.0


def ordered_retry_max_wait(max_lock_renewal_seconds: float) -> float:
    """The ordered lane's longest wait in place for this MaxLockRenewalSeconds: the lock
    keeper must still be renewing the session's lock when the wait ends."""
    room = max_lock_renewal_seconds - ORDERED_TRY_ALLOWANCE_SECONDS
    return max(0.0, min(ORDERED_RETRY_MAX_WAIT_SECONDS, room))


def clip(text: str) -> str:
    """A dead-letter description within the broker's limit."""
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


@contextmanager
def platform_call() -> Iterator[None]:
    try:
        yield
    except TransientError as error:
        raise PlatformUnavailable(error) from error


class Failures:
    def __init__(
        self,
        *,
        max_retries: int,
        retry_base_seconds: float,
        retry_max_seconds: float,
        jobs: JobRepository,
        announcer: Announcer,
        retry_sender: MessageSender,
        clock: Clock = utc_now,
        uniform: Callable[[float, float], float] = random.uniform,
        ordered: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        jitter_floor: float = 0.0,
        deadline_of: Callable[[RequestMessage, datetime], datetime] | None = None,
        ordered_max_wait_seconds: float = ORDERED_RETRY_MAX_WAIT_SECONDS,
    ) -> None:
        self._ordered_max_wait = ordered_max_wait_seconds
        self._deadline_of = deadline_of or (lambda request, _: request.deadline or datetime.max)
        self._jitter_floor = jitter_floor
        self._ordered = ordered
        self._sleep = sleep
        self._max_retries = max_retries
        self._retry_base_seconds = retry_base_seconds
        self._retry_max_seconds = retry_max_seconds
        self._jobs = jobs
        self._announcer = announcer
        self._retry_sender = retry_sender
        self._clock = clock
        self._uniform = uniform

    def retry(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: TransientError,
        *,
        completed: bool = False,
    ) -> Outcome:
        """Schedule a retry copy; ``completed``: the result is stored, only its
        announcement failed (the job stays completed whatever happens here)."""
        retries = self.tries_before(message)
        if retries >= self._max_retries and completed:
            why = f"the result is stored; announcing it failed {retries + 1} times: {error}"
            settler.dead_letter(message, DeadLetterReason.MAX_RETRIES_EXCEEDED, clip(why))
            return Outcome.DEAD_LETTERED
        if retries >= self._max_retries:
            why = f"gave up after {retries} retries; last error: {error}"
            return self.give_up(
                message, request, settler, DeadLetterReason.MAX_RETRIES_EXCEEDED,
                "max_retries_exceeded", why,
            )  # fmt: skip
        delay = self._delay(retries, error)
        if self._ordered:
            return self._retry_in_place(message, request, settler, error, delay, completed)
        now = self._clock()
        copy = retry_copy(
            message, retries + 1, now + timedelta(seconds=delay), request.deadline, now
        )
        if not self._scheduled(message, settler, copy):
            return Outcome.ABANDONED
        if not completed:
            self._note_retry(request, error, f"retry {retries + 1} scheduled in {delay:.1f}s")
        settler.complete(message)
        return Outcome.RETRY_SCHEDULED

    def wait_out_outage(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: TransientError,
    ) -> Outcome:
        """Storage or the broker, the platform's own dependencies, failed: a retry copy
        that leaves ``retry_count`` (the model's budget) as it is and counts
        ``outage_retry_count`` instead, so a healthy request that already met model faults
        still survives a long outage. The request's deadline bounds the wait: its own, or
        for a producer's message without one, DefaultDeadlineSeconds after the outage was
        first met (``outage_since``, carried from copy to copy). Past it, the message is
        dead-lettered; the job cannot be read or written now, so the dead-letter reconciler
        ends and announces it once storage is back. The ordered lane retries in place as
        for any failure."""
        if self._ordered:
            return self.retry(message, request, settler, error)
        now, outages = self._clock(), message.outage_retry_count
        since = message.outage_since or now
        if self._deadline_of(request, since) <= now:
            why = f"storage or the broker stayed unavailable past the deadline; last error: {error}"
            settler.dead_letter(message, DeadLetterReason.MAX_RETRIES_EXCEEDED, clip(why))
            return Outcome.DEAD_LETTERED
        due = now + timedelta(seconds=self._delay(outages, error))
        if not self._scheduled(message, settler, self._unattempted_copy(message, request, due)):
            return Outcome.ABANDONED
        settler.complete(message)
        return Outcome.RETRY_SCHEDULED

    def wait_for_capacity(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: TransientError,
    ) -> Outcome:
        """The model's deployment had no capacity for the call within the time it may
        wait (``inference.capacity``): the deployment's state, not the request's fault, so
        the copy keeps ``retry_count`` and counts ``outage_retry_count`` instead, like an
        outage. It comes back no later than the request's deadline, where it ends
        ``expired`` as any request past its deadline does. The ordered lane waits in
        place, in order, as for any failure."""
        if self._ordered:
            return self.retry(message, request, settler, error)
        now, outages = self._clock(), message.outage_retry_count
        since = message.outage_since or now
        deadline = self._deadline_of(request, since)
        due = min(now + timedelta(seconds=self._delay(outages, error)), max(deadline, now))
        if not self._scheduled(message, settler, self._unattempted_copy(message, request, due)):
            return Outcome.ABANDONED
        wait = (due - now).total_seconds()
        self._note_retry(request, error, f"waiting for model capacity, again in {wait:.1f}s")
        settler.complete(message)
        return Outcome.CAPACITY_WAIT

    def _unattempted_copy(
        self, message: InboundMessage, request: RequestMessage, due: datetime
    ) -> OutgoingMessage:
        """A copy due at ``due`` that keeps ``retry_count`` (the model's budget) and counts
        ``outage_retry_count``, carrying when the first such wait began."""
        now = self._clock()
        return retry_copy(
            message,
            message.retry_count,
            due,
            request.deadline,
            now,
            outage_retry_count=message.outage_retry_count + 1,
            outage_since=message.outage_since or now,
        )

    def _delay(self, attempts: int, error: TransientError) -> float:
        """The backoff before try ``attempts + 1``, never earlier than a Retry-After."""
        return retry_delay(
            attempts,
            base_seconds=self._retry_base_seconds,
            cap_seconds=self._retry_max_seconds,
            retry_after=error.retry_after,
            uniform=self._uniform,
            floor_fraction=self._jitter_floor,
        )

    def _scheduled(self, message: InboundMessage, settler: Settler, copy: OutgoingMessage) -> bool:
        """Send the retry copy; when even that fails, abandon the original (the broker's
        max delivery count is the backstop) and say so."""
        try:
            self._retry_sender.send(copy)
        except Exception:
            log.warning(
                "could not schedule retry of %s; abandoning", message.message_id, exc_info=True
            )
            settler.abandon(message)
            return False
        return True

    def tries_before(self, message: InboundMessage) -> int:
        """The ordered lane retries by redelivery (its delivery count counts the tries);
        the others by scheduled copies that carry ``retry_count``."""
        if self._ordered:
            return max(message.delivery_count - 1, message.retry_count, 0)
        return message.retry_count

    def _retry_in_place(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: TransientError,
        delay: float,
        completed: bool,
    ) -> Outcome:
        """The ordered lane's retry: a scheduled copy would let the document's next step
        overtake this one, so the session holds still instead. The backoff, the same as
        the other lanes' (``_delay``), is waited out here with the session (and the
        message) locked, up to ``ordered_max_wait_seconds`` a try; then the message is
        abandoned and comes back first in its session. With the default settings the
        waits add up to at least 917 s over MaxRetries tries, as for a scheduled retry.
        The broker's max delivery count stays above MaxRetries, so giving up is ours."""
        wait = min(delay, self._ordered_max_wait)
        if not completed:
            self._note_retry(
                request, error, f"retry {message.delivery_count} in order after {wait:.1f}s"
            )
        self._sleep(wait)
        settler.abandon(message)
        return Outcome.ABANDONED

    def _note_retry(self, request: RequestMessage, error: TransientError, settlement: str) -> None:
        """Back to ``accepted`` with the error that caused the retry (best effort: the
        retry happens whether or not the job says so)."""
        try:
            self._jobs.update(
                request.tenant_id,
                request.request_id,
                lambda current: transition(
                    current,
                    JobStatus.ACCEPTED,
                    last_error=JobError(code=error.code, message=str(error)),
                    settlement=settlement,
                ),
            )
        except Exception:
            log.warning("retry of %s: its job was not updated (%s)", request.request_id, settlement)

    def give_up_on(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: PermanentError,
    ) -> Outcome:
        """``give_up`` for a permanent error: a claim check that does not hold is
        dead-lettered ``ClaimCheckInvalid``, anything else ``PermanentFailure``."""
        if isinstance(error, ClaimCheckInvalid):
            reason, code = DeadLetterReason.CLAIM_CHECK_INVALID, "claim_check_invalid"
        else:
            reason, code = DeadLetterReason.PERMANENT_FAILURE, error.code
        return self.give_up(message, request, settler, reason, code, str(error))

    def give_up(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        reason: DeadLetterReason,
        code: str,
        why: str,
    ) -> Outcome:
        """A request that can never succeed: its job failed, its message dead-lettered,
        ``InferenceFailed`` announced."""
        failed = self.fail_job(request.tenant_id, request.request_id, code, why)
        settler.dead_letter(message, reason, clip(why))
        if failed:
            self.announce_end(request, "failed", code, message.application_properties)
        return Outcome.DEAD_LETTERED

    def fail_job(self, tenant_id: str, request_id: str, code: str, why: str) -> bool:
        """Mark the job failed; False when it was not (already ended, or storage is
        down). Only a failure marked here is announced: a job that ended otherwise keeps
        its own outcome, and one storage could not reach is ended (and announced) by the
        dead-letter reconciler later."""
        try:
            self._jobs.update(
                tenant_id, request_id, lambda job: fail(job, code, why, settlement="dead-lettered")
            )
        except Exception:
            log.info("job %s not marked failed (%s)", request_id, code, exc_info=True)
            return False
        return True

    def announce_end(
        self,
        request: RequestMessage,
        outcome: str,
        error_code: str,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        """Failures are announced best-effort: the dead-letter queue is the record."""
        try:
            self._announcer.announce(
                announcement_for(request, outcome, properties=properties, error_code=error_code)
            )
        except Exception:
            log.warning("could not announce %s of %s", outcome, request.request_id, exc_info=True)
