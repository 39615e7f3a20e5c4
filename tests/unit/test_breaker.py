"""The broker breaker's states, on a clock of the test's own: open after an outage, refuse at
once, let one probe through when the window ends, close on its success, reopen on its
failure; other failures pass through and leave it closed."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from shared.adapters.in_memory import RecordingSender
from shared.errors import BrokerUnreachable, PermanentError, ServiceUnavailable, TransientError
from shared.intake.breaker import SendBreaker
from shared.messaging import OutgoingMessage, Scheduled

OUTAGE = BrokerUnreachable("sending to inference-requests: ServiceBusConnectionError")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def message(n: int = 0) -> OutgoingMessage:
    return OutgoingMessage(body=b"{}", message_id=f"m{n}", correlation_id="c")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def breaker(sender: RecordingSender, clock: Clock) -> SendBreaker:
    return SendBreaker(sender, open_seconds=5, clock=clock)


def test_an_outage_opens_it_and_sends_are_refused_without_reaching_the_sender(
    breaker: SendBreaker, sender: RecordingSender, clock: Clock
) -> None:
    sender.fail_with = OUTAGE
    with pytest.raises(BrokerUnreachable):
        breaker.send(message())
    sender.fail_with = None  # the broker is back, but the window is not over

    clock.now += 1.2
    with pytest.raises(ServiceUnavailable) as refused:
        breaker.send(message(1))

    assert breaker.is_open
    assert refused.value.retry_after == 4, "the time left, rounded up"
    assert sender.sent == []


def test_after_the_window_one_probe_goes_through_and_closes_it(
    breaker: SendBreaker, sender: RecordingSender, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="shared.intake.breaker"):
        sender.fail_with = OUTAGE
        for n in range(3):  # only the first failure opens it (and logs)
            with pytest.raises(TransientError):
                breaker.send(message(n))
        sender.fail_with = None
        clock.now += 5
        breaker.send(message(10))
        breaker.send(message(11))

    assert not breaker.is_open
    assert [m.message_id for m in sender.sent] == ["m10", "m11"]
    assert [record.levelname for record in caplog.records] == ["WARNING", "INFO"]


def test_a_failed_probe_opens_it_for_another_window(
    breaker: SendBreaker, sender: RecordingSender, clock: Clock
) -> None:
    sender.fail_with = OUTAGE
    with pytest.raises(BrokerUnreachable):
        breaker.send(message())
    clock.now += 5
    with pytest.raises(BrokerUnreachable):  # the probe reached the sender, and failed
        breaker.send(message(1))
    sender.fail_with = None

    clock.now += 4
    with pytest.raises(ServiceUnavailable):
        breaker.send(message(2))
    clock.now += 1
    breaker.send(message(3))
    assert [m.message_id for m in sender.sent] == ["m3"]


def test_while_the_probe_runs_every_other_send_is_refused(clock: Clock) -> None:
    entered, release = threading.Event(), threading.Event()

    class SlowBroker(RecordingSender):
        def send(self, outgoing: OutgoingMessage) -> None:
            if outgoing.message_id == "outage":
                raise OUTAGE
            entered.set()
            release.wait(10)
            super().send(outgoing)

    broker = SlowBroker()
    breaker = SendBreaker(broker, open_seconds=5, clock=clock)
    with pytest.raises(BrokerUnreachable):
        breaker.send(OutgoingMessage(body=b"{}", message_id="outage", correlation_id="c"))
    clock.now += 5
    probe = threading.Thread(target=breaker.send, args=(message(1),))
    probe.start()
    assert entered.wait(10)
    try:
        with pytest.raises(ServiceUnavailable) as refused:
            breaker.send(message(2))
    finally:
        release.set()
        probe.join(10)
    assert refused.value.retry_after == 5
    assert [m.message_id for m in broker.sent] == ["m1"]
    assert not breaker.is_open


@pytest.mark.parametrize(
    "failure",
    [TransientError("inference-requests: ServiceBusQuotaExceededError"), PermanentError("big")],
)
def test_failures_that_are_not_an_outage_leave_it_closed(
    breaker: SendBreaker, sender: RecordingSender, failure: Exception
) -> None:
    sender.fail_with = failure
    with pytest.raises(type(failure)):
        breaker.send(message())
    sender.fail_with = None
    breaker.send(message(1))
    assert not breaker.is_open
    assert [m.message_id for m in sender.sent] == ["m1"]


def test_a_window_must_be_above_zero(sender: RecordingSender) -> None:
    with pytest.raises(ValueError, match="above zero"):
        SendBreaker(sender, open_seconds=0)


def test_a_scheduled_send_and_a_call_back_are_guarded_as_sends(
    breaker: SendBreaker, sender: RecordingSender, clock: Clock
) -> None:
    later = replace(message(1), scheduled_enqueue_time=datetime(2026, 12, 5, tzinfo=UTC))
    sender.fail_with = OUTAGE
    with pytest.raises(BrokerUnreachable):
        breaker.schedule(later)
    sender.fail_with = None
    with pytest.raises(ServiceUnavailable):
        breaker.cancel([Scheduled(sender.entity, 1)])
    clock.now += 5
    scheduled = breaker.schedule(later)  # the probe: the broker takes it, the breaker closes
    breaker.cancel([scheduled])
    assert not breaker.is_open
    assert sender.cancelled == [scheduled.sequence_number]
