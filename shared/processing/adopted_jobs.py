"""The job of a request message that arrives before (or without) its job.

Intake sends the request message first and records the job after the broker took it,
so that a job exists only for work that was really queued (and an Idempotency-Key's
marker needs no second write: the job's existence says the message was sent). The
processor can therefore meet a message whose job is not recorded yet: intake is a few
milliseconds behind, it crashed between the two steps, or the message came from a
producer that sends straight to the queue. In every case the message says all the job
needs, and the processor records it (exclusively: whichever of the two writers comes
second reads the first one's job), after checking the message against the same rules as
the doors (``intake.request_rules``): a direct producer passed no door.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from shared.clock import Clock
from shared.contracts import Job, ProcessingMode, RequestMessage
from shared.errors import InvalidInput, TransientError
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.jobs import JobRepository, Versioned, fail
from shared.processing.failures import Failures, clip
from shared.processing.inbound import InboundMessage, PropertyValue
from shared.processing.settlement import DeadLetterReason, Settler

log = logging.getLogger(__name__)

DIRECT_SOURCE = "servicebus"
# The job error code of a message refused for breaking a door's rule.
INVALID_REQUEST = "invalid_request"


class MessageFacts(Protocol):
    """What a job takes from the message that carried its request (an ``InboundMessage``,
    or a dead-lettered one the reconciler peeked)."""

    @property
    def application_properties(self) -> Mapping[str, PropertyValue]: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def enqueued_time(self) -> datetime | None: ...


def job_from_message(
    request: RequestMessage, message: MessageFacts, now: datetime, deadline: datetime | None
) -> Job:
    """The job a request message describes, as intake would have recorded it; ``deadline``
    is the message's own or the default one (``RequestRules.message_deadline``)."""
    source = message.application_properties.get("source")
    return Job(
        id=request.request_id,
        tenant_id=request.tenant_id,
        model=request.model,
        priority=request.priority,
        source=source if isinstance(source, str) and source else DIRECT_SOURCE,
        input=request.input,
        parameters=request.parameters,
        metadata=request.metadata,
        after=request.after,
        correlation_id=message.correlation_id or request.request_id,
        created_at=message.enqueued_time or now,
        updated_at=now,
        not_before=request.not_before,
        deadline=deadline,
        document_id=request.document_id,
        mode=request.mode,
    )


class JobAdoption:
    """Records the job of a message that came before it, or refuses the message."""

    def __init__(
        self,
        *,
        jobs: JobRepository,
        rules: RequestRules,
        claim_checks: ClaimChecks,
        failures: Failures,
        clock: Clock,
    ) -> None:
        self._jobs = jobs
        self._rules = rules
        self._claim_checks = claim_checks
        self._failures = failures
        self._clock = clock

    def adopt(self, message: InboundMessage, request: RequestMessage) -> Versioned:
        """The job, recorded now (or by intake meanwhile) once the message passes the
        doors' rules; InvalidInput when it does not."""
        now = self._clock()
        received_at = message.enqueued_time or now
        self._rules.check_message(request, received_at, self._claim_checks)
        deadline: datetime | None = self._rules.message_deadline(request, received_at)
        if request.mode is ProcessingMode.BATCH and request.deadline is None:
            deadline = None  # as intake: the batch lane takes hours; the watchdog bounds it
        created = self._jobs.create(job_from_message(request, message, now, deadline))
        if created is not None:
            log.info("recorded job %s from its message", request.request_id)
            return created
        existing = self._jobs.load(request.tenant_id, request.request_id)
        if existing is None:
            raise TransientError(f"job {request.request_id} was created and is gone again")
        return existing

    def refuse(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: InvalidInput,
    ) -> str:
        """A producer's message that breaks a door's rule: dead-lettered with the rule and
        the fields, its job recorded as failed so the status API tells the producer too
        (unless the tenant itself is what is wrong: no job is kept for such a tenant)."""
        fields = "; ".join(f"{f.field}: {f.message}" for f in error.fields)
        why = f"{error}" + (f" ({fields})" if fields else "")
        if not any(f.field == "tenant_id" for f in error.fields):
            now = self._clock()
            job = job_from_message(request, message, now, request.deadline or now)
            try:
                self._jobs.create(fail(job, INVALID_REQUEST, why, self._clock))
            except Exception:
                log.warning("could not record the failed job of %s", request.request_id)
            self._failures.announce_end(
                request, "failed", INVALID_REQUEST, message.application_properties
            )
        settler.dead_letter(message, DeadLetterReason.INVALID_PAYLOAD, clip(why))
        return "dead-lettered"
