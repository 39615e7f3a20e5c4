"""Test helpers over the in-memory ports.

Unit tests use ``shared.adapters.in_memory`` (the one in-memory implementation of the
ports) through ``composition.in_memory_ports``; this module adds what only tests need.
"""

from __future__ import annotations

from datetime import UTC, datetime

from shared.errors import TransientError


class ManualClock:
    """A clock that stands still until a test moves ``now``."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def broker_down() -> TransientError:
    """The error the Service Bus sender raises when the broker is unreachable."""
    return TransientError("sending to inference-requests: ServiceBusConnectionError")
