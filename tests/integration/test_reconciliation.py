"""The dead-letter reconciler against the emulator's dead-letter queues and Azurite.

Request messages are sent with the app's real sender and dead-lettered by the broker
itself: by its max delivery count (abandoned ten times through the SDK) and by expiry
(a one-second time to live on a queue that dead-letters expired messages). The
reconciler then peeks, ends the jobs, and announces on the results topic.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.blob_storage import AzureBlobStore
from shared.composition import Services
from shared.contracts import InlineText, Job, JobStatus, RequestMessage
from shared.events.announcements import FAILED
from shared.jobs import transition
from shared.lanes import LaneQueues
from shared.messaging import OutgoingMessage, request_envelope
from shared.processing import maintenance
from shared.tracing import continue_or_start
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
AUDIT = ("inference-results", "audit")


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


def send_request(services: Services, tenant: str, status: JobStatus, **envelope: object) -> str:
    """A request message sent with the app's sender, and its job recorded in ``status``."""
    now = datetime.now(UTC)
    request = RequestMessage(
        request_id=str(uuid.uuid4()),
        tenant_id=tenant,
        model="local-analyzer",
        input=InlineText(text="Invoice 12: 300 EUR due."),
        deadline=now + timedelta(hours=1),
    )
    job = Job(
        id=request.request_id,
        tenant_id=tenant,
        model=request.model,
        input=request.input,
        correlation_id=request.request_id,
        created_at=now,
        updated_at=now,
        deadline=request.deadline,
    )
    if status is not JobStatus.ACCEPTED:
        job = transition(job, status)
    assert services.jobs.create(job) is not None
    message: OutgoingMessage = request_envelope(
        request, correlation_id=request.request_id, trace=continue_or_start(None), now=now
    )
    services.ports.requests.send(replace(message, **envelope))  # type: ignore[arg-type]
    return request.request_id


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


def announced_failures(bus: ServiceBusClient) -> dict[str, str]:
    """request id -> error code of the InferenceFailed messages on the results topic."""
    found = {}
    for message in drain(bus, topic=AUDIT[0], subscription=AUDIT[1]):
        if message.subject == FAILED:
            data = json.loads(b"".join(message.body))
            found[data["request_id"]] = data["error_code"]
    return found


def test_messages_the_broker_dead_lettered_end_their_jobs_once(
    services: Services,
    bus: ServiceBusClient,
    servicebus_emulator: ServiceBusEmulator,
    tenant: str,
) -> None:
    poisoned = send_request(services, tenant, JobStatus.RUNNING)
    abandon_until_dead_lettered(bus, poisoned)
    expired = send_request(services, tenant, JobStatus.ACCEPTED, time_to_live=timedelta(seconds=1))
    wait_for_dead_letters(servicebus_emulator, 2)

    maintenance.reconcile_dead_letters(lambda: services)

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
    done = send_request(services, tenant, JobStatus.COMPLETED)
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
