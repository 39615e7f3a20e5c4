"""``documents.JsonDocuments`` as JSON blobs, with Blob storage's conditional requests.

``If-None-Match: *`` makes creation exclusive and ``If-Match: <etag>`` makes replacement
and deletion compare-and-swap; a failed precondition (412, or 404 for a document deleted
meanwhile) becomes ``ConcurrencyConflict``, other SDK failures the usual transient or
configuration errors (``blob_storage.storage_errors``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobServiceClient, ContentSettings

from shared.adapters.blob_storage import storage_errors
from shared.documents import Document, ListedDocument, NamePage, TagQuery, Tags
from shared.errors import ConcurrencyConflict

JSON_CONTENT = ContentSettings(content_type="application/json")


def _encode(document: Document) -> bytes:
    return json.dumps(document).encode("utf-8")


class BlobJsonDocuments:
    """Implements ``documents.JsonDocuments``."""

    def __init__(self, client: BlobServiceClient) -> None:
        self._client = client

    def create(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str | None:
        try:
            with storage_errors(f"creating {container}/{name}"):
                result = self._client.get_blob_client(container, name).upload_blob(
                    _encode(document),
                    overwrite=False,
                    content_settings=JSON_CONTENT,
                    tags=dict(tags) if tags else None,
                )
        except ResourceExistsError:
            return None
        return str(result["etag"])

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        try:
            with storage_errors(f"reading {container}/{name}"):
                downloader = self._client.get_blob_client(container, name).download_blob()
                content = downloader.readall()
        except ResourceNotFoundError:
            return None
        return json.loads(content), str(downloader.properties.etag)

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        try:
            with storage_errors(f"updating {container}/{name}"):
                result = self._client.get_blob_client(container, name).upload_blob(
                    _encode(document),
                    overwrite=True,
                    content_settings=JSON_CONTENT,
                    tags=dict(tags) if tags else None,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceModifiedError, ResourceNotFoundError) as error:
            raise ConcurrencyConflict(f"{container}/{name} changed since it was read") from error
        return str(result["etag"])

    def put(self, container: str, name: str, document: Document) -> str:
        with storage_errors(f"writing {container}/{name}"):
            result = self._client.get_blob_client(container, name).upload_blob(
                _encode(document), overwrite=True, content_settings=JSON_CONTENT
            )
        return str(result["etag"])

    def put_described(
        self, container: str, name: str, document: Document, metadata: Mapping[str, str]
    ) -> str:
        """Implements ``documents.DescribedDocuments``: the metadata goes with the same Put
        Blob."""
        with storage_errors(f"writing {container}/{name}"):
            result = self._client.get_blob_client(container, name).upload_blob(
                _encode(document),
                overwrite=True,
                content_settings=JSON_CONTENT,
                metadata=dict(metadata),
            )
        return str(result["etag"])

    def list_described(self, container: str, prefix: str) -> list[ListedDocument]:
        """Implements ``documents.DescribedDocuments``: one List Blobs with metadata per
        5,000 names."""
        with storage_errors(f"listing {container}/{prefix}"):
            client = self._client.get_container_client(container)
            return [
                ListedDocument(
                    blob.name,
                    blob.last_modified,
                    {key: value or "" for key, value in (blob.metadata or {}).items()},
                )
                for blob in client.list_blobs(name_starts_with=prefix, include=["metadata"])
            ]

    def delete(self, container: str, name: str, etag: str | None = None) -> None:
        conditions: dict[str, Any] = {}
        if etag:
            conditions = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        try:
            with storage_errors(f"deleting {container}/{name}"):
                self._client.get_blob_client(container, name).delete_blob(**conditions)
        except ResourceNotFoundError:
            return
        except ResourceModifiedError as error:
            raise ConcurrencyConflict(f"{container}/{name} changed since it was read") from error

    def list_names(self, container: str, prefix: str) -> list[str]:
        return [name for name, _ in self.list_modified(container, prefix)]

    def list_modified(self, container: str, prefix: str) -> list[tuple[str, datetime]]:
        """Names under ``prefix`` with their last-modified times, from the listing alone
        (``documents.DocumentListing``: no document is read)."""
        with storage_errors(f"listing {container}/{prefix}"):
            client = self._client.get_container_client(container)
            return [
                (blob.name, blob.last_modified)
                for blob in client.list_blobs(name_starts_with=prefix)
            ]

    def list_page(
        self, container: str, prefix: str, limit: int, marker: str | None = None
    ) -> NamePage:
        """Implements ``documents.PagedListing``: one List Blobs (``maxresults=limit``);
        the marker is Blob storage's own NextMarker."""
        with storage_errors(f"listing {container}/{prefix}"):
            client = self._client.get_container_client(container)
            pages = client.list_blobs(name_starts_with=prefix, results_per_page=limit).by_page(
                continuation_token=marker
            )
            page = next(pages, None)
            names = tuple(blob.name for blob in page) if page is not None else ()
            # by_page() is typed as a bare iterator; it is the SDK's page iterator, which
            # holds the NextMarker of the page it last fetched.
            marker = getattr(pages, "continuation_token", None)
        return NamePage(names, str(marker) if marker else None)

    def find_tagged(self, container: str, query: TagQuery) -> list[tuple[str, dict[str, str]]]:
        """Find Blobs by Tags in Container: one call per 5,000 matches, whatever else the
        container holds (``documents.TaggedDocuments``)."""
        with storage_errors(f"finding {container} by tags"):
            client = self._client.get_container_client(container)
            found = [
                (blob.name, dict(blob.tags or {}))
                for blob in client.find_blobs_by_tags(query.expression())
            ]
        return sorted(found)
