"""The deferred sweeper and the batch runner (concurrency, isolation, lock renewal)."""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta

from shared.adapters.in_memory import InMemoryDocuments, RecordingSettler
from shared.contracts import Job, JobStatus
from shared.events.announcements import FAILED
from shared.lanes import Lane
from shared.processing.batches import BatchProcessor
from shared.processing.deferral import DeferredSweeper, DocumentDeferralLedger
from shared.processing.inbound import InboundMessage
from shared.processing.ports import Settler
from shared.processing.values import DeferredEntry, Outcome
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def inbound(sequence: int, message_id: str | None = None) -> InboundMessage:
    return InboundMessage(
        body=b"{}",
        message_id=message_id or f"m{sequence}",
        sequence_number=sequence,
        delivery_count=1,
        enqueued_time=NOW,
    )


def new_ledger() -> DocumentDeferralLedger:
    """The ledger as documents in a fresh in-memory account."""
    return DocumentDeferralLedger(InMemoryDocuments(), "ledgers")


def recorded(ledger: DocumentDeferralLedger) -> set[int]:
    """Sequence numbers of every entry still in the ledger, due or not."""
    return {e.sequence_number for e in ledger.due("q", NOW + timedelta(days=365))}


def entry(sequence: int, due_in: int) -> DeferredEntry:
    return DeferredEntry(
        "q", sequence, "t", f"r{sequence}", NOW + timedelta(seconds=due_in), "not_before", NOW
    )


class Source:
    def __init__(self, available: list[int]) -> None:
        self.available = available
        self.settler = RecordingSettler()

    def receive_deferred(self, sequence_numbers: list[int]) -> list[InboundMessage]:
        return [inbound(n) for n in sequence_numbers if n in self.available]


class Handler:
    def __init__(self, outcomes: dict[int, Outcome]) -> None:
        self.outcomes = outcomes
        self.seen: list[int] = []

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome:
        assert message.sequence_number is not None
        self.seen.append(message.sequence_number)
        return self.outcomes.get(message.sequence_number, Outcome.COMPLETED)


def test_the_sweeper_runs_due_entries_and_reports_missing_ones() -> None:
    ledger = new_ledger()
    for e in (entry(1, -10), entry(2, -5), entry(3, -1), entry(4, 60)):
        ledger.record(e)
    handler = Handler({2: Outcome.DEFERRED, 3: Outcome.ABANDONED})

    source = Source([2, 3, 4])
    report = DeferredSweeper(ledger, handler, clock=lambda: NOW, missing_retries=0).sweep(
        "q", lambda queue: nullcontext(source)
    )

    assert handler.seen == [2, 3], "entry 4 is not due; entry 1's message is gone"
    assert report.due == 3
    assert report.missing == [1]
    assert [m.sequence_number for m in ledger.missing("q")] == [1]
    assert report.redeferred == 1
    assert recorded(ledger) == {2, 3, 4}, "abandoned and re-deferred stay"


def _job_for_entry(wired: Wired, request_id: str) -> None:
    job = Job(
        id=request_id,
        tenant_id="t",
        model="local-analyzer",
        correlation_id=request_id,
        created_at=NOW - timedelta(minutes=5),
        updated_at=NOW - timedelta(minutes=5),
        deadline=NOW + timedelta(hours=1),
    )
    assert wired.services.jobs.create(job) is not None


def test_a_missing_deferred_message_is_asked_for_again_then_its_job_fails() -> None:
    clock = ManualClock(NOW)
    wired = wire(clock=clock, DeferredMissingRetries="2", DeferredMissingRetrySeconds="60")
    _job_for_entry(wired, "r1")
    wired.services.lanes[Lane.STANDARD].ledger.record(entry(1, -1))
    sweeper = wired.services.lanes[Lane.STANDARD].sweeper
    assert sweeper is not None
    sweep = sweeper.sweep
    nothing = Source([])

    first = sweep("q", lambda queue: nullcontext(nothing))
    assert (first.retrying, first.missing) == ([1], [])
    assert sweep("q", lambda queue: nullcontext(nothing)).due == 0, "not due again yet"
    assert wired.services.jobs.get("t", "r1").status is JobStatus.ACCEPTED

    clock.now += timedelta(seconds=61)
    assert sweep("q", lambda queue: nullcontext(nothing)).retrying == [1]
    clock.now += timedelta(seconds=61)
    last = sweep("q", lambda queue: nullcontext(nothing))

    assert (last.retrying, last.missing) == ([], [1])
    job = wired.services.jobs.get("t", "r1")
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "deferred_message_lost"
    assert "sequence number 1" in job.error.message
    assert [e.sequence_number for e in wired.services.lanes[Lane.STANDARD].ledger.missing("q")] == [
        1
    ]
    (event,) = wired.published.published
    assert (event.type, event.data["error_code"]) == (FAILED, "deferred_message_lost")


def test_a_deferred_message_found_on_a_later_try_runs_normally() -> None:
    clock = ManualClock(NOW)
    wired = wire(clock=clock, DeferredMissingRetries="3")
    _job_for_entry(wired, "r1")
    wired.services.lanes[Lane.STANDARD].ledger.record(entry(1, -1))
    handler = Handler({})
    sweeper = DeferredSweeper(
        wired.services.lanes[Lane.STANDARD].ledger, handler, clock, missing_retries=3
    )

    sweeper.sweep("q", lambda queue: nullcontext(Source([])))
    clock.now += timedelta(minutes=2)
    report = sweeper.sweep("q", lambda queue: nullcontext(Source([1])))

    assert (report.processed, report.missing) == (1, [])
    assert handler.seen == [1]
    assert wired.services.jobs.get("t", "r1").status is JobStatus.ACCEPTED


def test_a_processed_entry_leaves_the_ledger() -> None:
    ledger = new_ledger()
    ledger.record(entry(9, -1))
    report = DeferredSweeper(ledger, Handler({}), clock=lambda: NOW).sweep(
        "q", lambda queue: nullcontext(Source([9]))
    )
    assert report.processed == 1
    assert recorded(ledger) == set()


class SlowProcessor:
    def __init__(self, delay: float, poison: set[str]) -> None:
        self.delay = delay
        self.poison = poison
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(self.delay)
        with self.lock:
            self.running -= 1
        if message.message_id in self.poison:
            settler.dead_letter(message, "InvalidPayload", "poison")
            return Outcome.DEAD_LETTERED
        settler.complete(message)
        return Outcome.COMPLETED


def test_a_batch_runs_within_the_concurrency_bound_and_isolates_poison() -> None:
    processor = SlowProcessor(0.05, poison={"m3"})
    settler = RecordingSettler()
    batch = BatchProcessor(
        processor, concurrency=3, lock_renewal_seconds=10, max_lock_renewal_seconds=60
    )

    report = batch.process([inbound(n) for n in range(10)], settler)

    assert processor.peak == 3
    assert report.outcomes == {"completed": 9, "dead-lettered": 1}
    assert sorted(str(a[1]) for a in settler.actions if a[0] == "complete") == sorted(
        f"m{n}" for n in range(10) if n != 3
    )


def test_locks_are_renewed_while_work_runs_and_not_after() -> None:
    processor = SlowProcessor(0.35, poison=set())
    settler = RecordingSettler()
    batch = BatchProcessor(
        processor, concurrency=2, lock_renewal_seconds=0.1, max_lock_renewal_seconds=60
    )

    report = batch.process([inbound(1), inbound(2)], settler)

    assert report.lock_renewals >= 4
    assert settler.renewals == report.lock_renewals
    keepers = [t for t in threading.enumerate() if t.name == "lock-keeper"]
    assert keepers == [], "renewal has stopped (its thread is gone) once the batch is done"


class RenewalLog(RecordingSettler):
    """Records when each message's lock was renewed."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed_at: dict[str | None, list[float]] = {}

    def renew_lock(self, message: InboundMessage) -> None:
        super().renew_lock(message)
        with self.lock:
            self.renewed_at.setdefault(message.message_id, []).append(time.monotonic())


class StartLog(SlowProcessor):
    """Records when each message's processing started."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay, poison=set())
        self.started_at: dict[str | None, float] = {}

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome:
        self.started_at[message.message_id] = time.monotonic()
        return super().process(message, settler)


def test_a_message_waiting_for_a_model_slot_keeps_its_lock() -> None:
    processor = StartLog(0.4)
    settler = RenewalLog()
    batch = BatchProcessor(
        processor, concurrency=1, lock_renewal_seconds=0.1, max_lock_renewal_seconds=60
    )

    batch.process([inbound(1), inbound(2)], settler)

    waiting = [t for t in settler.renewed_at.get("m2", []) if t < processor.started_at["m2"]]
    assert waiting, "m2's lock was renewed while it waited behind m1"


def test_lock_renewal_is_bounded_in_time() -> None:
    processor = SlowProcessor(0.5, poison=set())
    settler = RecordingSettler()
    batch = BatchProcessor(
        processor, concurrency=1, lock_renewal_seconds=0.05, max_lock_renewal_seconds=0.2
    )
    report = batch.process([inbound(1)], settler)
    assert 1 <= report.lock_renewals <= 4


def test_nothing_due_opens_no_receiver() -> None:
    ledger = new_ledger()
    ledger.record(entry(5, 60))

    def must_not_open(queue: str) -> nullcontext[Source]:
        raise AssertionError("the source was opened with nothing due")

    report = DeferredSweeper(ledger, Handler({}), clock=lambda: NOW).sweep("q", must_not_open)
    assert (report.due, report.processed) == (0, 0)
