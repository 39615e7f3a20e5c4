"""Microsoft's azure-servicebus samples, run unmodified against the emulator.

These scenarios make the SDK put two transfers in flight on one link at once (lock
renewals through ``$management`` while messages are settled, ``asyncio.gather`` sends on
one sender), and the async SDK then gives both the same delivery-id. Azure accepts that;
the emulator must too instead of dropping the connection.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
)
from azure.servicebus.aio import AutoLockRenewer as AsyncAutoLockRenewer
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.aio import ServiceBusReceiver as AsyncServiceBusReceiver
from azure.servicebus.exceptions import OperationTimeoutError

from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator

LOCK_S = 5  # LockDuration of the autorenew queues in config.json
HOLD_S = 12  # well past two lock durations: only renewals keep the locks
SCENARIO_TIMEOUT_S = 120.0


def locked_until_is_renewed(messages: list[ServiceBusReceivedMessage]) -> bool:
    """Every lock now ends later than a lock taken at receive time could."""
    now = dt.datetime.now(dt.UTC)
    return all(m.locked_until_utc is not None and m.locked_until_utc > now for m in messages)


async def receive_exactly_async(
    receiver: AsyncServiceBusReceiver, count: int
) -> list[ServiceBusReceivedMessage]:
    got: list[ServiceBusReceivedMessage] = []
    while len(got) < count:
        batch = await receiver.receive_messages(max_message_count=count - len(got), max_wait_time=5)
        assert batch, f"only {len(got)} of {count} messages arrived"
        got += batch
    return got


async def auto_lock_renew_async(connection_string: str, queue: str, count: int) -> None:
    """The async ``auto_lock_renew`` sample: hold ``count`` messages past their lock."""
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"held-{i}") for i in range(count)])
        async with client.get_queue_receiver(queue) as receiver:
            renewer = AsyncAutoLockRenewer()
            received = await receive_exactly_async(receiver, count)
            for message in received:
                renewer.register(receiver, message, max_lock_renewal_duration=60)
            await asyncio.sleep(HOLD_S)
            assert locked_until_is_renewed(received)
            for message in received:
                await receiver.complete_message(message)
            await renewer.close()
        async with client.get_queue_receiver(queue) as receiver:
            assert await receiver.receive_messages(max_wait_time=2) == []


def auto_lock_renew_sync(connection_string: str, queue: str, count: int) -> None:
    """The sync ``auto_lock_renew`` sample (renewals run on the renewer's threads)."""
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"held-{i}") for i in range(count)])
        with client.get_queue_receiver(queue) as receiver:
            renewer = AutoLockRenewer()
            received: list[ServiceBusReceivedMessage] = []
            while len(received) < count:
                batch = receiver.receive_messages(
                    max_message_count=count - len(received), max_wait_time=5
                )
                assert batch, f"only {len(received)} of {count} messages arrived"
                received += batch
            for message in received:
                renewer.register(receiver, message, max_lock_renewal_duration=60)
            time.sleep(HOLD_S)
            assert locked_until_is_renewed(received)
            for message in received:
                receiver.complete_message(message)
            renewer.close()
        with client.get_queue_receiver(queue) as receiver:
            assert receiver.receive_messages(max_wait_time=2) == []


# Renewals that overlap on one link (the race that once dropped the connection). The sync
# sample holds 10: its renewer runs renewals on threads over one SDK handler, and with 100
# on a loaded 2-core machine the SDK itself shuts the handler down ("Management Operation
# error occurred", the emulator seeing only the client drop its connection).
@pytest.mark.parametrize(("mode", "count"), [("sync", 10), ("async", 100)])
async def test_auto_lock_renew_holds_messages_past_their_lock(
    test_emulator: ServiceBusEmulator, mode: str, count: int
) -> None:
    queue = f"autorenew{count}-{mode}"
    if mode == "async":
        scenario = auto_lock_renew_async(test_emulator.connection_string, queue, count)
    else:
        scenario = asyncio.to_thread(
            auto_lock_renew_sync, test_emulator.connection_string, queue, count
        )
    await asyncio.wait_for(scenario, SCENARIO_TIMEOUT_S)


async def process_sessions(client: AsyncServiceBusClient, queue: str, seen: list[str]) -> None:
    """One worker of the session-pool sample: take sessions until none is left."""
    while True:
        try:
            async with client.get_queue_receiver(
                queue, max_wait_time=1, session_id=NEXT_AVAILABLE_SESSION
            ) as receiver:
                renewer = AsyncAutoLockRenewer()
                session = receiver.session
                renewer.register(receiver, session)
                await session.set_state("OPEN")
                async for message in receiver:
                    seen.append(f"{session.session_id}/{message}")
                    await receiver.complete_message(message)
                await session.set_state("CLOSED")
                await renewer.close()
        except OperationTimeoutError:
            return


async def test_async_session_pool_sample(test_emulator: ServiceBusEmulator) -> None:
    queue = "sessionpool-async"
    workers = 5
    per_session = 20
    sessions = [str(uuid.uuid4()) for _ in range(workers)]
    seen: list[str] = []
    client = AsyncServiceBusClient.from_connection_string(test_emulator.connection_string)
    async with client:
        for session_id in sessions:
            async with client.get_queue_sender(queue) as sender:
                await asyncio.gather(
                    *[
                        sender.send_messages(ServiceBusMessage(f"no. {i}", session_id=session_id))
                        for i in range(per_session)
                    ]
                )
        await asyncio.wait_for(
            asyncio.gather(*[process_sessions(client, queue, seen) for _ in range(workers)]),
            SCENARIO_TIMEOUT_S,
        )
    expected = {f"{sid}/no. {i}" for sid in sessions for i in range(per_session)}
    assert sorted(seen) == sorted(expected)  # each message once: none lost, none doubled


async def test_concurrent_sends_on_one_sender_all_arrive(
    test_emulator: ServiceBusEmulator,
) -> None:
    queue = "concurrent-send-async"
    client = AsyncServiceBusClient.from_connection_string(test_emulator.connection_string)
    async with client:
        async with client.get_queue_sender(queue) as sender:
            await asyncio.wait_for(
                asyncio.gather(
                    *[sender.send_messages(ServiceBusMessage(f"m{i}")) for i in range(50)]
                ),
                SCENARIO_TIMEOUT_S,
            )
        async with client.get_queue_receiver(queue) as receiver:
            got = await receive_exactly_async(receiver, 50)
            for message in got:
                await receiver.complete_message(message)
            doubled = await receiver.receive_messages(max_message_count=50, max_wait_time=2)
    assert sorted(str(m) for m in got) == sorted(f"m{i}" for i in range(50))
    assert doubled == []  # a delivery the SDK transmitted twice is stored once
