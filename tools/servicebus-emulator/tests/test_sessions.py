"""Sessions: FIFO, exclusive locks, NEXT_AVAILABLE, lock renewal and expiry, state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    SessionCannotBeLockedError,
)

from emulator_sdk import Sdk, make_client
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator


async def send(client: Sdk, queue: str, *messages: ServiceBusMessage) -> None:
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages(list(messages))


async def list_sessions(client: Sdk, queue: str) -> list[str]:
    if client.raw.__class__.__module__.startswith("azure.servicebus.aio"):
        return [sid async for sid in client.raw.list_queue_sessions(queue)]
    return await asyncio.to_thread(lambda: list(client.raw.list_queue_sessions(queue)))


async def test_fifo_within_a_session_and_state(client: Sdk, entity: Callable[[str], str]) -> None:
    queue = entity("session")
    interleaved = [
        ServiceBusMessage(f"{sid}-{i}", session_id=sid) for i in range(4) for sid in ("a", "b")
    ]
    await send(client, queue, *interleaved)
    assert sorted(await list_sessions(client, queue)) == ["a", "b"]
    async with client.get_queue_receiver(queue, session_id="b") as receiver:
        got: list[ServiceBusReceivedMessage] = []
        while len(got) < 4:
            batch = await receiver.receive_messages(max_message_count=4, max_wait_time=5)
            assert batch
            got += batch
        assert [str(m) for m in got] == ["b-0", "b-1", "b-2", "b-3"]
        assert all(m.session_id == "b" for m in got)
        session = receiver.session
        assert await session.get_state() is None
        await session.set_state(b"checkpoint-3")
        assert await session.get_state() == b"checkpoint-3"
        for message in got:
            await receiver.complete_message(message)
    async with client.get_queue_receiver(queue, session_id="a") as receiver:
        got = await receiver.receive_messages(max_message_count=4, max_wait_time=5)
        while len(got) < 4:
            got += await receiver.receive_messages(max_message_count=4 - len(got), max_wait_time=5)
        assert [str(m) for m in got] == ["a-0", "a-1", "a-2", "a-3"]
        for message in got:
            await receiver.complete_message(message)
    assert await list_sessions(client, queue) == ["b"]  # only state remains


async def test_a_session_has_one_receiver_at_a_time(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    queue = entity("session")
    await send(client, queue, ServiceBusMessage("only", session_id="solo"))
    async with client.get_queue_receiver(queue, session_id="solo") as holder:
        with pytest.raises(SessionCannotBeLockedError):
            async with client.get_queue_receiver(queue, session_id="solo") as intruder:
                await intruder.receive_messages(max_wait_time=1)
        (message,) = await holder.receive_messages(max_wait_time=5)
        await holder.complete_message(message)


async def test_next_available_waits_for_a_free_session(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator, mode: str
) -> None:
    """A wait that finds no session is refused: no receiver opens without a session, and the
    SDK raises OperationTimeoutError (one try here; by default it tries the wait again
    ``retry_total`` times, as against Azure)."""
    queue = entity("session-wait")
    one_try = make_client(mode, test_emulator.connection_string, retry_total=0)
    async with one_try:
        for _ in range(3):  # every time, not only when the detach happens to come first
            with pytest.raises(OperationTimeoutError):
                async with one_try.get_queue_receiver(
                    queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1
                ) as opened:
                    pytest.fail(f"opened a receiver with no session: {opened.session.session_id}")

    async def send_later() -> None:
        await asyncio.sleep(0.5)
        await send(client, queue, ServiceBusMessage("late", session_id="late-session"))

    sender_task = asyncio.create_task(send_later())
    async with client.get_queue_receiver(
        queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=10
    ) as receiver:
        assert receiver.session.session_id == "late-session"
        (message,) = await receiver.receive_messages(max_wait_time=5)
        assert str(message) == "late"
        await receiver.complete_message(message)
    await sender_task


async def test_session_lock_renew_and_expiry(client: Sdk, entity: Callable[[str], str]) -> None:
    queue = entity("session-lease")  # LockDuration PT1S
    await send(client, queue, ServiceBusMessage("held", session_id="lease"))
    async with client.get_queue_receiver(queue, session_id="lease") as receiver:
        session = receiver.session
        first_until = session.locked_until_utc
        await asyncio.sleep(0.6)
        await session.renew_lock()
        assert session.locked_until_utc > first_until
        await asyncio.sleep(0.6)  # past the original lock, inside the renewed one
        (message,) = await receiver.receive_messages(max_wait_time=5)
        await receiver.complete_message(message)
        await asyncio.sleep(1.2)  # let the session lock lapse
        async with client.get_queue_receiver(queue, session_id="lease") as successor:
            # The lapsed lock was freed: the successor holds a new lock, beyond the old one.
            assert successor.session.locked_until_utc > session.locked_until_utc
