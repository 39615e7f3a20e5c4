"""The queue gauges read each entity on its own: one unreadable entity drops only its own
points, is counted in ``inferbus.queue.unreadable`` and is logged once per failure streak.
Points are read back through the OpenTelemetry SDK's in-memory metric reader, on a meter
provider of the test's own (the global one is left alone)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shared import telemetry
from shared.processing.backlog import entity_readers, gauge_values
from shared.processing.ports import QueueObserver
from shared.processing.values import QueueSnapshot
from tests.support.telemetry import collected_points

NOW = datetime(2025, 1, 1, tzinfo=UTC)
QUEUES = ("inference-requests", "inference-priority", "inference-ordered")
FULL = QueueSnapshot(
    active=4, dead_lettered=1, scheduled=2, deferred=0, oldest_active_enqueued_at=NOW
)


class Observer:
    """Implements ``processing.ports.QueueObserver``; ``failure`` makes reads raise it."""

    def __init__(self, snapshot: QueueSnapshot = FULL) -> None:
        self.current = snapshot
        self.failure: Exception | None = None

    def snapshot(self) -> QueueSnapshot:
        if self.failure is not None:
            raise self.failure
        return self.current


class Minutes:
    """A monotonic clock that moves a minute at each collection (the reader's period):
    every collection then takes one fresh reading, shared by all the gauges."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Minutes()


def collect(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every exported point of one collection, by metric name."""
    CLOCK.now += 60
    return collected_points(reader)


def gauge_points(points: Mapping[str, list[Any]]) -> dict[str, int]:
    """How many gauge points each entity exported."""
    counted: dict[str, int] = {}
    for name in telemetry.QUEUE_GAUGES:
        for point in points.get(name, []):
            entity = point.attributes["messaging.destination.name"]
            counted[entity] = counted.get(entity, 0) + 1
    return counted


def unreadable(points: Mapping[str, list[Any]]) -> dict[str, int]:
    return {
        point.attributes["messaging.destination.name"]: point.value
        for point in points.get(telemetry.QUEUE_UNREADABLE, [])
    }


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def register(reader: InMemoryMetricReader, observers: Mapping[str, QueueObserver]) -> None:
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    readers = entity_readers(list(observers), observers.__getitem__, "inference-results", None)
    telemetry.QueueGauges(lambda: readers, max_age_seconds=5, clock=CLOCK).register(meter)


def test_one_unreadable_queue_drops_only_its_own_points(reader: InMemoryMetricReader) -> None:
    observers = {queue: Observer() for queue in QUEUES}
    observers["inference-priority"].failure = PermissionError("Manage rights are missing")
    register(reader, observers)

    points = collect(reader)

    assert gauge_points(points) == {"inference-requests": 5, "inference-ordered": 5}
    assert unreadable(points) == {"inference-priority": 1}


def test_every_entity_exports_its_known_gauges(reader: InMemoryMetricReader) -> None:
    unknowns = QueueSnapshot(3, 0, None, None, None, oldest_known=False)  # a subscription
    register(reader, {**{queue: Observer() for queue in QUEUES}, "t/s": Observer(unknowns)})

    points = collect(reader)

    assert gauge_points(points) == {**dict.fromkeys(QUEUES, 5), "t/s": 2}
    assert unreadable(points) == {}


def test_an_unreadable_entity_is_logged_once_per_streak_and_its_recovery_once(
    reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    observers = {"inference-requests": Observer()}
    observers["inference-requests"].failure = OSError("connection refused")
    register(reader, observers)

    with caplog.at_level(logging.INFO, logger="shared.telemetry"):
        for _ in range(3):
            collect(reader)
        failures = unreadable(collect(reader))
        observers["inference-requests"].failure = None
        recovered = gauge_points(collect(reader))
        collect(reader)

    messages = [record.getMessage() for record in caplog.records]
    assert failures == {"inference-requests": 4}, "each failed read counts"
    assert recovered == {"inference-requests": 5}
    assert messages == [
        "the counts of inference-requests cannot be read (OSError: connection refused); "
        "its queue gauges are left out until they can",
        "the counts of inference-requests can be read again",
    ]


def test_subscriptions_that_cannot_be_listed_count_the_topic_unreadable(
    reader: InMemoryMetricReader,
) -> None:
    def no_listing() -> dict[str, QueueObserver]:
        raise PermissionError("listing the topic's subscriptions needs Manage rights")

    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    observer = Observer()
    telemetry.QueueGauges(
        lambda: entity_readers(QUEUES, lambda queue: observer, "inference-results", no_listing),
        max_age_seconds=5,
        clock=CLOCK,
    ).register(meter)

    points = collect(reader)

    assert gauge_points(points) == dict.fromkeys(QUEUES, 5)
    assert unreadable(points) == {"inference-results": 1}


def test_an_empty_queue_is_zero_seconds_old_and_an_unseen_head_is_left_out() -> None:
    empty = QueueSnapshot(0, 0, 0, 0, oldest_active_enqueued_at=None)
    unseen = QueueSnapshot(2, 0, None, None, None, oldest_known=False)
    aged = QueueSnapshot(1, 0, 0, None, NOW - timedelta(seconds=30))
    assert gauge_values(empty, NOW)["oldest_message_age_seconds"] == 0.0
    assert gauge_values(unseen, NOW) == {"active_message_count": 2, "dead_letter_message_count": 0}
    assert gauge_values(aged, NOW)["oldest_message_age_seconds"] == 30.0
