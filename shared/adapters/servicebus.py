"""Service Bus through azure-servicebus: clients, the request sender, the backlog probe.

One ``ServiceBusClient`` per process (a namespace allows 5,000 AMQP connections, and a
connection per invocation also costs a TLS and CBS handshake each time). Senders are not
thread-safe, so each is guarded by a lock; a sender whose connection broke is closed and
rebuilt on the next send.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
)

from shared import telemetry
from shared.adapters.identity import azure_credential
from shared.errors import BrokerUnreachable, ConfigurationError, PermanentError, TransientError
from shared.lanes import Lane, LaneQueues, LaneRouter
from shared.messaging import OutgoingMessage, Scheduled
from shared.settings import Settings

log = logging.getLogger(__name__)


def malformed_servicebus_connection() -> ConfigurationError:
    """What a ``ServiceBusConnection`` string the SDK could not parse is (a ValueError of
    its ``from_connection_string``): a configuration error naming the setting, the string
    itself never quoted."""
    return ConfigurationError(
        "the ServiceBusConnection setting (a connection string) is malformed: it needs "
        "Endpoint=sb://... and SharedAccessKeyName with SharedAccessKey (or "
        "SharedAccessSignature)"
    )


def servicebus_client(
    settings: Settings, *, retry_total: int = 3, try_timeout: float | None = None
) -> ServiceBusClient:
    """The client for the ``ServiceBusConnection`` connection; ``retry_total``: the SDK's
    tries after the first (its default, 3); ``try_timeout``: what one try may take (None:
    the SDK's default)."""
    options: dict[str, Any] = {"retry_total": retry_total}
    if try_timeout is not None:
        options["try_timeout"] = try_timeout
    if settings.servicebus.connection_string:
        try:
            return ServiceBusClient.from_connection_string(
                settings.servicebus.connection_string, **options
            )
        except ValueError as error:  # the SDK's parse of the string
            raise malformed_servicebus_connection() from error
    if settings.servicebus.namespace:
        credential = azure_credential(settings.servicebus.client_id)
        return ServiceBusClient(settings.servicebus.namespace, credential, **options)
    raise ConfigurationError(
        "set ServiceBusConnection (connection string) or "
        "ServiceBusConnection__fullyQualifiedNamespace"
    )


def to_servicebus_message(message: OutgoingMessage) -> ServiceBusMessage:
    """The SDK message for an outgoing message: every system property set explicitly."""
    properties: dict[str | bytes, Any] = {k: v for k, v in message.application_properties.items()}
    return ServiceBusMessage(
        message.body,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        content_type=message.content_type,
        subject=message.subject,
        session_id=message.session_id,
        time_to_live=message.time_to_live,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time,
        application_properties=properties,
    )


@contextmanager
def servicebus_errors(what: str) -> Iterator[None]:
    """Translate SDK failures into the application's error tree."""
    try:
        yield
    except MessagingEntityNotFoundError as error:
        raise ConfigurationError(f"{what}: the entity does not exist") from error
    except MessageSizeExceededError as error:
        raise PermanentError(f"{what}: the message is too large") from error
    except (
        ServiceBusConnectionError,
        ServiceBusCommunicationError,
        OperationTimeoutError,
    ) as error:
        raise BrokerUnreachable(f"{what}: {type(error).__name__}") from error
    except ServiceBusError as error:
        raise TransientError(f"{what}: {type(error).__name__}") from error


class LazyServiceBusSender:
    """Implements ``messaging.SchedulingSender`` for one queue or topic.

    The client comes from ``client_factory`` on the first send, so processes (and tests)
    that never send open no AMQP connection.
    """

    def __init__(
        self, client_factory: Callable[[], ServiceBusClient], entity: str, *, topic: bool = False
    ) -> None:
        self._client_factory = client_factory
        self._entity = entity
        self._topic = topic
        self._sender: ServiceBusSender | None = None
        self._lock = threading.Lock()

    def _open(self) -> ServiceBusSender:
        if self._sender is None:
            client = self._client_factory()
            factory: Any = client.get_topic_sender if self._topic else client.get_queue_sender
            self._sender = factory(self._entity)
        return self._sender

    def send(self, message: OutgoingMessage) -> None:
        with self._send_span(message):
            self._send(message)

    def _send_span(self, message: OutgoingMessage) -> AbstractContextManager[object]:
        """The producer span of one send (a scheduled one's too)."""
        attributes = {
            "messaging.system": "servicebus",
            "messaging.operation.type": "send",
            "messaging.destination.name": self._entity,
            "messaging.message.id": message.message_id,
        }
        name = f"{telemetry.SPAN_SEND} {self._entity}"
        return telemetry.span(name, kind=telemetry.PRODUCER, attributes=attributes)

    def _send(self, message: OutgoingMessage) -> None:
        with self._lock, servicebus_errors(f"sending to {self._entity}"):
            try:
                self._open().send_messages(to_servicebus_message(message))
            except ServiceBusError:
                self._discard()
                raise

    def schedule(self, message: OutgoingMessage) -> Scheduled:
        """A scheduled message through the broker's schedule operation, which answers its
        sequence number (a plain send with a scheduled time answers none)."""
        at = message.scheduled_enqueue_time
        if at is None:
            raise ValueError(f"message {message.message_id} has no scheduled enqueue time")
        with (
            self._send_span(message),
            self._lock,
            servicebus_errors(f"scheduling on {self._entity}"),
        ):
            try:
                (number,) = self._open().schedule_messages(to_servicebus_message(message), at)
            except ServiceBusError:
                self._discard()
                raise
        return Scheduled(self._entity, int(number))

    def cancel(self, scheduled: Sequence[Scheduled]) -> None:
        numbers = [s.sequence_number for s in scheduled if s.entity == self._entity]
        if not numbers:
            return
        with self._lock, servicebus_errors(f"cancelling scheduled messages on {self._entity}"):
            try:
                self._open().cancel_scheduled_messages(numbers)
            except (ServiceBusConnectionError, ServiceBusCommunicationError):
                self._discard()
                raise
            # Any other refusal (a message that came due meanwhile) leaves the link sound.

    def _discard(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            try:
                sender.close()
            except Exception:
                log.debug("closing a broken sender failed", exc_info=True)

    def close(self) -> None:
        with self._lock:
            self._discard()


def lane_senders(settings: Settings, client: Callable[[], ServiceBusClient]) -> LaneRouter:
    """A sender per request lane's queue, over ``client``'s connection (opened on the
    first send)."""
    queues = LaneQueues.from_settings(settings)
    return LaneRouter({lane: LazyServiceBusSender(client, queues.queue(lane)) for lane in Lane})
