"""The health of the request queue, reported once a minute as one structured log line.

Service Bus offers platform metrics for active and dead-lettered messages but none for
the age of the oldest message, which is what tells "busy" from "stalled" (a deep queue
that moves is fine; an old head is not). The reporter reads the queue's counts and its
oldest active message and logs::

    inferbus.backlog queue=inference-requests active=12 dead_lettered=0 scheduled=3
        deferred=1 oldest_age_seconds=42.0          (one line in the log)

The same readings are exported as the ``inferbus.queue.*`` gauges (``entity_readers``,
``gauge_values``), per queue and results subscription; the "oldest message age" alert in
infra/ reads the gauge, and the log line stays for a reader of the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from shared.clock import Clock, utc_now
from shared.processing.ports import QueueObserver
from shared.processing.values import QueueSnapshot

log = logging.getLogger(__name__)

REPORT_PREFIX = "inferbus.backlog"


def report_line(queue: str, snapshot: QueueSnapshot, now: datetime) -> str:
    """The log line the alert parses (keep its ``key=value`` names stable)."""
    age = 0.0
    if snapshot.oldest_active_enqueued_at is not None:
        age = max(0.0, (now - snapshot.oldest_active_enqueued_at).total_seconds())
    deferred = "unknown" if snapshot.deferred is None else str(snapshot.deferred)
    scheduled = "unknown" if snapshot.scheduled is None else str(snapshot.scheduled)
    return (
        f"{REPORT_PREFIX} queue={queue} active={snapshot.active} "
        f"dead_lettered={snapshot.dead_lettered} scheduled={scheduled} "
        f"deferred={deferred} oldest_age_seconds={age:.1f}"
    )


def report_backlog(queue: str, observer: QueueObserver, clock: Clock = utc_now) -> str:
    line = report_line(queue, observer.snapshot(), clock())
    log.info(line)
    return line


def gauge_values(snapshot: QueueSnapshot, now: datetime | None = None) -> dict[str, float]:
    """A snapshot as the values of ``telemetry.QUEUE_GAUGES`` (each count only where known;
    an empty entity's oldest message is 0 seconds old)."""
    moment = now or utc_now()
    oldest = snapshot.oldest_active_enqueued_at
    values: dict[str, float] = {
        "active_message_count": snapshot.active,
        "dead_letter_message_count": snapshot.dead_lettered,
    }
    if snapshot.oldest_known:
        values["oldest_message_age_seconds"] = (
            max(0.0, (moment - oldest).total_seconds()) if oldest else 0.0
        )
    if snapshot.scheduled is not None:
        values["scheduled_message_count"] = snapshot.scheduled
    if snapshot.deferred is not None:
        values["deferred_message_count"] = snapshot.deferred
    return values


# The results topic's subscriptions, by entity name (``topic/subscription``); raises when
# they cannot be listed.
SubscriptionObservers = Callable[[], Mapping[str, QueueObserver]]
EntityCounts = Callable[[], Mapping[str, float]]


def entity_readers(
    queues: Iterable[str],
    observer: Callable[[str], QueueObserver],
    topic: str,
    subscriptions: SubscriptionObservers | None,
) -> dict[str, EntityCounts]:
    """A reader of gauge values per entity: each queue, and each subscription of ``topic``.
    When the subscriptions cannot be listed, the topic itself stands for them, with a
    reader that fails with the listing's error (so it is counted unreadable)."""

    def of_queue(queue: str) -> EntityCounts:
        return lambda: gauge_values(observer(queue).snapshot())

    def of_subscription(subscription: QueueObserver) -> EntityCounts:
        return lambda: gauge_values(subscription.snapshot())

    readers = {queue: of_queue(queue) for queue in queues}
    if subscriptions is None:
        return readers
    try:
        listed = subscriptions()
    except Exception as error:
        readers[topic] = _failing(error)
        return readers
    for entity, subscription in listed.items():
        readers[entity] = of_subscription(subscription)
    return readers


def _failing(error: Exception) -> EntityCounts:
    def read() -> Mapping[str, float]:
        raise error

    return read
