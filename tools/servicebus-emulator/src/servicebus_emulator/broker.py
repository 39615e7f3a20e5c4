"""The namespace: entities by path, the send pipeline, dead-lettering and timers.

Everything here runs on the event-loop thread; the AMQP layer calls in and is told,
through ``on_available``, which entity has new messages for its receivers.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proton import symbol

from .codec import StoredMessage
from .config import EntitySettings, NamespaceConfig, SendSettings
from .rules import Rule, rule_from_config
from .store import NO_JOURNAL, EntityStore, Envelope, Journal, MessageState

LOG = logging.getLogger("servicebus_emulator.broker")
DLQ_SUFFIX = "/$deadletterqueue"
_SCHEDULED_ANNOTATION = symbol("x-opt-scheduled-enqueue-time")


class BrokerError(Exception):
    """A refusal the AMQP layer reports with ``condition`` (an AMQP error symbol)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def dead_letter_settings(settings: EntitySettings) -> EntitySettings:
    return EntitySettings(lock_duration=settings.lock_duration, max_delivery_count=2**31 - 1)


@dataclass
class Sendable:
    """A queue or topic: what a sender link targets."""

    name: str
    send_settings: SendSettings
    next_sequence: int = 1
    seen_ids: OrderedDict[str, float] = field(default_factory=OrderedDict)

    def is_duplicate(self, message_id: str | None, now: float) -> bool:
        if not self.send_settings.requires_duplicate_detection or message_id is None:
            return False
        window = self.send_settings.duplicate_window
        while self.seen_ids and next(iter(self.seen_ids.values())) < now - window:
            self.seen_ids.popitem(last=False)
        if message_id in self.seen_ids:
            return True
        self.seen_ids[message_id] = now
        return False


@dataclass
class Receivable:
    """A queue or a subscription with its dead-letter sub-queue."""

    store: EntityStore
    dead_letters: EntityStore
    rules: dict[str, Rule] = field(default_factory=dict)


@dataclass
class Topic(Sendable):
    subscriptions: dict[str, Receivable] = field(default_factory=dict)
    scheduled: dict[int, tuple[float, StoredMessage]] = field(default_factory=dict)
    schedule_heap: list[tuple[float, int]] = field(default_factory=list)


class Namespace:
    """Every entity of the configured namespace."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.name = config.name
        self.queues: dict[str, tuple[Sendable, Receivable]] = {}
        self.topics: dict[str, Topic] = {}
        self.stores: dict[str, EntityStore] = {}
        self._sinks: dict[str, Callable[[Envelope, str, str], None]] = {}
        self.on_available: Callable[[EntityStore], None] = lambda store: None
        self.journal: Journal = NO_JOURNAL
        for queue in config.queues:
            receivable = self._receivable(queue.name, queue.settings)
            self.queues[queue.name.lower()] = (Sendable(queue.name, queue.send), receivable)
        for topic_config in config.topics:
            topic = Topic(topic_config.name, topic_config.send)
            self.topics[topic_config.name.lower()] = topic
            for sub in topic_config.subscriptions:
                path = f"{topic_config.name}/Subscriptions/{sub.name}"
                receivable = self._receivable(path, sub.settings)
                receivable.rules = {rule.name: rule_from_config(rule) for rule in sub.rules}
                topic.subscriptions[sub.name.lower()] = receivable

    def use_journal(self, journal: Journal) -> None:
        """Report every later change of state to ``journal`` (after a restore)."""
        self.journal = journal
        for store in self.stores.values():
            store.journal = journal

    def _receivable(self, path: str, settings: EntitySettings) -> Receivable:
        store = EntityStore(path, settings)
        dead_letters = EntityStore(path + "/$DeadLetterQueue", dead_letter_settings(settings))
        self.stores[path.lower()] = store
        self.stores[(path + DLQ_SUFFIX).lower()] = dead_letters
        return Receivable(store, dead_letters)

    # --- addressing ----------------------------------------------------------------------
    @staticmethod
    def normalize(address: str) -> str:
        """``amqps://host:port/a/b`` or ``/a/b`` -> ``a/b`` (lower-case)."""
        path = address.split("://", 1)[1].split("/", 1)[1] if "://" in address else address
        return path.strip("/").lower()

    def sendable(self, address: str) -> Sendable:
        path = self.normalize(address)
        if path in self.queues:
            return self.queues[path][0]
        if path in self.topics:
            return self.topics[path]
        raise BrokerError(
            "amqp:not-found", f"The messaging entity '{self.name}:{path}' could not be found."
        )

    def store(self, address: str) -> EntityStore:
        path = self.normalize(address)
        if path in self.stores:
            return self.stores[path]
        raise BrokerError(
            "amqp:not-found", f"The messaging entity '{self.name}:{path}' could not be found."
        )

    def receivable(self, address: str) -> Receivable:
        path = self.normalize(address).removesuffix(DLQ_SUFFIX)
        if path in self.queues:
            return self.queues[path][1]
        topic, _, sub = path.partition("/subscriptions/")
        if topic in self.topics and sub in self.topics[topic].subscriptions:
            return self.topics[topic].subscriptions[sub]
        raise BrokerError(
            "amqp:not-found", f"The messaging entity '{self.name}:{path}' could not be found."
        )

    # --- sending -------------------------------------------------------------------------
    def send(
        self, address: str, messages: list[StoredMessage], scheduled_at: float | None = None
    ) -> list[int]:
        """Accept messages for a queue or topic; returns their sequence numbers.

        With a data folder they are durable when this returns, before the client is told.
        """
        sequence_numbers = self._send(address, messages, scheduled_at)
        self.journal.flush()
        return sequence_numbers

    def _send(
        self, address: str, messages: list[StoredMessage], scheduled_at: float | None = None
    ) -> list[int]:
        target = self.sendable(address)
        now = time.time()
        for message in messages:
            if message.size > target.send_settings.max_message_size:
                raise BrokerError(
                    "amqp:link:message-size-exceeded",
                    f"The message size {message.size} exceeds the limit "
                    f"{target.send_settings.max_message_size}.",
                )
        queue_store = (
            None if isinstance(target, Topic) else self.queues[target.name.lower()][1].store
        )
        sequence_numbers = []
        for message in messages:
            sequence = target.next_sequence
            target.next_sequence += 1
            self.journal.sequence_advanced(target.name.lower())
            sequence_numbers.append(sequence)
            if target.is_duplicate(message.message_id, now):
                continue
            if message.message_id is not None and message.message_id in target.seen_ids:
                # Just remembered by is_duplicate: the history survives a restart too.
                self.journal.message_id_seen(target.name.lower(), message.message_id, now)
            when = scheduled_at
            annotated = message.annotations.get(_SCHEDULED_ANNOTATION)
            if when is None and isinstance(annotated, int) and annotated / 1000 > now:
                when = annotated / 1000
            if isinstance(target, Topic):
                if when is not None:
                    target.scheduled[sequence] = (when, message)
                    heapq.heappush(target.schedule_heap, (when, sequence))
                    self.journal.topic_schedule_changed(target.name.lower(), sequence)
                else:
                    self._fan_out(target, sequence, message, now)
            else:
                assert queue_store is not None
                self._enqueue(queue_store, target, sequence, message, now, when)
        return sequence_numbers

    def _fan_out(self, topic: Topic, sequence: int, message: StoredMessage, now: float) -> None:
        for receivable in topic.subscriptions.values():
            matched = next(
                (r for r in receivable.rules.values() if self._matches(r, message)), None
            )
            if matched is None:
                continue
            copy = message.copy()
            if matched.action is not None:
                matched.action(copy)
            self._enqueue(receivable.store, topic, sequence, copy, now, None)

    @staticmethod
    def _matches(rule: Rule, message: StoredMessage) -> bool:
        try:
            return rule.matches(message)
        except Exception:  # a filter that cannot evaluate simply does not match
            LOG.exception("rule %s failed to evaluate", rule.name)
            return False

    def _enqueue(
        self,
        store: EntityStore,
        source: Sendable,
        sequence: int,
        message: StoredMessage,
        now: float,
        scheduled_at: float | None,
    ) -> None:
        forward_to = store.settings.forward_to
        if forward_to:
            self._send(forward_to, [message])
            return
        if store.settings.requires_session and not message.session_id:
            raise BrokerError(
                "amqp:not-allowed",
                f"The entity '{store.path}' requires sessions: set a session_id on every message.",
            )
        ttl_candidates = [
            t for t in (source.send_settings.default_ttl, store.settings.default_ttl) if t
        ]
        if message.ttl_ms:
            ttl_candidates.append(message.ttl_ms / 1000)
        start = scheduled_at or now
        expires_at = start + min(ttl_candidates) if ttl_candidates else None
        state = MessageState.SCHEDULED if scheduled_at is not None else MessageState.ACTIVE
        store.add(Envelope(sequence, message, start, expires_at, state, scheduled_at))
        if state is MessageState.ACTIVE:
            self.on_available(store)

    def cancel_scheduled(self, address: str, sequence_numbers: list[int]) -> None:
        """Cancel scheduled messages, all or none: as Service Bus does, a number that is
        not a scheduled message's (one enqueued meanwhile, or never sent) refuses the
        whole call, naming the missing ones."""
        target = self.sendable(address)
        if isinstance(target, Topic):
            missing = [s for s in sequence_numbers if s not in target.scheduled]
        else:
            store = self.queues[target.name.lower()][1].store
            missing = [s for s in sequence_numbers if not store.is_scheduled(s)]
        if missing:
            raise BrokerError(
                "com.microsoft:message-not-found",
                "Messages not found. Missing sequence numbers: "
                + ", ".join(str(s) for s in missing),
            )
        for sequence in sequence_numbers:
            if isinstance(target, Topic):
                target.scheduled.pop(sequence, None)
                self.journal.topic_schedule_changed(target.name.lower(), sequence)
            else:
                self.queues[target.name.lower()][1].store.cancel_scheduled(sequence)

    # --- dead-lettering and time -----------------------------------------------------------
    def dead_letter(
        self,
        store: EntityStore,
        envelope: Envelope,
        reason: str | None,
        description: str | None,
    ) -> None:
        """Move a message to the dead-letter queue of ``store``.

        A reason or description of None (AMQP null from the client) is stored as absent,
        as Azure does, so the SDK reads ``None`` rather than a text such as "None".
        """
        dead_letters = self.stores.get(store.path.lower() + DLQ_SUFFIX)
        if dead_letters is None:  # already a dead-letter queue: nowhere further to go
            return
        message = envelope.message.copy()
        properties: dict[Any, Any] = dict(message.application_properties)
        for name, value in (
            ("DeadLetterReason", reason),
            ("DeadLetterErrorDescription", description),
        ):
            if value is not None:
                properties[name] = value
        message.set_application_properties(properties)
        message.annotations[symbol("x-opt-deadletter-source")] = store.path
        forward_to = store.settings.forward_dead_lettered_to
        if forward_to:
            self._send(forward_to, [message])
            return
        dead_letters.add(
            Envelope(
                envelope.sequence_number,
                message,
                envelope.enqueued_at,
                None,
                delivery_count=envelope.delivery_count,
            )
        )
        self.on_available(dead_letters)

    def dead_letter_sink(self, store: EntityStore) -> Callable[[Envelope, str, str], None]:
        """The dead-lettering callback of ``store``: one per store, made once (the tick and
        every settlement ask for it)."""
        sink = self._sinks.get(store.path)
        if sink is None:
            sink = self._sinks[store.path] = lambda envelope, reason, description: self.dead_letter(
                store, envelope, reason, description
            )
        return sink

    def tick(self) -> None:
        now = time.time()
        for topic in self.topics.values():
            while topic.schedule_heap and topic.schedule_heap[0][0] <= now:
                _, sequence = heapq.heappop(topic.schedule_heap)
                entry = topic.scheduled.pop(sequence, None)
                if entry is not None:
                    self.journal.topic_schedule_changed(topic.name.lower(), sequence)
                    self._fan_out(topic, sequence, entry[1], now)
        for store in list(self.stores.values()):
            if store.tick(now, self.dead_letter_sink(store)):
                self.on_available(store)
        self.journal.flush()  # settlements and timer work: durable within one tick


__all__ = ["BrokerError", "Namespace", "Receivable", "Sendable", "Topic"]
