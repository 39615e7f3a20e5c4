"""The minute report of the request queue."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from shared.processing.backlog import report_backlog, report_line
from shared.processing.values import QueueSnapshot

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_the_line_carries_every_count_and_the_oldest_age() -> None:
    snapshot = QueueSnapshot(12, 1, 3, 2, NOW - timedelta(seconds=42))
    assert report_line("q", snapshot, NOW) == (
        "inferbus.backlog queue=q active=12 dead_lettered=1 scheduled=3 deferred=2 "
        "oldest_age_seconds=42.0"
    )


def test_an_empty_queue_has_age_zero_and_unknown_counts_say_so() -> None:
    line = report_line("q", QueueSnapshot(0, 0, 0, None, None), NOW)
    assert line.endswith("deferred=unknown oldest_age_seconds=0.0")


def test_the_report_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Observer:
        def snapshot(self) -> QueueSnapshot:
            return QueueSnapshot(1, 0, 0, 0, NOW - timedelta(minutes=20))

    with caplog.at_level(logging.INFO, logger="shared.processing.backlog"):
        line = report_backlog("inference-requests", Observer(), clock=lambda: NOW)
    assert line.endswith("oldest_age_seconds=1200.0")
    assert caplog.messages == [line]
