"""Retries: how a request that failed for now comes back later.

Service Bus cannot abandon a message with a delay, so a retry is a copy of the message
scheduled at now + backoff, carrying ``retry_count + 1``; the original is completed only
once the copy is accepted. The ordered lane cannot let a copy overtake the document's
next step, so it waits in place instead.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from shared.clock import Clock, utc_now
from shared.contracts import JobError, JobStatus, RequestMessage
from shared.errors import TransientError
from shared.jobs import JobRepository, transition
from shared.messaging import MessageSender, OutgoingMessage
from shared.processing.backoff import retry_delay
from shared.processing.inbound import (
    FAIR_SHARE_WAITS,
    OUTAGE_RETRY_COUNT,
    OUTAGE_SINCE,
    InboundMessage,
)
from shared.processing.policy import ProcessingPolicy
from shared.processing.ports import Settler
from shared.processing.values import Outcome

log = logging.getLogger(__name__)


def retry_copy(
    message: InboundMessage,
    retry_count: int,
    enqueue_at: datetime,
    deadline: datetime | None,
    now: datetime,
    *,
    outage_retry_count: int | None = None,
    outage_since: datetime | None = None,
    fair_share_waits: int | None = None,
) -> OutgoingMessage:
    """A copy of ``message`` for a scheduled retry.

    It keeps the request id (in the body), correlation id, session id, subject and every
    application property, but needs its own message id, or the queue's duplicate
    detection would drop it as a copy of the original.
    """
    base_id = (message.message_id or "message").split(":retry:")[0]
    # An outage retry keeps retry_count, so it is told apart by its own count (the queue's
    # duplicate detection would drop a second copy with the same id).
    # A wait for the tenant's turn keeps both, and is told apart by its own.
    outage_count = outage_retry_count
    if outage_count is None and fair_share_waits is not None:
        outage_count = message.outage_retry_count
    suffix = f":outage:{outage_count}" if outage_count is not None else ""
    suffix += f":turn:{fair_share_waits}" if fair_share_waits is not None else ""
    properties = {k: v for k, v in message.application_properties.items() if v is not None}
    properties["retry_count"] = retry_count
    if outage_retry_count is not None:
        properties[OUTAGE_RETRY_COUNT] = outage_retry_count
    if fair_share_waits is not None:
        properties[FAIR_SHARE_WAITS] = fair_share_waits
    if outage_since is not None:
        properties[OUTAGE_SINCE] = outage_since.isoformat()
    ttl = max(deadline - now, timedelta(seconds=1)) if deadline else None
    return OutgoingMessage(
        body=message.body,
        message_id=f"{base_id}:retry:{retry_count}{suffix}",
        correlation_id=message.correlation_id or base_id,
        content_type=message.content_type or "application/json",
        subject=message.subject,
        session_id=message.session_id,
        time_to_live=ttl,
        scheduled_enqueue_time=enqueue_at,
        application_properties=properties,
    )


class Retries:
    """Trying a request again later, the one way each lane can: a scheduled copy, or in
    the ordered lane, in place.

    The outcome table (``outcomes``) decides that a message is tried again; this says
    how: when (backoff with jitter, never earlier than a Retry-After), with which budget
    (``retry_count`` for the model's own failures, ``outage_retry_count`` for the
    platform's and the deployment's), and what happens when the copy cannot be sent
    (the original is abandoned: the broker's max delivery count is the backstop).
    """

    def __init__(
        self,
        *,
        policy: ProcessingPolicy,
        jobs: JobRepository,
        sender: MessageSender,
        deadline_of: Callable[[RequestMessage, datetime], datetime],
        clock: Clock = utc_now,
        uniform: Callable[[float, float], float] = random.uniform,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._policy = policy
        self._jobs = jobs
        self._sender = sender
        self._deadline_of = deadline_of
        self._clock = clock
        self._uniform = uniform
        self._sleep = sleep

    @property
    def in_place(self) -> bool:
        """The ordered lane retries in place (a copy would let the next step overtake)."""
        return self._policy.ordered

    def tries_before(self, message: InboundMessage) -> int:
        """The ordered lane retries by redelivery (its delivery count counts the tries);
        the others by scheduled copies that carry ``retry_count``."""
        if self._policy.ordered:
            return max(message.delivery_count - 1, message.retry_count, 0)
        return message.retry_count

    def exhausted(self, message: InboundMessage) -> bool:
        return self.tries_before(message) >= self._policy.max_retries

    def schedule(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: TransientError,
        *,
        completed: bool = False,
    ) -> Outcome:
        """A copy with ``retry_count + 1`` at now + backoff, then the original completed;
        ``completed``: the result is stored, only its announcement is tried again."""
        retries = self.tries_before(message)
        delay = self._delay(retries, error)
        if self._policy.ordered:
            return self._in_place(message, request, settler, error, delay, completed)
        now = self._clock()
        copy = retry_copy(
            message, retries + 1, now + timedelta(seconds=delay), request.deadline, now
        )
        if not self._sent(message, settler, copy):
            return Outcome.ABANDONED
        if not completed:
            self._note(request, error, f"retry {retries + 1} scheduled in {delay:.1f}s")
        settler.complete(message)
        return Outcome.RETRY_SCHEDULED

    def capacity_copy(
        self, message: InboundMessage, request: RequestMessage, settler: Settler,
        error: TransientError,
    ) -> Outcome:  # fmt: skip
        """The deployment had no capacity: a copy that keeps the model's budget, back
        after the backoff but no later than the deadline (where it ends ``expired``)."""
        now, deadline = self._clock(), self._wait_deadline(message, request)
        due = min(now + self._outage_delay(message, error), max(deadline, now))
        if not self._sent(message, settler, self._budget_kept_copy(message, request, due)):
            return Outcome.ABANDONED
        wait = (due - now).total_seconds()
        self._note(request, error, f"waiting for model capacity, again in {wait:.1f}s")
        settler.complete(message)
        return Outcome.CAPACITY_WAIT

    def fair_share_copy(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, delay: float
    ) -> Outcome | None:
        """Its tenant holds its share of the deployment already (``fair_turns``): a copy
        back in ``delay`` seconds that keeps every count, and the original completed;
        nothing is read or written for it. None when its deadline comes first: it goes on
        to the gate and takes its chance there."""
        now = self._clock()
        due = now + timedelta(seconds=delay)
        if request.deadline is not None and request.deadline <= due:
            return None
        copy = retry_copy(
            message, message.retry_count, due, request.deadline, now,
            fair_share_waits=message.fair_share_waits + 1,
        )  # fmt: skip
        if not self._sent(message, settler, copy):
            return Outcome.ABANDONED
        settler.complete(message)
        return Outcome.FAIR_SHARE_WAIT

    def outage_copy(
        self, message: InboundMessage, request: RequestMessage, settler: Settler,
        error: TransientError,
    ) -> Outcome | None:  # fmt: skip
        """Storage or the broker failed: a copy that keeps the model's budget, back after
        the backoff; None once the deadline has passed (there is no waiting on)."""
        now = self._clock()
        if self._wait_deadline(message, request) <= now:
            return None
        due = now + self._outage_delay(message, error)
        if not self._sent(message, settler, self._budget_kept_copy(message, request, due)):
            return Outcome.ABANDONED
        settler.complete(message)
        return Outcome.RETRY_SCHEDULED

    def _wait_deadline(self, message: InboundMessage, request: RequestMessage) -> datetime:
        """What bounds a wait that keeps the model's budget: the request's deadline, or
        DefaultDeadlineSeconds after the first such wait began (``outage_since``)."""
        return self._deadline_of(request, message.outage_since or self._clock())

    def _outage_delay(self, message: InboundMessage, error: TransientError) -> timedelta:
        return timedelta(seconds=self._delay(message.outage_retry_count, error))

    def _budget_kept_copy(
        self, message: InboundMessage, request: RequestMessage, due: datetime
    ) -> OutgoingMessage:
        """A copy due at ``due`` that keeps ``retry_count`` (the model's budget) and counts
        ``outage_retry_count``, carrying when the first such wait began: the deployment's
        or the platform's state is not the request's fault."""
        now = self._clock()
        return retry_copy(
            message, message.retry_count, due, request.deadline, now,
            outage_retry_count=message.outage_retry_count + 1,
            outage_since=message.outage_since or now,
        )  # fmt: skip

    def _delay(self, attempts: int, error: TransientError) -> float:
        """The backoff before try ``attempts + 1``, never earlier than a Retry-After."""
        return retry_delay(
            attempts,
            base_seconds=self._policy.retry_base_seconds,
            cap_seconds=self._policy.retry_max_seconds,
            retry_after=error.retry_after,
            uniform=self._uniform,
            floor_fraction=self._policy.retry_jitter_floor,
        )

    def _sent(self, message: InboundMessage, settler: Settler, copy: OutgoingMessage) -> bool:
        """Send the retry copy; when even that fails, abandon the original (the broker's
        max delivery count is the backstop) and say so."""
        try:
            self._sender.send(copy)
        except Exception:
            log.warning(
                "could not schedule retry of %s; abandoning", message.message_id, exc_info=True
            )
            settler.abandon(message)
            return False
        return True

    def _in_place(
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
        the other lanes', is waited out here with the session (and the message) locked,
        up to ``ordered_retry_max_wait_seconds`` a try; then the message is abandoned and
        comes back first in its session. With the default settings the waits add up to
        at least 917 s over MaxRetries tries, as for a scheduled retry. The broker's max
        delivery count stays above MaxRetries, so giving up is ours."""
        wait = min(delay, self._policy.ordered_retry_max_wait_seconds)
        if not completed:
            self._note(request, error, f"retry {message.delivery_count} in order after {wait:.1f}s")
        self._sleep(wait)
        settler.abandon(message)
        return Outcome.ABANDONED

    def _note(self, request: RequestMessage, error: TransientError, settlement: str) -> None:
        """Back to ``accepted`` with the error that caused the retry (best effort: the
        retry happens whether or not the job says so)."""
        try:
            self._jobs.update(
                request.tenant_id,
                request.request_id,
                lambda current: transition(
                    current,
                    JobStatus.ACCEPTED,
                    self._clock,
                    last_error=JobError(code=error.code, message=str(error)),
                    settlement=settlement,
                ),
            )
        except Exception:
            log.warning("retry of %s: its job was not updated (%s)", request.request_id, settlement)
