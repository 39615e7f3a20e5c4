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
