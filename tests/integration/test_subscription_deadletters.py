"""``sb-deadletters --subscription`` against a results-topic subscription's dead-letter queue
in the emulator: list, show (redacted), replay to the topic (once) and purge."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from shared.processing.inbound import normalise_properties
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.integration.test_servicebus_deadletters import cli
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

TOPIC = "inference-results"
SUBSCRIPTIONS = ("high-priority", "human-review", "audit", "model-local-analyzer")
SECRET = "S3CRET-do-not-print"


@pytest.fixture
def bus(
    servicebus_emulator: ServiceBusEmulator, install_services: InstallServices
) -> Iterator[ServiceBusClient]:
    """The app's services on the emulator, and a client whose subscriptions are empty."""
    install_services()
    with connect(servicebus_emulator) as client:
        for name in SUBSCRIPTIONS:
            drain(client, topic=TOPIC, subscription=name)
            drain(client, topic=TOPIC, subscription=name, sub_queue="deadletter")
        yield client


def dead_lettered_result(bus: ServiceBusClient, subscription: str = "high-priority") -> str:
    """A results message sent to the topic and dead-lettered by ``subscription``'s consumer;
    the other subscriptions' copies are consumed. Its message id."""
    message_id = f"evt-{uuid.uuid4()}"
    body = {"type": "com.inferbus.InferenceCompleted", "data": {"result_uri": "https://a/b?sig=x"}}
    properties = {"priority": "high", "model_name": "other-model", "tenant": "contoso"}
    with bus.get_topic_sender(TOPIC) as sender:
        sender.send_messages(
            ServiceBusMessage(
                json.dumps(body),
                message_id=message_id,
                application_properties=properties,  # type: ignore[arg-type]
                content_type="application/json",
            )
        )
    with bus.get_subscription_receiver(TOPIC, subscription) as receiver:
        [message] = receiver.receive_messages(1, max_wait_time=5)
        receiver.dead_letter_message(
            message, reason="ConsumerRejected", error_description=f"token sig={SECRET} refused"
        )
    assert [str(m.message_id) for m in drain(bus, topic=TOPIC, subscription="audit")] == [
        message_id
    ]
    return message_id


def test_a_subscriptions_dead_letters_are_listed_shown_replayed_once_and_purged(
    bus: ServiceBusClient, capsys: pytest.CaptureFixture[str]
) -> None:
    message_id = dead_lettered_result(bus)
    entity = f"{TOPIC}/subscriptions/high-priority"

    code, out = cli(capsys, "list", "--subscription", "high-priority", "--json")
    assert code == 0
    listing = json.loads(out)
    assert listing["queues"] == [entity]
    [listed] = listing["messages"]
    assert (listed["message_id"], listed["reason"]) == (message_id, "ConsumerRejected")
    assert SECRET not in out

    code, out = cli(capsys, "show", message_id, "--queue", entity)
    assert code == 0
    assert "reason:              ConsumerRejected" in out
    assert SECRET not in out

    code, out = cli(capsys, "replay", "--subscription", "high-priority", "--all", "--yes")
    assert code == 0, out
    assert "every subscription whose filter admits a copy receives it" in out
    copy_id = f"{message_id}:replay:1"
    assert f"replayed as {copy_id} to {TOPIC} for subscription high-priority" in out
    [copy] = drain(bus, topic=TOPIC, subscription="high-priority")
    properties = normalise_properties(copy.application_properties)
    assert copy.message_id == copy_id
    assert properties["replay_of"] == message_id
    assert properties["replay_subscription"] == "high-priority"
    assert (properties["priority"], properties["tenant"]) == ("high", "contoso")
    assert "DeadLetterReason" not in properties
    # The filters route by the message's own properties: audit (1=1) got the copy too.
    assert [m.message_id for m in drain(bus, topic=TOPIC, subscription="audit")] == [copy_id]
    assert drain(bus, topic=TOPIC, subscription="human-review") == []

    code, out = cli(capsys, "replay", "--subscription", "high-priority", "--all", "--yes")
    assert code == 0
    assert f"already replayed as {copy_id}" in out
    assert drain(bus, topic=TOPIC, subscription="high-priority") == []

    code, out = cli(capsys, "purge", "--subscription", "high-priority", "--all", "--yes")
    assert code == 0
    assert "removed 1 of 1 dead-lettered messages" in out
    with bus.get_subscription_receiver(TOPIC, "high-priority", sub_queue="deadletter") as dlq:
        assert dlq.peek_messages(10) == []


def test_unknown_subscriptions_and_other_topics_are_refused(
    bus: ServiceBusClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = cli(capsys, "list", "--subscription", "no-such-subscription")
    assert code == 2
    assert "the entity does not exist" in out
    code, out = cli(capsys, "list", "--queue", "other-topic/subscriptions/audit")
    assert code == 2
    assert "is not a subscription of the results topic" in out
