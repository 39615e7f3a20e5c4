"""Publishing and receiving through the unmodified SDK: modes, fan-out, waits, limits, auth."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from azure.core import PipelineClient
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
)
from azure.core.messaging import CloudEvent
from azure.core.rest import HttpRequest, HttpResponse
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient
from azure.eventgrid.models._models import CloudEvent as WireCloudEvent

from eg_testing import make_event, scaled, unique_id
from eventgrid_emulator.process import EventGridEmulator

pytestmark = pytest.mark.eventgrid_emulator
Publisher = Callable[..., EventGridPublisherClient]
Consumer = Callable[..., EventGridConsumerClient]


def test_batch_publish_fans_out_and_keeps_every_attribute(
    publisher: Publisher, consumer: Consumer
) -> None:
    events = [
        make_event(subject="orders/1", data={"n": 1}, extensions={"tenant": "contoso"}),
        make_event(data=b"\x00\x01binary", datacontenttype="application/octet-stream"),
        make_event(data="plain text", datacontenttype="text/plain"),
    ]
    publisher("publish").send(events)  # namespace mode: application/cloudevents-batch+json
    for subscription in ("q", "q2"):
        received = consumer("publish", subscription).receive(max_events=10, max_wait_time=10)
        by_id = {r.event.id: r for r in received}
        assert set(by_id) == {e.id for e in events}
        first = by_id[events[0].id]
        assert first.broker_properties.delivery_count == 1
        assert (first.event.subject, first.event.data) == ("orders/1", {"n": 1})
        # The SDK types the event as its wire model and hands azure-core's CloudEvent.
        assert isinstance(first.event, CloudEvent)
        assert first.event.extensions == {"tenant": "contoso"}
        assert first.event.time == events[0].time
        assert by_id[events[1].id].event.data == b"\x00\x01binary"
        assert by_id[events[2].id].event.data == "plain text"


def test_single_and_binary_mode_publish(publisher: Publisher, consumer: Consumer) -> None:
    client = publisher("binary")
    single = WireCloudEvent(
        id=unique_id(), source="/tests", type="com.example.Single", specversion="1.0", data={"a": 1}
    )
    client._send("binary", single)  # the SDK's structured application/cloudevents+json operation
    binary_id = unique_id()
    request = HttpRequest(
        "POST",
        "/topics/binary:publish",
        params={"api-version": "2024-06-01"},
        headers={
            "ce-specversion": "1.0",
            "ce-id": binary_id,
            "ce-source": "/tests",
            "ce-type": "com.example.Binary",
            "ce-subject": "binary/1",
            "Content-Type": "application/json",
        },
        content=b'{"b": 2}',
    )
    assert client.send_request(request).status_code == 200
    received = consumer("binary").receive(max_events=10, max_wait_time=10)
    events = {r.event.id: r.event for r in received}
    assert events[single["id"]].data == {"a": 1}
    assert events[binary_id].subject == "binary/1"
    assert events[binary_id].data == {"b": 2}
    assert events[binary_id].datacontenttype == "application/json"


def test_receive_returns_at_most_max_events(publisher: Publisher, consumer: Consumer) -> None:
    publisher("receive-limits").send([make_event() for _ in range(5)])
    receiver = consumer("receive-limits")
    first = receiver.receive(max_events=3, max_wait_time=10)
    second = receiver.receive(max_events=10, max_wait_time=10)
    assert (len(first), len(second)) == (3, 2)
    tokens = [r.broker_properties.lock_token for r in first + second]
    assert receiver.acknowledge(lock_tokens=tokens).succeeded_lock_tokens == tokens
    assert receiver.receive(max_wait_time=10) == []


def test_empty_receive_waits_max_wait_time(consumer: Consumer) -> None:
    started = time.monotonic()
    assert consumer("receive-empty").receive(max_events=1, max_wait_time=10) == []
    assert scaled(10) * 0.9 <= time.monotonic() - started < scaled(10) + 1.0


def test_waiting_receive_returns_when_an_event_arrives(
    publisher: Publisher, consumer: Consumer
) -> None:
    event = make_event()
    timer = threading.Timer(0.4, lambda: publisher("receive-wait").send(event))
    started = time.monotonic()
    timer.start()
    received = consumer("receive-wait").receive(max_events=5, max_wait_time=120)  # 6 s here
    elapsed = time.monotonic() - started
    timer.join()
    assert [r.event.id for r in received] == [event.id]
    assert 0.35 <= elapsed < 2.0


@pytest.mark.parametrize(
    ("max_events", "max_wait_time", "parameter"),
    [(0, 10, "maxEvents"), (101, 10, "maxEvents"), (1, 9, "maxWaitTime"), (1, 121, "maxWaitTime")],
)
def test_out_of_range_receive_parameters_are_refused(
    consumer: Consumer, max_events: int, max_wait_time: int, parameter: str
) -> None:
    with pytest.raises(HttpResponseError) as raised:
        consumer("receive-empty").receive(max_events=max_events, max_wait_time=max_wait_time)
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "ArgumentInvalid"
    assert parameter in str(raised.value)


def test_invalid_events_are_refused_with_400(publisher: Publisher) -> None:
    with pytest.raises(HttpResponseError) as raised:
        publisher("publish").send({"id": unique_id(), "specversion": "1.0", "type": "no.source"})
    assert raised.value.status_code == 400
    assert "source" in str(raised.value)
    with pytest.raises(HttpResponseError) as raised:
        publisher("publish").send(
            {"id": unique_id(), "source": "/t", "type": "t", "specversion": "1.0", "Bad-Name": 1}
        )
    assert raised.value.status_code == 400


def test_unknown_topic_and_subscription_are_404(publisher: Publisher, consumer: Consumer) -> None:
    with pytest.raises(ResourceNotFoundError):
        publisher("no-such-topic").send(make_event())
    with pytest.raises(ResourceNotFoundError):
        consumer("publish", "no-such-subscription").receive(max_wait_time=10)


def test_wrong_or_missing_key_is_401(
    test_emulator: EventGridEmulator, publisher: Publisher, consumer: Consumer
) -> None:
    with pytest.raises(ClientAuthenticationError):
        publisher("publish", key="not-the-key").send(make_event())
    with pytest.raises(ClientAuthenticationError):
        consumer("publish", key="not-the-key").receive(max_wait_time=10)
    anonymous = HttpRequest(
        "POST", f"{test_emulator.endpoint}/topics/publish:publish?api-version=2024-06-01"
    )
    client: PipelineClient[HttpRequest, HttpResponse] = PipelineClient(test_emulator.endpoint)
    with client as bare:  # azure-core without a credential
        response = bare.send_request(anonymous)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "Unauthorized"
