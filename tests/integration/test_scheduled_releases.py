"""Intake's scheduled requests, sent sooner through the real SDK against the emulator:
the schedule operation answers a sequence number, the copy arrives with its own id, and
the earlier copy, cancelled by its number, never arrives (``ScheduledReleases`` over
``LazyServiceBusSender``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.servicebus import LazyServiceBusSender
from shared.adapters.servicebus_inbound import from_sdk
from shared.errors import TransientError
from shared.inference.capacity import Release
from shared.intake.releases import ScheduledReleases
from shared.messaging import PACED, OutgoingMessage
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


class BronzeAloneAtOnce:
    """A ``TenantPacing`` that, asked to space again bronze's work alone, lets it go now."""

    def release_delay(self, tenant: str, model: str, text_chars: int, parameters: Any) -> float:
        return 0.0

    def pacing_key(self, model: str) -> str:
        return model

    def respace(self, releases: Sequence[Release]) -> list[float]:
        alone = {r.tenant for r in releases} == {"bronze"}
        return [0.0 if alone else r.delay for r in releases]


def request(request_id: str, tenant: str, due: datetime) -> OutgoingMessage:
    return OutgoingMessage(
        body=b'{"request_id": "%s"}' % request_id.encode(),
        message_id=request_id,
        correlation_id=request_id,
        scheduled_enqueue_time=due,
        application_properties={"tenant": tenant, PACED: True},
    )


def test_a_request_sent_sooner_arrives_once_with_its_own_id(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        sender = LazyServiceBusSender(lambda: bus, QUEUE)
        releases = ScheduledReleases(sender, BronzeAloneAtOnce())
        now = datetime.now(UTC)
        for request_id, tenant, due in (
            ("gold-1", "gold", now + timedelta(seconds=1)),
            ("bronze-1", "bronze", now + timedelta(hours=1)),
        ):
            releases.schedule(request(request_id, tenant, due), tenant=tenant, model="gpt",
                              text_chars=20, parameters={})  # fmt: skip
        counts = servicebus_emulator.runtime_properties(QUEUE)
        assert counts["scheduled_message_count"] == 2
        assert releases.look() == 0, "both are where their tenants' parts put them"
        time.sleep(1.5)  # gold's one request has reached the queue

        assert releases.look() == 1
        arrived: list[str] = []
        with bus.get_queue_receiver(QUEUE, max_wait_time=5) as receiver:
            deadline = time.monotonic() + 10
            while len(arrived) < 2 and time.monotonic() < deadline:
                for message in receiver.receive_messages(10, max_wait_time=2):
                    arrived.append(str(message.message_id))
                    assert from_sdk(message).paced, "the mark travels with the copy"
                    receiver.complete_message(message)
        sender.close()
        assert sorted(arrived) == ["bronze-1:release:1", "gold-1"]
        counts = servicebus_emulator.runtime_properties(QUEUE)
        assert counts["scheduled_message_count"] == 0, "the hour-away copy is cancelled"
        assert counts["active_message_count"] == 0


def test_a_cancel_of_a_message_no_longer_scheduled_is_refused_and_the_link_kept(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        opened: list[ServiceBusClient] = []  # each link the sender opens asks for the client

        def client() -> ServiceBusClient:
            opened.append(bus)
            return bus

        sender = LazyServiceBusSender(client, QUEUE)
        later = datetime.now(UTC) + timedelta(hours=1)
        first = sender.schedule(request("r-1", "bronze", later))
        second = sender.schedule(request("r-2", "bronze", later))
        sender.cancel([first])
        with pytest.raises(TransientError, match="cancelling scheduled messages"):
            sender.cancel([first, second])  # all or none, as Service Bus does
        assert servicebus_emulator.runtime_properties(QUEUE)["scheduled_message_count"] == 1
        sender.cancel([second])
        assert len(opened) == 1, "the refusal left the link open and sound"
        sender.close()
        assert servicebus_emulator.runtime_properties(QUEUE)["scheduled_message_count"] == 0
