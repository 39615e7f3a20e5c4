"""Service Bus helpers for tests that drive the app through the real SDK and the emulator."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

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


class RuntimeCounts(Protocol):
    """The emulator's runtime counts (``ServiceBusEmulator.runtime_properties``)."""

    def runtime_properties(self, entity_path: str) -> dict[str, Any]: ...


class Emulator(RuntimeCounts, Protocol):
    @property
    def connection_string(self) -> str: ...


_EMULATOR_OF: weakref.WeakKeyDictionary[ServiceBusClient, RuntimeCounts] = (
    weakref.WeakKeyDictionary()
)


def connect(emulator: Emulator) -> ServiceBusClient:
    """A client of ``emulator`` whose ``drain`` calls consult the emulator's counts."""
    client = ServiceBusClient.from_connection_string(emulator.connection_string)
    _EMULATOR_OF[client] = emulator
    return client


def _held_messages(
    counts: RuntimeCounts,
    queue: str | None,
    topic: str | None,
    subscription: str | None,
    sub_queue: str | None,
) -> int:
    """Messages in the entity (or its dead-letter queue), scheduled and deferred included."""
    path = queue or f"{topic}/Subscriptions/{subscription}"
    properties = counts.runtime_properties(path)
    dead = int(properties["dead_letter_message_count"])
    return dead if sub_queue == "deadletter" else int(properties["total_message_count"]) - dead


def drain(
    client: ServiceBusClient,
    queue: str | None = None,
    *,
    topic: str | None = None,
    subscription: str | None = None,
    sub_queue: str | None = None,
    emulator: RuntimeCounts | None = None,
) -> list[ServiceBusReceivedMessage]:
    """Receive and complete everything currently in an entity; returns what was there.

    With ``emulator`` (or a client made by ``connect``) the entity's runtime counts say
    how much is there: an empty entity is not opened at all (a receiver's attach, empty
    receive and detach cost about two seconds against the emulator), and receiving stops
    once that many have arrived.
    Without it, receiving stops at the first empty batch.
    """
    expected: int | None = None
    emulator = emulator or _EMULATOR_OF.get(client)
    if emulator is not None:
        expected = _held_messages(emulator, queue, topic, subscription, sub_queue)
        if expected == 0:
            return []
    if queue:
        receiver = client.get_queue_receiver(queue, sub_queue=sub_queue)
    else:
        assert topic
        assert subscription
        receiver = client.get_subscription_receiver(topic, subscription, sub_queue=sub_queue)
    drained: list[ServiceBusReceivedMessage] = []
    with receiver:
        while expected is None or len(drained) < expected:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=0.5)
            if not batch:
                break
            for message in batch:
                receiver.complete_message(message)
            drained.extend(batch)
    return drained


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

    def __init__(
        self, client: ServiceBusClient, queue: str, emulator: RuntimeCounts | None = None
    ) -> None:
        self._client = client
        self._queue = queue
        self._emulator = emulator
        self._arrived: list[ArrivedMessage] = []
        drain(client, queue, emulator=emulator)

    @property
    def sent(self) -> list[ArrivedMessage]:
        for message in drain(self._client, self._queue, emulator=self._emulator):
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
