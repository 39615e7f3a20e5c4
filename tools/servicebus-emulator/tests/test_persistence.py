"""A data folder (``--data-dir``) keeps the broker's messages across a restart.

Every scenario goes through the unmodified SDK: state is built, the emulator is stopped
(SIGTERM, or SIGKILL for "an acknowledged send survives a crash"), a new emulator is
started on the same folder, and everything is read back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
)

from local_processes.child import StartError
from servicebus_emulator.persistence import DATABASE_NAME
from servicebus_emulator.process import EmulatorProcess, ServiceBusEmulator

pytestmark = pytest.mark.emulator
QUEUE, TOPIC, SUBSCRIPTION, SESSION_QUEUE = "kept", "kept-topic", "all", "kept-sessions"
SHORT_LOCK_QUEUE = "kept-short-lock"
DEDUPE_QUEUE = "kept-dedupe"
LOCK_S = 10  # long enough that a message locked before the restart is still locked after it


def _queue(
    name: str, *, sessions: bool = False, lock_s: int = LOCK_S, dedupe: bool = False
) -> dict[str, object]:
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": False,
            "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT10M",
            "LockDuration": f"PT{lock_s}S",
            "MaxDeliveryCount": 5,
            "RequiresDuplicateDetection": dedupe,
            "RequiresSession": sessions,
        },
    }


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    namespace = {
        "Name": "sbemulatorns",
        "Queues": [
            _queue(QUEUE),
            _queue(SESSION_QUEUE, sessions=True),
            _queue(SHORT_LOCK_QUEUE, lock_s=1),
            _queue(DEDUPE_QUEUE, dedupe=True),
        ],
        "Topics": [{"Name": TOPIC, "Properties": {}, "Subscriptions": [{"Name": SUBSCRIPTION}]}],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))
    return path


@contextmanager
def emulator_on(
    config_path: Path, data_dir: Path | None, *, kill: bool = False
) -> Iterator[ServiceBusEmulator]:
    log_path = config_path.parent / f"emulator-{time.monotonic_ns()}.log"
    process = EmulatorProcess(config_path, log_path, data_dir=data_dir)
    try:
        yield process.wait_ready()
    finally:
        process.kill() if kill else process.stop()


def client_of(emulator: ServiceBusEmulator) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(emulator.connection_string)


def receive_all(receiver: ServiceBusReceiver, count: int) -> list[ServiceBusReceivedMessage]:
    """Up to ``count`` messages, waiting at most 30 s in all (completed as they come)."""
    received: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + 30
    with receiver:
        while len(received) < count and time.monotonic() < deadline:
            for message in receiver.receive_messages(max_message_count=count, max_wait_time=2):
                receiver.complete_message(message)
                received.append(message)
    return received


def test_messages_in_every_state_survive_a_restart(config_path: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    due = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=LOCK_S + 5)
    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(b) for b in ("deferred", "dead", "locked")])
            (scheduled_number,) = sender.schedule_messages(ServiceBusMessage("scheduled"), due)
        with client.get_topic_sender(TOPIC) as sender:
            sender.schedule_messages(ServiceBusMessage("topic scheduled"), due)
        with client.get_queue_receiver(QUEUE) as receiver:
            deferred, dead, locked = receiver.receive_messages(max_message_count=3, max_wait_time=5)
            receiver.defer_message(deferred)
            deferred_number = deferred.sequence_number or 0
            receiver.dead_letter_message(dead, reason="Broken", error_description="kept")
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage("active-1"), ServiceBusMessage("active-2")])
        with client.get_queue_receiver(QUEUE) as receiver:
            before = {str(m): m for m in receiver.peek_messages(max_message_count=10)}
        with client.get_queue_receiver(SESSION_QUEUE, session_id="s1") as session_receiver:
            session_receiver.session.set_state(b"session state")
    assert locked.delivery_count == 0

    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        with client.get_queue_receiver(QUEUE) as receiver:
            available = receiver.receive_messages(max_message_count=10, max_wait_time=3)
            assert [str(m) for m in available] == ["active-1", "active-2"]  # "locked" is still
            for message in available:
                assert message.enqueued_time_utc == before[str(message)].enqueued_time_utc
                assert message.sequence_number == before[str(message)].sequence_number
                receiver.complete_message(message)
            (again,) = receiver.receive_deferred_messages([deferred_number])
            assert (str(again), again.delivery_count) == ("deferred", 0)
            receiver.complete_message(again)
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages(ServiceBusMessage("after the restart"))
        (dead_again,) = receive_all(client.get_queue_receiver(QUEUE, sub_queue="deadletter"), 1)
        assert (str(dead_again), dead_again.dead_letter_reason) == ("dead", "Broken")
        assert dead_again.dead_letter_error_description == "kept"
        with client.get_queue_receiver(SESSION_QUEUE, session_id="s1") as session_receiver:
            assert session_receiver.session.get_state() == b"session state"

        rest = {str(m): m for m in receive_all(client.get_queue_receiver(QUEUE), 3)}
        assert set(rest) == {"locked", "scheduled", "after the restart"}
        assert rest["locked"].delivery_count == 1  # its lock expired: one failed delivery
        assert rest["scheduled"].sequence_number == scheduled_number
        assert (rest["after the restart"].sequence_number or 0) > scheduled_number
        assert rest["scheduled"].scheduled_enqueue_time_utc == due
        assert rest["scheduled"].enqueued_time_utc is not None
        assert rest["scheduled"].enqueued_time_utc >= due - dt.timedelta(seconds=1)
        (from_topic,) = receive_all(client.get_subscription_receiver(TOPIC, SUBSCRIPTION), 1)
        assert str(from_topic) == "topic scheduled"


def test_an_acknowledged_send_survives_sigkill(config_path: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    process = EmulatorProcess(config_path, tmp_path / "killed.log", data_dir=data_dir)
    client = client_of(process.wait_ready())
    sender = client.get_queue_sender(QUEUE)
    try:
        for start in range(0, 60, 20):
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(start, start + 20)])
        sender.send_messages(ServiceBusMessage("single"))
        assert process.kill() == -signal.SIGKILL  # right after the last acknowledgement
    finally:
        process.stop()
        with contextlib.suppress(Exception):  # closing against a dead broker is not under test
            sender.close()
            client.close()
    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        bodies = sorted(str(m) for m in receive_all(client.get_queue_receiver(QUEUE), 61))
    assert bodies == sorted([f"m{i}" for i in range(60)] + ["single"])


def test_duplicate_detection_remembers_ids_across_a_crash(
    config_path: Path, tmp_path: Path
) -> None:
    """A sender that sends again after a crash swallowed its answer (the app's outbox does)
    finds the id still in the entity's history, as in Azure: the message is stored once."""
    data_dir = tmp_path / "data"
    process = EmulatorProcess(config_path, tmp_path / "killed.log", data_dir=data_dir)
    client = client_of(process.wait_ready())
    sender = client.get_queue_sender(DEDUPE_QUEUE)
    try:
        sender.send_messages([ServiceBusMessage(f"m{i}", message_id=f"id-{i}") for i in range(3)])
        assert process.kill() == -signal.SIGKILL
    finally:
        process.stop()
        with contextlib.suppress(Exception):
            sender.close()
            client.close()
    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        with client.get_queue_sender(DEDUPE_QUEUE) as again:
            again.send_messages(
                [ServiceBusMessage(f"again-{i}", message_id=f"id-{i}") for i in range(4)]
            )
        receiver = client.get_queue_receiver(DEDUPE_QUEUE)
        bodies = sorted(str(m) for m in receive_all(receiver, 4))
        with client.get_queue_receiver(DEDUPE_QUEUE) as rest:
            assert rest.receive_messages(max_wait_time=1) == []  # no copy of a resent id
    assert bodies == ["again-3", "m0", "m1", "m2"]


def test_without_a_data_folder_nothing_is_kept(config_path: Path) -> None:
    with (
        emulator_on(config_path, None) as emulator,
        client_of(emulator) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        sender.send_messages(ServiceBusMessage("gone"))
    with (
        emulator_on(config_path, None) as emulator,
        client_of(emulator) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        assert receiver.receive_messages(max_wait_time=2) == []


def test_an_unusable_data_folder_is_refused_with_its_reason(
    config_path: Path, tmp_path: Path
) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    process = EmulatorProcess(config_path, tmp_path / "refused.log", data_dir=not_a_folder)
    try:
        with pytest.raises(StartError):
            process.wait_ready(timeout=15)
    finally:
        status = process.stop()
    assert status == 2
    assert f"cannot use data folder {not_a_folder}" in (tmp_path / "refused.log").read_text()


def test_a_data_folder_holding_something_else_is_refused(config_path: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / DATABASE_NAME).write_bytes(b"not a database" * 100)
    process = EmulatorProcess(config_path, tmp_path / "refused.log", data_dir=data_dir)
    try:
        with pytest.raises(StartError):
            process.wait_ready(timeout=15)
    finally:
        status = process.stop()
    assert status == 2
    assert "cannot use data folder" in (tmp_path / "refused.log").read_text()


def test_a_second_emulator_on_the_same_folder_is_refused(config_path: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with emulator_on(config_path, data_dir):
        second = EmulatorProcess(config_path, tmp_path / "second.log", data_dir=data_dir)
        try:
            with pytest.raises(StartError):
                second.wait_ready(timeout=15)
        finally:
            status = second.stop()
    assert status == 2
    assert "another emulator is running on it" in (tmp_path / "second.log").read_text()


def test_a_lock_that_expired_while_stopped_is_lost_like_any_other(
    config_path: Path, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        with client.get_queue_sender(SHORT_LOCK_QUEUE) as sender:
            sender.send_messages(ServiceBusMessage("held"))
        with client.get_queue_receiver(SHORT_LOCK_QUEUE) as receiver:
            (held,) = receiver.receive_messages(max_wait_time=5)
    assert held.delivery_count == 0
    time.sleep(1.2)  # the 1 s lock runs out while no emulator is running
    with emulator_on(config_path, data_dir) as emulator, client_of(emulator) as client:
        (again,) = receive_all(client.get_queue_receiver(SHORT_LOCK_QUEUE), 1)
    assert (str(again), again.delivery_count) == ("held", 1)
