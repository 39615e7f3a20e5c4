"""A push delivery event subscription: a webhook fed one event per request, with retries.

Follows "push delivery and retry with namespace topics": a failed attempt is retried at
0 s (immediately), 10 s, 30 s, 1 min, 5 min and then every 5 min, until the event is
delivered, ``maxDeliveryCount`` attempts are spent or its time to live has passed (checked
only when the next attempt is due, as documented); a 503 waits at least 30 s and a 408
at least 2 min. 400, 401, 403, 404, 413 and 414, timeouts and connection failures are
not retried: the event is dead-lettered at once. Azure validates the webhook when the
subscription is created; here the handshake runs before the first delivery, and until it
passes every attempt counts as a failed, retryable one.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
from typing import Any

from .clock import Clock, utcnow
from .config import SubscriptionConfig
from .dead_letter import (
    CLIENT_ERROR,
    DESTINATION_ERROR,
    MAX_DELIVERY_EXCEEDED,
    TIME_TO_LIVE_EXPIRED,
    DeadLetter,
    DeadLetterSink,
    dead_letter_record,
)
from .entries import Entry
from .filters import resolve_key
from .webhook import Outcome, WebhookClient

log = logging.getLogger("eventgrid_emulator.push")

RETRY_SCHEDULE = (0.0, 10.0, 30.0, 60.0, 300.0)  # then every 300 s
MINIMUM_RETRY_DELAY = {503: 30.0, 408: 120.0}


class PushSubscription:
    mode = "Push"

    def __init__(
        self, prefix: str, config: SubscriptionConfig, clock: Clock, sink: DeadLetterSink
    ) -> None:
        assert config.endpoint_url is not None
        self.prefix = prefix
        self.config = config
        self.endpoint_url: str = config.endpoint_url
        self._clock = clock
        self._sink = sink
        self._pending: list[tuple[float, int, Entry]] = []
        self._order = itertools.count()
        self.validated = False
        self.in_flight = 0
        self.matched = 0
        self.delivered = 0
        self.dead_lettered = 0

    def enqueue(self, entry: Entry) -> None:
        self.matched += 1
        heapq.heappush(self._pending, (entry.visible_at, next(self._order), entry))

    def next_due(self) -> Entry | float | None:
        """The next event to attempt now, else seconds until one is due (None: nothing)."""
        now = self._clock.now()
        while self._pending and self._pending[0][0] <= now:
            entry = heapq.heappop(self._pending)[2]
            if entry.expired(now):
                self._dead_letter(entry, TIME_TO_LIVE_EXPIRED, "TimeToLiveExceeded")
                continue
            self.in_flight += 1
            return entry
        return self._pending[0][0] - now if self._pending else None

    def headers(self, entry: Entry) -> dict[str, str]:
        """The subscription's delivery attributes for this event."""
        found: dict[str, str] = {}
        for attribute in self.config.delivery_attributes:
            if attribute.static_value is not None:
                found[attribute.name] = attribute.static_value
            elif attribute.source_field is not None:
                value = resolve_key(entry.event, attribute.source_field)
                if isinstance(value, str | int | float | bool):
                    found[attribute.name] = str(value)
        return found

    def finish(self, entry: Entry, outcome: Outcome) -> None:
        """Record an attempt: delivered, scheduled again, or dead-lettered."""
        self.in_flight -= 1
        if outcome.delivered:
            self.delivered += 1
            return
        if not outcome.retryable:
            reason = CLIENT_ERROR if outcome.status is not None else DESTINATION_ERROR
            self._dead_letter(entry, reason, outcome.result)
        elif entry.delivery_count >= self.config.max_delivery_count:
            self._dead_letter(entry, MAX_DELIVERY_EXCEEDED, outcome.result)
        else:
            step = RETRY_SCHEDULE[min(entry.delivery_count - 1, len(RETRY_SCHEDULE) - 1)]
            delay = max(step, MINIMUM_RETRY_DELAY.get(outcome.status or 0, 0.0))
            entry.visible_at = self._clock.now() + self._clock.span(delay)
            heapq.heappush(self._pending, (entry.visible_at, next(self._order), entry))

    def counts(self) -> dict[str, Any]:
        return {
            "deliveryMode": self.mode,
            "matched": self.matched,
            "pending": len(self._pending) + self.in_flight,
            "delivered": self.delivered,
            "deadLettered": self.dead_lettered,
            "validated": self.validated,
        }

    def _dead_letter(self, entry: Entry, reason: str, result: str) -> None:
        self.dead_lettered += 1
        log.info("%s: event %s dead-lettered: %s", self.prefix, entry.event.get("id"), reason)
        secret = {a.name for a in self.config.delivery_attributes if a.secret}
        custom = {k: v for k, v in self.headers(entry).items() if k not in secret}
        record = dead_letter_record(entry, reason, result, custom)
        self._sink.put(DeadLetter(self.config.dead_letter_container, self.prefix, record))


class PushDeliverer:
    """The thread that works one push subscription off, one event per request."""

    def __init__(
        self,
        subscription: PushSubscription,
        condition: threading.Condition,
        client: WebhookClient,
    ) -> None:
        self._subscription = subscription
        self._condition = condition
        self._client = client
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name=f"push {subscription.prefix}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop after the attempt under way (the caller notifies the condition)."""
        self._closed = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _next(self) -> Entry | None:
        with self._condition:
            while not self._closed:
                due = self._subscription.next_due()
                if isinstance(due, Entry):
                    return due
                self._condition.wait(timeout=due)
        return None

    def _run(self) -> None:
        while (entry := self._next()) is not None:
            outcome = self._attempt(entry)
            with self._condition:
                self._subscription.finish(entry, outcome)
                self._condition.notify_all()

    def _attempt(self, entry: Entry) -> Outcome:
        subscription = self._subscription
        entry.delivery_count += 1
        entry.last_attempt_utc = utcnow()
        if not subscription.validated:
            problem = self._client.handshake(subscription.endpoint_url)
            if problem is not None:
                log.warning("%s: webhook not validated: %s", subscription.prefix, problem)
                return Outcome(False, True, "WebhookValidationFailed")
            subscription.validated = True
            log.info("%s: webhook %s validated", subscription.prefix, subscription.endpoint_url)
        body = json.dumps(entry.event).encode()
        outcome = self._client.post(subscription.endpoint_url, body, subscription.headers(entry))
        log.debug("%s: event %s -> %s", subscription.prefix, entry.event.get("id"), outcome)
        return outcome
