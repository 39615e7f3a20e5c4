"""What a Service Bus dead-letter sub-queue holds, and the port that reads and empties one.

A request message lands in its queue's dead-letter sub-queue when the processor gives up
on it (``processing.settlement.DeadLetterReason``: InvalidPayload, ClaimCheckInvalid,
MaxRetriesExceeded, PermanentFailure) or the broker does (MaxDeliveryCountExceeded,
TTLExpiredException). It keeps its body, properties and sequence number there, with the
reason and description beside its application properties.

This module has only the model (``DeadLetteredMessage``) and the port
(``DeadLetterQueues``), so that the filters (``deadletter_filters``), the operations
(``servicebus_deadletters``) and the adapter (``adapters.servicebus_deadletters``) share
one definition and none of them has to import another.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from shared.processing.inbound import PropertyValue

# The broker puts these beside the application properties; they are not the sender's.
DEAD_LETTER_PROPERTIES = frozenset({"DeadLetterReason", "DeadLetterErrorDescription"})


@dataclass(frozen=True)
class DeadLetteredMessage:
    queue: str  # the request queue whose dead-letter sub-queue holds it
    sequence_number: int
    message_id: str | None
    enqueued_time: datetime | None
    delivery_count: int
    reason: str
    description: str
    source: str | None  # the entity it was dead-lettered from, when the broker says
    body: bytes
    correlation_id: str | None = None
    session_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    application_properties: dict[str, PropertyValue] = field(default_factory=dict)

    def _property(self, name: str) -> str | None:
        value = self.application_properties.get(name)
        return value if isinstance(value, str) and value else None

    @property
    def tenant(self) -> str | None:
        return self._property("tenant")

    @property
    def model(self) -> str | None:
        return self._property("model_name")

    def age(self, now: datetime) -> timedelta | None:
        return None if self.enqueued_time is None else max(now - self.enqueued_time, timedelta())


class DeadLetterQueues(Protocol):
    """The dead-letter sub-queues (adapter: ``adapters.servicebus_deadletters``)."""

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        """Every message in ``queue``'s dead-letter sub-queue, in sequence order; peek
        only (nothing is locked or received)."""
        ...

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        """Delete these messages from ``queue``'s dead-letter sub-queue and leave the
        others as they are; the sequence numbers actually removed."""
        ...
