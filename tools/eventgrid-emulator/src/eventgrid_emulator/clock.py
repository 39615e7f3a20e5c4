"""Time: monotonic for deadlines, UTC for what is written down, and the time scale.

The service's durations are long for tests (a 60 s minimum lock, 10 s release delays, a
retry schedule in minutes). ``--time-scale`` multiplies every such duration (locks,
receive waits, release delays, time to live, retry and dead-letter schedules, the
renew-lock window) so a suite can run the real semantics in seconds; timestamps stay
wall-clock time.
"""

from __future__ import annotations

import datetime as dt
import time


class Clock:
    """Scales service durations by ``scale`` (1.0: real time)."""

    def __init__(self, scale: float = 1.0) -> None:
        if not 0 < scale <= 1:
            raise ValueError(f"time scale must be in (0, 1], got {scale}")
        self.scale = scale

    def now(self) -> float:
        return time.monotonic()

    def span(self, seconds: float) -> float:
        """How long ``seconds`` of the service's time lasts here."""
        return seconds * self.scale


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def service_timestamp(moment: dt.datetime) -> str:
    """UTC with seven fractional digits and ``Z``, as the service writes timestamps."""
    utc = moment.astimezone(dt.UTC)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond:06d}0Z"
