"""The ports the processing capability needs, in one place: what the adapters (and other
capabilities) implement for it, so that processing imports none of them.

- ``Settler``: how one message is settled, whatever delivered it: over the Functions
  ``ServiceBusMessageActions`` (the batch triggers) or an SDK receiver (the deferred
  sweeper, the local host) (``adapters.servicebus_inbound``).
- ``DeferralLedger``, ``DeferredSource``: the deferred messages' ledger and where they are
  received again (``deferral``); ``MessageHandler``: what processes one message, for the
  batch and the deferred sweeper (``pipeline.MessageProcessor``).
- ``QueueObserver``: a queue's or subscription's counts (``adapters.queue_counts``).
- ``DeadLetterQueues``, ``DeadLetterPages``: the dead-letter sub-queues, peeked whole or a
  page at a time (``adapters.servicebus_dead_letters``).
- ``BatchStaging``: how the pipeline hands a batch-mode request to the Global Batch lane
  (``global_batch.staging.BatchStager``; the rings test keeps processing from importing
  ``global_batch``; ``entrypoints.bootstrap`` wires it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from shared.contracts import RequestMessage

if TYPE_CHECKING:
    from datetime import datetime

    from shared.processing.inbound import InboundMessage
    from shared.processing.values import (
        DeadLetteredMessage,
        DeferredEntry,
        Outcome,
        QueueSnapshot,
    )


class BatchStaging(Protocol):
    """Stages batch-mode requests for the next Global Batch file of their deployment."""

    def stage(
        self,
        request: RequestMessage,
        correlation_id: str,
        content: bytes,
        media_type: str,
        properties: Mapping[str, object],
    ) -> bool:
        """Stage ``request`` (its input already read); False when it was staged before."""
        ...

    def withdraw(self, request: RequestMessage) -> None:
        """Take back ``request``'s staged line (its job ended before it went out)."""
        ...


class Settler(Protocol):
    def complete(self, message: InboundMessage) -> None: ...

    def abandon(self, message: InboundMessage) -> None: ...

    def dead_letter(self, message: InboundMessage, reason: str, description: str) -> None: ...

    def defer(self, message: InboundMessage) -> None: ...

    def renew_lock(self, message: InboundMessage) -> None: ...


class DeferralLedger(Protocol):
    def record(self, entry: DeferredEntry) -> None:
        """Create or replace the entry for this queue and sequence number."""
        ...

    def due(self, queue: str, now: datetime) -> list[DeferredEntry]:
        """Entries whose due time has come, oldest first."""
        ...

    def remove(self, entry: DeferredEntry) -> None: ...

    def mark_missing(self, entry: DeferredEntry) -> None:
        """Move the entry aside: its message could not be received any more."""
        ...


class DeferredSource(Protocol):
    """Receives deferred messages by sequence number and settles them."""

    def receive_deferred(self, sequence_numbers: list[int]) -> list[InboundMessage]: ...

    @property
    def settler(self) -> Settler: ...


class MessageHandler(Protocol):
    """What processes and settles one message (``pipeline.MessageProcessor``): the batch
    runs it for each message of a trigger's batch, the sweeper for each deferred one."""

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome: ...


class QueueObserver(Protocol):
    def snapshot(self) -> QueueSnapshot: ...


class DeadLetterQueues(Protocol):
    """The dead-letter sub-queues (adapter: ``adapters.servicebus_dead_letters``)."""

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        """Every message in ``queue``'s dead-letter sub-queue, in sequence order; peek
        only (nothing is locked or received)."""
        ...

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        """Delete these messages from ``queue``'s dead-letter sub-queue and leave the
        others as they are; the sequence numbers actually removed."""
        ...


@runtime_checkable
class DeadLetterPages(Protocol):
    """A dead-letter sub-queue read a page at a time (adapter: ``adapters.
    servicebus_dead_letters``), so a reader's cost does not grow with what it holds."""

    def peek_page(
        self, queue: str, from_sequence_number: int, max_count: int
    ) -> list[DeadLetteredMessage]:
        """Up to ``max_count`` messages of ``queue``'s dead-letter sub-queue whose sequence
        numbers are ``from_sequence_number`` or higher, in sequence order; peek only."""
        ...
