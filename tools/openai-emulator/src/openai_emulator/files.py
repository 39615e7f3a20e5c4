"""Stored files: the uploads (``purpose="batch"``) and the batches' output and error files.

Everything lives in memory; a file is its bytes plus the fields of the SDK's
``FileObject``. Uploaded files are ``processed`` at once (the service takes a moment,
which the app's ``wait_for_processing`` tolerates either way).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from .errors import bad_request, not_found
from .listing import cursor_page

UPLOAD_PURPOSES = frozenset({"batch", "fine-tune", "assistants", "vision", "user_data", "evals"})
# Azure's range for a batch file's expires_after (14 to 30 days), also its output files'.
EXPIRY_RANGE = (1_209_600, 2_592_000)


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int
    expires_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": self.expires_at,
        }


def check_expiry_seconds(value: Any, what: str) -> int:
    """``seconds`` of an ``expires_after`` policy, held to Azure's range; 400 otherwise."""
    low, high = EXPIRY_RANGE
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_request(
            f"{what}.seconds must be an integer between {low} (14 days) and {high} (30 days), "
            f"got {value!r}.",
            "invalid_expires_after",
        )
    return value


class FileStore:
    """The files of the emulated resource, in upload order. Not thread-safe: callers lock."""

    def __init__(self) -> None:
        self.files: dict[str, StoredFile] = {}

    def add(
        self, filename: str, purpose: str, data: bytes, expires_after: int | None = None
    ) -> StoredFile:
        now = int(time.time())
        stored = StoredFile(
            id=f"file-{secrets.token_hex(16)}",
            filename=filename,
            purpose=purpose,
            data=data,
            created_at=now,
            expires_at=now + expires_after if expires_after else None,
        )
        self.files[stored.id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile:
        stored = self.files.get(file_id)
        if stored is None:
            raise not_found(f"File '{file_id}' not found.", "fileNotFound")
        return stored

    def delete(self, file_id: str) -> dict[str, Any]:
        self.get(file_id)
        del self.files[file_id]
        return {"id": file_id, "object": "file", "deleted": True}

    def page(
        self, purpose: str | None, order: str, after: str | None, limit: int
    ) -> dict[str, Any]:
        if order not in ("asc", "desc"):
            raise bad_request(f"'order' must be 'asc' or 'desc', got {order!r}.")
        items = [f.to_json() for f in self.files.values() if purpose in (None, f.purpose)]
        if order == "desc":
            items.reverse()
        return cursor_page(items, after, limit)
