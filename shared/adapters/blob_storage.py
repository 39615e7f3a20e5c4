"""Blob storage through azure-storage-blob: raw blobs and ETag-guarded JSON documents.

Conditional requests give the guarantees the use cases rely on: ``If-None-Match: *``
makes creation exclusive (one job per id, one idempotency marker per key) and
``If-Match: <etag>`` makes updates compare-and-swap. SDK exceptions are translated here
into the application's error tree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobServiceClient, ContentSettings, LinearRetry

from shared.adapters.identity import azure_credential
from shared.errors import ConcurrencyConflict, ConfigurationError, TransientError
from shared.intake.claim_checks import BlobInfo
from shared.settings import Settings

JSON_CONTENT = ContentSettings(content_type="application/json")


def blob_service_client(settings: Settings) -> BlobServiceClient:
    """The client for the ``Storage`` connection, by connection string or identity."""
    # The SDK's default retry waits 15 s and more between attempts: far too long for an
    # API that promises a 202 in milliseconds. Two quick retries, then 503 to the caller.
    options: dict[str, Any] = {
        "retry_policy": LinearRetry(backoff=1, random_jitter_range=1, retry_total=2),
        "connection_timeout": 5,
        "read_timeout": 60,
    }
    if settings.storage_connection_string:
        return BlobServiceClient.from_connection_string(
            settings.storage_connection_string, **options
        )
    if settings.blob_service_uri:
        credential = azure_credential(settings.storage_client_id)
        return BlobServiceClient(settings.blob_service_uri, credential=credential, **options)
    raise ConfigurationError("set Storage (connection string) or Storage__blobServiceUri")


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Translate SDK failures: outages and throttling are transient, a missing container
    is a deployment problem."""
    try:
        yield
    except ResourceNotFoundError as error:
        if getattr(error, "error_code", None) == "ContainerNotFound":
            raise ConfigurationError(f"{what}: the container does not exist") from error
        raise
    except HttpResponseError as error:
        if error.status_code in (408, 429, 500, 502, 503, 504):
            raise TransientError(f"{what}: storage answered {error.status_code}") from error
        raise
    except AzureError as error:
        raise TransientError(f"{what}: storage is unreachable ({type(error).__name__})") from error


class AzureBlobStore:
    """Implements ``claimcheck.BlobStore`` and ETag-guarded JSON documents."""

    def __init__(self, client: BlobServiceClient) -> None:
        self._client = client

    @property
    def account_url(self) -> str:
        return str(self._client.url).rstrip("/")

    def upload(
        self, container: str, name: str, data: bytes, media_type: str, metadata: dict[str, str]
    ) -> None:
        with storage_errors(f"writing {container}/{name}"):
            self._client.get_blob_client(container, name).upload_blob(
                data,
                overwrite=True,
                content_settings=ContentSettings(content_type=media_type),
                metadata=metadata,
            )

    def info(self, container: str, name: str) -> BlobInfo | None:
        try:
            with storage_errors(f"reading {container}/{name}"):
                props = self._client.get_blob_client(container, name).get_blob_properties()
        except ResourceNotFoundError:
            return None
        media_type = props.content_settings.content_type or "application/octet-stream"
        return BlobInfo(
            size=props.size,
            media_type=media_type,
            metadata=dict(props.metadata),
            etag=str(props.etag).strip('"') if props.etag else None,
        )

    def read_chunks(self, container: str, name: str) -> Iterator[bytes]:
        with storage_errors(f"reading {container}/{name}"):
            downloader = self._client.get_blob_client(container, name).download_blob()
            yield from downloader.chunks()

    def read(self, container: str, name: str) -> bytes | None:
        try:
            with storage_errors(f"reading {container}/{name}"):
                return self._client.get_blob_client(container, name).download_blob().readall()
        except ResourceNotFoundError:
            return None

    def list_names(self, container: str, prefix: str) -> list[str]:
        """Names of the blobs under ``prefix`` (operations tools and tests)."""
        with storage_errors(f"listing {container}/{prefix}"):
            client = self._client.get_container_client(container)
            return [blob.name for blob in client.list_blobs(name_starts_with=prefix)]

    # --- JSON documents with ETags -------------------------------------------------------

    def create_json(self, container: str, name: str, document: dict[str, Any]) -> str | None:
        """Create only if absent; the new ETag, or None when the blob exists."""
        try:
            with storage_errors(f"creating {container}/{name}"):
                result = self._client.get_blob_client(container, name).upload_blob(
                    json.dumps(document).encode("utf-8"),
                    overwrite=False,
                    content_settings=JSON_CONTENT,
                )
        except ResourceExistsError:
            return None
        return str(result["etag"])

    def load_json(self, container: str, name: str) -> tuple[dict[str, Any], str] | None:
        try:
            with storage_errors(f"reading {container}/{name}"):
                downloader = self._client.get_blob_client(container, name).download_blob()
                content = downloader.readall()
        except ResourceNotFoundError:
            return None
        return json.loads(content), str(downloader.properties.etag)

    def replace_json(self, container: str, name: str, document: dict[str, Any], etag: str) -> str:
        """Overwrite only if unchanged since ``etag`` was read; the new ETag."""
        try:
            with storage_errors(f"updating {container}/{name}"):
                result = self._client.get_blob_client(container, name).upload_blob(
                    json.dumps(document).encode("utf-8"),
                    overwrite=True,
                    content_settings=JSON_CONTENT,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceModifiedError, ResourceNotFoundError) as error:
            raise ConcurrencyConflict(f"{container}/{name} changed since it was read") from error
        return str(result["etag"])

    def delete(self, container: str, name: str, etag: str | None = None) -> None:
        """Delete, optionally only if unchanged; deleting a missing blob is not an error."""
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

    def ensure_containers(self, names: list[str]) -> None:
        """Create containers that do not exist (local stack and tests; Bicep does it in Azure)."""
        for name in names:
            try:
                with storage_errors(f"creating container {name}"):
                    self._client.create_container(name)
            except ResourceExistsError:
                continue
