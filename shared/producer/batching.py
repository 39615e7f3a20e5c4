"""Filling size-limited batches, one queue at a time (pure, over two small ports).

A broker batch is sent as one transfer and holds as many messages as fit in the size the
broker allows (the SDK reads it from the AMQP link: ``max-message-size`` on the attach,
256 KB on Standard, 1 MB batches on Premium). A message that does not fit the current
batch closes it: the batch is sent and the message starts the next one. A message that
does not fit even an empty batch is handed back to the caller, who may move its input
into a claim check or refuse it; nothing is dropped or split here.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.messaging import OutgoingMessage
from shared.producer.ports import BatchSender, OutgoingBatch


class QueueBatcher:
    """The open batch of one queue: ``add`` fills it and sends it when it is full.

    ``max_messages`` caps a batch's count as well as its size (1 sends one by one).
    ``on_sent(count)`` is told each batch the broker accepted.
    """

    def __init__(
        self,
        sender: BatchSender,
        on_sent: Callable[[int], None],
        max_messages: int | None = None,
    ) -> None:
        if max_messages is not None and max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        self._sender = sender
        self._on_sent = on_sent
        self._max_messages = max_messages
        self._batch: OutgoingBatch | None = None
        self._max_bytes: int | None = None
        self.accepted = 0
        self.sent = 0

    @property
    def max_bytes(self) -> int | None:
        """The size limit of this queue's batches, once one was created."""
        return self._max_bytes

    @property
    def pending(self) -> int:
        """Messages taken by ``add`` and not (yet) accepted by the broker."""
        return self.accepted - self.sent

    def add(self, message: OutgoingMessage) -> bool:
        """Queue a message for sending; False when it does not fit even an empty batch
        (the open batch is then left as it was)."""
        batch = self._batch
        if batch is None:
            batch = self._batch = self._create()
        elif self._max_messages is not None and len(batch) >= self._max_messages:
            self.flush()
            batch = self._batch = self._create()
        if batch.try_add(message):
            self.accepted += 1
            return True
        if len(batch) == 0:
            return False
        fresh = self._create()
        if not fresh.try_add(message):
            return False
        self.accepted += 1
        full, self._batch = batch, fresh
        self._send(full)
        return True

    def flush(self) -> None:
        """Send the open batch, if it holds anything."""
        batch, self._batch = self._batch, None
        if batch is not None and len(batch):
            self._send(batch)

    def _create(self) -> OutgoingBatch:
        batch = self._sender.create_batch()
        self._max_bytes = batch.max_bytes
        return batch

    def _send(self, batch: OutgoingBatch) -> None:
        self._sender.send_batch(batch)
        self.sent += len(batch)
        self._on_sent(len(batch))
