"""Locks, deferral, scheduling, TTL and max delivery count, sync and async."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusReceiveMode
from azure.servicebus.exceptions import MessageLockLostError, MessageNotFoundError

from emulator_sdk import Sdk, make_client
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def send(client: Sdk, queue: str, *messages: ServiceBusMessage) -> None:
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(list(messages))


async def test_lock_expiry_redelivers_and_late_settlement_fails(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    queue = entity("locks")  # LockDuration PT1S
    await send(client, queue, ServiceBusMessage("slow"))
    async with client.get_queue_receiver(queue) as receiver:
        (first,) = await receiver.receive_messages(max_wait_time=5)
        await asyncio.sleep(1.3)
        with pytest.raises(MessageLockLostError):
            await receiver.complete_message(first)
        (again,) = await receiver.receive_messages(max_wait_time=5)
        assert (str(again), again.delivery_count) == ("slow", 1)
        await receiver.complete_message(again)


async def test_renew_lock_keeps_the_message(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("locks")
    await send(client, queue, ServiceBusMessage("renewed"))
    async with client.get_queue_receiver(queue) as receiver:
        (message,) = await receiver.receive_messages(max_wait_time=5)
        first_until = message.locked_until_utc
        for _ in range(3):
            await asyncio.sleep(0.5)
            await receiver.renew_message_lock(message)
        assert message.locked_until_utc > first_until
        await receiver.complete_message(message)  # 1.5 s after receipt: only valid if renewed
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 0


async def test_max_delivery_count_dead_letters(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("maxdelivery")  # MaxDeliveryCount 2
    await send(client, queue, ServiceBusMessage("cursed"))
    async with client.get_queue_receiver(queue) as receiver:
        for _ in range(2):
            (message,) = await receiver.receive_messages(max_wait_time=5)
            await receiver.abandon_message(message)
    async with client.get_queue_receiver(queue, sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive_messages(max_wait_time=5)
        assert str(dead) == "cursed"
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
        assert dead.delivery_count == 2
        await dlq.complete_message(dead)
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 0


async def test_ttl_expiry_dead_letters_or_drops_per_entity(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    await send(client, entity("ttl-dl"), ServiceBusMessage("stale"))  # entity TTL PT1S
    short_lived = ServiceBusMessage("short", time_to_live=dt.timedelta(seconds=0.5))
    await send(client, entity("ttl-drop"), ServiceBusMessage("stale"), short_lived)
    await asyncio.sleep(1.3)
    dead_lettering = test_emulator.runtime_properties(entity("ttl-dl"))
    dropping = test_emulator.runtime_properties(entity("ttl-drop"))
    assert (
        dead_lettering["active_message_count"],
        dead_lettering["dead_letter_message_count"],
    ) == (0, 1)
    assert (dropping["active_message_count"], dropping["dead_letter_message_count"]) == (0, 0)
    async with client.get_queue_receiver(entity("ttl-dl"), sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive_messages(max_wait_time=5)
        assert dead.dead_letter_reason == "TTLExpiredException"
        await dlq.complete_message(dead)


async def test_defer_then_receive_by_sequence_number_and_settle_via_management(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("defer")
    await send(client, queue, ServiceBusMessage("later"), ServiceBusMessage("also later"))
    async with client.get_queue_receiver(queue) as receiver:
        messages = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
        assert len(messages) == 2
        for message in messages:
            await receiver.defer_message(message)
        assert test_emulator.runtime_properties(queue)["deferred_message_count"] == 2
        assert await receiver.receive_messages(max_wait_time=1) == []
        numbers = [m.sequence_number for m in messages]
        deferred = await receiver.receive_deferred_messages(numbers)
        assert [str(m) for m in deferred] == ["later", "also later"]
        assert all(m.state == ServiceBusMessageState.DEFERRED for m in deferred)
        await receiver.complete_message(deferred[0])  # update-disposition over $management
        await receiver.dead_letter_message(
            deferred[1], reason="Expired", error_description="gave up"
        )
    counts = test_emulator.runtime_properties(queue)
    assert counts["deferred_message_count"] == 0
    assert counts["dead_letter_message_count"] == 1


async def test_a_missing_number_takes_no_deferred_message_with_it(
    entity: Callable[[str], str], test_emulator: ServiceBusEmulator, mode: str
) -> None:
    """(One try for the failing request: the SDK's retries would only ask again.)"""
    queue = entity("defer")
    one_try = make_client(mode, test_emulator.connection_string, retry_total=0)
    async with one_try:
        await send(one_try, queue, ServiceBusMessage("kept"))
        await take_back_after_a_miss(one_try, queue)


async def take_back_after_a_miss(client: Sdk, queue: str) -> None:
    async with client.get_queue_receiver(queue) as receiver:
        [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        await receiver.defer_message(message)
        with pytest.raises(MessageNotFoundError):
            await receiver.receive_deferred_messages([message.sequence_number, 987_654_321])
        # The failed request locked nothing: the deferred message is still there to take.
        [again] = await receiver.receive_deferred_messages([message.sequence_number])
        assert str(again) == "kept"
        await receiver.complete_message(again)


async def test_a_request_failing_part_way_leaves_every_found_message_deferred_and_free(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator, mode: str
) -> None:
    """Found, missing, found: the request fails on the missing number, and neither found
    message stays locked (another receiver takes both at once) or is deleted, in either
    receive mode, as Service Bus answers a receive by sequence number all or nothing.
    (The failing requests go through a client with one try: the SDK would ask three more
    times, 11 s in all, for the same answer.)"""
    queue = entity("defer")
    await send(client, queue, ServiceBusMessage("first"), ServiceBusMessage("second"))
    async with make_client(mode, test_emulator.connection_string, retry_total=0) as one_try:
        first, second = await refuse_part_way(one_try, test_emulator, queue)
    async with client.get_queue_receiver(queue) as other:
        taken = await other.receive_deferred_messages([first, second])
        assert sorted(str(m) for m in taken) == ["first", "second"]
        for message in taken:
            await other.complete_message(message)
    assert test_emulator.runtime_properties(queue)["deferred_message_count"] == 0


async def refuse_part_way(
    client: Sdk, test_emulator: ServiceBusEmulator, queue: str
) -> tuple[int, int]:
    """Defer both messages, then ask for each with a missing number beside it, in both
    receive modes; the two sequence numbers."""
    async with client.get_queue_receiver(queue) as receiver:
        messages = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
        assert len(messages) == 2
        for message in messages:
            await receiver.defer_message(message)
        first, second = (m.sequence_number or 0 for m in messages)
        with pytest.raises(MessageNotFoundError):
            await receiver.receive_deferred_messages([first, 987_654_323, second])
    deleting = client.get_queue_receiver(
        queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    )
    async with deleting:
        with pytest.raises(MessageNotFoundError):
            await deleting.receive_deferred_messages([second, 987_654_324])
    assert test_emulator.runtime_properties(queue)["deferred_message_count"] == 2
    return first, second


async def test_a_due_scheduled_message_joins_the_tail_and_an_abandoned_one_keeps_its_place(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    """Service Bus moves a scheduled message into the queue when it is due, behind what
    was sent meanwhile, though its sequence number is older; a message given back (an
    abandon) is delivered again before the ones behind it."""
    queue = entity("schedule-order")
    async with client.get_queue_sender(queue) as sender:
        soon = utcnow() + dt.timedelta(seconds=1)
        (scheduled,) = await sender.schedule_messages(ServiceBusMessage("scheduled"), soon)
        await sender.send_messages([ServiceBusMessage("sent after"), ServiceBusMessage("last")])
    await asyncio.sleep(max(0.0, (soon - utcnow()).total_seconds()) + 0.5)
    async with client.get_queue_receiver(queue) as receiver:
        (first,) = await receiver.receive_messages(max_wait_time=5)
        assert str(first) == "sent after"
        assert first.sequence_number > scheduled
        await receiver.abandon_message(first)
        received: list[str] = []
        while len(received) < 3:
            batch = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
            assert batch, f"only {received} came back"
            for message in batch:
                received.append(str(message))
                await receiver.complete_message(message)
    assert received == ["sent after", "last", "scheduled"]


async def test_schedule_and_cancel(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("schedule")
    async with client.get_queue_sender(queue) as sender:
        soon = utcnow() + dt.timedelta(seconds=2)
        (kept,) = await sender.schedule_messages(ServiceBusMessage("on time"), soon)
        (cancelled,) = await sender.schedule_messages(ServiceBusMessage("never"), soon)
        assert cancelled > kept
        assert test_emulator.runtime_properties(queue)["scheduled_message_count"] == 2
        await sender.cancel_scheduled_messages(cancelled)
        assert test_emulator.runtime_properties(queue)["scheduled_message_count"] == 1
        # A number no longer scheduled refuses the whole call, as Service Bus does.
        later = utcnow() + dt.timedelta(hours=1)
        (held,) = await sender.schedule_messages(ServiceBusMessage("later"), later)
        with pytest.raises(MessageNotFoundError, match=rf"sequence numbers: {cancelled}\b"):
            await sender.cancel_scheduled_messages([held, cancelled])
        await sender.cancel_scheduled_messages(held)  # it was kept: all or none
    async with client.get_queue_receiver(queue) as receiver:
        peeked = await receiver.peek_messages(max_message_count=5)
        assert [p.sequence_number for p in peeked] == [kept]
        if utcnow() < soon - dt.timedelta(milliseconds=100):  # a slow machine may be past it
            assert peeked[0].state == ServiceBusMessageState.SCHEDULED
        (message,) = await receiver.receive_messages(max_wait_time=5)
        assert str(message) == "on time"
        assert message.scheduled_enqueue_time_utc is not None
        assert utcnow() >= soon - dt.timedelta(milliseconds=100)
        await receiver.complete_message(message)
    counts = test_emulator.runtime_properties(queue)
    assert (counts["active_message_count"], counts["scheduled_message_count"]) == (0, 0)


async def test_peek_does_not_lock_or_remove(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    queue = entity("peek")
    await send(client, queue, *[ServiceBusMessage(f"m{i}") for i in range(4)])
    async with client.get_queue_receiver(queue) as receiver:
        first_two = await receiver.peek_messages(max_message_count=2)
        rest = await receiver.peek_messages(max_message_count=10)
        assert [str(m) for m in first_two] == ["m0", "m1"]
        assert [str(m) for m in rest] == ["m2", "m3"]  # the SDK continues after the last peeked
        from_start = await receiver.peek_messages(
            max_message_count=1, sequence_number=first_two[0].sequence_number
        )
        assert str(from_start[0]) == "m0"
        assert from_start[0].locked_until_utc is None, "a peeked message holds no lock"
    assert test_emulator.runtime_properties(queue)["active_message_count"] == 4
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    async with client.get_queue_receiver(queue, receive_mode=mode) as receiver:
        assert len(await receiver.receive_messages(max_message_count=4, max_wait_time=5)) == 4


async def test_auto_forward_moves_messages(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    await send(client, entity("fwd-src"), ServiceBusMessage("moved"))
    assert test_emulator.runtime_properties(entity("fwd-src"))["active_message_count"] == 0
    async with client.get_queue_receiver(entity("fwd-dst")) as receiver:
        (message,) = await receiver.receive_messages(max_wait_time=5)
        assert str(message) == "moved"
        await receiver.complete_message(message)


async def test_dead_letter_without_reason_leaves_reason_and_description_absent(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    queue = entity("deadletter")
    await send(client, queue, ServiceBusMessage("no reason given"))
    async with client.get_queue_receiver(queue) as receiver:
        (message,) = await receiver.receive_messages(max_wait_time=5)
        await receiver.dead_letter_message(message)  # the SDK sends AMQP null for both
    async with client.get_queue_receiver(queue, sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive_messages(max_wait_time=5)
        assert str(dead) == "no reason given"
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == (None, None)
        assert b"DeadLetterReason" not in (dead.application_properties or {})
        await dlq.complete_message(dead)
