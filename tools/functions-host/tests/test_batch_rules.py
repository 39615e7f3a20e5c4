"""The extension's batch and session rules and host.json options, as units (no services)."""

from __future__ import annotations

from typing import Any

import pytest

from functions_host.config import HostConfigError, ServiceBusOptions
from functions_host.functions import FunctionSpec
from functions_host.servicebus_listener import PendingBatch, ServiceBusListener, renew_delay
from functions_host.settlement import MessageLocks


def test_messages_wait_until_the_minimum_then_the_oldest_go_up_to_the_maximum() -> None:
    pending = PendingBatch[str](max_size=4, min_size=3, wait_s=2.0)
    assert pending.add(["a", "b"]) == []
    pending.arm(now=10.0)
    assert pending.deadline == 12.0
    assert pending.add(["c", "d", "e", "f", "g"]) == ["a", "b", "c", "d"]
    # The dispatch cancelled the wait; what is left starts a new one after the dispatch.
    assert pending.deadline is None
    assert len(pending) == 3
    pending.arm(now=11.0)
    assert pending.deadline == 13.0


def test_the_wait_starts_once_and_more_messages_do_not_restart_it() -> None:
    pending = PendingBatch[str](max_size=8, min_size=4, wait_s=2.0)
    pending.add(["a"])
    pending.arm(now=10.0)
    pending.add(["b"])
    pending.arm(now=11.5)
    assert pending.deadline == 12.0
    assert not pending.due(11.999)
    assert pending.due(12.0)
    assert pending.take() == ["a", "b"]  # the partial batch
    assert pending.deadline is None
    pending.arm(now=20.0)
    assert pending.deadline is None  # nothing held, no wait


def test_receives_do_not_wait_past_the_deadline() -> None:
    pending = PendingBatch[str](max_size=8, min_size=4, wait_s=2.0)
    assert pending.receive_wait(now=10.0, longest=1.0) == 1.0
    pending.add(["a"])
    pending.arm(now=10.0)
    assert pending.receive_wait(now=10.0, longest=1.0) == 1.0
    assert pending.receive_wait(now=11.7, longest=1.0) == pytest.approx(0.3)
    assert pending.receive_wait(now=12.5, longest=1.0) > 0


def test_a_minimum_of_one_holds_nothing() -> None:
    pending = PendingBatch[str](max_size=8, min_size=1, wait_s=30.0)
    assert pending.add(["a", "b"]) == ["a", "b"]
    pending.arm(now=0.0)
    assert pending.deadline is None


def test_service_bus_options_have_the_extension_defaults() -> None:
    options = ServiceBusOptions.from_section({})
    assert (
        options.max_message_batch_size,
        options.min_message_batch_size,
        options.max_batch_wait_time_s,
        options.prefetch_count,
        options.auto_complete_messages,
    ) == (1000, 1, 30.0, 0, True)
    assert options.max_concurrent_calls % 16 == 0
    assert (
        options.max_concurrent_sessions,
        options.max_concurrent_calls_per_session,
        options.session_idle_timeout_s,
        options.session_idle_s,  # unset: clientRetryOptions.tryTimeout, 60 s
        options.max_auto_lock_renewal_duration_s,
    ) == (8, 1, None, 60.0, 300.0)


def test_service_bus_options_bind_case_insensitively() -> None:
    options = ServiceBusOptions.from_section(
        {
            "MaxMessageBatchSize": 8,
            "minmessagebatchsize": "4",
            "maxBatchWaitTime": "00:00:02",
            "PrefetchCount": 16,
            "autoCompleteMessages": "False",
        }
    )
    assert options.max_message_batch_size == 8
    assert options.min_message_batch_size == 4
    assert options.max_batch_wait_time_s == 2.0
    assert options.prefetch_count == 16
    assert options.auto_complete_messages is False


def test_session_options_bind_as_the_extension_binds_them() -> None:
    options = ServiceBusOptions.from_section(
        {
            "MaxConcurrentSessions": "3",
            "maxConcurrentCallsPerSession": 1,
            "SessionIdleTimeout": "00:00:05",
            "maxAutoLockRenewalDuration": "00:10:00",
        }
    )
    assert options.max_concurrent_sessions == 3
    assert options.session_idle_s == 5.0
    assert options.max_auto_lock_renewal_duration_s == 600.0
    # Without sessionIdleTimeout the SDK waits the client's try timeout.
    retry = ServiceBusOptions.from_section({"ClientRetryOptions": {"TryTimeout": "00:00:20"}})
    assert retry.session_idle_s == 20.0
    # Timeout.InfiniteTimeSpan as host.json writes it: no limit; zero: no renewal.
    infinite = ServiceBusOptions.from_section({"maxAutoLockRenewalDuration": "-00:00:00.0010000"})
    assert infinite.max_auto_lock_renewal_duration_s is None
    none = ServiceBusOptions.from_section({"maxAutoLockRenewalDuration": "00:00:00"})
    assert none.max_auto_lock_renewal_duration_s == 0.0


@pytest.mark.parametrize(
    ("section", "complaint"),
    [
        ({"maxMessageBatchSize": 4, "minMessageBatchSize": 5}, "minMessageBatchSize"),
        ({"maxBatchWaitTime": "00:02:31"}, "maxBatchWaitTime"),
        ({"autoCompleteMessages": "yes"}, "boolean"),
        ({"maxMessageBatchSize": "eight"}, "maxMessageBatchSize: not a number"),
        ({"maxConcurrentSessions": 0}, "maxConcurrentSessions must be at least 1"),
        ({"maxConcurrentCallsPerSession": 0}, "maxConcurrentCallsPerSession"),
        ({"sessionIdleTimeout": "00:00:00"}, "sessionIdleTimeout must be positive"),
        ({"maxAutoLockRenewalDuration": "-00:00:01"}, "must not be negative"),
    ],
)
def test_service_bus_options_the_extension_refuses(
    section: dict[str, object], complaint: str
) -> None:
    with pytest.raises(HostConfigError, match=complaint):
        ServiceBusOptions.from_section(section)


def test_the_longest_allowed_wait_and_equal_sizes_are_accepted() -> None:
    options = ServiceBusOptions.from_section(
        {"maxMessageBatchSize": 4, "minMessageBatchSize": 4, "maxBatchWaitTime": "00:02:30"}
    )
    assert options.max_batch_wait_time_s == 150.0


def test_session_locks_are_renewed_when_the_sdk_renews_them() -> None:
    """ReceiverManager.CalculateRenewDelay: half the remaining time before expiry, at most
    10 s before it, and at once when less than 400 ms remain."""
    assert renew_delay(30.0) == 20.0
    assert renew_delay(8.0) == 4.0
    assert renew_delay(0.3) == 0.0


def _session_spec(**trigger: Any) -> FunctionSpec:
    return FunctionSpec(
        name="ordered",
        function_id="id-ordered",
        trigger_type="serviceBusTrigger",
        trigger={
            "type": "serviceBusTrigger",
            "name": "message",
            "queueName": "q",
            "isSessionsEnabled": True,
            "properties": {"SupportsDeferredBinding": True},
            **trigger,
        },
        bindings=[],
    )


@pytest.mark.parametrize(
    ("cardinality", "receivers"),
    [("one", 5), ("many", 1)],  # batches: one session at a time (RunBatchReceiveLoopAsync)
)
def test_single_message_session_triggers_get_max_concurrent_sessions_receivers(
    cardinality: str, receivers: int
) -> None:
    options = ServiceBusOptions(max_concurrent_sessions=5)
    spec = _session_spec(cardinality=cardinality)
    listener = ServiceBusListener(spec, invoker=None, options=options, locks=MessageLocks())  # type: ignore[arg-type]
    assert len(listener._threads) == receivers
