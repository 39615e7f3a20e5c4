"""The ports intake needs, in one place: what the adapters implement for it.

- ``IdempotencyStore``: the Idempotency-Key markers (``idempotency.DocumentIdempotencyStore``
  over the JSON documents port).
- ``BacklogProbe``: a queue's depth, read by the backpressure gates
  (``adapters.queue_counts``).
- ``ModelPace``: how fast an alias's deployment clears requests
  (``inference.capacity.ServedPace``), for the admission by expected wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shared.inference.capacity import Pace


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
    def pace(self, model: str) -> Pace | None:
        """The tokens per minute of ``model``'s deployment, the tokens one of its requests
        costs and the part of the deployment high priority takes; None when the
        deployment declares no token quota."""
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
