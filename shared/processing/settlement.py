"""Settling one message: the outcomes, the dead-letter reasons, and a ``Settler`` (the
port, in ``processing.ports``) that notes what it was asked.

Dead-letter reasons are a small fixed vocabulary so that operators and alerts can group
them.
"""

from __future__ import annotations

from enum import StrEnum

from shared.processing.inbound import InboundMessage
from shared.processing.ports import Settler


class DeadLetterReason(StrEnum):
    INVALID_PAYLOAD = "InvalidPayload"
    CLAIM_CHECK_INVALID = "ClaimCheckInvalid"
    MAX_RETRIES_EXCEEDED = "MaxRetriesExceeded"
    PERMANENT_FAILURE = "PermanentFailure"
    # A direct producer named a tenant ProducerTenants does not list (no job is kept).
    TENANT_NOT_ALLOWED = "TenantNotAllowed"


class Outcome(StrEnum):
    """What became of one message (``Processor.process``): the rows of the outcome table,
    counted in ``inferbus.messages.settled`` and logged as ``message <id> -> <outcome>``."""

    COMPLETED = "completed"
    # A content-filter refusal: a result, not a failure (the message is completed).
    REFUSED = "refused"
    DEAD_LETTERED = "dead-lettered"
    ABANDONED = "abandoned"
    RETRY_SCHEDULED = "retry-scheduled"
    DEFERRED = "deferred"
    # No model capacity within the wait: a copy comes back when the deployment has room.
    CAPACITY_WAIT = "capacity-wait"
    DUPLICATE = "duplicate"
    EXPIRED = "expired"
    STAGED = "staged"
    # Its job had ended, and settling the message failed (a lock lost to a broker restart):
    # the broker delivers it again, and that delivery completes as a duplicate.
    UNSETTLED = "unsettled"


# Service Bus limits the dead-letter description; keep ours well inside it.
MAX_DESCRIPTION_CHARS = 1024


class NotedSettler:
    """Implements ``Settler`` over another, noting the dead-letter reason it was given
    (the processor's span says why a message ended in the dead-letter queue) and whether
    a settlement was attempted (a failure after that must not schedule a retry copy: the
    message may be settled already, and a copy would run the request twice)."""

    def __init__(self, settler: Settler) -> None:
        self._settler = settler
        self.dead_letter_reason: str | None = None
        self.settling = False

    def complete(self, message: InboundMessage) -> None:
        self.settling = True
        self._settler.complete(message)

    def abandon(self, message: InboundMessage) -> None:
        self.settling = True
        self._settler.abandon(message)

    def dead_letter(self, message: InboundMessage, reason: str, description: str) -> None:
        self.settling = True
        self._settler.dead_letter(message, reason, description)
        self.dead_letter_reason = reason

    def defer(self, message: InboundMessage) -> None:
        self.settling = True
        self._settler.defer(message)

    def renew_lock(self, message: InboundMessage) -> None:
        self._settler.renew_lock(message)
