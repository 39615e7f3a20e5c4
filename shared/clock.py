"""Time as a port, so that deadlines and backoff are testable without sleeping."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, always timezone-aware UTC."""
    return datetime.now(UTC)
