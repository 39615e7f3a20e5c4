"""The JsonDocuments port: small JSON documents by container and name, guarded by ETags.

The job, idempotency and deferral stores keep their records as JSON documents and rely
on Blob storage's conditional requests for their guarantees:

- ``create`` is exclusive (``If-None-Match: *``): one job per id, one marker per key;
- ``replace`` is compare-and-swap (``If-Match: <etag>``): a writer that read an older
  version loses with ``ConcurrencyConflict`` and re-reads;
- ``delete`` with an ETag deletes only the version that was read.

Adapters: ``adapters.blob_documents.BlobJsonDocuments`` (azure-storage-blob) and
``adapters.in_memory.InMemoryDocuments`` (the same rules, in memory, for tests and
benchmarks).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

Document = dict[str, Any]


class JsonDocuments(Protocol):
    def create(self, container: str, name: str, document: Document) -> str | None:
        """Create only if absent; the new ETag, or None when the name is taken."""
        ...

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        """The document and its ETag, or None when it does not exist."""
        ...

    def replace(self, container: str, name: str, document: Document, etag: str) -> str:
        """Overwrite only if unchanged since ``etag`` was read; the new ETag.

        ConcurrencyConflict when the document changed or no longer exists.
        """
        ...

    def put(self, container: str, name: str, document: Document) -> str:
        """Create or overwrite unconditionally; the new ETag."""
        ...

    def delete(self, container: str, name: str, etag: str | None = None) -> None:
        """Delete (only the version ``etag`` names, when given: else ConcurrencyConflict).

        Deleting a document that does not exist is not an error.
        """
        ...

    def list_names(self, container: str, prefix: str) -> list[str]:
        """Names of the documents under ``prefix``, in name order."""
        ...


@runtime_checkable
class DocumentListing(Protocol):
    """Document names with their last-modified times (``BlobJsonDocuments``): the
    watchdog, the usage report and the batch lane's pending listing read no document to
    find the ones they want."""

    def list_modified(self, container: str, prefix: str) -> list[tuple[str, datetime]]: ...


@runtime_checkable
class ListedDocuments(JsonDocuments, DocumentListing, Protocol):
    """Documents whose listing carries last-modified times."""
