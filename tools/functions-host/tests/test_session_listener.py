"""Single-message session triggers against the emulator, as the SDK's session processor runs them.

Each test runs one ``ServiceBusListener`` (real SDK session receivers, on a queue of its
own in ``listener-emulator.json``) with an invoker that records each invocation instead of
calling a worker; settlement goes through the host's ``SettlementService`` in-process, as
``ServiceBusMessageActions`` would reach it. What is checked is what the extension's
``ServiceBusSessionProcessor`` guarantees: up to ``maxConcurrentSessions`` sessions at
once, one message at a time within a session in sequence order, an abandoned message
received again before the session's next one, the session lock renewed while held.
Timing checks are lower bounds or generous upper bounds far from what they rule out.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest
from azure.servicebus import ServiceBusReceivedMessage as SdkMessage
from azurefunctions.extensions.bindings.protos import settlement_pb2

from functions_host.config import ServiceBusOptions
from functions_host.servicebus_listener import ServiceBusListener
from functions_host.settlement import MessageLocks, SettlementService
from hostproc import wait_for
from listener_testing import Senders, StubInvoker, body_text, listener_spec, new_listener, running
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Call:
    session: str
    body: str
    sequence_number: int
    delivery_count: int
    started: float
    ended: float


class Aborted(Exception):
    pass


class _Context:
    """The gRPC context the Settlement service aborts through."""

    def abort(self, code: Any, details: str) -> NoReturn:
        raise Aborted(f"{code}: {details}")


Action = Callable[[SdkMessage, "SessionInvoker"], None]


class SessionInvoker(StubInvoker):
    """Stands in for the worker: records each invocation, sessions running at once, and
    invocations of one session that overlapped; ``action`` plays the function's part."""

    def __init__(self, locks: MessageLocks, busy_s: float = 0.0, action: Action | None = None):
        self.calls: list[Call] = []
        self.deliveries: list[tuple[str, int]] = []  # (body, delivery count) as invocations start
        self.most_sessions_at_once = 0
        self.overlaps: list[str] = []
        self.settlement = SettlementService(locks)
        self._busy_s = busy_s
        self._action = action
        self._running: dict[str, int] = {}
        self._lock = threading.Lock()
        self._hurry = threading.Event()

    def run(self, messages: list[Any], started: float) -> None:
        (message,) = messages
        session = str(message.session_id)
        with self._lock:
            self.deliveries.append((body_text(message), message.delivery_count))
            self._running[session] = self._running.get(session, 0) + 1
            if self._running[session] > 1:
                self.overlaps.append(session)
            at_once = sum(1 for count in self._running.values() if count)
            self.most_sessions_at_once = max(self.most_sessions_at_once, at_once)
        try:
            self._hurry.wait(self._busy_s)
            if self._action is not None:
                self._action(message, self)
        finally:
            with self._lock:
                self._running[session] -= 1
                self.calls.append(
                    Call(
                        session,
                        body_text(message),
                        message.sequence_number,
                        message.delivery_count,
                        started,
                        time.monotonic(),
                    )
                )

    def hurry(self) -> None:
        """End the running (and later) invocations' busy time now."""
        self._hurry.set()

    def complete(self, message: SdkMessage) -> None:
        request = settlement_pb2.CompleteRequest(locktoken=str(message.lock_token))
        self.settlement.Complete(request, _Context())

    def abandon(self, message: SdkMessage) -> None:
        request = settlement_pb2.AbandonRequest(locktoken=str(message.lock_token))
        self.settlement.Abandon(request, _Context())

    def renew_session(self, session: str) -> None:
        request = settlement_pb2.RenewSessionLockRequest(sessionId=session)
        self.settlement.RenewSessionLock(request, _Context())

    def of(self, session: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.session == session]


@contextmanager
def listening(
    queue: str, invoker_for: Callable[[MessageLocks], SessionInvoker], options: ServiceBusOptions
) -> Iterator[tuple[ServiceBusListener, SessionInvoker]]:
    locks = MessageLocks()
    invoker = invoker_for(locks)
    spec = listener_spec(queue, many=False, isSessionsEnabled=True)
    with running(new_listener(spec, invoker, options, locks)) as listener:
        yield listener, invoker


def _assert_in_order_one_at_a_time(calls: list[Call]) -> None:
    numbers = [call.sequence_number for call in calls]
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == len(numbers)
    for before, after in itertools.pairwise(calls):
        assert after.started >= before.ended  # never two invocations of a session at once


def test_sessions_run_concurrently_and_each_in_order(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    sessions = ["doc-a", "doc-b", "doc-c"]
    # Interleaved, as documents' steps arrive: each session's order is its send order.
    senders.send_to_sessions(
        "session-order",
        [(session, f"{session}-{step}") for step in range(5) for session in sessions],
    )
    renewed: list[str] = []

    def renew_own_session(message: SdkMessage, invoker: SessionInvoker) -> None:
        # Every held session is registered on its own with the Settlement service.
        invoker.renew_session(str(message.session_id))
        renewed.append(str(message.session_id))

    options = ServiceBusOptions(session_idle_timeout_s=1.0)
    with listening(
        "session-order", lambda locks: SessionInvoker(locks, 0.2, renew_own_session), options
    ) as (_, invoker):
        wait_for(lambda: len(invoker.calls) >= 15, what="every message of the three sessions")
    assert invoker.most_sessions_at_once >= 2
    assert invoker.overlaps == []
    for session in sessions:
        calls = invoker.of(session)
        assert [call.body for call in calls] == [f"{session}-{step}" for step in range(5)]
        _assert_in_order_one_at_a_time(calls)
    assert sorted(set(renewed)) == sessions
    assert len(renewed) == 15
    assert connected.runtime_properties("session-order")["active_message_count"] == 0


def test_an_abandoned_message_comes_back_before_the_sessions_next(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    senders.send_to_sessions("session-abandon", [("doc", f"step-{step}") for step in range(3)])

    seen: set[str] = set()

    def function(message: SdkMessage, invoker: SessionInvoker) -> None:
        body = body_text(message)
        first = body not in seen
        seen.add(body)
        if body == "step-0" and first:
            invoker.abandon(message)  # through ServiceBusMessageActions
            return
        if body == "step-1" and first:
            raise RuntimeError("the function failed")  # the host abandons it
        invoker.complete(message)

    options = ServiceBusOptions(session_idle_timeout_s=1.0, auto_complete_messages=False)
    with listening(
        "session-abandon", lambda locks: SessionInvoker(locks, action=function), options
    ) as (_, invoker):
        wait_for(lambda: len(invoker.calls) >= 5, what="the five invocations")
        time.sleep(0.5)  # nothing more comes
    calls = invoker.of("doc")
    first = calls[0].delivery_count
    assert [(call.body, call.delivery_count - first) for call in calls] == [
        ("step-0", 0),
        ("step-0", 1),  # abandoned: delivered again, before the session's next message
        ("step-1", 0),
        ("step-1", 1),  # failed: abandoned by the host, the same
        ("step-2", 0),
    ]
    assert connected.runtime_properties("session-abandon")["active_message_count"] == 0


def test_max_concurrent_sessions_one_takes_sessions_one_after_another(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    idle_s = 1.0
    senders.send_to_sessions(
        "session-one",
        [(session, f"{session}-{step}") for step in range(3) for session in ("one", "two")],
    )
    options = ServiceBusOptions(max_concurrent_sessions=1, session_idle_timeout_s=idle_s)
    with listening("session-one", lambda locks: SessionInvoker(locks, busy_s=0.05), options) as (
        listener,
        invoker,
    ):
        assert len(listener._threads) == 1
        wait_for(lambda: len(invoker.calls) >= 6, what="both sessions")
    assert invoker.most_sessions_at_once == 1
    order = [call.session for call in invoker.calls]
    first, second = order[0], order[3]
    assert order == [first] * 3 + [second] * 3  # a whole session, then the next
    for session in (first, second):
        _assert_in_order_one_at_a_time(invoker.of(session))
    # The first session was let go only after a receive had waited sessionIdleTimeout.
    gap = invoker.of(second)[0].started - invoker.of(first)[-1].ended
    assert idle_s <= gap < idle_s + 15


def test_stop_ends_every_session_receiver_promptly(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    senders.send_to_sessions("session-stop", [("held-1", "a"), ("held-2", "b")])
    # The default sessionIdleTimeout (60 s): both sessions stay held, receiving, when stopped.
    with listening("session-stop", lambda locks: SessionInvoker(locks), ServiceBusOptions()) as (
        listener,
        invoker,
    ):
        wait_for(lambda: len(invoker.calls) >= 2, what="both messages")
        wait_for(lambda: len(listener.held_sessions) == 2, what="both sessions held")
        started = time.monotonic()
        listener.stop()
        listener.join(10)
        took = time.monotonic() - started
    assert not listener.is_alive()
    assert took < 5  # receives wait 1 s at most, accepts 2 s
    assert listener.held_sessions == {}


def test_a_held_session_lock_is_renewed_automatically(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    """The queue's locks last 5 s; the invocation runs 7 s and its completion still holds."""
    senders.send_to_sessions("session-renew", [("long", "slow")])
    options = ServiceBusOptions(session_idle_timeout_s=1.0)
    with listening("session-renew", lambda locks: SessionInvoker(locks, busy_s=7.0), options) as (
        listener,
        invoker,
    ):
        wait_for(lambda: listener.held_sessions, what="the session")
        renewal = listener.held_sessions["long"]
        assert renewal is not None
        wait_for(lambda: invoker.calls, what="the invocation")
        time.sleep(1.5)  # long enough for a redelivery, were the lock lost
    assert [call.body for call in invoker.calls] == ["slow"]  # once: never redelivered
    assert renewal.renewals >= 1
    assert connected.runtime_properties("session-renew")["active_message_count"] == 0


def test_without_renewal_the_session_lock_expires_under_a_long_invocation(
    connected: ServiceBusEmulator, senders: Senders
) -> None:
    """The check above is the renewal's doing: with maxAutoLockRenewalDuration 0 the same
    invocation loses its session, and the message is delivered again."""
    senders.send_to_sessions("session-unrenewed", [("long", "slow")])
    options = ServiceBusOptions(session_idle_timeout_s=1.0, max_auto_lock_renewal_duration_s=0)
    with listening(
        "session-unrenewed", lambda locks: SessionInvoker(locks, busy_s=7.0), options
    ) as (_, invoker):
        # Once the lock has expired the message goes again, while the first call still runs.
        wait_for(lambda: len(invoker.deliveries) >= 2, timeout=30, what="the redelivery")
        invoker.hurry()
    (body, count), (again, count_again) = invoker.deliveries[:2]
    assert body == again == "slow"
    assert count_again == count + 1
