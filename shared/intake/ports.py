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


@dataclass(frozen=True)
class IdempotencyRecord:
    """One Idempotency-Key marker as ``IdempotencyStore`` keeps it."""

    tenant_id: str
    key_hash: str
    request_hash: str
    request_id: str
    created_at: datetime


class BacklogProbe(Protocol):
    def active_messages(self) -> int:
        """Active (deliverable) messages in the requests queue."""
        ...


class ModelPace(Protocol):
    def pace(self, model: str) -> tuple[int, float] | None:
        """The tokens per minute of ``model``'s deployment and the tokens one of its
        requests costs; None when the deployment declares no token quota."""
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
