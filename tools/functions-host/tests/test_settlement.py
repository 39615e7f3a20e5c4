"""The host's Service Bus side, checked against the extension's own client code.

The trigger data the host builds must decode, in the extension the worker runs, into the
message the SDK received; the Settlement service must answer the extension's
``ServiceBusMessageActions`` as the Functions host does. Both run here against the
emulator through the unmodified SDK (queue ``host-direct``, which no sample function reads).
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import grpc
import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from azurefunctions.extensions.bindings.protos import settlement_pb2, settlement_pb2_grpc
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
)
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusReceivedMessage as ExtensionMessage,
)
from azurefunctions.extensions.bindings.servicebus.serviceBusMessageActions import SettlementError

from functions_host.servicebus_binding import model_binding_data
from functions_host.settlement import MessageLocks, SettlementService
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.integration
QUEUE = "host-direct"
COMPARED_FIELDS = (
    "message_id", "correlation_id", "content_type", "session_id", "subject", "to", "reply_to",
    "partition_key", "application_properties", "sequence_number", "enqueued_time_utc",
    "time_to_live", "expires_at_utc", "locked_until_utc", "delivery_count", "lock_token",
    "scheduled_enqueue_time_utc",
)  # fmt: skip


@pytest.fixture
def receiver(host_emulator: ServiceBusEmulator) -> Iterator[ServiceBusReceiver]:
    with (
        ServiceBusClient.from_connection_string(host_emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, max_wait_time=5) as queue_receiver,
    ):
        yield queue_receiver


def _send(emulator: ServiceBusEmulator, message: ServiceBusMessage) -> None:
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        sender.send_messages(message)


def _receive_one(receiver: ServiceBusReceiver, tag: str) -> ServiceBusReceivedMessage:
    for message in receiver.receive_messages(max_message_count=10, max_wait_time=5):
        if message.message_id == tag:
            return message
        receiver.complete_message(message)  # left over by an earlier run
    raise AssertionError(f"message {tag} not received")


def test_model_binding_data_decodes_into_the_message_the_sdk_received(
    host_emulator: ServiceBusEmulator, receiver: ServiceBusReceiver
) -> None:
    tag = uuid.uuid4().hex
    _send(
        host_emulator,
        ServiceBusMessage(
            b'{"schema": "inferbus.request/v1"}',
            message_id=tag,
            correlation_id="corr-1",
            content_type="application/json",
            subject="subject-1",
            to="to-1",
            reply_to="reply-1",
            time_to_live=timedelta(minutes=30),
            application_properties={
                "retry_count": 2,
                "tenant": "contoso",
                "ratio": 0.5,
                "flag": True,
            },
        ),
    )
    received = _receive_one(receiver, tag)

    decoded = ExtensionMessage(data=model_binding_data(received)).get_sdk_type()

    for field in COMPARED_FIELDS:
        if field == "delivery_count":  # the extension's count includes this delivery
            assert decoded.delivery_count == (received.delivery_count or 0) + 1
            continue
        assert getattr(decoded, field) == getattr(received, field), field
    assert b"".join(decoded.body) == b'{"schema": "inferbus.request/v1"}'
    receiver.complete_message(received)


@pytest.fixture
def settlement_port() -> Iterator[tuple[int, MessageLocks]]:
    locks = MessageLocks()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    SettlementService(locks).register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, locks
    server.stop(grace=None)


@pytest.fixture
def message_actions(
    settlement_port: tuple[int, MessageLocks], monkeypatch: pytest.MonkeyPatch
) -> ServiceBusMessageActions:
    """The extension's real client, pointed at the service the way a worker's argv does."""
    port, _ = settlement_port
    argv = ["worker", "--host", "127.0.0.1", "--port", str(port)]
    monkeypatch.setattr(sys, "argv", [*argv, "--functions-grpc-max-message-length", "4194304"])
    monkeypatch.setattr(ServiceBusMessageActions, "_instance", None)
    return ServiceBusMessageActions.get_instance()


def test_settlement_through_the_extension_client_reaches_the_broker(
    host_emulator: ServiceBusEmulator,
    receiver: ServiceBusReceiver,
    settlement_port: tuple[int, MessageLocks],
    message_actions: ServiceBusMessageActions,
) -> None:
    _, locks = settlement_port
    tag = uuid.uuid4().hex
    _send(host_emulator, ServiceBusMessage(b"poison", message_id=tag))
    received = _receive_one(receiver, tag)
    held = locks.hold(receiver, [received], threading.Lock())
    worker_side = ExtensionMessage(data=model_binding_data(received)).get_sdk_type()

    message_actions.renew_message_lock(worker_side)
    message_actions.deadletter(
        worker_side, deadletter_reason="InvalidPayload", deadletter_error_description="bad body"
    )

    assert held[0].settled
    with (
        ServiceBusClient.from_connection_string(host_emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq,
    ):
        dead = [m for m in dlq.peek_messages(max_message_count=50) if m.message_id == tag]
    assert [(m.dead_letter_reason, m.dead_letter_error_description) for m in dead] == [
        ("InvalidPayload", "bad body")
    ]
    # Settling it again fails in the broker; the error comes back as the host returns it.
    with pytest.raises(SettlementError) as failed:
        message_actions.complete(worker_side)
    assert failed.value.original.code() == grpc.StatusCode.UNKNOWN
    locks.release(held)


def test_an_unknown_lock_token_is_a_failed_precondition(
    settlement_port: tuple[int, MessageLocks],
) -> None:
    port, _ = settlement_port
    token = str(uuid.uuid4())
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = settlement_pb2_grpc.SettlementStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.Complete(settlement_pb2.CompleteRequest(locktoken=token))
        error: grpc.Call = failed.value
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == f"LockToken {token} not found."
