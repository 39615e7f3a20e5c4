"""The dead-letter reconciler against the emulator's dead-letter queues and Azurite.

Request messages are sent with the app's real sender and dead-lettered by the broker
itself: by its max delivery count (abandoned ten times through the SDK) and by expiry
(a one-second time to live on a queue that dead-letters expired messages). The
reconciler then peeks, ends the jobs, and announces on the results topic.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import Services
from shared.lanes import LaneQueues
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.queued_requests import AUDIT, announced_failures, queue_request
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    """The emulator with an empty request queue, empty dead-letter queues (of every lane:
    the reconciler reads them all) and an empty audit subscription."""
    with connect(servicebus_emulator) as client:
        for lane_queue in (QUEUE, "inference-priority", "inference-ordered"):
            drain(client, lane_queue, sub_queue="deadletter")
        drain(client, QUEUE)
        drain(client, topic=AUDIT[0], subscription=AUDIT[1])
        yield client


@pytest.fixture
def services(
    install_services: InstallServices, storage: AzureBlobStore, bus: ServiceBusClient
) -> Services:
    """The real services with a ledger container of this test's own (its markers)."""
    ledger = f"ledger-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([ledger])
    return install_services(LedgerContainer=ledger)


def abandon_until_dead_lettered(bus: ServiceBusClient, message_id: str) -> None:
    """Deliver and abandon until the broker dead-letters it (MaxDeliveryCount 10)."""
    with bus.get_queue_receiver(QUEUE) as receiver:
        for _ in range(10):
            [message] = receiver.receive_messages(1, max_wait_time=10)
            assert message.message_id == message_id
            receiver.abandon_message(message)


def wait_for_dead_letters(emulator: ServiceBusEmulator, count: int) -> None:
    """The broker expires messages on its own timer: wait (bounded) until it has."""
    for _ in range(100):
        if emulator.runtime_properties(QUEUE)["dead_letter_message_count"] >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} dead-lettered messages in {QUEUE}")


def test_messages_the_broker_dead_lettered_end_their_jobs_once(
    services: Services,
    bus: ServiceBusClient,
    servicebus_emulator: ServiceBusEmulator,
    tenant: str,
) -> None:
    poisoned = queue_request(services, tenant, JobStatus.RUNNING)
    abandon_until_dead_lettered(bus, poisoned)
    expired = queue_request(services, tenant, JobStatus.ACCEPTED, time_to_live=timedelta(seconds=1))
    wait_for_dead_letters(servicebus_emulator, 2)

    entry_points.reconcile_dead_letters(lambda: services)

    failed = services.jobs.get(tenant, poisoned)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert failed.error.code == "max_delivery_count_exceeded"
    assert failed.error.message.startswith("MaxDeliveryCountExceeded: ")
    ended = services.jobs.get(tenant, expired)
    assert ended.status is JobStatus.EXPIRED
    assert ended.error is not None
    assert ended.error.code == "message_expired"
    assert announced_failures(bus) == {
        poisoned: "max_delivery_count_exceeded",
        expired: "message_expired",
    }
    assert services.reconciler is not None
    held = {item.message_id: item.reason for item in services.ports.dead_letter_queues.peek(QUEUE)}  # type: ignore[union-attr]
    assert held == {poisoned: "MaxDeliveryCountExceeded", expired: "TTLExpiredException"}

    queues = LaneQueues.from_settings(services.settings)
    again = services.reconciler.reconcile([queues.standard, queues.priority, queues.ordered])

    assert dict(again.outcomes) == {"reconciled-before": 2}
    assert services.jobs.get(tenant, poisoned) == failed
    assert services.jobs.get(tenant, expired) == ended
    assert announced_failures(bus) == {}


def test_a_job_that_already_ended_is_left_alone(
    services: Services, bus: ServiceBusClient, tenant: str
) -> None:
    done = queue_request(services, tenant, JobStatus.COMPLETED)
    abandon_until_dead_lettered(bus, done)
    before = services.jobs.load(tenant, done)

    assert services.reconciler is not None
    report = services.reconciler.reconcile([QUEUE])

    assert dict(report.outcomes) == {"skipped": 1}
    after = services.jobs.load(tenant, done)
    assert after is not None
    assert before is not None
    assert after.etag == before.etag
    assert announced_failures(bus) == {}
