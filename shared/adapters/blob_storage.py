"""Blob storage through azure-storage-blob: the client and raw blobs (``BlobStore``).

JSON documents with ETags live in ``blob_documents``. SDK exceptions are translated here
into the application's error tree.
"""

from __future__ import annotations

import base64
import binascii
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.core.pipeline.transport import HttpTransport, RequestsTransport
from azure.storage.blob import BlobServiceClient, ContentSettings, LinearRetry
from requests import Session
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from shared.adapters.identity import azure_credential
from shared.blobs import BlobInfo
from shared.errors import ConfigurationError, TransientError
from shared.settings import Settings

# requests reads these when it trusts the environment (a custom CA bundle for TLS).
CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# The runtime's thread pool runs at most this many invocations at once: its default
# (PYTHON_THREADPOOL_THREAD_COUNT unset) is Python's, min(32, cores + 4).
RUNTIME_THREADS = 32
# What the storage SDK's own transport uses: the socket write size azure-core's adapter
# asks for, and the download chunk size.
SOCKET_BLOCK_SIZE = 32 * 1024
DOWNLOAD_BLOCK_SIZE = 256 * 1024


def environment_matters() -> bool:
    """Whether the storage transport must consult the environment on each call. Trusting
    it, requests looks up proxy variables, a CA bundle and ~/.netrc on every call: 10-15%
    of a storage call's CPU, measured. Only a configured proxy or CA bundle needs that;
    storage authenticates by key or token, never by netrc."""
    proxies = urllib.request.getproxies()
    return bool(proxies) or any(os.environ.get(name) for name in CA_BUNDLE_VARIABLES)


class _StorageAdapter(HTTPAdapter):
    """requests' adapter with azure-core's larger socket writes (its own adapter sets them
    by overriding a method requests no longer calls; this is the public way)."""

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        pool_kwargs.setdefault("blocksize", SOCKET_BLOCK_SIZE)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


def connection_pool_size(settings: Settings) -> int:
    """How many storage calls one process can make at once: every invocation of the
    runtime's pool, and the processor's model calls (each stores its result)."""
    return (
        RUNTIME_THREADS
        + settings.processing.model_concurrency
        + settings.processing.priority_model_concurrency
    )


def storage_transport(settings: Settings) -> RequestsTransport:
    """The storage SDK's transport, with a connection for each call that can run at once.

    requests keeps 10 connections per host by default and closes any further one after
    its call, logging a warning each time: 173 times in 700 requests end to end, each a
    new connection (and a TLS handshake in Azure) for a later call.
    Otherwise as the SDK builds its own: no retries in the transport (the pipeline's
    policy retries), the same timeouts and block sizes.
    """
    session = Session()
    session.trust_env = environment_matters()
    adapter = _StorageAdapter(
        pool_maxsize=connection_pool_size(settings),
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
    )
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return RequestsTransport(
        session=session,
        session_owner=True,
        connection_timeout=5,
        read_timeout=60,
        connection_data_block_size=DOWNLOAD_BLOCK_SIZE,
    )


def storage_connection_problem(connection: str) -> str | None:
    """What keeps the storage SDK from signing a request with the connection string
    ``connection``, read as azure-storage-blob reads it (``parse_connection_str``, then
    ``sign_string`` base64-decodes the key at the first request): every part Name=Value,
    and the AccountKey that signs (beside an AccountName) base64. None: nothing (the
    account may still refuse the key). The key itself is never quoted."""
    parts = [part.split("=", 1) for part in connection.rstrip(";").split(";")]
    if any(len(part) != 2 for part in parts):
        return "is malformed: each part must be Name=Value, the parts separated by ';'"
    values = {part[0].upper(): part[1] for part in parts}
    if values.get("USEDEVELOPMENTSTORAGE") == "true":
        return None
    if "ACCOUNTNAME" not in values or "ACCOUNTKEY" not in values:
        return None
    try:
        base64.b64decode(values["ACCOUNTKEY"].encode("utf-8"))
    except (binascii.Error, ValueError):
        return "has an AccountKey that is not base64: copy the storage account's key again"
    return None


def blob_service_client(
    settings: Settings, transport: HttpTransport[Any, Any] | None = None
) -> BlobServiceClient:
    """The client for the ``Storage`` connection, by connection string or identity;
    ``transport`` replaces the HTTP transport (the tests count round trips with it)."""
    # The SDK's default retry waits 15 s and more between attempts: far too long for an
    # API that promises a 202 in milliseconds. Two quick retries, then 503 to the caller.
    options: dict[str, Any] = {
        "retry_policy": LinearRetry(backoff=1, random_jitter_range=1, retry_total=2),
        "transport": transport or storage_transport(settings),
    }
    connection = settings.storage.connection_string
    if connection:
        problem = storage_connection_problem(connection)
        if problem:
            raise ConfigurationError(f"the Storage setting (a connection string) {problem}")
        return BlobServiceClient.from_connection_string(connection, **options)
    if settings.storage.blob_endpoint:
        credential = azure_credential(settings.storage.client_id)
        return BlobServiceClient(settings.storage.blob_endpoint, credential=credential, **options)
    raise ConfigurationError("set Storage (connection string) or Storage__blobServiceUri")


# Answers that mean "not now": timeouts, throttling and every server-side failure.
TRANSIENT_STATUSES = frozenset({408, 429})


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Translate SDK failures: outages and throttling are transient, a missing container
    is a deployment problem.

    Transient covers an unreachable account (``ServiceRequestError``: connection refused,
    DNS, TLS), a connection that broke mid-answer (``ServiceResponseError``), any 5xx,
    408 and 429, and a socket error that escaped the SDK's own wrapping: the processor
    then schedules a retry with backoff instead of abandoning the message at once.
    """
    try:
        yield
    except ResourceNotFoundError as error:
        if getattr(error, "error_code", None) == "ContainerNotFound":
            raise ConfigurationError(f"{what}: the container does not exist") from error
        raise
    except HttpResponseError as error:
        status = error.status_code or 0
        if status >= 500 or status in TRANSIENT_STATUSES:
            raise TransientError(f"{what}: storage answered {status}") from error
        raise
    except AzureError as error:
        raise TransientError(f"{what}: storage is unreachable ({type(error).__name__})") from error
    except (ConnectionError, TimeoutError) as error:
        raise TransientError(f"{what}: storage is unreachable ({type(error).__name__})") from error


class AzureBlobStore:
    """Implements ``blobs.BlobStore``."""

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

    def delete(self, container: str, name: str) -> None:
        """Delete a blob; deleting a missing blob is not an error."""
        try:
            with storage_errors(f"deleting {container}/{name}"):
                self._client.get_blob_client(container, name).delete_blob()
        except ResourceNotFoundError:
            return

    def ensure_containers(self, names: list[str]) -> None:
        """Create containers that do not exist (local stack and tests; Bicep does it in Azure)."""
        for name in names:
            try:
                with storage_errors(f"creating container {name}"):
                    self._client.create_container(name)
            except ResourceExistsError:
                continue
