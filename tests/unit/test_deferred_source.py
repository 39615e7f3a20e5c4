"""Receiving deferred messages: only "not found" makes a message missing.

The receiver below stands in for the SDK's ``ServiceBusReceiver`` and raises the SDK's own
exception types, so the adapter's translation is what is under test.
"""

from __future__ import annotations

from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusConnectionError

from shared.adapters.in_memory import InMemoryDocuments
from shared.adapters.servicebus_inbound import ReceiverDeferredSource
from shared.errors import TransientError
from shared.processing.deferral import DeferredEntry, DeferredSweeper, DocumentDeferralLedger

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Receiver:
    """Answers receive_deferred_messages from a script: sequence number -> outcome."""

    def __init__(self, batch_error: Exception, single: dict[int, Exception]) -> None:
        self.batch_error = batch_error
        self.single = single
        self.calls: list[list[int]] = []

    def receive_deferred_messages(self, numbers: list[int]) -> list[Any]:
        self.calls.append(list(numbers))
        if len(numbers) > 1:
            raise self.batch_error
        raise self.single[numbers[0]]


def test_a_missing_message_is_found_one_by_one() -> None:
    receiver = Receiver(
        MessageNotFoundError(message="Deferred message 1 not found."),
        {1: MessageNotFoundError(message="gone"), 2: MessageNotFoundError(message="gone")},
    )
    source = ReceiverDeferredSource(receiver)  # type: ignore[arg-type]

    assert source.receive_deferred([1, 2]) == []
    assert receiver.calls == [[1, 2], [1], [2]]


@pytest.mark.parametrize("fails", ["batch", "single"])
def test_an_unreachable_broker_is_transient_not_missing(fails: str) -> None:
    down = ServiceBusConnectionError(message="connection lost")
    if fails == "batch":
        receiver = Receiver(down, {})
    else:
        receiver = Receiver(MessageNotFoundError(message="2 not found"), {1: down, 2: down})
    source = ReceiverDeferredSource(receiver)  # type: ignore[arg-type]

    with pytest.raises(TransientError):
        source.receive_deferred([1, 2])


def test_the_sweeper_keeps_every_entry_when_the_broker_is_down() -> None:
    ledger = DocumentDeferralLedger(InMemoryDocuments(), "ledgers")
    for number in (1, 2):
        ledger.record(
            DeferredEntry(
                queue="q",
                sequence_number=number,
                tenant_id="t",
                request_id=f"r{number}",
                due_at=NOW - timedelta(seconds=5),
                reason="not_before",
                recorded_at=NOW - timedelta(minutes=1),
            )
        )
    receiver = Receiver(ServiceBusConnectionError(message="connection lost"), {})
    source = ReceiverDeferredSource(receiver)  # type: ignore[arg-type]
    sweeper = DeferredSweeper(ledger, handler=None, clock=lambda: NOW)  # type: ignore[arg-type]

    with pytest.raises(TransientError):
        sweeper.sweep("q", lambda: nullcontext(source))

    assert [e.sequence_number for e in ledger.due("q", NOW)] == [1, 2]
    assert ledger.missing("q") == []
