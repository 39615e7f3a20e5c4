"""The dead-letter reconciler: a dead-lettered request message ends its job.

A request message reaches its queue's dead-letter sub-queue for reasons of ours (the
processor gives up and marks the job failed, best effort) and of the broker's
(``MaxDeliveryCountExceeded`` after repeated abandons or lost locks, ``TTLExpiredException``
when it waited too long): the broker's reasons never touch the job, which would then
stay ``accepted`` or ``running`` forever. A timer (``DeadLetterReconcileSchedule``) peeks
every request queue's dead-letter sub-queue and ends the job of each message it has not
reconciled yet: ``expired`` when the broker expired the message or the request's
deadline has passed, else ``failed`` with the dead-letter reason and description as the
job's error; then it announces ``InferenceFailed``.

Peek only: the message stays for inspection and replay (``python -m shared.ops
sb-deadletters``). What was reconciled is recorded per message as a marker document,
``<LedgerContainer>/sb-reconciled/<queue>/<sequence>-<identity>.json``, where the
identity digests the message's id and enqueued time (sequence numbers start again in a
recreated queue); a second run changes nothing.

A run reads by pages of ``DeadLetterReconcilePageSize`` messages from a checkpoint per
queue (``<LedgerContainer>/sb-reconcile-checkpoints/<queue>.json``), so that its cost does
not grow with a dead-letter queue kept for inspection: first what is new, every page from
the frontier (the highest sequence number reconciled) up, saving the checkpoint after each
page; then one page of a sweep that walks the rest of the queue from the start, a page a
run, and starts again when it reaches the frontier. The sweep is there because a
dead-lettered message keeps the sequence number it had in its queue, and sequence numbers
are given when a message is sent or scheduled: a retry copy scheduled ten minutes ahead, a
deferred message or a message that waited behind a long session is dead-lettered after
later-numbered ones, below the frontier. Such a message is reconciled within one sweep
(queue size / page size runs). Purges and replays only remove messages: the frontier never
passes a message it has not read. A message whose ending could not be announced (or that
another run holds) stops the frontier (or the sweep) before it, so the next run tries it
again first. Each message read costs one marker listing of its own name.

A claim (``<sequence>-<identity>.ending.json``) is created before the job is touched and
replaced by the finished marker once the ending is announced: a run that crashed, or
could not publish, is resumed by the next.

Replays: a dead-lettered message the operator replayed (its replay marker exists) no
longer speaks for its job, which the replay copy now owns; and a job reopened by a replay
that has not run yet is not failed by an original (not replayed) copy dead-lettered
before the replay. A replay copy that is itself dead-lettered later ends the job again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pydantic import ValidationError

from shared.bounded_json import MAX_MESSAGE_JSON_BYTES, parse_json
from shared.clock import Clock, utc_now
from shared.contracts import Job, JobStatus, RequestMessage
from shared.documents import Document, JsonDocuments
from shared.errors import InvalidInput, TransientError
from shared.jobs import JobRepository, Versioned
from shared.processing.adopted_jobs import job_from_message
from shared.processing.dead_letters.operations import (
    REPLAYED_SETTLEMENT,
    replay_generation,
    replay_marker,
)
from shared.processing.dead_letters.queues import pages_of
from shared.processing.endings import (
    DEADLINE_EXCEEDED,
    MESSAGE_EXPIRED,
    Ending,
    JobEndings,
)
from shared.processing.ports import DeadLetterQueues
from shared.processing.settlement import DeadLetterReason
from shared.processing.values import DeadLetteredMessage

log = logging.getLogger(__name__)

MARKER_PREFIX = "sb-reconciled/"
CHECKPOINT_PREFIX = "sb-reconcile-checkpoints/"
DONE_SUFFIX = ".json"
CLAIM_SUFFIX = ".ending.json"
TTL_EXPIRED = "TTLExpiredException"


class ReconcileOutcome(StrEnum):
    """What one run did with one dead-lettered message (``ReconcileReport.outcomes``,
    logged as ``dead-letter reconciliation: {...}``)."""

    ENDED_FAILED = "ended-failed"  # its job ended failed, and was announced
    ENDED_EXPIRED = "ended-expired"  # its job ended expired (deadline or time to live)
    # No job was ever recorded (a producer's message that met a storage outage on each
    # delivery): it is recorded already ended.
    RECORDED_FAILED = "recorded-failed"
    RECORDED_EXPIRED = "recorded-expired"
    ANNOUNCED_AGAIN = "announced-again"  # ended by a run that stopped before its marker
    ANNOUNCE_PENDING = "announce-pending"  # ended; its announcement waits for the next run
    CLAIMED_BY_ANOTHER_RUN = "claimed-by-another-run"
    RECONCILED_BEFORE = "reconciled-before"
    SKIPPED = "skipped"  # nothing to end (no request id, replayed, ended meanwhile...)

    @classmethod
    def ended(cls, status: JobStatus) -> ReconcileOutcome:
        return cls(f"ended-{status.value}")

    @classmethod
    def recorded(cls, status: JobStatus) -> ReconcileOutcome:
        return cls(f"recorded-{status.value}")


# Outcomes that leave a message to be tried again by the next run.
UNFINISHED = frozenset({ReconcileOutcome.ANNOUNCE_PENDING, ReconcileOutcome.CLAIMED_BY_ANOTHER_RUN})
INVALID_PAYLOAD = DeadLetterReason.INVALID_PAYLOAD.value
# Refused before any job was kept (a bad payload, a tenant direct producers may not name).
NO_JOB_KEPT = frozenset({INVALID_PAYLOAD, DeadLetterReason.TENANT_NOT_ALLOWED.value})

_COPY_SUFFIX = re.compile(r":(?:replay|retry|requeue):.*$")
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def request_of(item: DeadLetteredMessage) -> tuple[str, str] | None:
    """(tenant id, request id) of a dead-lettered message: from its body, else from its
    ``tenant`` property and its message id without a retry or replay suffix."""
    tenant, request_id = item.tenant, None
    if item.message_id:
        request_id = _COPY_SUFFIX.sub("", item.message_id)
    try:
        document = parse_json(item.body, max_bytes=MAX_MESSAGE_JSON_BYTES, what="the message")
    except InvalidInput:
        document = None
    if isinstance(document, dict):
        body_tenant, body_id = document.get("tenant_id"), document.get("request_id")
        tenant = body_tenant if isinstance(body_tenant, str) and body_tenant else tenant
        request_id = body_id if isinstance(body_id, str) and body_id else request_id
    return (tenant, request_id) if tenant and request_id else None


def request_message(item: DeadLetteredMessage) -> RequestMessage | None:
    """The request a dead-lettered message carries, when its body is a valid one."""
    try:
        document = parse_json(item.body, max_bytes=MAX_MESSAGE_JSON_BYTES, what="the message")
        return RequestMessage.model_validate(document)
    except (InvalidInput, ValidationError):
        return None


def error_code(reason: str) -> str:
    """``MaxDeliveryCountExceeded`` -> ``max_delivery_count_exceeded``."""
    return _WORD.sub("_", reason).replace("-", "_").lower() or "dead_lettered"


def settlement_for(item: DeadLetteredMessage) -> str:
    return f"dead-lettered in {item.queue} ({item.reason})"


def ending_for(item: DeadLetteredMessage, job: Job, now: datetime) -> Ending:
    """How the job of dead-lettered ``item`` ends."""
    detail = f"{item.reason}: {item.description}" if item.description else item.reason
    settlement = settlement_for(item)
    if job.deadline is not None and job.deadline <= now:
        why = f"deadline {job.deadline.isoformat()} passed; the message was dead-lettered {detail}"
        return Ending(JobStatus.EXPIRED, DEADLINE_EXCEEDED, why, settlement)
    if item.reason == TTL_EXPIRED:
        return Ending(JobStatus.EXPIRED, MESSAGE_EXPIRED, detail, settlement)
    return Ending(JobStatus.FAILED, error_code(item.reason), detail, settlement)


def skip_reason(item: DeadLetteredMessage, job: Job | None, replayed: bool) -> str | None:
    """Why ``item`` must not end ``job`` (None: it must)."""
    if replayed:
        return "replayed: the copy owns the job"
    if job is None:
        return "no job"
    if job.status.is_terminal:
        return f"job {job.status.value} already"
    reopened = (job.settlement or "").startswith(REPLAYED_SETTLEMENT)
    if reopened and replay_generation(item.message_id) == 0:
        return "job reopened by a replay"
    return None


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def marker_stem(item: DeadLetteredMessage) -> str:
    """The name of ``item``'s markers without their suffix: its queue, its sequence number
    and a digest of its id and enqueued time (another message under a reused number)."""
    identity = f"{item.message_id}\x1f{_iso(item.enqueued_time)}".encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(identity).hexdigest()[:16]
    return f"{MARKER_PREFIX}{item.queue}/{item.sequence_number}-{digest}"


@dataclass
class ReconcileReport:
    examined: int = 0
    outcomes: Counter[ReconcileOutcome] = field(default_factory=Counter)


@dataclass(frozen=True)
class Checkpoint:
    """Where a queue's reconciliation stands: the highest sequence number read by the
    new-message pass (``frontier``), and where the sweep's next page starts."""

    frontier: int = 0
    sweep_from: int = 1


class DeadLetterReconciler:
    """Peeks the request queues' dead-letter sub-queues and ends their messages' jobs."""

    def __init__(
        self,
        *,
        dead_letters: DeadLetterQueues,
        documents: JsonDocuments,
        marker_container: str,
        jobs: JobRepository,
        endings: JobEndings,
        clock: Clock = utc_now,
        page_size: int = 100,
    ) -> None:
        """``page_size``: messages a page (``DeadLetterReconcilePageSize``)."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {page_size}")
        self._pages = pages_of(dead_letters)
        self._documents = documents
        self._container = marker_container
        self._jobs = jobs
        self._endings = endings
        self._clock = clock
        self._page_size = page_size

    def reconcile(self, queues: Iterable[str]) -> ReconcileReport:
        report = ReconcileReport()
        for queue in queues:
            start = self.checkpoint(queue)
            frontier = self._read_new(queue, start, report)
            sweep_from = self._sweep(queue, start, report)
            self._save(queue, Checkpoint(frontier, sweep_from))
        if report.outcomes:
            log.info("dead-letter reconciliation: %s", dict(report.outcomes))
        return report

    def checkpoint(self, queue: str) -> Checkpoint:
        found = self._documents.load(self._container, f"{CHECKPOINT_PREFIX}{queue}.json")
        if found is None:
            return Checkpoint()
        frontier, sweep_from = found[0].get("frontier"), found[0].get("sweep_from")
        if not isinstance(frontier, int) or not isinstance(sweep_from, int):
            log.warning("checkpoint of %s unreadable (%s); starting afresh", queue, found[0])
            return Checkpoint()
        return Checkpoint(frontier, sweep_from)

    def _save(self, queue: str, checkpoint: Checkpoint) -> None:
        document = {
            "queue": queue,
            "frontier": checkpoint.frontier,
            "sweep_from": checkpoint.sweep_from,
            "at": self._clock().isoformat(),
        }
        self._documents.put(self._container, f"{CHECKPOINT_PREFIX}{queue}.json", document)

    def _read_new(self, queue: str, start: Checkpoint, report: ReconcileReport) -> int:
        """Every page above the frontier; the new frontier (saved after each page)."""
        frontier = start.frontier
        while page := self._pages.peek_page(queue, frontier + 1, self._page_size):
            stopped_at = self._examine(page, report)
            if stopped_at is not None:
                return max(frontier, stopped_at - 1)
            frontier = page[-1].sequence_number
            self._save(queue, Checkpoint(frontier, start.sweep_from))
        return frontier

    def _sweep(self, queue: str, start: Checkpoint, report: ReconcileReport) -> int:
        """One page of the sweep below the frontier the run began with; where the next
        page starts (1 again once the sweep reached the frontier or the queue's end)."""
        if start.frontier < 1:
            return 1
        sweep_from = start.sweep_from if start.sweep_from <= start.frontier else 1
        page = self._pages.peek_page(queue, sweep_from, self._page_size)
        below = [i for i in page if i.sequence_number <= start.frontier]
        if not below:
            return 1
        stopped_at = self._examine(below, report)
        if stopped_at is not None:
            return stopped_at
        return below[-1].sequence_number + 1 if len(below) == len(page) else 1

    def _examine(self, page: list[DeadLetteredMessage], report: ReconcileReport) -> int | None:
        """Reconcile a page in sequence order; the sequence number of the first message
        left for the next run (None: all done)."""
        report.examined += len(page)
        first_unfinished = None
        for item in page:
            outcome = self._reconcile_one(item)
            report.outcomes[outcome] += 1
            if outcome in UNFINISHED and first_unfinished is None:
                first_unfinished = item.sequence_number
        return first_unfinished

    def _replayed(self, item: DeadLetteredMessage) -> bool:
        """Whether the operator replayed ``item`` (the replay marker names this message)."""
        return replay_marker(self._documents, self._container, item) is not None

    def _reconcile_one(self, item: DeadLetteredMessage) -> ReconcileOutcome:
        name = marker_stem(item)
        marked = set(self._documents.list_names(self._container, name))
        if name + DONE_SUFFIX in marked:
            return ReconcileOutcome.RECONCILED_BEFORE
        ids = request_of(item)
        if ids is None:
            self._finish(name, item, None, "no request id")
            return ReconcileOutcome.SKIPPED
        current = self._jobs.load(*ids)
        job = current.job if current else None
        if name + CLAIM_SUFFIX in marked:  # a run stopped after it claimed the message
            return self._resume(name, item, current)
        was_replayed = self._replayed(item)
        why = skip_reason(item, job, was_replayed)
        if current is None and not was_replayed and item.reason not in NO_JOB_KEPT:
            return self._record_ended(name, item, ids)
        if why is not None or current is None:
            self._finish(name, item, ids, why or "no job")
            return ReconcileOutcome.SKIPPED
        if not self._claim(name, item, ids):
            return ReconcileOutcome.CLAIMED_BY_ANOTHER_RUN
        ending = ending_for(item, current.job, self._clock())
        ended = self._endings.end(
            current, ending, lambda fresh: skip_reason(item, fresh, False) is None
        )
        if ended is None:
            self._finish(name, item, ids, "ended meanwhile")
            return ReconcileOutcome.SKIPPED
        return self._announce(name, item, ended, ReconcileOutcome.ended(ended.status))

    def _record_ended(
        self, name: str, item: DeadLetteredMessage, ids: tuple[str, str]
    ) -> ReconcileOutcome:
        """A message dead-lettered before its job was ever recorded (a producer's message
        that met a storage outage on each delivery, so its job was never adopted): the job
        is recorded already ended, so the status API tells the producer the truth too.
        Messages refused as ``InvalidPayload`` or ``TenantNotAllowed`` are left out: the
        processor already recorded what it could of those (and keeps no job for a refused
        tenant)."""
        request = request_message(item)
        if request is None or (request.tenant_id, request.request_id) != ids:
            self._finish(name, item, ids, "no job, and no readable request to record one")
            return ReconcileOutcome.SKIPPED
        if not self._claim(name, item, ids):
            return ReconcileOutcome.CLAIMED_BY_ANOTHER_RUN
        now = self._clock()
        job = job_from_message(request, item, now, request.deadline)
        ended = ending_for(item, job, now).apply(job, self._clock)
        if self._jobs.create(ended) is None:  # recorded meanwhile: end that one instead
            return self._resume(name, item, self._jobs.load(*ids))
        return self._announce(name, item, ended, ReconcileOutcome.recorded(ended.status))

    def _resume(
        self, name: str, item: DeadLetteredMessage, current: Versioned | None
    ) -> ReconcileOutcome:
        job = current.job if current else None
        if job is not None and job.status.is_terminal and job.settlement == settlement_for(item):
            return self._announce(name, item, job, ReconcileOutcome.ANNOUNCED_AGAIN)
        if current is None or skip_reason(item, current.job, False) is not None:
            self._finish(name, item, None, "nothing to end on resuming")
            return ReconcileOutcome.SKIPPED
        ended = self._endings.end(current, ending_for(item, current.job, self._clock()))
        if ended is None:
            self._finish(name, item, None, "ended meanwhile")
            return ReconcileOutcome.SKIPPED
        return self._announce(name, item, ended, ReconcileOutcome.ended(ended.status))

    def _announce(
        self, name: str, item: DeadLetteredMessage, job: Job, outcome: ReconcileOutcome
    ) -> ReconcileOutcome:
        try:
            self._endings.announce(job, item.application_properties)
        except TransientError as error:
            log.warning("job %s ended; announcing it failed (%s): next run", job.id, error)
            return ReconcileOutcome.ANNOUNCE_PENDING
        self._finish(name, item, (job.tenant_id, job.id), f"job {job.status.value}")
        return outcome

    def _document(self, item: DeadLetteredMessage, ids: tuple[str, str] | None) -> Document:
        return {
            "queue": item.queue,
            "sequence_number": item.sequence_number,
            "message_id": item.message_id,
            "enqueued_time": _iso(item.enqueued_time),
            "reason": item.reason,
            "tenant_id": ids[0] if ids else None,
            "request_id": ids[1] if ids else None,
            "at": self._clock().isoformat(),
        }

    def _claim(self, name: str, item: DeadLetteredMessage, ids: tuple[str, str]) -> bool:
        """Create the claim; False when another run holds it."""
        marker = {**self._document(item, ids), "status": "ending"}
        return self._documents.create(self._container, name + CLAIM_SUFFIX, marker) is not None

    def _finish(
        self, name: str, item: DeadLetteredMessage, ids: tuple[str, str] | None, note: str
    ) -> None:
        """Write the finished marker, then drop the claim (if any): a crash in between
        leaves both, and the finished marker wins."""
        marker = {**self._document(item, ids), "status": "done", "note": note}
        self._documents.put(self._container, name + DONE_SUFFIX, marker)
        self._documents.delete(self._container, name + CLAIM_SUFFIX)
