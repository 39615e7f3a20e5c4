"""Subscription filters: what each subscription receives, and the operators' edge rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient

from eg_testing import make_event
from eventgrid_emulator.filters import parse_filter

pytestmark = pytest.mark.eventgrid_emulator
Publisher = Callable[..., EventGridPublisherClient]
Consumer = Callable[..., EventGridConsumerClient]

WANTED = "com.example.Wanted"
EVENTS = {
    "wanted-order": make_event(WANTED, subject="orders/42", data={"status": "new"}),
    "other-invoice-pdf": make_event(subject="Invoices/7.PDF", data={"status": "cancelled"}),
    "wanted-urgent-small": make_event(
        WANTED, data={"urgent": True, "size": 3}, extensions={"tenant": "Contoso"}
    ),
    "wanted-urgent-big": make_event(
        WANTED, data={"urgent": True, "size": 30}, extensions={"tenant": "contoso"}
    ),
    "wanted-calm-small": make_event(
        WANTED, data={"urgent": False, "size": 3}, extensions={"tenant": "contoso"}
    ),
    "no-subject-no-status": make_event(data={"other": 1}),
}
EXPECTED = {
    # includedEventTypes
    "by-type": {"wanted-order", "wanted-urgent-small", "wanted-urgent-big", "wanted-calm-small"},
    # StringBeginsWith subject ["orders/", "INVOICES/"]: case-insensitive, values OR-ed
    "subject-begins": {"wanted-order", "other-invoice-pdf"},
    # StringEndsWith subject [".pdf"]
    "subject-ends": {"other-invoice-pdf"},
    # event type AND BoolEquals data.urgent AND NumberInRange data.size AND StringIn tenant
    "data-and-extension": {"wanted-urgent-small"},
    # StringNotIn data.status ["cancelled"]: a missing key matches
    "not-in": {
        "wanted-order",
        "wanted-urgent-small",
        "wanted-urgent-big",
        "wanted-calm-small",
        "no-subject-no-status",
    },
}


def test_each_subscription_gets_what_its_filters_select(
    publisher: Publisher, consumer: Consumer
) -> None:
    publisher("filters").send(list(EVENTS.values()))
    names = {event.id: name for name, event in EVENTS.items()}
    for subscription, expected in EXPECTED.items():
        receiver = consumer("filters", subscription)
        received = receiver.receive(max_events=100, max_wait_time=10)
        assert {names[r.event.id] for r in received} == expected, subscription
        receiver.acknowledge(lock_tokens=[r.broker_properties.lock_token for r in received])


@pytest.mark.parametrize(
    ("raw", "event", "expected"),
    [
        # An array key matches element by element; other types in it are ignored.
        (
            {"operatorType": "NumberIn", "key": "data.n", "values": [2]},
            {"data": {"n": [1, "2", 2]}},
            True,
        ),
        (
            {"operatorType": "NumberNotIn", "key": "data.n", "values": [2]},
            {"data": {"n": [1, 2]}},
            False,
        ),
        # A missing key: only the NotIn operators and IsNullOrUndefined match.
        ({"operatorType": "StringNotIn", "key": "data.s", "values": ["a"]}, {"data": {}}, True),
        ({"operatorType": "StringNotContains", "key": "data.s", "values": ["a"]}, {}, False),
        ({"operatorType": "IsNullOrUndefined", "key": "data.s"}, {"data": {"s": None}}, True),
        ({"operatorType": "IsNotNull", "key": "data.s"}, {"data": {"s": 0}}, True),
        # Strings ignore case; attribute names too; eventtype is type.
        (
            {"operatorType": "StringContains", "key": "Subject", "values": ["ORD"]},
            {"subject": "orders"},
            True,
        ),
        (
            {"operatorType": "StringIn", "key": "eventtype", "values": ["a.b"]},
            {"type": "A.B"},
            True,
        ),
        (
            {"operatorType": "NumberGreaterThanOrEquals", "key": "data.n", "value": 5},
            {"data": {"n": 5}},
            True,
        ),
        (
            {"operatorType": "NumberNotInRange", "key": "data.n", "values": [[1, 5]]},
            {"data": {"n": 6}},
            True,
        ),
        (
            {"operatorType": "BoolEquals", "key": "data.b", "value": False},
            {"data": {"b": 0}},
            False,
        ),
    ],
)
def test_operator_rules(raw: dict[str, object], event: dict[str, object], expected: bool) -> None:
    """The documented rules of advanced filters, on the filter module itself (no emulator)."""
    assert parse_filter([], [raw]).matches(event) is expected
