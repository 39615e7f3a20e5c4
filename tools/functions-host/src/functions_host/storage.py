"""Blob storage access for blob triggers: connection lookup and reads.

A binding's ``connection`` names an app setting holding a connection string (Azurite
locally), or, as in Azure, ``<connection>__blobServiceUri`` / ``__serviceUri`` for an
identity-based connection; ``AzureWebJobsStorage`` is the default connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient


class StorageConnectionError(Exception):
    """The app setting a binding's ``connection`` names is not set."""


def container_of_path(path: str) -> str:
    """``incoming/{name}`` -> ``incoming`` (the path is already %Setting%-resolved)."""
    return path.strip("/").split("/", 1)[0]


def blob_service_for_connection(connection: str) -> BlobServiceClient:
    value = os.environ.get(connection)
    if value:
        return BlobServiceClient.from_connection_string(value)
    uri = os.environ.get(f"{connection}__blobServiceUri") or os.environ.get(
        f"{connection}__serviceUri"
    )
    if uri:
        from azure.identity import DefaultAzureCredential

        return BlobServiceClient(uri, credential=DefaultAzureCredential())
    raise StorageConnectionError(
        f"app setting {connection!r} (or {connection}__blobServiceUri) is not set"
    )


@dataclass(frozen=True)
class BlobContent:
    content: bytes
    url: str
    properties: dict[str, Any]
    metadata: dict[str, str]


class BlobReader:
    def __init__(self, client: BlobServiceClient) -> None:
        self.client = client

    @classmethod
    def for_connection(cls, connection: str) -> BlobReader:
        return cls(blob_service_for_connection(connection))

    def read(self, container: str, name: str) -> BlobContent | None:
        blob = self.client.get_blob_client(container, name)
        try:
            downloader = blob.download_blob()
            content = downloader.readall()
        except ResourceNotFoundError:
            return None
        props = downloader.properties
        properties = {
            "Length": props.size,
            "ContentType": props.content_settings.content_type,
            "ETag": props.etag,
            "LastModified": props.last_modified.isoformat() if props.last_modified else None,
            "BlobType": str(props.blob_type),
        }
        return BlobContent(content, blob.url, properties, dict(props.metadata or {}))
