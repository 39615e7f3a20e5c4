"""The ports intake needs, in one place: what the adapters implement for it.

- ``IdempotencyStore``: the Idempotency-Key markers (``idempotency.DocumentIdempotencyStore``
  over the JSON documents port).
- ``BacklogProbe``: a queue's depth, read by the backpressure gates
  (``adapters.queue_counts``).
- ``ModelPace``: how fast an alias's deployment clears requests
  (``inference.capacity.ServedPace``), for the admission by expected wait.
- ``TenantPacing``: when a tenant's new request should reach the queue
  (``inference.capacity.ServedPace``), so that one tenant's burst does not stand in front
  of every other tenant's work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from shared.inference.capacity import Pace, Release


@dataclass(frozen=True)
class IdempotencyRecord:
    """One Idempotency-Key marker as ``IdempotencyStore`` keeps it."""

    tenant_id: str
    key_hash: str
    request_hash: str
    request_id: str
    created_at: datetime


@dataclass(frozen=True)
class QueueDepth:
    """A requests queue's messages as the broker counts them."""

    active: int  # deliverable, or locked by a receiver: what the depth ceilings count
    scheduled: int = 0  # retries and capacity give-backs that come back later
    # A cached reading: how long ago the broker counted, and how many of ``active`` this
    # instance sent since (they are behind everything the broker counted).
    age_seconds: float = 0.0
    sent_since: int = 0

    @property
    def ahead(self) -> int:
        """The messages a request sent now waits behind: a scheduled copy comes back
        before a new request's turn, so it is work ahead as much as an active one."""
        return self.active + self.scheduled


class BacklogProbe(Protocol):
    def queue_depth(self) -> QueueDepth:
        """The requests queue's active and scheduled messages."""
        ...


class ModelPace(Protocol):
    def pace(
        self,
        model: str,
        text_chars: int | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> Pace | None:
        """The tokens per minute of ``model``'s deployment, the tokens one of its requests
        costs (before its first answer, a request like the one asking: its text
        ``text_chars`` long, with ``parameters``) and the part of the deployment high
        priority takes; None when the deployment declares no token quota."""
        ...


class TenantPacing(Protocol):
    def release_delay(
        self, tenant: str, model: str, text_chars: int, parameters: Mapping[str, Any]
    ) -> float:
        """The seconds after which a new request of ``tenant`` for ``model`` (its text
        ``text_chars`` long) should reach the queue: 0 while the queue holds little of the
        tenant's work, later when its earlier requests fill the deployment's next
        seconds (``inference.tenant_shares``)."""
        ...

    def pacing_key(self, model: str) -> str:
        """What ``model``'s tenants' parts are shared over: its deployment."""
        ...

    def respace(self, releases: Sequence[Release]) -> list[float]:
        """New delays (seconds from now) for the requests scheduled earlier (every one of
        their deployments'), in their order, now that these are the tenants with
        scheduled work: each at its weight's part of its deployment. Intake sends again
        the ones whose delay moved by much."""
        ...


class IdempotencyStore(Protocol):
    """Durable markers, created with if-none-match and changed by ETag
    (``DocumentIdempotencyStore``)."""

    def try_create(self, record: IdempotencyRecord) -> str | None:
        """Create the marker; its ETag, or None when it already exists."""
        ...

    def load(self, tenant_id: str, key_hash: str) -> tuple[IdempotencyRecord, str] | None: ...

    def replace(self, record: IdempotencyRecord, etag: str) -> str:
        """Overwrite if the ETag matches (else ConcurrencyConflict); the new ETag."""
        ...

    def delete(self, tenant_id: str, key_hash: str, etag: str) -> None: ...
