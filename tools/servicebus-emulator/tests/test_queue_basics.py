"""Connect, send (single, list, batch), receive and settle on queues, sync and async."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
)

from emulator_sdk import Sdk, make_client
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator


async def drain(client: Sdk, queue: str) -> None:
    async with client.get_queue_receiver(
        queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as r:
        while await r.receive_messages(max_message_count=100, max_wait_time=0.5):
            pass


async def test_send_single_list_and_batch_then_complete(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("settle")
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage("one", application_properties={"n": 1}))
        await sender.send_messages([ServiceBusMessage("two"), ServiceBusMessage("three")])
        batch = await sender.create_message_batch()
        batch.add_message(ServiceBusMessage("four"))
        batch.add_message(ServiceBusMessage("five"))
        await sender.send_messages(batch)
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 5
    async with client.get_queue_receiver(queue) as receiver:
        received: list[ServiceBusReceivedMessage] = []
        while len(received) < 5:
            batch_received = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert batch_received, "broker delivered fewer messages than were sent"
            received += batch_received
        assert [str(m) for m in received] == ["one", "two", "three", "four", "five"]
        assert (received[0].application_properties or {})[b"n"] == 1
        sequence_numbers = [m.sequence_number for m in received if m.sequence_number is not None]
        assert len(sequence_numbers) == 5, "every delivered message has its sequence number"
        assert sequence_numbers == sorted(sequence_numbers)
        assert all(m.delivery_count == 0 and m.lock_token and m.locked_until_utc for m in received)
        assert all(m.enqueued_time_utc is not None for m in received)
        for message in received:
            await receiver.complete_message(message)
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 0


async def test_receive_and_delete_removes_on_delivery(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("rd")
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages([ServiceBusMessage(f"rd-{i}") for i in range(3)])
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    async with client.get_queue_receiver(queue, receive_mode=mode) as receiver:
        got = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
    assert sorted(str(m) for m in got) == ["rd-0", "rd-1", "rd-2"]
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 0


async def test_abandon_redelivers_with_incremented_delivery_count(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    queue = entity("abandon")
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage("retry-me"))
    async with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        (first,) = await receiver.receive_messages(max_wait_time=5)
        await receiver.abandon_message(first)
        (second,) = await receiver.receive_messages(max_wait_time=5)
        assert str(second) == "retry-me"
        assert (first.delivery_count, second.delivery_count) == (0, 1)
        assert second.sequence_number == first.sequence_number
        await receiver.complete_message(second)


async def test_dead_letter_with_reason_and_description(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("settle")
    await drain(client, queue)
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(
            ServiceBusMessage("poison", application_properties={"kind": "bad"})
        )
    async with client.get_queue_receiver(queue) as receiver:
        (message,) = await receiver.receive_messages(max_wait_time=5)
        await receiver.dead_letter_message(
            message, reason="InvalidPayload", error_description="not json"
        )
    counts = test_emulator.runtime_properties(queue)
    assert (counts["active_message_count"], counts["dead_letter_message_count"]) == (0, 1)
    async with client.get_queue_receiver(queue, sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive_messages(max_wait_time=5)
        assert str(dead) == "poison"
        assert dead.dead_letter_reason == "InvalidPayload"
        assert dead.dead_letter_error_description == "not json"
        assert dead.application_properties[b"kind"] == b"bad"
        await dlq.complete_message(dead)
    assert test_emulator.runtime_properties(queue)["dead_letter_message_count"] == 0


async def test_unknown_entity_is_an_error(client: Sdk) -> None:
    with pytest.raises(MessagingEntityNotFoundError):
        async with client.get_queue_sender("no-such-queue") as sender:
            await sender.send_messages(ServiceBusMessage("lost"))
    with pytest.raises(MessagingEntityNotFoundError):
        async with client.get_queue_receiver("no-such-queue") as receiver:
            await receiver.receive_messages(max_wait_time=1)


async def test_wrong_sas_key_is_refused(test_emulator: ServiceBusEmulator, mode: str) -> None:
    wrong_key = test_emulator.connection_string_with_key("not-the-key")
    wrong = make_client(mode, wrong_key, retry_total=0)
    async with wrong:
        with pytest.raises(ServiceBusAuthenticationError):
            async with wrong.get_queue_sender("settle-" + mode) as sender:
                await sender.send_messages(ServiceBusMessage("denied"))
    right = make_client(mode, test_emulator.connection_string, retry_total=0)
    async with right:
        async with right.get_queue_sender("settle-" + mode) as sender:
            await sender.send_messages(ServiceBusMessage("allowed"))
        async with right.get_queue_receiver("settle-" + mode) as receiver:
            (message,) = await receiver.receive_messages(max_wait_time=5)
            assert str(message) == "allowed"
            await receiver.complete_message(message)


async def test_oversized_message_is_refused(client: Sdk, entity: Callable[[str], str]) -> None:
    async with client.get_queue_sender(entity("settle")) as sender:
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * (300 * 1024)))
        await sender.send_messages(ServiceBusMessage(b"x" * (200 * 1024)))  # under 256 KB: fine
    delete = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    async with client.get_queue_receiver(entity("settle"), receive_mode=delete) as receiver:
        (large,) = await receiver.receive_messages(max_wait_time=5)
        assert len(b"".join(large.body)) == 200 * 1024
    async with client.get_queue_sender(entity("small")) as sender:
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * (70 * 1024)))


async def test_duplicate_message_id_is_dropped_within_window(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("basic")
    message_id = str(uuid.uuid4())
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(ServiceBusMessage("first", message_id=message_id))
        await sender.send_messages(ServiceBusMessage("again", message_id=message_id))
        await sender.send_messages(ServiceBusMessage("other", message_id=str(uuid.uuid4())))
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 2
    async with client.get_queue_receiver(queue) as receiver:
        got = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
        while len(got) < 2:
            more = await receiver.receive_messages(max_message_count=2 - len(got), max_wait_time=5)
            assert more
            got += more
        assert sorted(str(m) for m in got) == ["first", "other"]
        assert await receiver.peek_messages(max_message_count=5) == []
        for message in got:
            await receiver.complete_message(message)


async def test_prefetch_delivers_buffered_messages(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    queue = entity("prefetch")
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages([ServiceBusMessage(f"p{i}") for i in range(20)])
    async with client.get_queue_receiver(queue, prefetch_count=10) as receiver:
        received: list[ServiceBusReceivedMessage] = []
        while len(received) < 20:
            got = await receiver.receive_messages(max_message_count=10, max_wait_time=5)
            assert got
            for message in got:
                await receiver.complete_message(message)
            received += got
    assert [str(m) for m in received] == [f"p{i}" for i in range(20)]


async def test_closing_a_prefetching_receiver_returns_unread_messages(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("release")
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages([ServiceBusMessage(f"r{i}") for i in range(5)])
    async with client.get_queue_receiver(queue, prefetch_count=5) as receiver:
        (first,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        await receiver.complete_message(first)
    # the unread prefetched messages were released on close: available again, count unchanged
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 4
    async with client.get_queue_receiver(
        queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as r:
        rest = await r.receive_messages(max_message_count=4, max_wait_time=5)
        while len(rest) < 4:
            more = await r.receive_messages(max_message_count=4 - len(rest), max_wait_time=5)
            assert more
            rest += more
    assert str(first) == "r0"
    assert sorted(str(m) for m in rest) == ["r1", "r2", "r3", "r4"]
    assert [m.delivery_count for m in rest] == [0, 0, 0, 0]
