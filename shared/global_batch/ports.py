"""The BatchService port: what the control plane needs of the Azure OpenAI files and
batches APIs (adapter: ``adapters.openai_batch``, the real ``openai`` SDK).

Each call that creates something has a lookup beside it (``find_file`` by file name,
``find_batch`` by input file), because a crash between the service creating a thing and
the app recording it must not make the next run create it again: the control plane looks
before it creates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Protocol

# The statuses of a service batch (``Batch.status``); the last four are final.
ACTIVE_STATUSES: Final = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
FINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})
# The service's code for a batch refused because the deployment's enqueued-token quota
# is used up: not the requests' fault, so they wait and are submitted again.
TOKEN_LIMIT_EXCEEDED: Final = "token_limit_exceeded"  # noqa: S105 (an error code)


@dataclass(frozen=True)
class BatchError:
    code: str
    message: str
    line: int | None = None


@dataclass(frozen=True)
class RemoteBatch:
    """A batch as the service reports it."""

    id: str
    status: str
    input_file_id: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: tuple[BatchError, ...] = field(default_factory=tuple)

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def refused_for_quota(self) -> bool:
        return self.status == "failed" and any(
            error.code == TOKEN_LIMIT_EXCEEDED for error in self.errors
        )


class BatchService(Protocol):
    """``since``: the lookups need not look at what was made before then (the submission
    was planned then), so they read the newest pages only."""

    def find_file(self, filename: str, since: datetime) -> str | None:
        """The id of an uploaded batch input file with this name, or None."""
        ...

    def upload(self, filename: str, content: bytes, expiry_seconds: int) -> str:
        """Upload a JSONL input file (``purpose="batch"``, deleted by the service after
        ``expiry_seconds``: files without an expiry count against a much smaller quota);
        its id."""
        ...

    def file_status(self, file_id: str) -> str:
        """``processed`` once the service has read the file (``pending``/``processing``
        before; ``error`` when it cannot)."""
        ...

    def find_batch(
        self, input_file_id: str, excluding: frozenset[str], since: datetime
    ) -> RemoteBatch | None:
        """A batch created from this input file, other than those in ``excluding``."""
        ...

    def create_batch(
        self, input_file_id: str, output_expiry_seconds: int, metadata: dict[str, str]
    ) -> RemoteBatch:
        """Create a batch over an uploaded file (24 h completion window)."""
        ...

    def get_batch(self, batch_id: str) -> RemoteBatch: ...

    def cancel_batch(self, batch_id: str) -> RemoteBatch: ...

    def download(self, file_id: str) -> bytes:
        """An output or error file's content."""
        ...

    def delete_file(self, file_id: str) -> None:
        """Delete a file (absent files are not an error)."""
        ...
