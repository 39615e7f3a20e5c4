"""In-memory fakes of Inferbus's own ports, for unit tests of pure logic.

They keep the same contracts as the real adapters (exclusive create, ETag
compare-and-swap) so the logic under test meets the same rules it meets in production.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from shared.contracts import Job
from shared.errors import ConcurrencyConflict, TransientError
from shared.events.announcements import CloudEventSpec
from shared.intake.claim_checks import BlobInfo
from shared.intake.idempotency import IdempotencyRecord
from shared.jobs import Versioned
from shared.messaging import OutgoingMessage
from shared.processing.deferral import DeferredEntry
from shared.processing.inbound import InboundMessage

_etags = itertools.count(1)


def _next_etag() -> str:
    return f'"{next(_etags)}"'


class InMemoryJobStore:
    def __init__(self) -> None:
        self.documents: dict[tuple[str, str], tuple[Job, str]] = {}
        self.lock = threading.Lock()

    def create(self, job: Job) -> bool:
        with self.lock:
            key = (job.tenant_id, job.id)
            if key in self.documents:
                return False
            self.documents[key] = (job, _next_etag())
            return True

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        with self.lock:
            found = self.documents.get((tenant_id, job_id))
            return Versioned(*found) if found else None

    def replace(self, job: Job, etag: str) -> str:
        with self.lock:
            key = (job.tenant_id, job.id)
            if key not in self.documents or self.documents[key][1] != etag:
                raise ConcurrencyConflict("etag mismatch")
            new_etag = _next_etag()
            self.documents[key] = (job, new_etag)
            return new_etag


class InMemoryIdempotencyStore:
    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[IdempotencyRecord, str]] = {}
        self.lock = threading.Lock()

    def try_create(self, record: IdempotencyRecord) -> str | None:
        with self.lock:
            key = (record.tenant_id, record.key_hash)
            if key in self.records:
                return None
            etag = _next_etag()
            self.records[key] = (record, etag)
            return etag

    def load(self, tenant_id: str, key_hash: str) -> tuple[IdempotencyRecord, str] | None:
        with self.lock:
            return self.records.get((tenant_id, key_hash))

    def replace(self, record: IdempotencyRecord, etag: str) -> str:
        with self.lock:
            key = (record.tenant_id, record.key_hash)
            if key not in self.records or self.records[key][1] != etag:
                raise ConcurrencyConflict("etag mismatch")
            new_etag = _next_etag()
            self.records[key] = (record, new_etag)
            return new_etag

    def delete(self, tenant_id: str, key_hash: str, etag: str) -> None:
        with self.lock:
            key = (tenant_id, key_hash)
            if key in self.records and self.records[key][1] == etag:
                del self.records[key]


@dataclass
class RecordingSender:
    """A MessageSender that keeps what it was given; ``fail_with`` makes sends fail."""

    sent: list[OutgoingMessage] = field(default_factory=list)
    fail_with: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: OutgoingMessage) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.sent.append(message)


def broker_down() -> TransientError:
    return TransientError("sending to inference-requests: ServiceBusConnectionError")


@dataclass
class FixedBacklog:
    depth: int
    reads: int = 0

    def active_messages(self) -> int:
        self.reads += 1
        return self.depth


class InMemoryBlobStore:
    """Implements claimcheck.BlobStore in memory."""

    account_url = "https://acct.blob.core.windows.net"

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str], tuple[bytes, str]] = {}

    def upload(
        self, container: str, name: str, data: bytes, media_type: str, metadata: dict[str, str]
    ) -> None:
        self.blobs[(container, name)] = (data, media_type)

    def info(self, container: str, name: str) -> BlobInfo | None:
        found = self.blobs.get((container, name))
        return BlobInfo(len(found[0]), found[1], {}) if found else None

    def read_chunks(self, container: str, name: str) -> Iterator[bytes]:
        yield self.blobs[(container, name)][0]

    def read(self, container: str, name: str) -> bytes | None:
        found = self.blobs.get((container, name))
        return found[0] if found else None

    def list_names(self, container: str, prefix: str) -> list[str]:
        return sorted(n for c, n in self.blobs if c == container and n.startswith(prefix))


@dataclass
class RecordingSettler:
    """A Settler that records each settlement as (action, message_id, reason, description)."""

    actions: list[tuple[str, str | None, str | None, str | None]] = field(default_factory=list)
    renewals: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(
        self,
        action: str,
        message: InboundMessage,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        with self.lock:
            self.actions.append((action, message.message_id, reason, description))

    def complete(self, message: InboundMessage) -> None:
        self._record("complete", message)

    def abandon(self, message: InboundMessage) -> None:
        self._record("abandon", message)

    def dead_letter(self, message: InboundMessage, reason: str, description: str) -> None:
        self._record("dead_letter", message, reason, description)

    def defer(self, message: InboundMessage) -> None:
        self._record("defer", message)

    def renew_lock(self, message: InboundMessage) -> None:
        with self.lock:
            self.renewals += 1


class InMemoryLedger:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], DeferredEntry] = {}
        self.missing: list[DeferredEntry] = []

    def record(self, entry: DeferredEntry) -> None:
        self.entries[(entry.queue, entry.sequence_number)] = entry

    def due(self, queue: str, now: datetime) -> list[DeferredEntry]:
        return sorted(
            (e for e in self.entries.values() if e.queue == queue and e.due_at <= now),
            key=lambda e: e.due_at,
        )

    def remove(self, entry: DeferredEntry) -> None:
        self.entries.pop((entry.queue, entry.sequence_number), None)

    def mark_missing(self, entry: DeferredEntry) -> None:
        self.missing.append(entry)
        self.remove(entry)


@dataclass
class RecordingEvents:
    published: list[CloudEventSpec] = field(default_factory=list)
    fail_with: Exception | None = None

    def publish(self, events: list[CloudEventSpec]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.published.extend(events)
