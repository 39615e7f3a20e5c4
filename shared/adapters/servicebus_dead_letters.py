"""The dead-letter sub-queues of the request queues and of the results topic's subscriptions
through azure-servicebus (an entity is a queue name or ``<topic>/subscriptions/<name>``).

Reading is ``peek_messages`` on a receiver of ``sub_queue=DEAD_LETTER`` (the management
operation ``com.microsoft:peek-message``): nothing is locked, received or counted as a
delivery. The dead-letter sub-queue of a session-enabled queue is not session-enabled
itself, so one receiver reads it whole.

Removing chosen messages cannot go by sequence number (the broker receives by sequence
number only deferred messages), so ``remove`` receives in peek-lock in sequence order,
completes the chosen ones and keeps the others locked until it is done, then abandons
them all at once: an abandoned message is available again at once, and abandoning each
as it came would hand the same message back on the next receive. The pass ends when every
chosen message is removed, the sub-queue has nothing more to give, or a message comes
back a second time (its lock lapsed on a very long pass). Each message passed over
counts one more delivery in the sub-queue, which has no maximum delivery count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)

from shared.adapters.servicebus import LazyServiceBusSender, servicebus_client, servicebus_errors
from shared.adapters.servicebus_inbound import from_sdk
from shared.messaging import MessageSender
from shared.processing.dead_letters.queues import DEAD_LETTER_PROPERTIES, topic_subscription
from shared.processing.values import DeadLetteredMessage
from shared.settings import Settings

log = logging.getLogger(__name__)

PAGE = 100


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def dead_lettered(queue: str, message: ServiceBusReceivedMessage) -> DeadLetteredMessage:
    """The domain's view of a message of ``queue``'s dead-letter sub-queue."""
    inbound = from_sdk(message)
    properties = inbound.application_properties
    reason = message.dead_letter_reason or _text(properties.get("DeadLetterReason"))
    description = message.dead_letter_error_description or _text(
        properties.get("DeadLetterErrorDescription")
    )
    return DeadLetteredMessage(
        queue=queue,
        sequence_number=int(message.sequence_number or 0),
        message_id=inbound.message_id,
        enqueued_time=inbound.enqueued_time,
        delivery_count=inbound.delivery_count,
        reason=reason or "unknown",
        description=description or "",
        source=message.dead_letter_source,
        body=inbound.body,
        correlation_id=inbound.correlation_id,
        session_id=inbound.session_id,
        subject=inbound.subject,
        content_type=inbound.content_type,
        application_properties={
            k: v for k, v in properties.items() if k not in DEAD_LETTER_PROPERTIES
        },
    )


class ServiceBusDeadLetterQueues:
    """Implements ``processing.ports.DeadLetterQueues``."""

    def __init__(
        self,
        client: ServiceBusClient | Callable[[], ServiceBusClient],
        receive_wait_seconds: float = 2.0,
    ) -> None:
        """``client`` or a factory of it (called on first use: a process that never reads
        a dead-letter queue opens no connection)."""
        self._client_or_factory = client
        self._wait = receive_wait_seconds

    @property
    def _client(self) -> ServiceBusClient:
        found = self._client_or_factory
        return found if isinstance(found, ServiceBusClient) else found()

    def _receiver(self, entity: str, **options: Any) -> Any:
        """A receiver of ``entity``'s dead-letter sub-queue (a queue or a subscription)."""
        found = topic_subscription(entity)
        if found is not None:
            topic, subscription = found
            return self._client.get_subscription_receiver(
                topic, subscription, sub_queue=ServiceBusSubQueue.DEAD_LETTER, **options
            )
        return self._client.get_queue_receiver(
            entity, sub_queue=ServiceBusSubQueue.DEAD_LETTER, **options
        )

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        found: list[DeadLetteredMessage] = []
        receiver = self._receiver(queue)
        with servicebus_errors(f"peeking the dead-letter queue of {queue}"), receiver:
            next_number = 1
            while page := receiver.peek_messages(PAGE, sequence_number=next_number):
                found.extend(dead_lettered(queue, m) for m in page)
                next_number = max(int(m.sequence_number or 0) for m in page) + 1
        return found

    def peek_page(
        self, queue: str, from_sequence_number: int, max_count: int
    ) -> list[DeadLetteredMessage]:
        """Implements ``DeadLetterPages``: one ``peek_messages`` from a sequence number."""
        receiver = self._receiver(queue)
        with servicebus_errors(f"peeking the dead-letter queue of {queue}"), receiver:
            page = receiver.peek_messages(max_count, sequence_number=max(from_sequence_number, 1))
        found = [dead_lettered(queue, m) for m in page]
        return sorted(found, key=lambda i: i.sequence_number)

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        wanted = set(sequence_numbers)
        if not wanted:
            return []
        removed: list[int] = []
        held: list[ServiceBusReceivedMessage] = []
        seen: set[int] = set()
        receiver = self._receiver(
            queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=0
        )
        with servicebus_errors(f"purging the dead-letter queue of {queue}"), receiver:
            try:
                while len(removed) < len(wanted):
                    batch = receiver.receive_messages(PAGE, max_wait_time=self._wait)
                    fresh = [m for m in batch if int(m.sequence_number or 0) not in seen]
                    held.extend(m for m in batch if m not in fresh)
                    if not fresh:
                        break  # empty, or only messages seen before: nothing more to find
                    for message in fresh:
                        number = int(message.sequence_number or 0)
                        seen.add(number)
                        if number in wanted:
                            receiver.complete_message(message)
                            removed.append(number)
                        else:
                            held.append(message)
            finally:
                self._let_go(receiver, held)
        return removed

    @staticmethod
    def _let_go(receiver: Any, held: list[ServiceBusReceivedMessage]) -> None:
        for message in held:
            try:
                receiver.abandon_message(message)
            except Exception:  # its lock lapsed: it is available again anyway
                log.debug("abandoning %s failed", message.sequence_number, exc_info=True)


@contextmanager
def dead_letter_tools(
    settings: Settings,
) -> Iterator[tuple[ServiceBusDeadLetterQueues, Callable[[str], MessageSender]]]:
    """The dead-letter queues and a sender per entity over one client, closed afterwards
    (a subscription's sender sends to its topic: nothing can send to a subscription)."""
    client = servicebus_client(settings)
    senders: list[LazyServiceBusSender] = []

    @cache
    def sender_for(entity: str) -> MessageSender:
        found = topic_subscription(entity)
        if found is not None:
            sender = LazyServiceBusSender(lambda: client, found[0], topic=True)
        else:
            sender = LazyServiceBusSender(lambda: client, entity)
        senders.append(sender)
        return sender

    try:
        yield ServiceBusDeadLetterQueues(client), sender_for
    finally:
        for sender in senders:
            sender.close()
        client.close()
