"""The extension's batch rules and host.json options, as units (no services)."""

from __future__ import annotations

import pytest

from functions_host.config import HostConfigError, ServiceBusOptions
from functions_host.servicebus_listener import PendingBatch


def test_messages_wait_until_the_minimum_then_the_oldest_go_up_to_the_maximum() -> None:
    pending = PendingBatch(max_size=4, min_size=3, wait_s=2.0)
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
    pending = PendingBatch(max_size=8, min_size=4, wait_s=2.0)
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
    pending = PendingBatch(max_size=8, min_size=4, wait_s=2.0)
    assert pending.receive_wait(now=10.0, longest=1.0) == 1.0
    pending.add(["a"])
    pending.arm(now=10.0)
    assert pending.receive_wait(now=10.0, longest=1.0) == 1.0
    assert pending.receive_wait(now=11.7, longest=1.0) == pytest.approx(0.3)
    assert pending.receive_wait(now=12.5, longest=1.0) > 0


def test_a_minimum_of_one_holds_nothing() -> None:
    pending = PendingBatch(max_size=8, min_size=1, wait_s=30.0)
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


@pytest.mark.parametrize(
    ("section", "complaint"),
    [
        ({"maxMessageBatchSize": 4, "minMessageBatchSize": 5}, "minMessageBatchSize"),
        ({"maxBatchWaitTime": "00:02:31"}, "maxBatchWaitTime"),
        ({"autoCompleteMessages": "yes"}, "boolean"),
        ({"maxMessageBatchSize": "eight"}, "maxMessageBatchSize: not a number"),
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
