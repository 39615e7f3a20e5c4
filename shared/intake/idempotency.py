"""Idempotency-Key handling: one key, one job, one message, however often it is sent.

A marker per (tenant, key) is created with if-none-match, so exactly one of several
concurrent submissions wins; it names the request id the key stands for. Whether that
request was accepted is not written on the marker (a second write per request) but read
from its job: intake records a job only after the broker took the request message
(``submissions``). A second submission with the same key:

- and a different body: 409 ``idempotency_key_reused``;
- when the first request's job exists: gets that job back;
- while the first is still being accepted: waits a little for its job, then 409 with
  Retry-After (it must not answer 202 for work that might still fail to enqueue).

A failed submission deletes its marker so the key can be used again. A marker whose
request never got a job (the instance crashed before sending) is taken over after
``stale_after`` seconds (``STALE_CLAIM_SECONDS``), keeping its request id so that the job
and the message (deduplicated by message id) stay single.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from shared.clock import Clock, utc_now
from shared.contracts import Job
from shared.documents import JsonDocuments
from shared.errors import ConcurrencyConflict, Conflict, FieldError, InvalidInput
from shared.intake.ports import IdempotencyRecord, IdempotencyStore
from shared.request_ids import new_request_id

IDEMPOTENCY_KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
# How long a claim without a job holds its key before a retry takes it over. A takeover
# is safe even while the owner still works, because it keeps the owner's request id: both
# store the same input, the queue's duplicate detection keeps one message of that id, and
# the job is created once (if-none-match). So the window only has to cover an intake
# that is slow, not prove its owner dead: 30 s is several times a slow acceptance (an
# input upload and a send within their timeouts), and a caller whose intake crashed
# waits that long at most instead of minutes.
STALE_CLAIM_SECONDS = 30.0


class DocumentIdempotencyStore:
    """Implements ``IdempotencyStore`` as ``<IdempotencyContainer>/<tenant>/<sha256(key)>.json``."""

    def __init__(self, documents: JsonDocuments, container: str) -> None:
        self._documents = documents
        self._container = container

    @staticmethod
    def _name(tenant_id: str, key_hash: str) -> str:
        return f"{tenant_id}/{key_hash}.json"

    @staticmethod
    def _document(record: IdempotencyRecord) -> dict[str, str]:
        return {
            "tenant_id": record.tenant_id,
            "key_hash": record.key_hash,
            "request_hash": record.request_hash,
            "request_id": record.request_id,
            "created_at": record.created_at.isoformat(),
        }

    def try_create(self, record: IdempotencyRecord) -> str | None:
        name = self._name(record.tenant_id, record.key_hash)
        return self._documents.create(self._container, name, self._document(record))

    def load(self, tenant_id: str, key_hash: str) -> tuple[IdempotencyRecord, str] | None:
        found = self._documents.load(self._container, self._name(tenant_id, key_hash))
        if found is None:
            return None
        document, etag = found
        record = IdempotencyRecord(
            tenant_id=document["tenant_id"],
            key_hash=document["key_hash"],
            request_hash=document["request_hash"],
            request_id=document["request_id"],
            created_at=datetime.fromisoformat(document["created_at"]),
        )
        return record, etag

    def replace(self, record: IdempotencyRecord, etag: str) -> str:
        name = self._name(record.tenant_id, record.key_hash)
        return self._documents.replace(self._container, name, self._document(record), etag)

    def delete(self, tenant_id: str, key_hash: str, etag: str) -> None:
        self._documents.delete(self._container, self._name(tenant_id, key_hash), etag)


@dataclass(frozen=True)
class Claimed:
    """This submission owns the key and must commit or release it."""

    record: IdempotencyRecord
    etag: str


@dataclass(frozen=True)
class Replay:
    """The key was already used for the same body: return that request's job."""

    job: Job


def hash_key(key: str) -> str:
    """Keys are caller-chosen strings; a hash makes a safe, fixed-length blob name."""
    if not IDEMPOTENCY_KEY_PATTERN.match(key):
        raise InvalidInput(
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
            (FieldError("Idempotency-Key", "must be 1 to 255 visible ASCII characters"),),
        )
    return hashlib.sha256(key.encode("ascii")).hexdigest()


AcceptedJob = Callable[[str, str], Job | None]
"""The job of the request (tenant id, request id) when it was accepted, else None."""


class IdempotencyGuard:
    def __init__(
        self,
        store: IdempotencyStore,
        accepted: AcceptedJob,
        clock: Clock = utc_now,
        wait_seconds: float = 5.0,
        stale_after_seconds: float = STALE_CLAIM_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._accepted = accepted
        self._clock = clock
        self._wait_seconds = wait_seconds
        self._stale_after = stale_after_seconds
        self._sleep = sleep

    def begin(self, tenant_id: str, key: str, request_hash: str) -> Claimed | Replay:
        """Claim ``key`` for a new request, or say which request already owns it."""
        key_hash = hash_key(key)
        deadline = time.monotonic() + self._wait_seconds
        fresh = IdempotencyRecord(
            tenant_id=tenant_id,
            key_hash=key_hash,
            request_hash=request_hash,
            request_id=new_request_id(self._clock),
            created_at=self._clock(),
        )
        while True:
            etag = self._store.try_create(fresh)
            if etag is not None:
                return Claimed(fresh, etag)
            existing = self._store.load(tenant_id, key_hash)
            if existing is not None:
                outcome = self._resolve(existing[0], existing[1], request_hash)
                if outcome is not None:
                    return outcome
            if time.monotonic() >= deadline:
                raise Conflict(
                    "a request with this Idempotency-Key is still being accepted; retry shortly",
                    code="idempotency_key_in_progress",
                    retry_after=1,
                )
            self._sleep(0.1)

    def _resolve(
        self, record: IdempotencyRecord, etag: str, request_hash: str
    ) -> Claimed | Replay | None:
        if record.request_hash != request_hash:
            raise Conflict(
                "this Idempotency-Key was already used with a different request body",
                code="idempotency_key_reused",
            )
        job = self._accepted(record.tenant_id, record.request_id)
        if job is not None:
            return Replay(job)
        age = (self._clock() - record.created_at).total_seconds()
        if age < self._stale_after:
            return None
        taken_over = replace(record, created_at=self._clock())
        try:
            return Claimed(taken_over, self._store.replace(taken_over, etag))
        except ConcurrencyConflict:
            return None

    def release(self, claim: Claimed) -> None:
        """The submission failed: free the key for a new attempt."""
        self._store.delete(claim.record.tenant_id, claim.record.key_hash, claim.etag)
