"""The ports the producer needs: batches per queue, as Service Bus builds them
(``adapters.servicebus_producer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shared.messaging import OutgoingMessage


class OutgoingBatch(Protocol):
    """A batch under construction (adapter: ``azure.servicebus.ServiceBusMessageBatch``)."""

    def try_add(self, message: OutgoingMessage) -> bool:
        """Add the message, or False (batch unchanged) when it would exceed the size limit."""
        ...

    def __len__(self) -> int: ...

    @property
    def max_bytes(self) -> int:
        """The size limit of the batch, as the broker advertised it."""
        ...


class BatchSender(Protocol):
    """Creates and sends batches for one queue (adapter: ``ServiceBusSender``)."""

    def create_batch(self) -> OutgoingBatch:
        """An empty batch as large as the broker allows; TransientError when unreachable."""
        ...

    def send_batch(self, batch: OutgoingBatch) -> None:
        """Send every message of the batch durably; TransientError when the broker cannot
        take it now (it may or may not have taken it: resending is safe, ids dedupe)."""
        ...


class BatchSenders(Protocol):
    """The batch sender of each queue."""

    def sender(self, queue: str) -> BatchSender: ...
