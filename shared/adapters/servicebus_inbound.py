"""Received Service Bus messages and their settlement, for both ways they arrive.

- Through the Functions extension: ``ServiceBusReceivedMessage`` objects without a
  receiver, settled with ``ServiceBusMessageActions`` (1.0.0b2: ``complete``, ``abandon``,
  ``deadletter(message, deadletter_reason=, deadletter_error_description=)``, ``defer``,
  ``renew_message_lock``), which talk to the host over gRPC.
- Through an SDK ``ServiceBusReceiver`` (the deferred sweeper, tests, tools): settled on
  the receiver. A receiver is not thread-safe, so its settler serialises calls.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver
from azure.servicebus.exceptions import MessageNotFoundError

from shared.adapters.servicebus import servicebus_errors
from shared.errors import TransientError
from shared.processing.inbound import InboundMessage, normalise_properties


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _body(message: ServiceBusReceivedMessage) -> bytes:
    body = message.body
    if isinstance(body, bytes):
        return body
    try:
        return b"".join(body)
    except TypeError:
        # An AMQP value or sequence body is no request of ours: an empty body makes the
        # pipeline dead-letter it as InvalidPayload instead of failing the whole batch.
        return b""


def from_sdk(message: ServiceBusReceivedMessage, *, from_receiver: bool = False) -> InboundMessage:
    """The processor's view of an SDK message (the SDK message stays in ``handle``).

    Messages of the Functions binding extension are SDK messages too (a subclass), so the
    batch trigger converts its binding with this before anything else sees it. Their
    delivery count includes the current delivery (1 on the first: the .NET SDK under the
    extension adds it), while a Python SDK receiver reports the AMQP header's count of
    earlier attempts (0 on the first): ``from_receiver`` adds the one, so that
    ``InboundMessage.delivery_count`` means the same whichever way a message came.
    """
    return InboundMessage(
        body=_body(message),
        message_id=_text(message.message_id),
        sequence_number=message.sequence_number,
        delivery_count=(message.delivery_count or 0) + (1 if from_receiver else 0),
        enqueued_time=message.enqueued_time_utc,
        correlation_id=_text(message.correlation_id),
        session_id=_text(message.session_id),
        subject=_text(message.subject),
        content_type=_text(message.content_type),
        application_properties=normalise_properties(message.application_properties),
        handle=message,
    )


class MessageActions(Protocol):
    """What ``ServiceBusMessageActions`` (binding extension 1.0.0b2) offers for settling."""

    def complete(self, message: ServiceBusReceivedMessage) -> None: ...

    def abandon(self, message: ServiceBusReceivedMessage) -> None: ...

    def deadletter(
        self,
        message: ServiceBusReceivedMessage,
        deadletter_reason: str | None = ...,
        deadletter_error_description: str | None = ...,
    ) -> None: ...

    def defer(self, message: ServiceBusReceivedMessage) -> None: ...

    def renew_message_lock(self, message: ServiceBusReceivedMessage) -> None: ...

    def renew_session_lock(self, session_id: str) -> object: ...


class ActionsSettler:
    """Implements ``processing.ports.Settler`` over the Functions ``ServiceBusMessageActions``."""

    def __init__(self, actions: MessageActions) -> None:
        self._actions = actions

    def complete(self, message: InboundMessage) -> None:
        self._actions.complete(message.handle)

    def abandon(self, message: InboundMessage) -> None:
        self._actions.abandon(message.handle)

    def dead_letter(self, message: InboundMessage, reason: str, description: str) -> None:
        self._actions.deadletter(
            message.handle, deadletter_reason=reason, deadletter_error_description=description
        )

    def defer(self, message: InboundMessage) -> None:
        self._actions.defer(message.handle)

    def renew_lock(self, message: InboundMessage) -> None:
        # A session message is locked by its session: renewing the session lock keeps it.
        if message.session_id:
            self._actions.renew_session_lock(message.session_id)
        else:
            self._actions.renew_message_lock(message.handle)


class ReceiverSettler:
    """Implements ``processing.ports.Settler`` over an SDK receiver (peek-lock)."""

    def __init__(self, receiver: ServiceBusReceiver) -> None:
        self._receiver = receiver
        self._lock = threading.Lock()

    def complete(self, message: InboundMessage) -> None:
        with self._lock, servicebus_errors("completing a message"):
            self._receiver.complete_message(message.handle)

    def abandon(self, message: InboundMessage) -> None:
        with self._lock, servicebus_errors("abandoning a message"):
            self._receiver.abandon_message(message.handle)

    def dead_letter(self, message: InboundMessage, reason: str, description: str) -> None:
        with self._lock, servicebus_errors("dead-lettering a message"):
            self._receiver.dead_letter_message(
                message.handle, reason=reason, error_description=description
            )

    def defer(self, message: InboundMessage) -> None:
        with self._lock, servicebus_errors("deferring a message"):
            self._receiver.defer_message(message.handle)

    def renew_lock(self, message: InboundMessage) -> None:
        with self._lock, servicebus_errors("renewing a lock"):
            session = self._receiver.session if message.session_id else None
            if session is not None:
                session.renew_lock()  # a session message is locked by its session
            else:
                self._receiver.renew_message_lock(message.handle)


class ReceiverDeferredSource:
    """Implements ``processing.ports.DeferredSource``: deferred messages by sequence number."""

    def __init__(self, receiver: ServiceBusReceiver) -> None:
        self._receiver = receiver
        self._settler = ReceiverSettler(receiver)

    @property
    def settler(self) -> ReceiverSettler:
        return self._settler

    def receive_deferred(self, sequence_numbers: list[int]) -> list[InboundMessage]:
        """Fetch in one call; when the broker says one is not found, fall back to one by one
        so that a single missing message does not hide the others.

        Only "not found" makes a message missing: any other failure (the broker
        unreachable, a timeout) raises ``TransientError``, so the sweeper leaves every
        ledger entry in place for its next run instead of setting them aside as missing.
        """
        if not sequence_numbers:
            return []
        try:
            with servicebus_errors("receiving deferred messages"):
                received = self._receiver.receive_deferred_messages(sequence_numbers)
            return [from_sdk(message, from_receiver=True) for message in received]
        except TransientError as error:
            if not isinstance(error.__cause__, MessageNotFoundError):
                raise
        found: list[InboundMessage] = []
        for number in sequence_numbers:
            try:
                with servicebus_errors(f"receiving deferred message {number}"):
                    found.extend(
                        from_sdk(m, from_receiver=True)
                        for m in self._receiver.receive_deferred_messages([number])
                    )
            except TransientError as error:
                if not isinstance(error.__cause__, MessageNotFoundError):
                    raise
                # missing: the sweeper reports it and keeps its ledger entry aside
        return found


@contextmanager
def deferred_source(client: ServiceBusClient, queue: str) -> Iterator[ReceiverDeferredSource]:
    """A peek-lock receiver on ``queue`` for the deferred sweeper, closed afterwards."""
    with client.get_queue_receiver(queue) as receiver:
        yield ReceiverDeferredSource(receiver)
