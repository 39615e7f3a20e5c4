"""Time as a port, so that deadlines and backoff are testable without sleeping."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]

MonotonicClock = Callable[[], float]
"""Seconds on a clock that never goes back (``time.monotonic``): for measuring how long
something took or may take, unlike ``Clock``, which tells the wall-clock time."""


def utc_now() -> datetime:
    """The current time, always timezone-aware UTC."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken as UTC (how the app writes every time)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
