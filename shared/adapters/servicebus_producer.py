"""Batches on Service Bus queues through azure-servicebus (the producer's ports).

``ServiceBusSender.create_message_batch()`` opens the sender's link first: the broker's
attach advertises the largest message it takes (``max-message-size``), and the SDK sizes
batches by it (256 KB on Standard; 1 MB batches on Premium, or the vendor property
``com.microsoft:max-message-batch-size`` when the broker sends one). ``add_message``
encodes the message and raises ``MessageSizeExceededError`` when the batch would grow
past that limit; here that is ``try_add`` answering False, the batch unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from azure.servicebus import ServiceBusClient, ServiceBusMessageBatch, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

from shared.adapters.servicebus import servicebus_errors, to_servicebus_message
from shared.errors import ConfigurationError
from shared.messaging import OutgoingMessage
from shared.producer.ports import OutgoingBatch

log = logging.getLogger(__name__)


@contextmanager
def sender_errors(what: str) -> Iterator[None]:
    """``servicebus_errors``, with missing rights named as such (not as an outage)."""
    with servicebus_errors(what):
        try:
            yield
        except ServiceBusAuthenticationError as error:
            raise ConfigurationError(f"{what}: authentication failed ({error})") from error
        except ServiceBusAuthorizationError as error:
            raise ConfigurationError(
                f"{what}: not authorized (the identity needs Azure Service Bus Data Sender)"
            ) from error


class ServiceBusBatch:
    """Implements ``producer.ports.OutgoingBatch`` over an SDK batch."""

    def __init__(self, batch: ServiceBusMessageBatch) -> None:
        self.batch = batch

    def try_add(self, message: OutgoingMessage) -> bool:
        try:
            self.batch.add_message(to_servicebus_message(message))
        except MessageSizeExceededError:
            return False
        return True

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def max_bytes(self) -> int:
        return self.batch.max_size_in_bytes


class ServiceBusBatchSender:
    """Implements ``producer.ports.BatchSender`` for one queue."""

    def __init__(self, client: ServiceBusClient, queue: str) -> None:
        self._client = client
        self._queue = queue
        self._sender: ServiceBusSender | None = None

    def _open(self) -> ServiceBusSender:
        if self._sender is None:
            self._sender = self._client.get_queue_sender(self._queue)
        return self._sender

    def create_batch(self) -> OutgoingBatch:
        with sender_errors(f"opening a sender to {self._queue}"):
            return ServiceBusBatch(self._open().create_message_batch())

    def send_batch(self, batch: OutgoingBatch) -> None:
        if not isinstance(batch, ServiceBusBatch):
            raise TypeError("send_batch takes the batches create_batch made")
        with sender_errors(f"sending {len(batch)} messages to {self._queue}"):
            self._open().send_messages(batch.batch)

    def close(self) -> None:
        """Close the link; a failure to close is logged, not raised (the sends are done)."""
        sender, self._sender = self._sender, None
        if sender is not None:
            try:
                sender.close()
            except Exception:
                log.warning("closing the sender to %s failed", self._queue, exc_info=True)


class ServiceBusBatchSenders:
    """Implements ``producer.ports.BatchSenders``: one sender per queue on one client."""

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self._senders: dict[str, ServiceBusBatchSender] = {}

    def sender(self, queue: str) -> ServiceBusBatchSender:
        if queue not in self._senders:
            self._senders[queue] = ServiceBusBatchSender(self._client, queue)
        return self._senders[queue]

    def close(self) -> None:
        """Close every sender (together: each close waits for the broker's detach), then
        the client."""
        senders = list(self._senders.values())
        self._senders.clear()
        if senders:
            with ThreadPoolExecutor(len(senders)) as pool:
                list(pool.map(lambda sender: sender.close(), senders))
        self._client.close()
