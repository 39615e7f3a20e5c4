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

A direct producer must name a tenant listed in ``ProducerTenants`` (empty: none); a
message naming another is dead-lettered ``TenantNotAllowed`` and no job is kept. Intake's
own messages meet that check too when they overtake their job, so a fresh message (sent
moments ago: intake records the job right after the send) is given one short wait for
its job to appear; if none does (intake's job write failed, and it answered 202 all the
same), a message whose input is the claim check a door stored for it in the inputs
container (which only the app writes) still has its job recorded: it was accepted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

from shared.accounting.cost import estimated_spend
from shared.accounting.spending import UNANSWERED_BATCH_SECONDS, TenantSpending
from shared.clock import Clock
from shared.contracts import ClaimCheck, Door, Job, RequestMessage, input_characters
from shared.errors import TransientError
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules, TenantNotAllowed
from shared.jobs import JobRepository, Versioned
from shared.processing.inbound import InboundMessage, PropertyValue

log = logging.getLogger(__name__)

# The job error code of a message refused for breaking a door's rule.
INVALID_REQUEST = "invalid_request"
# A message this young may have overtaken the job intake records right after sending
# it; it looks for that job again after each of these waits (intake is usually a few
# milliseconds behind; 2 s in all) before its tenant is refused.
FRESH_MESSAGE = timedelta(seconds=10)
INTAKE_RECORD_WAITS_SECONDS = (0.02, 0.05, 0.1, 0.2, 0.4, 0.5, 0.73)


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
        source=source if isinstance(source, str) and source else Door.SERVICEBUS,
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
    """Records the job of a message that came before it (``outcomes`` refuses one that
    breaks a door's rule)."""

    def __init__(
        self,
        *,
        jobs: JobRepository,
        rules: RequestRules,
        claim_checks: ClaimChecks,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
        spending: TenantSpending | None = None,
    ) -> None:
        self._sleep = sleep
        self._spending = spending
        self._jobs = jobs
        self._rules = rules
        self._claim_checks = claim_checks
        self._clock = clock

    def adopt(self, message: InboundMessage, request: RequestMessage) -> Versioned:
        """The job, recorded now (or by intake meanwhile) once the message passes the
        doors' rules; InvalidInput when it does not."""
        now = self._clock()
        received_at = message.enqueued_time or now
        try:
            self._rules.check_message(request, received_at, self._claim_checks)
        except TenantNotAllowed:
            recorded = self._recorded_by_intake(message, request, now - received_at)
            if recorded is not None:
                return recorded
            if not self._stored_by_a_door(request):
                raise
            log.warning(
                "request %s came through a door whose job write failed; recording its job",
                request.request_id,
            )
            self._rules.check_message(request, received_at, self._claim_checks, tenant_vouched=True)
        deadline = self._rules.job_deadline(request, received_at)
        self._hold_budget(request, now, deadline)
        created = self._jobs.create(job_from_message(request, message, now, deadline))
        if created is not None:
            log.info("recorded job %s from its message", request.request_id)
            return created
        existing = self._jobs.load(request.tenant_id, request.request_id)
        if existing is None:
            raise TransientError(f"job {request.request_id} was created and is gone again")
        return existing

    def _hold_budget(
        self, request: RequestMessage, now: datetime, deadline: datetime | None
    ) -> None:
        """A producer's request passed no door: its estimate is held against its tenant's
        budgets here, before its job is recorded (BudgetExceeded: the outcome table
        records it ``rejected``). A request a door held already stays held."""
        card = self._rules.catalog.card(request.model)
        if self._spending is None or card is None:
            return
        if not self._spending.has_budget(request.tenant_id):
            return
        chars = input_characters(request.input)
        estimate = estimated_spend(card, chars, request.parameters, request.mode)
        until = deadline or now + timedelta(seconds=UNANSWERED_BATCH_SECONDS)
        self._spending.reserve(request.tenant_id, request.request_id, estimate, until)

    def _recorded_by_intake(
        self, message: InboundMessage, request: RequestMessage, age: timedelta
    ) -> Versioned | None:
        """The job intake recorded for a fresh first delivery that overtook it, looked for
        during a short wait; None for any other message (a producer's, whose tenant is
        refused)."""
        if message.attempted_before or age > FRESH_MESSAGE:
            return None
        for wait in INTAKE_RECORD_WAITS_SECONDS:
            self._sleep(wait)
            found = self._jobs.load(request.tenant_id, request.request_id)
            if found is not None:
                log.info("job %s was recorded by intake meanwhile", request.request_id)
                return found
        return None

    def _stored_by_a_door(self, request: RequestMessage) -> bool:
        """A message of the app's own doors: its input is the claim check a door stored."""
        return isinstance(request.input, ClaimCheck) and self._claim_checks.stored_by_a_door(
            request.input, request.tenant_id, request.request_id
        )
