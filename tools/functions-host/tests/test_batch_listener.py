"""The batch listener against the emulator: when batches go, how big, one at a time.

Each test runs one ``ServiceBusListener`` (the real SDK receiver, on a queue of its own in
``listener-emulator.json``) with an invoker that records what it is given instead of
calling a worker (listener_testing.py). Timing checks are lower bounds (a held message
never goes before ``maxBatchWaitTime``) or generous upper bounds far from the behaviour
they rule out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient

from functions_host.config import ServiceBusOptions
from functions_host.servicebus_listener import BATCH_WINDOW_S, ServiceBusListener
from functions_host.settlement import MessageLocks
from hostproc import wait_for
from listener_testing import Senders, StubInvoker, body_text, listener_spec, new_listener, running
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Call:
    started: float
    bodies: list[str]
    delivery_counts: list[int]


class RecordingInvoker(StubInvoker):
    """Stands in for the worker: records each batch (and how many ran at once)."""

    def __init__(self, busy_s: float = 0.0, failures: int = 0) -> None:
        self.calls: list[Call] = []
        self.most_at_once = 0
        self._busy_s = busy_s
        self._failures = failures
        self._running = 0
        self._lock = threading.Lock()

    def run(self, messages: list[Any], started: float) -> None:
        bodies = [body_text(message) for message in messages]
        counts = [message.delivery_count for message in messages]
        with self._lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        time.sleep(self._busy_s)
        with self._lock:
            self._running -= 1
            self.calls.append(Call(started, bodies, counts))
            failing = len(self.calls) <= self._failures
        if failing:
            raise RuntimeError("the function failed")

    def bodies(self) -> list[str]:
        return [body for call in self.calls for body in call.bodies]


@contextmanager
def listening(
    queue: str, invoker: RecordingInvoker, options: ServiceBusOptions, **trigger: Any
) -> Iterator[ServiceBusListener]:
    """A started listener whose receiver is open (its first receive is under way); a
    session listener only opens one when a session has messages, so it is not awaited."""
    spec = listener_spec(queue, many=True, **trigger)
    with running(new_listener(spec, invoker, options, MessageLocks())) as listener:
        if not trigger.get("isSessionsEnabled"):
            wait_for(lambda: listener._held is not None, what="the receiver")
        yield listener


def _options(**overrides: Any) -> ServiceBusOptions:
    return ServiceBusOptions(**{"max_message_batch_size": 8, **overrides})


def test_a_lone_message_waits_max_batch_wait_time_from_its_receipt(
    connected: ServiceBusEmulator,
    senders: Senders,
) -> None:
    invoker = RecordingInvoker()
    wait_s = 1.5
    options = _options(min_message_batch_size=4, max_batch_wait_time_s=wait_s)
    with listening("lone-wait", invoker, options):
        # Mid-way through the listener's first receive: the wait counts from the message's
        # receipt, not from when the listener started to receive.
        time.sleep(0.6)
        sent = senders.send("lone-wait", ["lone"])
        wait_for(lambda: invoker.calls, what="the partial batch")
    assert invoker.calls[0].bodies == ["lone"]
    assert invoker.calls[0].started - sent >= wait_s
    assert invoker.calls[0].started - sent < wait_s + 10


def test_with_a_minimum_of_one_a_lone_message_goes_at_once(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    invoker = RecordingInvoker()
    options = _options(min_message_batch_size=1, max_batch_wait_time_s=60)
    with listening("lone-min1", invoker, options):
        sent = senders.send("lone-min1", ["lone"])
        wait_for(lambda: invoker.calls, timeout=20, what="the batch")
    assert invoker.calls[0].bodies == ["lone"]
    assert invoker.calls[0].started - sent < 10  # maxBatchWaitTime (60 s) plays no part


def test_a_batch_that_reaches_the_minimum_goes_without_waiting(
    connected: ServiceBusEmulator,
    senders: Senders,
) -> None:
    invoker = RecordingInvoker()
    options = _options(min_message_batch_size=4, max_batch_wait_time_s=60)
    bodies = [f"full-{index}" for index in range(4)]
    with listening("full-batch", invoker, options):
        sent = senders.send("full-batch", bodies)
        wait_for(lambda: invoker.calls, timeout=20, what="the batch")
    # Held until the fourth arrived (however the receives split them), then all at once.
    assert [call.bodies for call in invoker.calls] == [bodies]
    assert invoker.calls[0].started - sent < 10


def test_batches_never_exceed_the_maximum_and_run_one_at_a_time(
    connected: ServiceBusEmulator,
    senders: Senders,
) -> None:
    invoker = RecordingInvoker(busy_s=0.2)
    options = _options(max_message_batch_size=4, min_message_batch_size=2, max_batch_wait_time_s=1)
    bodies = [f"many-{index:02}" for index in range(11)]
    senders.send("max-size", bodies)
    with listening("max-size", invoker, options):
        wait_for(lambda: len(invoker.bodies()) >= len(bodies), what="every message")
    # How the receives split them depends on timing (one message, then what arrives within
    # BATCH_WINDOW_S); the order and the bounds do not.
    assert invoker.bodies() == bodies  # the queue's order, the oldest first
    assert all(1 <= len(call.bodies) <= 4 for call in invoker.calls)
    assert len(invoker.calls[0].bodies) >= 2  # the first batch met the minimum
    assert invoker.most_at_once == 1


def test_a_binding_max_message_batch_size_wins_over_host_json(
    connected: ServiceBusEmulator,
    senders: Senders,
) -> None:
    invoker = RecordingInvoker()
    bodies = [f"bound-{index}" for index in range(5)]
    senders.send("binding-max", bodies)
    with listening("binding-max", invoker, _options(), maxMessageBatchSize=2):
        wait_for(lambda: len(invoker.bodies()) >= len(bodies), what="every message")
    assert all(len(call.bodies) <= 2 for call in invoker.calls)


def test_a_failed_batch_is_abandoned_even_without_auto_complete(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    invoker = RecordingInvoker(failures=1)
    options = _options(auto_complete_messages=False)
    with listening("failed-batch", invoker, options):
        senders.send("failed-batch", ["fails-once"])
        wait_for(lambda: len(invoker.calls) >= 2, what="the redelivery")
    first, second = invoker.calls[:2]
    assert first.bodies == second.bodies == ["fails-once"]
    assert second.delivery_counts[0] == first.delivery_counts[0] + 1
    assert second.started - first.started < 20  # abandoned: its 30 s lock did not expire


def test_stop_dispatches_what_is_held_for_a_batch(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    invoker = RecordingInvoker()
    options = _options(min_message_batch_size=4, max_batch_wait_time_s=60)
    with listening("stop-flush", invoker, options) as listener:
        senders.send("stop-flush", ["held-1", "held-2"])
        held = listener._held
        assert held is not None
        wait_for(lambda: len(held.pending) == 2, what="the messages held")
        assert invoker.calls == []
        listener.stop()
        # Dispatched before stop() returned (the extension's StopAsync does the same).
        assert [call.bodies for call in invoker.calls] == [["held-1", "held-2"]]
    # autoCompleteMessages (the default) completed them after the invocation.
    assert connected.runtime_properties("stop-flush")["active_message_count"] == 0


def test_an_idle_session_dispatches_what_it_holds(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    invoker = RecordingInvoker()
    idle_s = 1.0
    options = _options(
        min_message_batch_size=4, max_batch_wait_time_s=60, session_idle_timeout_s=idle_s
    )
    # A session receiver opens once a session has messages: send first.
    sent = senders.send("session-batch", ["s-1", "s-2"], session_id="s")
    with listening("session-batch", invoker, options, isSessionsEnabled=True) as listener:
        assert len(listener._threads) == 1  # batches: one session at a time per listener
        wait_for(lambda: invoker.calls, timeout=30, what="the session's batch")
    assert [call.bodies for call in invoker.calls] == [["s-1", "s-2"]]
    # The session ended after a receive waited sessionIdleTimeout, not maxBatchWaitTime.
    assert idle_s <= invoker.calls[0].started - sent < 20


def test_a_receive_collects_for_the_batch_window_only(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    """After the first message a receive waits BATCH_WINDOW_S (20 ms) for more, not the
    Python SDK's 200 ms: the fastest of a few receives of a lone message shows it."""
    spec = listener_spec("receive-window", many=True)
    listener = new_listener(spec, RecordingInvoker(), _options(), MessageLocks())
    durations = []
    with (
        ServiceBusClient.from_connection_string(connected.connection_string) as client,
        listener._receiver(client) as receiver,
    ):
        lock = threading.Lock()
        for index in range(3):
            senders.send("receive-window", [f"window-{index}"])
            started = time.monotonic()
            received = listener._receive(receiver, lock, 8, 10)
            durations.append(time.monotonic() - started)
            assert len(received) == 1
            receiver.complete_message(received[0])
    assert min(durations) < BATCH_WINDOW_S + 0.1 < 0.2
