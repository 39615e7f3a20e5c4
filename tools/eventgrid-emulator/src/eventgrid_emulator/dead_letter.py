"""Dead letters: the record the service writes, and the writer that puts it in Azurite.

Format and place follow the namespace dead-lettering documentation: a blob named
``<GUID>.json`` under ``<namespace>/<topic>/<subscription>/<year>/<month>/<day>/<UTC hour>``
(no zero padding) in the subscription's container, holding a JSON array of
``{"deadLetterProperties": {deadletterreason, deliveryattempts, deliveryresult,
publishutc, deliveryattemptutc}, "event": {...}}`` (plus ``customDeliveryProperties`` for
push subscriptions with non-secret delivery attributes). Letters that are ready together
for the same subscription share one blob, as the service may do. A failed write is retried
on the documented schedule (10 s, 1 min, 5 min, then every 5 min for up to 2 days).
Without a storage connection string dead letters are logged and dropped, which is what the
service does for a subscription without a dead-letter destination.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .clock import Clock, service_timestamp, utcnow
from .entries import Entry

log = logging.getLogger("eventgrid_emulator.dead_letter")

# The first two reasons and the lock-expiry result are the service's documented texts; the
# others are the emulator's, in the same style.
MAX_DELIVERY_EXCEEDED = "Maximum delivery attempts was exceeded."
CLIENT_ERROR = "Undeliverable due to client error"
DESTINATION_ERROR = "Undeliverable due to destination error"
REJECTED = "Event was rejected by the receiver."
TIME_TO_LIVE_EXPIRED = "Event time to live expired."
NOT_SETTLED = "Event was not acknowledged nor rejected."
RELEASED = "Event was released."
RETRY_SCHEDULE = (10.0, 60.0, 300.0)
MAX_RETRY_PERIOD = 2 * 86400.0


@dataclass(frozen=True)
class DeadLetter:
    """A dead-lettered event on its way to ``container`` (None: dropped)."""

    container: str | None
    prefix: str  # <namespace>/<topic>/<subscription>
    record: dict[str, Any]


def dead_letter_record(
    entry: Entry,
    reason: str,
    result: str,
    custom_properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    attempted = entry.last_attempt_utc or entry.published_utc
    record: dict[str, Any] = {
        "deadLetterProperties": {
            "deadletterreason": reason,
            "deliveryattempts": entry.delivery_count,
            "deliveryresult": result,
            "publishutc": service_timestamp(entry.published_utc),
            "deliveryattemptutc": service_timestamp(attempted),
        },
        "event": entry.event,
    }
    if custom_properties:
        record["customDeliveryProperties"] = dict(custom_properties)
    return record


def blob_name(prefix: str, moment: dt.datetime) -> str:
    utc = moment.astimezone(dt.UTC)
    return f"{prefix}/{utc.year}/{utc.month}/{utc.day}/{utc.hour}/{uuid.uuid4()}.json"


class DeadLetterSink(Protocol):
    def put(self, letter: DeadLetter) -> None: ...

    def close(self, timeout: float = 5.0) -> None: ...


def log_dropped(letter: DeadLetter, why: str) -> None:
    log.warning(
        "dropped dead letter (%s): %s event %s: %s",
        why,
        letter.prefix,
        letter.record["event"].get("id"),
        letter.record["deadLetterProperties"]["deadletterreason"],
    )


class DroppingSink:
    """No storage configured: say what would have been dead-lettered, keep nothing."""

    def put(self, letter: DeadLetter) -> None:
        log_dropped(letter, "no --storage" if letter.container else "no dead-letter container")

    def close(self, timeout: float = 5.0) -> None:
        return None


@dataclass
class _Batch:
    container: str
    prefix: str
    records: list[dict[str, Any]]
    first_failure: float | None = None
    failures: int = 0


class BlobDeadLetterWriter:
    """Writes dead letters to blob storage on a thread of its own, retrying failures."""

    def __init__(self, connection_string: str, clock: Clock) -> None:
        from azure.storage.blob import BlobServiceClient  # imported only when storage is used

        # No SDK retries (its first backoff is 15 s): the documented schedule below retries.
        self._service = BlobServiceClient.from_connection_string(
            connection_string, retry_total=0, connection_timeout=10
        )
        self._clock = clock
        self._queue: queue.Queue[DeadLetter | None] = queue.Queue()
        self._retries: list[tuple[float, _Batch]] = []
        self._containers: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="dead-letters", daemon=True)
        self._thread.start()

    def put(self, letter: DeadLetter) -> None:
        self._queue.put(letter)

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        closing = False
        while not closing:
            wait = None
            if self._retries:
                wait = max(0.0, min(due for due, _ in self._retries) - self._clock.now())
            letters: list[DeadLetter] = []
            try:
                item = self._queue.get(timeout=wait)
                while True:
                    if item is None:
                        closing = True
                    else:
                        letters.append(item)
                    item = self._queue.get_nowait()
            except queue.Empty:
                pass
            self._write_all(self._group(letters), final=closing)
        for _, batch in self._retries:
            log.error(
                "dropped %d dead letter(s) for %s at shutdown", len(batch.records), batch.prefix
            )

    def _group(self, letters: list[DeadLetter]) -> list[_Batch]:
        batches: dict[tuple[str, str], _Batch] = {}
        for letter in letters:
            if letter.container is None:
                log_dropped(letter, "no dead-letter container")
                continue
            key = (letter.container, letter.prefix)
            batches.setdefault(key, _Batch(letter.container, letter.prefix, [])).records.append(
                letter.record
            )
        due_now = self._clock.now()
        ready = [batch for due, batch in self._retries if due <= due_now]
        self._retries = [(due, batch) for due, batch in self._retries if due > due_now]
        return ready + list(batches.values())

    def _write_all(self, batches: list[_Batch], *, final: bool) -> None:
        for batch in batches:
            try:
                self._write(batch)
            except Exception as error:  # storage down, bad credentials: retry on schedule
                self._retry(batch, error, final=final)

    def _write(self, batch: _Batch) -> None:
        from azure.core.exceptions import ResourceExistsError

        container = self._service.get_container_client(batch.container)
        if batch.container not in self._containers:
            try:
                container.create_container()
                log.info("created dead-letter container %s", batch.container)
            except ResourceExistsError:
                pass
            self._containers.add(batch.container)
        name = blob_name(batch.prefix, utcnow())
        container.upload_blob(name, json.dumps(batch.records).encode(), overwrite=False)
        log.info("dead-lettered %d event(s) to %s/%s", len(batch.records), batch.container, name)

    def _retry(self, batch: _Batch, error: Exception, *, final: bool) -> None:
        now = self._clock.now()
        batch.first_failure = batch.first_failure if batch.first_failure is not None else now
        expired = now - batch.first_failure > self._clock.span(MAX_RETRY_PERIOD)
        if final or expired:
            log.error(
                "dropped %d dead letter(s) for %s: %r", len(batch.records), batch.prefix, error
            )
            return
        delay = RETRY_SCHEDULE[min(batch.failures, len(RETRY_SCHEDULE) - 1)]
        batch.failures += 1
        log.warning("dead-letter write failed (%r); retrying in %.0f s", error, delay)
        self._retries.append((now + self._clock.span(delay), batch))
