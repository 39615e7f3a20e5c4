"""OpenAIBatchService: the Azure OpenAI files and batches APIs behind ``BatchService``.

The real ``openai`` SDK (``AzureOpenAI`` at a dated API version, ``OpenAI`` on the v1
API: the client ``models.azure_openai`` builds for ``GlobalBatch__apiVersion``) with
Microsoft Entra ID (the app identity holds Cognitive Services OpenAI User on the
resource) or, for the local emulator only, a key.
Failures are sorted for the control plane: throttling, server errors, timeouts and
connection failures are transient (the timer's next run tries again); any other 4xx is
permanent. The client's own retries are off, as for chat completions: the control plane's
schedule is the retry, visibly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from openai import APIConnectionError, APIStatusError, NotFoundError, OpenAI

from shared.adapters.models.azure_openai import azure_openai_client
from shared.adapters.models.chat_client import status_error
from shared.errors import ConfigurationError, NotFound, TransientError
from shared.global_batch.files import CHAT_COMPLETIONS_URL
from shared.global_batch.ports import BatchError, RemoteBatch
from shared.settings import Settings

PAGE = 100
# The service's clock and ours may disagree this much: a lookup reads that far back.
CLOCK_SKEW_SECONDS = 600


@contextmanager
def service_errors(what: str) -> Iterator[None]:
    try:
        yield
    except NotFoundError as error:
        raise NotFound(f"{what}: not found on the service") from error
    except APIStatusError as error:
        raise status_error(f"{what}: the service", error) from error
    except APIConnectionError as error:
        raise TransientError(
            f"{what}: the service is unreachable ({type(error).__name__})"
        ) from error


def remote_batch(batch: Any) -> RemoteBatch:
    counts = batch.request_counts
    errors: tuple[BatchError, ...] = ()
    if batch.errors is not None and batch.errors.data:
        errors = tuple(
            BatchError(code=str(e.code or ""), message=str(e.message or ""), line=e.line)
            for e in batch.errors.data
        )
    return RemoteBatch(
        id=batch.id,
        status=batch.status,
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        total=counts.total if counts else 0,
        completed=counts.completed if counts else 0,
        failed=counts.failed if counts else 0,
        errors=errors,
    )


class OpenAIBatchService:
    """Implements ``global_batch.ports.BatchService``."""

    def __init__(self, client: OpenAI) -> None:
        self._client = client

    def find_file(self, filename: str, since: datetime) -> str | None:
        oldest = int(since.timestamp()) - CLOCK_SKEW_SECONDS
        with service_errors(f"listing batch files for {filename}"):
            for file in self._client.files.list(purpose="batch", limit=PAGE, order="desc"):
                if file.filename == filename:
                    return file.id
                if file.created_at < oldest:
                    break  # newest first: the rest were made before the submission
        return None

    def upload(self, filename: str, content: bytes, expiry_seconds: int) -> str:
        with service_errors(f"uploading {filename}"):
            created = self._client.files.create(
                file=(filename, content),
                purpose="batch",
                expires_after={"anchor": "created_at", "seconds": expiry_seconds},
            )
            return created.id

    def file_status(self, file_id: str) -> str:
        with service_errors(f"reading {file_id}"):
            return str(self._client.files.retrieve(file_id).status)

    def find_batch(
        self, input_file_id: str, excluding: frozenset[str], since: datetime
    ) -> RemoteBatch | None:
        oldest = int(since.timestamp()) - CLOCK_SKEW_SECONDS
        with service_errors(f"listing batches of {input_file_id}"):
            for batch in self._client.batches.list(limit=PAGE):
                if batch.input_file_id == input_file_id and batch.id not in excluding:
                    return remote_batch(batch)
                if batch.created_at < oldest:
                    break  # newest first: the rest were made before the submission
        return None

    def create_batch(
        self, input_file_id: str, output_expiry_seconds: int, metadata: dict[str, str]
    ) -> RemoteBatch:
        with service_errors(f"creating a batch of {input_file_id}"):
            batch = self._client.batches.create(
                input_file_id=input_file_id,
                endpoint=CHAT_COMPLETIONS_URL,  # type: ignore[arg-type]  # Azure's form
                completion_window="24h",
                metadata=metadata,
                output_expires_after={"anchor": "created_at", "seconds": output_expiry_seconds},
            )
        return remote_batch(batch)

    def get_batch(self, batch_id: str) -> RemoteBatch:
        with service_errors(f"reading batch {batch_id}"):
            return remote_batch(self._client.batches.retrieve(batch_id))

    def cancel_batch(self, batch_id: str) -> RemoteBatch:
        with service_errors(f"cancelling batch {batch_id}"):
            return remote_batch(self._client.batches.cancel(batch_id))

    def download(self, file_id: str) -> bytes:
        with service_errors(f"downloading {file_id}"):
            return self._client.files.content(file_id).read()

    def delete_file(self, file_id: str) -> None:
        try:
            with service_errors(f"deleting {file_id}"):
                self._client.files.delete(file_id)
        except NotFound:
            return


def openai_batch_service(settings: Settings) -> OpenAIBatchService:
    endpoint = settings.batch_endpoint
    if not endpoint:
        raise ConfigurationError("GlobalBatch__deployments needs GlobalBatch__endpoint")
    return OpenAIBatchService(
        azure_openai_client(
            endpoint,
            settings.global_batch.api_version,
            settings.global_batch.timeout_seconds,
            settings.global_batch.api_key,
            settings.global_batch.client_id,
        )
    )
