"""The ports the events capability needs, in one place.

- ``EventPublisher``: CloudEvents out to the Event Grid topic (``adapters.eventgrid``).
- ``EventQueue``: a namespace topic's queue subscription, pulled and settled
  (``adapters.eventgrid_pull``).
- ``TokenValidator``: the webhook's Entra tokens (``adapters.entra_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CloudEventSpec:
    """A CloudEvent 1.0 described without the SDK."""

    id: str
    type: str
    source: str
    subject: str
    data: dict[str, Any]
    extensions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PulledEvent:
    """One received event: its lock token, delivery count and the raw CloudEvent."""

    lock_token: str
    delivery_count: int
    cloud_event: object


class EventPublisher(Protocol):
    def publish(self, events: list[CloudEventSpec]) -> None:
        """Publish to Event Grid; TransientError when it cannot take them now."""
        ...


class EventQueue(Protocol):
    """A namespace topic's queue event subscription (adapter: ``EventGridConsumerClient``).

    Settling methods return the lock tokens that failed (lock lost or already settled).
    """

    def receive(self, max_events: int, max_wait_seconds: int) -> list[PulledEvent]: ...

    def acknowledge(self, lock_tokens: list[str]) -> list[str]: ...

    def release(self, lock_tokens: list[str], delay_seconds: int) -> list[str]: ...

    def reject(self, lock_tokens: list[str]) -> list[str]: ...

    def renew_locks(self, lock_tokens: list[str]) -> list[str]: ...


class TokenValidator(Protocol):
    def validate(self, token: str) -> dict[str, object]:
        """The token's claims; Forbidden when the token is not acceptable."""
        ...
