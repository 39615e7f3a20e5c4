"""The deferral ledger as JSON blobs: ``<LedgerContainer>/deferred/<queue>/<seq>.json``.

Entries whose message could not be received any more move to ``deferred-missing/`` so an
operator can see them (and the sweeper does not report them forever).
"""

from __future__ import annotations

import json
from datetime import datetime

from shared.adapters.blob_storage import AzureBlobStore
from shared.processing.deferral import DeferredEntry


def _document(entry: DeferredEntry) -> dict[str, object]:
    return {
        "queue": entry.queue,
        "sequence_number": entry.sequence_number,
        "tenant_id": entry.tenant_id,
        "request_id": entry.request_id,
        "due_at": entry.due_at.isoformat(),
        "reason": entry.reason,
        "recorded_at": entry.recorded_at.isoformat(),
    }


def _entry(document: dict[str, object]) -> DeferredEntry:
    return DeferredEntry(
        queue=str(document["queue"]),
        sequence_number=int(str(document["sequence_number"])),
        tenant_id=str(document["tenant_id"]),
        request_id=str(document["request_id"]),
        due_at=datetime.fromisoformat(str(document["due_at"])),
        reason=str(document["reason"]),
        recorded_at=datetime.fromisoformat(str(document["recorded_at"])),
    )


class BlobDeferralLedger:
    """Implements ``deferral.DeferralLedger``."""

    def __init__(self, blobs: AzureBlobStore, container: str) -> None:
        self._blobs = blobs
        self._container = container

    @staticmethod
    def _name(prefix: str, queue: str, sequence_number: int) -> str:
        return f"{prefix}/{queue}/{sequence_number:020d}.json"

    def record(self, entry: DeferredEntry) -> None:
        body = json.dumps(_document(entry)).encode("utf-8")
        name = self._name("deferred", entry.queue, entry.sequence_number)
        self._blobs.upload(self._container, name, body, "application/json", {})

    def due(self, queue: str, now: datetime) -> list[DeferredEntry]:
        entries = []
        for name in self._blobs.list_names(self._container, f"deferred/{queue}/"):
            content = self._blobs.read(self._container, name)
            if content is not None:
                entries.append(_entry(json.loads(content)))
        return sorted((e for e in entries if e.due_at <= now), key=lambda e: e.due_at)

    def remove(self, entry: DeferredEntry) -> None:
        self._blobs.delete(
            self._container, self._name("deferred", entry.queue, entry.sequence_number)
        )

    def mark_missing(self, entry: DeferredEntry) -> None:
        body = json.dumps(_document(entry)).encode("utf-8")
        name = self._name("deferred-missing", entry.queue, entry.sequence_number)
        self._blobs.upload(self._container, name, body, "application/json", {})
        self.remove(entry)

    def missing(self, queue: str) -> list[DeferredEntry]:
        """Entries whose message was gone when the sweeper came for it."""
        entries = []
        for name in self._blobs.list_names(self._container, f"deferred-missing/{queue}/"):
            content = self._blobs.read(self._container, name)
            if content is not None:
                entries.append(_entry(json.loads(content)))
        return entries
