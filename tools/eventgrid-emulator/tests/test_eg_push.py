"""Push delivery to a local webhook: the handshake, the POST, retries and dead letters.

The webhook's port is only known at run time, so this module writes a namespace file of
its own (push subscriptions whose ``local.endpointUrl`` points at the receiver) and
starts an emulator for it through the same fixture factory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureKeyCredential
from azure.eventgrid import EventGridPublisherClient

from eg_testing import TIME_SCALE, Behaviour, DeadLetters, WebhookReceiver, make_event, scaled
from eventgrid_emulator.process import EventGridEmulator
from eventgrid_emulator.pytest_plugin import EventGridEmulatorFactory
from local_processes import Azurite

pytestmark = pytest.mark.eventgrid_emulator

ATTRIBUTES = [
    {"name": "X-Webhook-Secret", "type": "Static", "properties": {"value": "s3", "isSecret": True}},
    {"name": "X-Static", "type": "Static", "properties": {"value": "fixed", "isSecret": False}},
    {"name": "X-Subject", "type": "Dynamic", "properties": {"sourceField": "subject"}},
]
CASES: dict[str, tuple[Behaviour, int]] = {  # topic: webhook behaviour, maxDeliveryCount
    "push-ok": (Behaviour(), 10),
    "push-flaky": (Behaviour(statuses=[500, 500]), 10),
    "push-busy": (Behaviour(statuses=[503]), 10),
    "push-bad": (Behaviour(statuses=[400]), 10),
    "push-refuse": (Behaviour(refuse_handshakes=1), 10),
    "push-down": (Behaviour(default_status=500), 3),
}


def _push_topic(name: str, url: str, max_delivery_count: int) -> dict[str, Any]:
    push = {
        "maxDeliveryCount": max_delivery_count,
        "eventTimeToLive": "P1D",
        "destination": {
            "endpointType": "WebHook",
            "properties": {"deliveryAttributeMappings": ATTRIBUTES},
        },
    }
    subscription = {
        "name": "hook",
        "properties": {
            "eventDeliverySchema": "CloudEventSchemaV1_0",
            "deliveryConfiguration": {"deliveryMode": "Push", "push": push},
        },
        "local": {"deadLetterContainer": "test-deadletters", "endpointUrl": url},
    }
    return {"name": name, "eventSubscriptions": [subscription]}


@pytest.fixture(scope="module")
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def push_emulator(
    webhook: WebhookReceiver,
    eventgrid_emulator_factory: EventGridEmulatorFactory,
    azurite: Azurite,
    tmp_path_factory: pytest.TempPathFactory,
) -> EventGridEmulator:
    for topic, (behaviour, _) in CASES.items():
        webhook.behaviours[f"/{topic}"] = behaviour
    document = {
        "namespace": {"name": "inferbus-test", "accessKey": "push-key"},
        "topics": [
            _push_topic(topic, webhook.url(f"/{topic}"), count)
            for topic, (_, count) in CASES.items()
        ],
    }
    path: Path = tmp_path_factory.mktemp("push") / "namespace.json"
    path.write_text(json.dumps(document))
    return eventgrid_emulator_factory(
        path, storage=azurite.connection_string, time_scale=TIME_SCALE
    )


@pytest.fixture
def publish(push_emulator: EventGridEmulator) -> Iterator[Callable[[str, Any], None]]:
    clients: list[EventGridPublisherClient] = []

    def send(topic: str, events: Any) -> None:
        client = EventGridPublisherClient(
            push_emulator.endpoint,
            AzureKeyCredential(push_emulator.access_key),
            namespace_topic=topic,
        )
        clients.append(client)
        client.send(events)

    yield send
    for client in clients:
        client.close()


def test_handshake_then_structured_post_with_delivery_attributes(
    publish: Callable[[str, Any], None], webhook: WebhookReceiver
) -> None:
    events = [make_event(subject="orders/1", data={"n": 1}), make_event(subject="orders/2")]
    publish("push-ok", events)
    posts = webhook.wait_for_posts("/push-ok", 2)
    requests = webhook.requests("/push-ok")
    assert [r.method for r in requests] == ["OPTIONS", "POST", "POST"]  # validated once
    assert requests[0].headers["WebHook-Request-Origin"] == "eventgrid.azure.net"
    bodies = {json.loads(p.body)["id"]: (p, json.loads(p.body)) for p in posts}
    post, body = bodies[events[0].id]
    assert post.headers["Content-Type"] == "application/cloudevents+json; charset=utf-8"
    assert body["data"] == {"n": 1}
    assert (body["subject"], body["specversion"], body["type"]) == (
        "orders/1",
        "1.0",
        "com.example.Test",
    )
    assert post.headers["X-Webhook-Secret"] == "s3"
    assert post.headers["X-Static"] == "fixed"
    assert post.headers["X-Subject"] == "orders/1"
    assert bodies[events[1].id][0].headers["X-Subject"] == "orders/2"


def test_failures_are_retried_on_the_namespace_schedule(
    publish: Callable[[str, Any], None], webhook: WebhookReceiver
) -> None:
    publish("push-flaky", make_event())  # 500, 500, then 200
    publish("push-busy", make_event())  # 503, then 200
    flaky = webhook.wait_for_posts("/push-flaky", 3)
    assert flaky[1].at - flaky[0].at < scaled(10)  # the first retry is immediate
    assert flaky[2].at - flaky[1].at >= scaled(10) * 0.9  # then 10 s
    busy = webhook.wait_for_posts("/push-busy", 2)
    assert busy[1].at - busy[0].at >= scaled(30) * 0.9  # a 503 waits at least 30 s
    assert isinstance(json.loads(flaky[0].body), dict)  # one structured event per request


def test_400_is_not_retried_and_dead_letters(
    publish: Callable[[str, Any], None], webhook: WebhookReceiver, dead_letters: DeadLetters
) -> None:
    event = make_event(subject="bad/1")
    publish("push-bad", event)
    _, record = dead_letters.find("push-bad", "hook", event.id)
    assert len(webhook.requests("/push-bad", "POST")) == 1
    properties = record["deadLetterProperties"]
    assert properties["deadletterreason"] == "Undeliverable due to client error"
    assert (properties["deliveryresult"], properties["deliveryattempts"]) == ("BadRequest", 1)
    assert record["customDeliveryProperties"] == {"X-Static": "fixed", "X-Subject": "bad/1"}


def test_refused_handshake_means_no_delivery_until_it_passes(
    publish: Callable[[str, Any], None], webhook: WebhookReceiver
) -> None:
    publish("push-refuse", make_event())
    webhook.wait_for_posts("/push-refuse", 1)
    methods = [r.method for r in webhook.requests("/push-refuse")]
    assert methods == ["OPTIONS", "OPTIONS", "POST"]


def test_max_delivery_count_dead_letters_push_events(
    publish: Callable[[str, Any], None],
    webhook: WebhookReceiver,
    dead_letters: DeadLetters,
    push_emulator: EventGridEmulator,
) -> None:
    event = make_event()
    publish("push-down", event)  # 500 for ever, maxDeliveryCount 3
    _, record = dead_letters.find("push-down", "hook", event.id)
    assert len(webhook.requests("/push-down", "POST")) == 3
    properties = record["deadLetterProperties"]
    assert properties["deadletterreason"] == "Maximum delivery attempts was exceeded."
    assert (properties["deliveryresult"], properties["deliveryattempts"]) == (
        "InternalServerError",
        3,
    )
    counts = push_emulator.runtime("push-down", "hook")
    assert (counts["pending"], counts["deadLettered"], counts["validated"]) == (0, 1, True)
