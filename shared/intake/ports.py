"""The ports intake needs, in one place: what the adapters implement for it.

- ``BlobStore``: blob storage as the claim checks and the doors use it
  (``adapters.blob_storage``, ``adapters.in_memory``).
- ``IdempotencyStore``: the Idempotency-Key markers (``idempotency.DocumentIdempotencyStore``
  over the JSON documents port).
- ``BacklogProbe``: a queue's depth, read by the backpressure gates
  (``adapters.queue_counts``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class BlobInfo:
    """What ``BlobStore.info`` reports; a value of the port, so it lives beside it."""

    size: int
    media_type: str
    metadata: dict[str, str]
    etag: str | None = None


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


class BlobStore(Protocol):
    """Blob storage as the use cases need it (adapter: azure-storage-blob)."""

    @property
    def account_url(self) -> str:
        """The account endpoint without a trailing slash, e.g. https://acct.blob.core.windows.net."""
        ...

    def upload(
        self, container: str, name: str, data: bytes, media_type: str, metadata: dict[str, str]
    ) -> None:
        """Write (or overwrite) a blob."""
        ...

    def info(self, container: str, name: str) -> BlobInfo | None:
        """Size, media type and metadata, or None when the blob does not exist."""
        ...

    def read_chunks(self, container: str, name: str) -> Iterator[bytes]:
        """Stream the blob's content; NotFound when it does not exist."""
        ...

    def read(self, container: str, name: str) -> bytes | None:
        """The whole blob, or None when it does not exist."""
        ...

    def list_names(self, container: str, prefix: str) -> list[str]:
        """Names of the blobs under ``prefix``."""
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
