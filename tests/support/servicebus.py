"""Service Bus helpers for tests that drive the app through the real SDK and the emulator."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver

from shared.processing.inbound import normalise_properties


class ReceiverMessageActions:
    """Has the methods of the Functions ``ServiceBusMessageActions`` (extension 1.0.0b2),
    settling through an SDK receiver, as the Functions host does for the real one."""

    def __init__(self, receiver: ServiceBusReceiver) -> None:
        self._receiver = receiver
        self._lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []

    def _log(self, action: str, message: ServiceBusReceivedMessage) -> None:
        self.calls.append((action, str(message.message_id)))

    def complete(self, message: ServiceBusReceivedMessage) -> None:
        with self._lock:
            self._log("complete", message)
            self._receiver.complete_message(message)

    def abandon(self, message: ServiceBusReceivedMessage) -> None:
        with self._lock:
            self._log("abandon", message)
            self._receiver.abandon_message(message)

    def deadletter(
        self,
        message: ServiceBusReceivedMessage,
        deadletter_reason: str | None = None,
        deadletter_error_description: str | None = None,
    ) -> None:
        with self._lock:
            self._log("deadletter", message)
            self._receiver.dead_letter_message(
                message, reason=deadletter_reason, error_description=deadletter_error_description
            )

    def defer(self, message: ServiceBusReceivedMessage) -> None:
        with self._lock:
            self._log("defer", message)
            self._receiver.defer_message(message)

    def renew_message_lock(self, message: ServiceBusReceivedMessage) -> None:
        with self._lock:
            self._log("renew", message)
            self._receiver.renew_message_lock(message)


def drain(
    client: ServiceBusClient,
    queue: str | None = None,
    *,
    topic: str | None = None,
    subscription: str | None = None,
    sub_queue: str | None = None,
) -> list[ServiceBusReceivedMessage]:
    """Receive and complete everything currently in an entity; returns what was there."""
    if queue:
        receiver = client.get_queue_receiver(queue, sub_queue=sub_queue, max_wait_time=0.5)
    else:
        assert topic
        assert subscription
        receiver = client.get_subscription_receiver(
            topic, subscription, sub_queue=sub_queue, max_wait_time=1
        )
    drained: list[ServiceBusReceivedMessage] = []
    with receiver:
        while True:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=0.5)
            if not batch:
                return drained
            for message in batch:
                receiver.complete_message(message)
            drained.extend(batch)


@dataclass(frozen=True)
class ArrivedMessage:
    """A message as the broker delivered it, with properties normalised to ``str`` keys."""

    message_id: str
    correlation_id: str | None
    content_type: str | None
    subject: str | None
    time_to_live: timedelta | None
    application_properties: dict[str, Any]
    body: bytes


class QueueRecorder:
    """What the app sent to a queue on the emulator: ``sent`` drains the queue and keeps
    everything that has arrived so far (the queue is emptied when the recorder starts)."""

    def __init__(self, client: ServiceBusClient, queue: str) -> None:
        self._client = client
        self._queue = queue
        self._arrived: list[ArrivedMessage] = []
        drain(client, queue)

    @property
    def sent(self) -> list[ArrivedMessage]:
        for message in drain(self._client, self._queue):
            self._arrived.append(
                ArrivedMessage(
                    message_id=str(message.message_id),
                    correlation_id=message.correlation_id,
                    content_type=message.content_type,
                    subject=message.subject,
                    time_to_live=message.time_to_live,
                    application_properties=normalise_properties(message.application_properties),
                    body=b"".join(message.body),
                )
            )
        return list(self._arrived)
