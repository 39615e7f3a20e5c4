"""Service Bus triggers: batch settled by the function, single messages auto-completed."""

from __future__ import annotations

import uuid

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue

from hostproc import SampleHost, wait_for
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.integration


def _dead_letters(
    emulator: ServiceBusEmulator,
    queue: str | None = None,
    topic: str | None = None,
    subscription: str | None = None,
) -> list[tuple[str, str | None, str | None]]:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        if queue:
            receiver = client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        else:
            receiver = client.get_subscription_receiver(
                str(topic), str(subscription), sub_queue=ServiceBusSubQueue.DEAD_LETTER
            )
        with receiver:
            found = []
            for message in receiver.peek_messages(max_message_count=100):
                found.append(
                    (
                        str(message),
                        message.dead_letter_reason,
                        message.dead_letter_error_description,
                    )
                )
            return found


def test_batch_function_settles_each_message(
    sample_host: SampleHost, host_emulator: ServiceBusEmulator
) -> None:
    tag = uuid.uuid4().hex[:8]
    bodies = [f"complete-{tag}-1", f"deadletter-{tag}", f"leave-{tag}", f"complete-{tag}-2"]
    client = ServiceBusClient.from_connection_string(host_emulator.connection_string)
    with client, client.get_queue_sender("host-batch") as sender:
        sender.send_messages([ServiceBusMessage(body) for body in bodies])

    def seen() -> list[str]:
        return [b for r in sample_host.records("settle_batch") for b in r["bodies"] if tag in b]

    wait_for(lambda: set(bodies) <= set(seen()), what="the batch")
    # minMessageBatchSize 3 with a 2 s maxBatchWaitTime: the four arrive together.
    assert any(set(bodies) <= set(r["bodies"]) for r in sample_host.records("settle_batch"))
    dead = [d for d in _dead_letters(host_emulator, queue="host-batch") if tag in d[0]]
    assert dead == [(f"deadletter-{tag}", "SampleReason", f"deadletter-{tag}")]
    # The unsettled message comes back after its 5 s lock expires (never abandoned early),
    # the completed ones never do.
    wait_for(lambda: seen().count(f"leave-{tag}") >= 2, timeout=60, what="lock expiry")
    assert seen().count(f"complete-{tag}-1") == 1
    assert seen().count(f"complete-{tag}-2") == 1


def test_single_message_function_auto_completes_and_abandons_on_failure(
    sample_host: SampleHost, host_emulator: ServiceBusEmulator
) -> None:
    tag = uuid.uuid4().hex[:8]
    client = ServiceBusClient.from_connection_string(host_emulator.connection_string)
    with client, client.get_topic_sender("host-events") as sender:
        sender.send_messages(
            [
                ServiceBusMessage(f"ok-{tag}", application_properties={"tenant": "contoso"}),
                ServiceBusMessage(f"boom-{tag}"),
            ]
        )

    def bodies() -> list[str]:
        return [r["body"] for r in sample_host.records("handle_single") if tag in r["body"]]

    # Abandoned on every failure until maxDeliveryCount (3) dead-letters it.
    wait_for(lambda: bodies().count(f"boom-{tag}") >= 3, what="redeliveries")
    dead = wait_for(
        lambda: [
            d
            for d in _dead_letters(host_emulator, topic="host-events", subscription="all")
            if tag in d[0]
        ],
        what="dead-lettered message",
    )
    assert dead[0][:2] == (f"boom-{tag}", "MaxDeliveryCountExceeded")
    ok = [r for r in sample_host.records("handle_single") if r["body"] == f"ok-{tag}"]
    assert len(ok) == 1
    assert ok[0]["properties"] == {"tenant": "contoso"}
    counts = host_emulator.runtime_properties("host-events/Subscriptions/all")
    assert counts["active_message_count"] == 0


def test_session_trigger_keeps_order_within_each_session(
    sample_host: SampleHost, host_emulator: ServiceBusEmulator
) -> None:
    tag = uuid.uuid4().hex[:8]
    sessions = [f"{tag}-a", f"{tag}-b"]
    client = ServiceBusClient.from_connection_string(host_emulator.connection_string)
    with client, client.get_queue_sender("host-sessions") as sender:
        sender.send_messages(
            [
                ServiceBusMessage(f"{session}-{index}", session_id=session)
                for index in range(5)
                for session in sessions
            ]
        )

    def bodies(session: str) -> list[str]:
        return [r["body"] for r in sample_host.records("ordered") if r["session"] == session]

    wait_for(lambda: all(len(bodies(s)) == 5 for s in sessions), what="both sessions")
    for session in sessions:
        assert bodies(session) == [f"{session}-{index}" for index in range(5)]
