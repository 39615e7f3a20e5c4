"""The dead-letter reconciler reads by pages from a checkpoint: a run after N messages were
reconciled reads at most one page (the sweep's) plus what is new; new messages, messages
dead-lettered below the frontier and messages after a purge are still reconciled."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from shared.contracts import Job, JobStatus
from shared.processing.dead_letters.reconciliation import (
    CHECKPOINT_PREFIX,
    Checkpoint,
    DeadLetterReconciler,
)
from shared.processing.values import DeadLetteredMessage
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
QUEUE = "inference-requests"
TENANT = "t1"
PAGE = 100  # the reconciler's default, and DeadLetterReconcilePageSize's


@dataclass
class CountingDeadLetters:
    """Implements ``DeadLetterQueues`` and ``DeadLetterPages``; counts what pages return
    and refuses a whole-queue peek."""

    held: list[DeadLetteredMessage] = field(default_factory=list)
    read: int = 0  # messages handed out by peek_page
    pages: int = 0

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        raise AssertionError("the whole dead-letter queue was peeked")

    def peek_page(
        self, queue: str, from_sequence_number: int, max_count: int
    ) -> list[DeadLetteredMessage]:
        later = sorted(
            (
                i
                for i in self.held
                if i.queue == queue and i.sequence_number >= from_sequence_number
            ),
            key=lambda i: i.sequence_number,
        )[:max_count]
        self.pages += 1
        self.read += len(later)
        return later

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        gone = [i.sequence_number for i in self.held if i.sequence_number in sequence_numbers]
        self.held = [i for i in self.held if i.sequence_number not in sequence_numbers]
        return gone

    def counted(self) -> tuple[int, int]:
        """(messages read, pages read) since the last call."""
        counts = (self.read, self.pages)
        self.read = self.pages = 0
        return counts


class Setup:
    def __init__(self) -> None:
        self.queues = CountingDeadLetters()
        self.wired: Wired = wire(clock=ManualClock(NOW), ports={"dead_letter_queues": self.queues})
        reconciler = self.wired.services.reconciler
        assert reconciler is not None
        self.reconciler: DeadLetterReconciler = reconciler

    def add(self, sequence: int, request_id: str | None = None) -> str:
        """A job and its message, dead-lettered by the broker; the request id."""
        request_id = request_id or f"r{sequence}"
        job = Job(
            id=request_id,
            tenant_id=TENANT,
            model="local-analyzer",
            correlation_id=request_id,
            created_at=NOW - timedelta(minutes=40),
            updated_at=NOW - timedelta(minutes=30),
            deadline=NOW + timedelta(hours=1),
            status=JobStatus.RUNNING,
        )
        assert self.wired.services.jobs.create(job) is not None
        body = {"schema": "inferbus.request/v1", "request_id": request_id, "tenant_id": TENANT}
        self.queues.held.append(
            DeadLetteredMessage(
                queue=QUEUE,
                sequence_number=sequence,
                message_id=request_id,
                enqueued_time=NOW - timedelta(minutes=30),
                delivery_count=10,
                reason="MaxDeliveryCountExceeded",
                description="",
                source=QUEUE,
                body=json.dumps(body).encode(),
                application_properties={"tenant": TENANT},
            )
        )
        return request_id

    def run(self) -> dict[str, int]:
        outcomes = self.reconciler.reconcile([QUEUE]).outcomes
        return {outcome.value: count for outcome, count in outcomes.items()}

    def status(self, request_id: str) -> JobStatus:
        return self.wired.services.jobs.get(TENANT, request_id).status


@pytest.fixture
def setup() -> Setup:
    backlog = Setup()
    for sequence in range(1, 251):
        backlog.add(sequence)
    assert backlog.run() == {"ended-failed": 250}
    assert backlog.queues.counted() == (250, 4)  # three full pages, one short, one empty
    return backlog


def test_a_run_after_n_reconciled_reads_at_most_one_page(setup: Setup) -> None:
    assert setup.reconciler.checkpoint(QUEUE) == Checkpoint(frontier=250, sweep_from=1)
    assert setup.wired.documents.load("ledgers", f"{CHECKPOINT_PREFIX}{QUEUE}.json")

    assert setup.run() == {"reconciled-before": PAGE}
    read, pages = setup.queues.counted()
    assert read <= PAGE
    assert pages == 2  # nothing new above the frontier, one page of the sweep


def test_new_dead_letters_are_reconciled_for_one_page_more(setup: Setup) -> None:
    new = [setup.add(sequence) for sequence in (251, 252, 260)]
    outcomes = setup.run()
    assert outcomes["ended-failed"] == 3
    assert all(setup.status(request_id) is JobStatus.FAILED for request_id in new)
    read, _ = setup.queues.counted()
    assert read <= 3 + PAGE
    assert setup.reconciler.checkpoint(QUEUE).frontier == 260


def test_a_message_dead_lettered_below_the_frontier_is_found_by_the_sweep(
    setup: Setup,
) -> None:
    """A retry copy scheduled before later messages were sent keeps its lower number."""
    late = setup.add(7, "late-retry")  # dead-lettered now, numbered below the frontier
    for _ in range(3):  # the sweep walks 250 messages a page (100) a run
        setup.run()
        read, _ = setup.queues.counted()
        assert read <= PAGE
    assert setup.status(late) is JobStatus.FAILED


def test_a_purge_does_not_make_the_reconciler_skip_new_messages(setup: Setup) -> None:
    setup.queues.remove(QUEUE, range(200, 251))  # the operator purged the newest
    new = setup.add(251)
    assert setup.run()["ended-failed"] == 1
    assert setup.status(new) is JobStatus.FAILED
    setup.queues.remove(QUEUE, range(1, 252))  # everything, then one more
    newer = setup.add(252)
    assert setup.run() == {"ended-failed": 1}
    assert setup.status(newer) is JobStatus.FAILED


def test_the_sweep_starts_again_after_reaching_the_frontier(setup: Setup) -> None:
    starts = []
    for _ in range(4):
        setup.run()
        starts.append(setup.reconciler.checkpoint(QUEUE).sweep_from)
    assert starts == [101, 201, 251, 101]  # 251: past the frontier, so from 1


def test_a_page_size_below_one_is_refused() -> None:
    wired = wire()
    with pytest.raises(ValueError, match="page_size must be at least 1, not 0"):
        DeadLetterReconciler(
            dead_letters=CountingDeadLetters(),
            documents=wired.documents,
            marker_container="ledgers",
            jobs=wired.services.jobs,
            endings=None,  # type: ignore[arg-type]  # never reached
            page_size=0,
        )
