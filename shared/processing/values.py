"""The values the processing ports speak in, below the ports and the modules that use them.

``ports`` names these in its signatures and the modules that implement or call the ports
build them; keeping them here, apart from both, lets every import point one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from shared.contracts import RequestMessage
from shared.inference.capacity import Booking, DeploymentGate
from shared.jobs import Versioned
from shared.processing.inbound import PropertyValue


class Outcome(StrEnum):
    """What became of one message (``MessageProcessor.process``): the rows of the outcome table,
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
    # Its tenant holds its share of the deployment here already: a copy comes back at its
    # turn, before anything was read (processing.fair_turns).
    FAIR_SHARE_WAIT = "fair-share-wait"
    DUPLICATE = "duplicate"
    EXPIRED = "expired"
    REJECTED = "rejected"  # over its tenant's budget: recorded so, never run
    STAGED = "staged"
    # Settling the message failed (a lock lost to a broker restart): the broker delivers
    # it again when the lock lapses, as a duplicate when its job had ended.
    UNSETTLED = "unsettled"


@dataclass(frozen=True)
class QueueSnapshot:
    """One entity's counts; None where the source does not tell (a subscription's
    scheduled messages live on its topic; the management API counts no deferred ones)."""

    active: int
    dead_lettered: int
    scheduled: int | None
    deferred: int | None
    oldest_active_enqueued_at: datetime | None
    # False where the oldest message cannot be seen (a subscription in Azure is not peeked):
    # its age is then unknown, not zero.
    oldest_known: bool = True


@dataclass(frozen=True)
class DeferredEntry:
    queue: str
    sequence_number: int
    tenant_id: str
    request_id: str
    due_at: datetime
    reason: str
    recorded_at: datetime
    missing_attempts: int = 0  # sweeps that found its message missing so far


@dataclass(frozen=True)
class DeadLetteredMessage:
    queue: str  # the entity whose dead-letter sub-queue holds it (a queue or a subscription)
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


@dataclass(frozen=True)
class Turn:
    """A message's tokens booked against its tenant's share (``fair_turns``), released
    when its processing ends, however it ends."""

    gate: DeploymentGate | None = None
    booking: Booking | None = None

    def release(self) -> None:
        if self.gate is not None and self.booking is not None:
            self.gate.release(self.booking)


NO_TURN = Turn()


@dataclass(frozen=True)
class Admitted:
    """A message whose model may run (``admission``): its request, its job moved to
    running, its input, and its turn among the deployment's tenants."""

    request: RequestMessage
    running: Versioned
    content: bytes
    media_type: str
    turn: Turn = NO_TURN
