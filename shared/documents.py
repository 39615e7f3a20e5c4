"""The JsonDocuments port: small JSON documents by container and name, guarded by ETags.

The job, idempotency and deferral stores keep their records as JSON documents and rely
on Blob storage's conditional requests for their guarantees:

- ``create`` is exclusive (``If-None-Match: *``): one job per id, one marker per key;
- ``replace`` is compare-and-swap (``If-Match: <etag>``): a writer that read an older
  version loses with ``ConcurrencyConflict`` and re-reads;
- ``delete`` with an ETag deletes only the version that was read.

A document can carry index tags (Blob index tags), written by the same request as the
document itself, so a document and its tags never disagree, and found again by a tag
query (Find Blobs by Tags) without listing the container: the job store tags each job so
the periodic jobs find the few they need among every job retained (``job_index.JobIndex``).

Adapters: ``adapters.blob_documents.BlobJsonDocuments`` (azure-storage-blob) and
``adapters.in_memory.InMemoryDocuments`` (the same rules, in memory, for tests and
benchmarks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

Document = dict[str, Any]
Tags = Mapping[str, str]
Comparison = Literal["=", ">", ">=", "<", "<="]


@dataclass(frozen=True)
class TagCondition:
    """One comparison of a tag query; values compare as strings, as Blob storage does."""

    key: str
    comparison: Comparison
    value: str

    def holds(self, tags: Tags) -> bool:
        found = tags.get(self.key)
        if found is None:
            return False
        match self.comparison:
            case "=":
                return found == self.value
            case ">":
                return found > self.value
            case ">=":
                return found >= self.value
            case "<":
                return found < self.value
            case "<=":
                return found <= self.value


@dataclass(frozen=True)
class TagQuery:
    """Conditions that must all hold (Find Blobs by Tags' ``AND``)."""

    conditions: tuple[TagCondition, ...]

    def expression(self) -> str:
        """The query in Find Blobs by Tags' syntax: ``"key" >= 'value' AND ...``."""
        return " AND ".join(f"\"{c.key}\" {c.comparison} '{c.value}'" for c in self.conditions)

    def matches(self, tags: Tags) -> bool:
        return all(condition.holds(tags) for condition in self.conditions)

    def shown(self, tags: Tags) -> dict[str, str]:
        """The tags a match returns: those the query names (as Blob storage returns)."""
        named = {c.key for c in self.conditions}
        return {key: value for key, value in tags.items() if key in named}


class JsonDocuments(Protocol):
    def create(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str | None:
        """Create only if absent, with ``tags``; the new ETag, or None when the name is
        taken."""
        ...

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        """The document and its ETag, or None when it does not exist."""
        ...

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        """Overwrite (document and tags: no tags clears them) only if unchanged since
        ``etag`` was read; the new ETag.

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


class TaggedDocuments(Protocol):
    """Documents found by their index tags instead of by listing the container."""

    def find_tagged(self, container: str, query: TagQuery) -> list[tuple[str, dict[str, str]]]:
        """The names in ``container`` whose tags match ``query``, in name order, each with
        the tags the query names. Blob storage updates its tag index shortly after a
        write: a document written a moment ago may be missing, or found by its old tags."""
        ...


@dataclass(frozen=True)
class NamePage:
    """One page of a listing in name order: ``marker`` (opaque: the store's own) resumes
    after it, None when nothing is left under the prefix."""

    names: tuple[str, ...]
    marker: str | None


class PagedListing(Protocol):
    """Document names a page at a time: a caller that needs the first few names under a
    prefix, or walks a long listing across several requests, pays one call per page
    instead of one per 5,000 names (``job_listing``)."""

    def list_page(
        self, container: str, prefix: str, limit: int, marker: str | None = None
    ) -> NamePage:
        """At most ``limit`` names under ``prefix`` in name order, from ``marker`` (a
        page's ``marker``; None: the first). A page may hold fewer names than ``limit``
        while its ``marker`` says more follow (Blob storage does so at its partitions'
        edges)."""
        ...


@dataclass(frozen=True)
class ListedDocument:
    """One document as a listing shows it: no document is read."""

    name: str
    modified: datetime
    metadata: Mapping[str, str]


class DescribedDocuments(Protocol):
    """Documents whose metadata the listing returns: many small facts (the instances'
    heartbeats, ``inference.instances``) read in one call instead of one read each."""

    def put_described(
        self, container: str, name: str, document: Document, metadata: Mapping[str, str]
    ) -> str:
        """Create or overwrite unconditionally, with ``metadata`` (ASCII names and
        values); the new ETag."""
        ...

    def list_described(self, container: str, prefix: str) -> list[ListedDocument]:
        """The documents under ``prefix`` in name order, with their last-modified times and
        metadata."""
        ...


@runtime_checkable
class ListedDocuments(
    JsonDocuments, DocumentListing, TaggedDocuments, DescribedDocuments, PagedListing, Protocol
):
    """Documents whose listing carries last-modified times and metadata, comes a page at
    a time, and that tags can find."""
