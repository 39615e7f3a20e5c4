"""Lanes: which queue a request takes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import cast

import pytest

from shared.adapters.in_memory import RecordingSender
from shared.contracts import InlineText, Priority, RequestMessage
from shared.lanes import Lane, LaneQueues, LaneRouter, lane_for, lane_of_message
from shared.messaging import OutgoingMessage, request_envelope
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


def test_the_router_schedules_on_the_lane_and_each_queue_cancels_its_own() -> None:
    senders = {lane: RecordingSender(entity=lane.value) for lane in Lane}
    router = LaneRouter(senders)
    due = datetime(2026, 12, 5, 12, tzinfo=UTC)
    plain, document = (cast(OutgoingMessage, envelope(document_id=d)) for d in (None, "d"))
    standard = router.schedule(replace(plain, scheduled_enqueue_time=due))
    ordered = router.schedule(replace(document, scheduled_enqueue_time=due))
    assert (standard.entity, ordered.entity) == ("standard", "ordered")
    router.cancel([standard, ordered])
    assert senders[Lane.STANDARD].cancelled == [standard.sequence_number]
    assert senders[Lane.ORDERED].cancelled == [ordered.sequence_number]
    assert senders[Lane.PRIORITY].cancelled == []


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
    with pytest.raises(ValueError, match="not a request queue"):
        queues.lane("other")
