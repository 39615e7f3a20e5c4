"""Deferred messages and the durable ledger that keeps them from being forgotten.

A deferred Service Bus message can only be received again by its sequence number, and
the broker offers no way to list them: without a record it is lost in the queue until
its time to live ends. So the processor writes a ledger entry (sequence number, due time)
BEFORE it defers, and a timer (the sweeper) receives due entries by sequence number and
runs them through the same pipeline.

A message the broker cannot find by its sequence number is asked for again
``DeferredMissingRetries`` times, ``DeferredMissingRetrySeconds`` apart (a broker that
fails over, or an entry recorded a moment before the deferral, can answer "not found" for
a while). Only then is it gone: its ledger entry moves to ``deferred-missing/`` for
investigation, and its job is failed ``deferred_message_lost`` with an ``InferenceFailed``
announcement, so the caller polling it learns the truth instead of waiting forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.clock import Clock, utc_now
from shared.contracts import JobStatus
from shared.documents import Document, JsonDocuments
from shared.processing.endings import DEFERRED_MESSAGE_LOST, Ending, JobEndings
from shared.processing.ports import DeferralLedger, DeferredSource, MessageHandler
from shared.processing.values import DeferredEntry, Outcome

log = logging.getLogger(__name__)


def _document(entry: DeferredEntry) -> Document:
    return {
        "queue": entry.queue,
        "sequence_number": entry.sequence_number,
        "tenant_id": entry.tenant_id,
        "request_id": entry.request_id,
        "due_at": entry.due_at.isoformat(),
        "reason": entry.reason,
        "recorded_at": entry.recorded_at.isoformat(),
        "missing_attempts": entry.missing_attempts,
    }


def _entry(document: Document) -> DeferredEntry:
    return DeferredEntry(
        queue=str(document["queue"]),
        sequence_number=int(document["sequence_number"]),
        tenant_id=str(document["tenant_id"]),
        request_id=str(document["request_id"]),
        due_at=datetime.fromisoformat(str(document["due_at"])),
        reason=str(document["reason"]),
        recorded_at=datetime.fromisoformat(str(document["recorded_at"])),
        missing_attempts=int(document.get("missing_attempts") or 0),
    )


class DocumentDeferralLedger:
    """Implements ``DeferralLedger`` as ``<LedgerContainer>/deferred/<queue>/<seq>.json``.

    Entries whose message could not be received any more move to ``deferred-missing/``
    so an operator can see them (and the sweeper does not report them forever).
    """

    def __init__(self, documents: JsonDocuments, container: str) -> None:
        self._documents = documents
        self._container = container

    @staticmethod
    def _name(prefix: str, queue: str, sequence_number: int) -> str:
        return f"{prefix}/{queue}/{sequence_number:020d}.json"

    def record(self, entry: DeferredEntry) -> None:
        name = self._name("deferred", entry.queue, entry.sequence_number)
        self._documents.put(self._container, name, _document(entry))

    def due(self, queue: str, now: datetime) -> list[DeferredEntry]:
        due = [e for e in self._entries(f"deferred/{queue}/") if e.due_at <= now]
        return sorted(due, key=lambda e: e.due_at)

    def remove(self, entry: DeferredEntry) -> None:
        name = self._name("deferred", entry.queue, entry.sequence_number)
        self._documents.delete(self._container, name)

    def mark_missing(self, entry: DeferredEntry) -> None:
        name = self._name("deferred-missing", entry.queue, entry.sequence_number)
        self._documents.put(self._container, name, _document(entry))
        self.remove(entry)

    def missing(self, queue: str) -> list[DeferredEntry]:
        """Entries whose message was gone when the sweeper came for it."""
        return self._entries(f"deferred-missing/{queue}/")

    def _entries(self, prefix: str) -> list[DeferredEntry]:
        entries = []
        for name in self._documents.list_names(self._container, prefix):
            found = self._documents.load(self._container, name)
            if found is not None:
                entries.append(_entry(found[0]))
        return entries


# Opens the deferred source of a queue, by name (every unordered lane has deferrals).
DeferredSources = Callable[[str], AbstractContextManager[DeferredSource]]


@dataclass
class SweepReport:
    due: int = 0
    processed: int = 0
    redeferred: int = 0
    missing: list[int] = field(default_factory=list)  # gone: their jobs ended
    retrying: list[int] = field(default_factory=list)  # not found this time: asked again


class DeferredSweeper:
    BATCH = 50

    def __init__(
        self,
        ledger: DeferralLedger,
        handler: MessageHandler,
        clock: Clock = utc_now,
        *,
        endings: JobEndings | None = None,
        missing_retries: int = 5,
        missing_retry_seconds: float = 60.0,
    ) -> None:
        self._ledger = ledger
        self._handler = handler
        self._clock = clock
        self._endings = endings
        self._missing_retries = missing_retries
        self._missing_retry_delay = timedelta(seconds=missing_retry_seconds)

    def sweep(self, queue: str, sources: DeferredSources) -> SweepReport:
        """Run every due deferred message of ``queue`` through the pipeline once.

        The source (a Service Bus receiver) is opened only when something is due.
        """
        entries = self._ledger.due(queue, self._clock())
        report = SweepReport(due=len(entries))
        if not entries:
            return report
        with sources(queue) as source:
            for start in range(0, len(entries), self.BATCH):
                self._sweep_chunk(entries[start : start + self.BATCH], source, report)
        log.info(
            "deferred sweep of %s: %d due, %d processed, %d deferred again, "
            "%d not found (asked again later), %d gone",
            queue,
            report.due,
            report.processed,
            report.redeferred,
            len(report.retrying),
            len(report.missing),
        )
        return report

    def _sweep_chunk(
        self, chunk: list[DeferredEntry], source: DeferredSource, report: SweepReport
    ) -> None:
        received = {
            message.sequence_number: message
            for message in source.receive_deferred([e.sequence_number for e in chunk])
        }
        for entry in chunk:
            message = received.get(entry.sequence_number)
            if message is None:
                self._not_found(entry, report)
                continue
            outcome = self._handler.process(message, source.settler)
            if outcome is Outcome.DEFERRED:
                report.redeferred += 1
            elif outcome is not Outcome.ABANDONED:
                self._ledger.remove(entry)
                report.processed += 1

    def _not_found(self, entry: DeferredEntry, report: SweepReport) -> None:
        """Ask again later, or, after the last try, declare the message gone and end its
        job (the ledger entry is kept aside for investigation)."""
        if entry.missing_attempts < self._missing_retries:
            later = self._clock() + self._missing_retry_delay
            self._ledger.record(
                replace(entry, due_at=later, missing_attempts=entry.missing_attempts + 1)
            )
            report.retrying.append(entry.sequence_number)
            log.info(
                "deferred message %s (request %s) not found; asking again at %s",
                entry.sequence_number,
                entry.request_id,
                later.isoformat(),
            )
            return
        log.warning(
            "deferred message %s (request %s) is gone after %d tries; ending its job",
            entry.sequence_number,
            entry.request_id,
            entry.missing_attempts + 1,
        )
        if self._endings is not None:
            self._end_job(entry)
        self._ledger.mark_missing(entry)  # after the job ended: a storage error retries both
        report.missing.append(entry.sequence_number)

    def _end_job(self, entry: DeferredEntry) -> None:
        assert self._endings is not None
        why = (
            f"its deferred message (sequence number {entry.sequence_number} in "
            f"{entry.queue}) could not be received after {entry.missing_attempts + 1} tries"
        )
        settlement = f"deferred message lost in {entry.queue}"
        ending = Ending(JobStatus.FAILED, DEFERRED_MESSAGE_LOST, why, settlement)
        ended = self._endings.end_by_id(entry.tenant_id, entry.request_id, ending)
        if ended is not None:
            try:
                self._endings.announce(ended)
            except Exception:
                log.warning("job %s failed; announcing it failed", ended.id, exc_info=True)
