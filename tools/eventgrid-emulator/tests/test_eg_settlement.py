"""Locks and settlement through the unmodified SDK; dead letters read back from Azurite."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from azure.core.exceptions import HttpResponseError
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient
from azure.eventgrid.models import ReleaseDelay

from eg_testing import NAMESPACE, DeadLetters, make_event, scaled, wait_until
from eventgrid_emulator.process import EventGridEmulator

pytestmark = pytest.mark.eventgrid_emulator
Publisher = Callable[..., EventGridPublisherClient]
Consumer = Callable[..., EventGridConsumerClient]
LOCK = scaled(60)  # receiveLockDurationInSeconds 60 in namespace.json
FORMED_BUT_UNKNOWN = "RUdFTVUAAQAAAAAAAAAAAAAAAAAAAAAA"  # the emulator's token format, no lock


def test_acknowledge_deletes_the_event(publisher: Publisher, consumer: Consumer) -> None:
    publisher("acknowledge").send(make_event())
    receiver = consumer("acknowledge")
    (received,) = receiver.receive(max_wait_time=10)
    token = received.broker_properties.lock_token
    result = receiver.acknowledge(lock_tokens=[token])
    assert (result.succeeded_lock_tokens, result.failed_lock_tokens) == ([token], [])
    assert receiver.receive(max_wait_time=10) == []
    (again,) = receiver.acknowledge(lock_tokens=[token]).failed_lock_tokens
    assert (again.lock_token, again.error.code) == (token, "TokenLost")


def test_release_makes_the_event_available_at_once(
    publisher: Publisher, consumer: Consumer
) -> None:
    event = make_event()
    publisher("release").send(event)
    receiver = consumer("release")
    (first,) = receiver.receive(max_wait_time=10)
    released = receiver.release(lock_tokens=[first.broker_properties.lock_token])
    assert released.succeeded_lock_tokens == [first.broker_properties.lock_token]
    started = time.monotonic()
    (second,) = receiver.receive(max_wait_time=10)
    assert time.monotonic() - started < scaled(10) / 2
    assert second.event.id == event.id
    assert second.broker_properties.delivery_count == 2
    assert second.broker_properties.lock_token != first.broker_properties.lock_token
    receiver.acknowledge(lock_tokens=[second.broker_properties.lock_token])


def test_release_with_delay_hides_the_event_until_it_passes(
    test_emulator: EventGridEmulator, publisher: Publisher, consumer: Consumer
) -> None:
    publisher("release-delay").send(make_event())
    receiver = consumer("release-delay")
    (first,) = receiver.receive(max_wait_time=10)
    receiver.release(
        lock_tokens=[first.broker_properties.lock_token], release_delay=ReleaseDelay.TEN_SECONDS
    )
    released_at = time.monotonic()
    counts = test_emulator.runtime("release-delay", "q")
    assert (counts["available"], counts["delayed"], counts["locked"]) == (0, 1, 0)
    (second,) = receiver.receive(max_wait_time=60)
    assert time.monotonic() - released_at >= scaled(10) * 0.9
    assert second.broker_properties.delivery_count == 2
    with pytest.raises(HttpResponseError) as raised:  # only 0, 10, 60, 600 and 3600 exist
        receiver.release(lock_tokens=[second.broker_properties.lock_token], release_delay=5)
    assert raised.value.status_code == 400


def test_reject_dead_letters_to_blob_storage(
    publisher: Publisher, consumer: Consumer, dead_letters: DeadLetters
) -> None:
    event = make_event(subject="rejected/1", data={"why": "poison"})
    publisher("reject").send(event)
    receiver = consumer("reject")
    (received,) = receiver.receive(max_wait_time=10)
    token = received.broker_properties.lock_token
    assert receiver.reject(lock_tokens=[token]).succeeded_lock_tokens == [token]
    assert receiver.receive(max_wait_time=10) == []
    name, record = dead_letters.find("reject", "q", event.id)
    assert re.fullmatch(
        rf"{NAMESPACE}/reject/q/\d{{4}}/\d{{1,2}}/\d{{1,2}}/\d{{1,2}}/[0-9a-f-]{{36}}\.json", name
    )
    assert record["event"]["data"] == {"why": "poison"}
    assert record["event"]["subject"] == "rejected/1"
    properties = record["deadLetterProperties"]
    assert properties["deliveryattempts"] == 1
    assert properties["deadletterreason"] == "Event was rejected by the receiver."
    assert properties["publishutc"].endswith("Z")
    assert properties["deliveryattemptutc"] >= properties["publishutc"]


def test_renew_lock_extends_it(publisher: Publisher, consumer: Consumer) -> None:
    publisher("renew").send(make_event())
    receiver = consumer("renew")
    (received,) = receiver.receive(max_wait_time=10)
    token = received.broker_properties.lock_token
    time.sleep(LOCK * 0.6)
    renewed = receiver.renew_locks(lock_tokens=[token, FORMED_BUT_UNKNOWN])
    assert renewed.succeeded_lock_tokens == [token]
    assert [f.error.code for f in renewed.failed_lock_tokens] == ["TokenLost"]
    time.sleep(LOCK * 0.6)  # past the first lock, inside the renewed one
    assert receiver.acknowledge(lock_tokens=[token]).succeeded_lock_tokens == [token]


def test_lock_expiry_redelivers_with_the_next_delivery_count(
    publisher: Publisher, consumer: Consumer
) -> None:
    event = make_event()
    publisher("lock-expiry").send(event)
    receiver = consumer("lock-expiry")
    (first,) = receiver.receive(max_wait_time=10)
    time.sleep(LOCK + 0.3)
    late = receiver.acknowledge(lock_tokens=[first.broker_properties.lock_token])
    assert [f.error.code for f in late.failed_lock_tokens] == ["TokenLost"]
    (second,) = receiver.receive(max_wait_time=10)
    assert (second.event.id, second.broker_properties.delivery_count) == (event.id, 2)
    receiver.acknowledge(lock_tokens=[second.broker_properties.lock_token])


def test_max_delivery_count_dead_letters(
    publisher: Publisher, consumer: Consumer, dead_letters: DeadLetters
) -> None:
    event = make_event()
    publisher("max-delivery").send(event)  # maxDeliveryCount 2
    receiver = consumer("max-delivery")
    for expected_count in (1, 2):
        (received,) = receiver.receive(max_wait_time=10)
        assert received.broker_properties.delivery_count == expected_count
        receiver.release(lock_tokens=[received.broker_properties.lock_token])
    assert receiver.receive(max_wait_time=10) == []
    _, record = dead_letters.find("max-delivery", "q", event.id)
    assert record["deadLetterProperties"]["deadletterreason"] == (
        "Maximum delivery attempts was exceeded."
    )
    assert record["deadLetterProperties"]["deliveryattempts"] == 2


def test_time_to_live_dead_letters_expired_events(
    test_emulator: EventGridEmulator,
    publisher: Publisher,
    consumer: Consumer,
    dead_letters: DeadLetters,
) -> None:
    event = make_event()
    publisher("ttl").send(event)  # eventTimeToLive PT1M
    time.sleep(scaled(60) + 0.2)
    assert consumer("ttl").receive(max_wait_time=10) == []
    _, record = dead_letters.find("ttl", "q", event.id)
    assert record["deadLetterProperties"]["deadletterreason"] == "Event time to live expired."
    assert record["deadLetterProperties"]["deliveryattempts"] == 0
    assert test_emulator.runtime("ttl", "q")["deadLettered"] == 1


def test_invalid_and_lost_tokens_come_back_failed(publisher: Publisher, consumer: Consumer) -> None:
    publisher("tokens").send(make_event())
    receiver = consumer("tokens")
    (received,) = receiver.receive(max_wait_time=10)
    token = received.broker_properties.lock_token
    for settle in (receiver.acknowledge, receiver.release, receiver.reject, receiver.renew_locks):
        result = settle(lock_tokens=["not a token", FORMED_BUT_UNKNOWN])
        assert result.succeeded_lock_tokens == []
        failures = {
            f.lock_token: (f.error.code, f.error.message) for f in result.failed_lock_tokens
        }
        assert failures == {
            "not a token": ("BadToken", "Token is not valid."),
            FORMED_BUT_UNKNOWN: ("TokenLost", "Token has expired."),
        }
    mixed = receiver.acknowledge(lock_tokens=[FORMED_BUT_UNKNOWN, token])
    assert mixed.succeeded_lock_tokens == [token]
    assert [f.lock_token for f in mixed.failed_lock_tokens] == [FORMED_BUT_UNKNOWN]
    # A token of one subscription means nothing to another.
    publisher("tokens").send(make_event())
    (other,) = receiver.receive(max_wait_time=10)
    stranger = consumer("release").acknowledge(lock_tokens=[other.broker_properties.lock_token])
    assert [f.error.code for f in stranger.failed_lock_tokens] == ["TokenLost"]
    receiver.acknowledge(lock_tokens=[other.broker_properties.lock_token])


def test_without_a_dead_letter_container_rejected_events_are_dropped(
    test_emulator: EventGridEmulator, publisher: Publisher, consumer: Consumer
) -> None:
    publisher("no-dead-letter").send(make_event())
    receiver = consumer("no-dead-letter")
    (received,) = receiver.receive(max_wait_time=10)
    receiver.reject(lock_tokens=[received.broker_properties.lock_token])
    counts = wait_until(lambda: test_emulator.runtime("no-dead-letter", "q"))
    assert (counts["available"], counts["locked"], counts["deadLettered"]) == (0, 0, 1)
