"""Service Bus helpers for tests that drive the app through the real SDK and the emulator."""

from __future__ import annotations

import threading
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver


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
