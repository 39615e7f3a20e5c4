"""The namespace: topics fanning events out to their subscriptions, and time passing.

All state sits behind one condition variable: HTTP handler threads publish, receive and
settle under it, receivers wait on it for events (long polling), push deliverers wait on
it for due events, and the sweeper thread wakes every few milliseconds to expire locks,
reveal delayed releases and expire old events. Names of topics and subscriptions are
case-insensitive, as Azure resource names are.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .clock import Clock, utcnow
from .config import NamespaceConfig
from .dead_letter import DeadLetterSink
from .entries import Entry
from .errors import bad_request, not_found
from .pull import PullSubscription, Settled
from .push import PushDeliverer, PushSubscription
from .webhook import WebhookClient

log = logging.getLogger("eventgrid_emulator.broker")

SWEEP_INTERVAL = 0.02
Subscription = PullSubscription | PushSubscription


class Broker:
    def __init__(
        self,
        config: NamespaceConfig,
        clock: Clock,
        sink: DeadLetterSink,
        webhooks: WebhookClient | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.sink = sink
        self.condition = threading.Condition()
        self._closed = False
        self.topics: dict[str, dict[str, Subscription]] = {}
        self._topic_names: dict[str, str] = {}
        self._deliverers: list[PushDeliverer] = []
        client = webhooks or WebhookClient()
        for topic in config.topics:
            self._topic_names[topic.name.lower()] = topic.name
            subscriptions: dict[str, Subscription] = {}
            for sub in topic.subscriptions:
                prefix = f"{config.name}/{topic.name}/{sub.name}"
                if sub.mode == "Push":
                    push = PushSubscription(prefix, sub, clock, sink)
                    self._deliverers.append(PushDeliverer(push, self.condition, client))
                    subscriptions[sub.name.lower()] = push
                else:
                    subscriptions[sub.name.lower()] = PullSubscription(prefix, sub, clock, sink)
            self.topics[topic.name.lower()] = subscriptions
        self._sweeper = threading.Thread(target=self._sweep_loop, name="sweeper", daemon=True)

    def start(self) -> None:
        self._sweeper.start()
        for deliverer in self._deliverers:
            deliverer.start()

    def close(self) -> None:
        """Stop the sweeper and deliverers and answer every waiting receive."""
        with self.condition:
            self._closed = True
            for deliverer in self._deliverers:
                deliverer.close()
            self.condition.notify_all()
        self._sweeper.join(2)
        for deliverer in self._deliverers:
            deliverer.join(2)

    def _subscriptions(self, topic: str) -> dict[str, Subscription]:
        found = self.topics.get(topic.lower())
        if found is None:
            raise not_found(f"Topic {topic!r} does not exist in namespace {self.config.name!r}.")
        return found

    def _pull(self, topic: str, name: str) -> PullSubscription:
        subscription = self._subscriptions(topic).get(name.lower())
        if subscription is None:
            raise not_found(f"Event subscription {name!r} does not exist on topic {topic!r}.")
        if not isinstance(subscription, PullSubscription):
            raise bad_request(
                f"Event subscription {name!r} delivers by push; only queue subscriptions "
                "support receive and settlement operations."
            )
        return subscription

    def publish(self, topic: str, events: list[dict[str, Any]]) -> None:
        """Accept events for every subscription whose filter matches them."""
        with self.condition:
            subscriptions = self._subscriptions(topic)
            now = self.clock.now()
            published = utcnow()
            for event in events:
                for subscription in subscriptions.values():
                    if subscription.config.filter.matches(event):
                        ttl = self.clock.span(subscription.config.time_to_live)
                        entry = Entry(event, published, expires_at=now + ttl, visible_at=now)
                        subscription.enqueue(entry)
            self.condition.notify_all()

    def receive(
        self, topic: str, subscription: str, max_events: int, max_wait: float
    ) -> list[dict[str, Any]]:
        """Up to ``max_events`` events, waiting up to ``max_wait`` service seconds for one."""
        with self.condition:
            queue = self._pull(topic, subscription)
            deadline = self.clock.now() + self.clock.span(max_wait)
            while not queue.has_available() and not self._closed:
                remaining = deadline - self.clock.now()
                if remaining <= 0:
                    break
                self.condition.wait(remaining)
            taken = queue.take(max_events)
        return [
            {
                "brokerProperties": {
                    "lockToken": entry.lock_token,
                    "deliveryCount": entry.delivery_count,
                },
                "event": entry.event,
            }
            for entry in taken
        ]

    def settle(
        self, topic: str, subscription: str, action: str, tokens: list[str], delay: float = 0.0
    ) -> Settled:
        with self.condition:
            result = self._pull(topic, subscription).settle(action, tokens, delay)
            self.condition.notify_all()
            return result

    def runtime(self) -> dict[str, dict[str, Any]]:
        """Counts per ``topic/subscription`` (the /runtime endpoint)."""
        with self.condition:
            return {
                f"{self._topic_names[topic]}/{sub.config.name}": sub.counts()
                for topic, subscriptions in self.topics.items()
                for sub in subscriptions.values()
            }

    def _sweep_loop(self) -> None:
        with self.condition:
            while not self._closed:
                woke = False
                for subscriptions in self.topics.values():
                    for sub in subscriptions.values():
                        if isinstance(sub, PullSubscription) and sub.sweep():
                            woke = True
                if woke:
                    self.condition.notify_all()
                self.condition.wait(SWEEP_INTERVAL)
