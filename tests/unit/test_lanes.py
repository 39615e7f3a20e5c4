"""Lanes: which queue a request takes, and the ordered lane's batches keeping order."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from shared.adapters.in_memory import RecordingSender, RecordingSettler
from shared.contracts import InlineText, Priority, RequestMessage
from shared.lanes import Lane, LaneQueues, LaneRouter, lane_for, lane_of_message
from shared.messaging import request_envelope
from shared.processing.batches import HELD_BACK, BatchProcessor
from shared.processing.inbound import InboundMessage
from shared.processing.settlement import Settler
from shared.settings import Settings
from shared.tracing import continue_or_start

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def envelope(priority: Priority = Priority.NORMAL, document_id: str | None = None) -> object:
    request = RequestMessage(
        request_id="r1",
        tenant_id="t1",
        model="local-analyzer",
        input=InlineText(text="hello"),
        priority=priority,
        document_id=document_id,
    )
    return request_envelope(request, correlation_id="c", trace=continue_or_start(None), now=NOW)


@pytest.mark.parametrize(
    ("priority", "document_id", "lane"),
    [
        (Priority.LOW, None, Lane.STANDARD),
        (Priority.NORMAL, None, Lane.STANDARD),
        (Priority.HIGH, None, Lane.PRIORITY),
        (Priority.HIGH, "doc-1", Lane.ORDERED),
        (Priority.LOW, "doc-1", Lane.ORDERED),
    ],
)
def test_the_lane_follows_the_document_then_the_priority(
    priority: Priority, document_id: str | None, lane: Lane
) -> None:
    assert lane_for(priority, document_id) is lane
    message = envelope(priority, document_id)
    assert lane_of_message(message) is lane  # type: ignore[arg-type]


def test_a_document_id_becomes_the_session_id() -> None:
    message = envelope(document_id="doc-1")
    assert message.session_id == "doc-1"  # type: ignore[attr-defined]
    assert envelope().session_id is None  # type: ignore[attr-defined]


def test_the_router_sends_each_envelope_to_its_lane() -> None:
    senders = {lane: RecordingSender() for lane in Lane}
    router = LaneRouter(senders)
    for priority, document in [(Priority.HIGH, None), (Priority.LOW, "d"), (Priority.NORMAL, None)]:
        router.send(envelope(priority, document))  # type: ignore[arg-type]
    assert [len(senders[lane].sent) for lane in Lane] == [1, 1, 1]
    assert senders[Lane.ORDERED].sent[0].session_id == "d"


def test_the_router_needs_every_lane() -> None:
    with pytest.raises(ValueError, match="ordered"):
        LaneRouter({Lane.STANDARD: RecordingSender(), Lane.PRIORITY: RecordingSender()})


def test_queue_names_come_from_the_settings() -> None:
    queues = LaneQueues.from_settings(Settings.model_validate({"PriorityQueueName": "vip"}))
    assert [queues.queue(lane) for lane in Lane] == [
        "inference-requests",
        "vip",
        "inference-ordered",
    ]
    assert queues.lane("vip") is Lane.PRIORITY
    assert queues.unordered() == ("inference-requests", "vip")
    with pytest.raises(ValueError, match="not a request queue"):
        queues.lane("other")


# --- the ordered lane's batches ------------------------------------------------------------


@dataclass
class ScriptedProcessor:
    """Outcomes by message id; records when each message ran."""

    outcomes: dict[str, str] = field(default_factory=dict)
    runs: list[tuple[str, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> str:
        started = time.monotonic()
        time.sleep(0.02)
        outcome = self.outcomes.get(message.message_id or "", "completed")
        if outcome == "completed":
            settler.complete(message)
        else:
            settler.abandon(message)
        with self.lock:
            self.runs.append((message.message_id or "", started, time.monotonic()))
        return outcome


def inbound(message_id: str, session: str) -> InboundMessage:
    return InboundMessage(
        body=b"{}",
        message_id=message_id,
        sequence_number=None,
        delivery_count=1,
        enqueued_time=NOW,
        session_id=session,
    )


def test_the_ordered_lane_runs_each_session_in_order_and_sessions_in_parallel() -> None:
    scripted = ScriptedProcessor()
    batch = BatchProcessor(scripted, 4, 60, 600, ordered=True)  # type: ignore[arg-type]
    messages = [inbound(f"{s}{i}", s) for i in range(4) for s in "ab"]

    report = batch.process(messages, RecordingSettler())

    assert report.outcomes["completed"] == 8
    for session in "ab":
        runs = [run for run in scripted.runs if run[0].startswith(session)]
        assert [run[0] for run in runs] == [f"{session}{i}" for i in range(4)]
        assert all(before[2] <= after[1] for before, after in itertools.pairwise(runs))
    a_runs = [r for r in scripted.runs if r[0].startswith("a")]
    b_runs = [r for r in scripted.runs if r[0].startswith("b")]
    assert a_runs[0][1] < b_runs[-1][2], "the sessions ran at the same time"
    assert b_runs[0][1] < a_runs[-1][2], "the sessions ran at the same time"


def test_an_abandoned_step_holds_back_the_rest_of_its_session_only() -> None:
    scripted = ScriptedProcessor(outcomes={"a1": "abandoned"})
    batch = BatchProcessor(scripted, 4, 60, 600, ordered=True)  # type: ignore[arg-type]
    settler = RecordingSettler()
    messages = [inbound(f"{s}{i}", s) for i in range(4) for s in "ab"]

    report = batch.process(messages, settler)

    assert sorted(run[0] for run in scripted.runs) == ["a0", "a1", "b0", "b1", "b2", "b3"]
    assert report.outcomes[HELD_BACK] == 2
    abandoned = [message_id for action, message_id, *_ in settler.actions if action == "abandon"]
    assert abandoned == ["a1", "a2", "a3"]
