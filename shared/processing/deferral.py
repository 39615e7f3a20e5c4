"""Deferred messages and the durable ledger that keeps them from being forgotten.

A deferred Service Bus message can only be received again by its sequence number, and
the broker offers no way to list them: without a record it is lost in the queue until
its time to live ends. So the processor writes a ledger entry (sequence number, due time)
BEFORE it defers, and a timer (the sweeper) receives due entries by sequence number and
runs them through the same pipeline. An entry whose message is gone is reported and kept
apart for investigation rather than silently dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from shared.clock import Clock, utc_now
from shared.processing.inbound import InboundMessage
from shared.processing.settlement import Settler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeferredEntry:
    queue: str
    sequence_number: int
    tenant_id: str
    request_id: str
    due_at: datetime
    reason: str
    recorded_at: datetime


class DeferralLedger(Protocol):
    def record(self, entry: DeferredEntry) -> None:
        """Create or replace the entry for this queue and sequence number."""
        ...

    def due(self, queue: str, now: datetime) -> list[DeferredEntry]:
        """Entries whose due time has come, oldest first."""
        ...

    def remove(self, entry: DeferredEntry) -> None: ...

    def mark_missing(self, entry: DeferredEntry) -> None:
        """Move the entry aside: its message could not be received any more."""
        ...


class DeferredSource(Protocol):
    """Receives deferred messages by sequence number and settles them."""

    def receive_deferred(self, sequence_numbers: list[int]) -> list[InboundMessage]: ...

    @property
    def settler(self) -> Settler: ...


class MessageHandler(Protocol):
    def process(self, message: InboundMessage, settler: Settler) -> str: ...


@dataclass
class SweepReport:
    due: int = 0
    processed: int = 0
    redeferred: int = 0
    missing: list[int] = field(default_factory=list)


class DeferredSweeper:
    BATCH = 50

    def __init__(
        self, ledger: DeferralLedger, handler: MessageHandler, clock: Clock = utc_now
    ) -> None:
        self._ledger = ledger
        self._handler = handler
        self._clock = clock

    def sweep(self, queue: str, source: DeferredSource) -> SweepReport:
        """Run every due deferred message of ``queue`` through the pipeline once."""
        entries = self._ledger.due(queue, self._clock())
        report = SweepReport(due=len(entries))
        for start in range(0, len(entries), self.BATCH):
            chunk = entries[start : start + self.BATCH]
            received = {
                message.sequence_number: message
                for message in source.receive_deferred([e.sequence_number for e in chunk])
            }
            for entry in chunk:
                message = received.get(entry.sequence_number)
                if message is None:
                    log.warning(
                        "deferred message %s (request %s) is gone; ledger entry kept aside",
                        entry.sequence_number,
                        entry.request_id,
                    )
                    self._ledger.mark_missing(entry)
                    report.missing.append(entry.sequence_number)
                    continue
                outcome = self._handler.process(message, source.settler)
                if outcome == "deferred":
                    report.redeferred += 1
                elif outcome != "abandoned":
                    self._ledger.remove(entry)
                    report.processed += 1
        if report.due:
            log.info(
                "deferred sweep of %s: %d due, %d processed, %d deferred again, %d missing",
                queue,
                report.due,
                report.processed,
                report.redeferred,
                len(report.missing),
            )
        return report
