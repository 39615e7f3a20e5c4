"""The BlobStore port: blob storage as the claim checks, the doors, the producer and the
Global Batch lane use it.

A core port beside ``documents.JsonDocuments``, ``jobs.JobStore`` and
``messaging.MessageSender``: several capabilities need it, so none of them owns it.
Adapters: ``adapters.blob_storage.AzureBlobStore`` (azure-storage-blob) and
``adapters.in_memory`` (for tests and the local host).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class BlobInfo:
    """What ``BlobStore.info`` reports; a value of the port, so it lives beside it."""

    size: int
    media_type: str
    metadata: dict[str, str]
    etag: str | None = None


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
