"""Event Grid dead-letter blobs: read them, summarise them, replay the chosen ones.

When a subscription gives up on an event (max attempts or time to live, or a 400/413
answer), Event Grid writes it to the dead-letter container as a JSON array, one blob per
batch, under ``<TOPIC>/<SUBSCRIPTION>/<yyyy>/<MM>/<dd>/<HH>/<id>.json``. Each entry is
the event with ``deadLetterReason``, ``deliveryAttempts``, ``lastDeliveryOutcome``,
``lastHttpStatusCode``, ``publishTime`` and ``lastDeliveryAttemptTime`` beside its fields
(Event Grid schema), or an entry whose ``event`` holds the CloudEvent; both are read.

Replay runs each chosen event through the same intake as a live delivery (whose dedupe
keys make a second job impossible) and writes a marker per replayed event, so running
the same replay twice replays nothing the second time.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.blobs import BlobStore
from shared.clock import Clock, utc_now
from shared.contracts import Door
from shared.errors import InvalidInput
from shared.events.incoming import IncomingEvent, event_from_cloudevent, event_from_eventgrid
from shared.events.intake import EventIntake, EventOutcome

log = logging.getLogger(__name__)

MARKER_PREFIX = "eventgrid-replays/"
DEAD_LETTER_FIELDS = (
    "deadLetterReason",
    "deliveryAttempts",
    "lastDeliveryOutcome",
    "lastHttpStatusCode",
    "publishTime",
    "lastDeliveryAttemptTime",
)


@dataclass(frozen=True)
class DeadLetteredEvent:
    blob_name: str
    index: int
    event: IncomingEvent
    reason: str
    attempts: int
    last_outcome: str
    last_http_status: int | None
    publish_time: str | None
    last_attempt_time: str | None

    @property
    def key(self) -> str:
        """Identifies this dead-lettered copy (an event can be dead-lettered more than once)."""
        raw = f"{self.blob_name}#{self.index}#{self.event.id}"
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _as_event(document: dict[str, Any]) -> IncomingEvent:
    """The dead-lettered event, read exactly as a live delivery of it would be."""
    if "specversion" in document:
        return event_from_cloudevent(document)
    return event_from_eventgrid(document)


def parse_dead_letter_blob(blob_name: str, content: bytes) -> list[DeadLetteredEvent]:
    document = json.loads(content)
    entries = document if isinstance(document, list) else [document]
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        wrapped = entry.get("event")
        inner: dict[str, Any] = wrapped if isinstance(wrapped, dict) else entry
        status = entry.get("lastHttpStatusCode")
        try:
            event = _as_event(inner)
        except InvalidInput as error:
            log.warning("entry %d of %s is not an event (%s); skipped", index, blob_name, error)
            continue
        found.append(
            DeadLetteredEvent(
                blob_name=blob_name,
                index=index,
                event=event,
                reason=str(entry.get("deadLetterReason", "unknown")),
                attempts=int(entry.get("deliveryAttempts") or 0),
                last_outcome=str(entry.get("lastDeliveryOutcome", "unknown")),
                last_http_status=int(status)
                if isinstance(status, int | str) and str(status).isdigit()
                else None,
                publish_time=entry.get("publishTime"),
                last_attempt_time=entry.get("lastDeliveryAttemptTime"),
            )
        )
    return found


@dataclass(frozen=True)
class ReplayResult:
    item: DeadLetteredEvent
    outcome: EventOutcome | None  # None: it had been replayed before


class DeadLetterReplay:
    def __init__(
        self,
        blobs: BlobStore,
        dead_letter_container: str,
        marker_container: str,
        event_intake: EventIntake,
        clock: Clock = utc_now,
    ) -> None:
        self._blobs = blobs
        self._container = dead_letter_container
        self._markers = marker_container
        self._intake = event_intake
        self._clock = clock

    @property
    def container(self) -> str:
        """The container Event Grid dead-letters into (EventGridDeadLetterContainer)."""
        return self._container

    def events(self, prefix: str = "") -> Iterator[DeadLetteredEvent]:
        for name in self._blobs.list_names(self._container, prefix):
            content = self._blobs.read(self._container, name)
            if content is None:
                continue
            try:
                yield from parse_dead_letter_blob(name, content)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                log.warning("dead-letter blob %s is not JSON (%s); skipped", name, error)

    def replayed(self, item: DeadLetteredEvent) -> bool:
        return self._blobs.read(self._markers, MARKER_PREFIX + item.key + ".json") is not None

    def replay(
        self,
        items: list[DeadLetteredEvent],
        progress: Callable[[int, int, ReplayResult], None] = lambda *_: None,
    ) -> list[ReplayResult]:
        """Replay ``items`` in order; stops at the first transient failure (it raises)."""
        results = []
        for position, item in enumerate(items, start=1):
            if self.replayed(item):
                result = ReplayResult(item, None)
            else:
                outcome = self._intake.accept_event(item.event, source=Door.REPLAY)
                if outcome.status != "rejected":
                    self._mark(item, outcome)
                result = ReplayResult(item, outcome)
            results.append(result)
            progress(position, len(items), result)
        return results

    def _mark(self, item: DeadLetteredEvent, outcome: EventOutcome) -> None:
        marker = {
            "blob_name": item.blob_name,
            "index": item.index,
            "event_id": item.event.id,
            "status": outcome.status,
            "request_id": outcome.request_id,
            "replayed_at": self._clock().isoformat(),
        }
        body = json.dumps(marker).encode("utf-8")
        self._blobs.upload(
            self._markers, MARKER_PREFIX + item.key + ".json", body, "application/json", {}
        )


def summarise(items: list[DeadLetteredEvent]) -> dict[str, Counter[str]]:
    return {
        "reason": Counter(i.reason for i in items),
        "last outcome": Counter(i.last_outcome for i in items),
        "event type": Counter(i.event.type for i in items),
    }


def newest_first(items: list[DeadLetteredEvent]) -> list[DeadLetteredEvent]:
    def when(item: DeadLetteredEvent) -> datetime:
        try:
            return datetime.fromisoformat(str(item.publish_time).replace("Z", "+00:00"))
        except ValueError:
            return datetime.min.replace(tzinfo=utc_now().tzinfo)

    return sorted(items, key=when, reverse=True)
