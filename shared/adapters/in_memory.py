"""In-memory implementations of Inferbus's ports, for unit tests and benchmarks.

They keep the rules of the real adapters so that the logic under test meets what it meets
in production: ``InMemoryDocuments`` enforces Blob storage's preconditions exactly
(``create`` is if-none-match, ``replace`` and a conditional ``delete`` are if-match, a
failed precondition raises ``ConcurrencyConflict`` like ``BlobJsonDocuments``), and
documents are blobs of the same ``InMemoryBlobs`` account, as they are in Azure. The
recording ports (sender, publisher, settler) keep what they were given and can be told
to fail. ``entrypoints.port_sets.in_memory_ports`` wires them; nothing here touches the network.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.blobs import BlobInfo
from shared.clock import Clock, utc_now
from shared.documents import Document, ListedDocument, NamePage, TagQuery, Tags
from shared.errors import ConcurrencyConflict, NotFound
from shared.events.ports import CloudEventSpec
from shared.intake.ports import QueueDepth
from shared.messaging import OutgoingMessage, Scheduled
from shared.processing.inbound import InboundMessage
from shared.processing.values import DeadLetteredMessage, QueueSnapshot

ACCOUNT_URL = "https://acct.blob.core.windows.net"
_etags = itertools.count(1)


def _next_etag() -> str:
    return f'"0x{next(_etags):X}"'


@dataclass(frozen=True)
class StoredBlob:
    data: bytes
    media_type: str
    metadata: dict[str, str]
    etag: str
    modified: datetime


class InMemoryBlobs:
    """Implements ``blobs.BlobStore``: one storage account in memory; ``clock``
    stamps each write's last-modified time, as the service does."""

    def __init__(self, account_url: str = ACCOUNT_URL, clock: Clock = utc_now) -> None:
        self.account_url = account_url
        self.clock = clock
        self.stored: dict[tuple[str, str], StoredBlob] = {}
        # Blob index tags by blob; every write replaces them, as a Put Blob does.
        self.tags: dict[tuple[str, str], dict[str, str]] = {}
        self.lock = threading.RLock()

    def write(
        self,
        container: str,
        name: str,
        data: bytes,
        media_type: str,
        metadata: dict[str, str],
        tags: Tags | None = None,
    ) -> str:
        etag = _next_etag()
        blob = StoredBlob(data, media_type, dict(metadata), etag, self.clock())
        with self.lock:
            self.stored[(container, name)] = blob
            if tags:
                self.tags[(container, name)] = dict(tags)
            else:
                self.tags.pop((container, name), None)
        return etag

    def upload(
        self, container: str, name: str, data: bytes, media_type: str, metadata: dict[str, str]
    ) -> None:
        self.write(container, name, data, media_type, metadata)

    def info(self, container: str, name: str) -> BlobInfo | None:
        found = self.stored.get((container, name))
        if found is None:
            return None
        return BlobInfo(len(found.data), found.media_type, dict(found.metadata), found.etag)

    def read_chunks(self, container: str, name: str) -> Iterator[bytes]:
        found = self.stored.get((container, name))
        if found is None:
            raise NotFound(f"blob {container}/{name} does not exist")
        yield found.data

    def read(self, container: str, name: str) -> bytes | None:
        found = self.stored.get((container, name))
        return found.data if found else None

    def list_names(self, container: str, prefix: str) -> list[str]:
        with self.lock:
            names = [n for c, n in self.stored if c == container and n.startswith(prefix)]
        return sorted(names)

    def delete(self, container: str, name: str) -> None:
        with self.lock:
            self.stored.pop((container, name), None)
            self.tags.pop((container, name), None)


class InMemoryDocuments:
    """Implements ``documents.JsonDocuments`` over ``InMemoryBlobs`` with Blob storage's
    conditional-request rules."""

    def __init__(self, blobs: InMemoryBlobs | None = None) -> None:
        self.blobs = blobs if blobs is not None else InMemoryBlobs()

    def _write(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str:
        data = json.dumps(document).encode("utf-8")
        return self.blobs.write(container, name, data, "application/json", {}, tags)

    def create(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str | None:
        with self.blobs.lock:
            if (container, name) in self.blobs.stored:
                return None
            return self._write(container, name, document, tags)

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        found = self.blobs.stored.get((container, name))
        if found is None:
            return None
        document: Document = json.loads(found.data)
        return document, found.etag

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        with self.blobs.lock:
            found = self.blobs.stored.get((container, name))
            if found is None or found.etag != etag:
                raise ConcurrencyConflict(f"{container}/{name} changed since it was read")
            return self._write(container, name, document, tags)

    def put(self, container: str, name: str, document: Document) -> str:
        return self._write(container, name, document)

    def delete(self, container: str, name: str, etag: str | None = None) -> None:
        with self.blobs.lock:
            found = self.blobs.stored.get((container, name))
            if found is None:
                return
            if etag and found.etag != etag:
                raise ConcurrencyConflict(f"{container}/{name} changed since it was read")
            self.blobs.delete(container, name)

    def list_names(self, container: str, prefix: str) -> list[str]:
        return self.blobs.list_names(container, prefix)

    def list_modified(self, container: str, prefix: str) -> list[tuple[str, datetime]]:
        """Implements ``documents.DocumentListing``."""
        with self.blobs.lock:
            return sorted(
                (name, blob.modified)
                for (c, name), blob in self.blobs.stored.items()
                if c == container and name.startswith(prefix)
            )

    def list_page(
        self, container: str, prefix: str, limit: int, marker: str | None = None
    ) -> NamePage:
        """Implements ``documents.PagedListing``; the marker is the page's last name."""
        names = [name for name in self.blobs.list_names(container, prefix) if name > (marker or "")]
        page = tuple(names[:limit])
        return NamePage(page, page[-1] if len(names) > limit else None)

    def put_described(
        self, container: str, name: str, document: Document, metadata: Mapping[str, str]
    ) -> str:
        """Implements ``documents.DescribedDocuments``."""
        data = json.dumps(document).encode("utf-8")
        return self.blobs.write(container, name, data, "application/json", dict(metadata))

    def list_described(self, container: str, prefix: str) -> list[ListedDocument]:
        """Implements ``documents.DescribedDocuments``."""
        with self.blobs.lock:
            return sorted(
                (
                    ListedDocument(name, blob.modified, dict(blob.metadata))
                    for (c, name), blob in self.blobs.stored.items()
                    if c == container and name.startswith(prefix)
                ),
                key=lambda listed: listed.name,
            )

    def find_tagged(self, container: str, query: TagQuery) -> list[tuple[str, dict[str, str]]]:
        """Implements ``documents.TaggedDocuments`` (the index is never behind here)."""
        with self.blobs.lock:
            return sorted(
                (name, query.shown(tags))
                for (c, name), tags in self.blobs.tags.items()
                if c == container and query.matches(tags)
            )


@dataclass
class RecordingSender:
    """Implements ``messaging.SchedulingSender``; ``fail_with`` makes sends raise it. A
    scheduled message is sent (``sent``) and numbered; ``cancelled`` holds the numbers
    called back."""

    sent: list[OutgoingMessage] = field(default_factory=list)
    fail_with: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    entity: str = "recorded"
    scheduled: dict[int, OutgoingMessage] = field(default_factory=dict)
    cancelled: list[int] = field(default_factory=list)

    def send(self, message: OutgoingMessage) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.sent.append(message)

    def schedule(self, message: OutgoingMessage) -> Scheduled:
        if message.scheduled_enqueue_time is None:
            raise ValueError(f"message {message.message_id} has no scheduled enqueue time")
        self.send(message)
        with self.lock:
            number = len(self.scheduled) + 1
            self.scheduled[number] = message
        return Scheduled(self.entity, number)

    def cancel(self, scheduled: Sequence[Scheduled]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.cancelled.extend(s.sequence_number for s in scheduled if s.entity == self.entity)

    def live(self) -> list[OutgoingMessage]:
        """What was sent and not cancelled: what the queue gets."""
        with self.lock:
            gone = {id(self.scheduled[n]) for n in self.cancelled}
            return [m for m in self.sent if id(m) not in gone]


@dataclass
class RecordingPublisher:
    """Implements ``events.ports.EventPublisher``; ``fail_with`` makes publishing raise."""

    published: list[CloudEventSpec] = field(default_factory=list)
    fail_with: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, events: list[CloudEventSpec]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.published.extend(events)


@dataclass
class FixedBacklog:
    """Implements ``intake.ports.BacklogProbe`` with set counts; counts its reads."""

    depth: int  # active messages
    scheduled: int = 0
    reads: int = 0

    def queue_depth(self) -> QueueDepth:
        self.reads += 1
        return QueueDepth(self.depth, self.scheduled)


@dataclass
class RecordingSettler:
    """Implements ``processing.ports.Settler``; records (action, message_id, reason,
    description)."""

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


@dataclass
class InMemoryDeferredSource:
    """Implements ``processing.ports.DeferredSource``: deferred messages by sequence number."""

    deferred: dict[int, InboundMessage] = field(default_factory=dict)
    settler: RecordingSettler = field(default_factory=RecordingSettler)

    def receive_deferred(self, sequence_numbers: list[int]) -> list[InboundMessage]:
        return [self.deferred[n] for n in sequence_numbers if n in self.deferred]


@dataclass
class FixedQueueObserver:
    """Implements ``processing.ports.QueueObserver`` with a set snapshot."""

    current: QueueSnapshot = field(
        default_factory=lambda: QueueSnapshot(0, 0, 0, 0, oldest_active_enqueued_at=None)
    )

    def snapshot(self) -> QueueSnapshot:
        return self.current


@dataclass
class InMemoryDeadLetterQueues:
    """Implements ``processing.ports.DeadLetterQueues``: messages by queue."""

    held: dict[str, list[DeadLetteredMessage]] = field(default_factory=dict)

    def add(self, item: DeadLetteredMessage) -> None:
        self.held.setdefault(item.queue, []).append(item)

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        return sorted(self.held.get(queue, []), key=lambda item: item.sequence_number)

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        wanted = set(sequence_numbers)
        mine = self.held.get(queue, [])
        removed = [i.sequence_number for i in mine if i.sequence_number in wanted]
        self.held[queue] = [i for i in mine if i.sequence_number not in wanted]
        return removed
