"""A storage outage while a message is processed: rescheduled with backoff, not abandoned.

The processor's storage account is a port where nothing listens (connections refused, as
with Azurite stopped); Service Bus is the emulator. The job lookup fails before the model
runs, which used to abandon the message at once and burn its delivery count. It now takes
the transient path: a retry copy is scheduled and the original completed. When storage is
back (the same app over the running Azurite), the copy completes the request.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.servicebus_inbound import ReceiverSettler, from_sdk
from shared.contracts import JobStatus
from shared.entrypoints.bootstrap import Services
from shared.lanes import Lane
from tests.fixtures.azurite import ACCOUNT_KEY, ACCOUNT_NAME, free_port
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.queued_requests import queue_request
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    """The emulator with an empty request queue and dead-letter queue."""
    with connect(servicebus_emulator) as client:
        drain(client, QUEUE)
        drain(client, QUEUE, sub_queue="deadletter")
        yield client


def refused_storage() -> str:
    """A storage connection string whose blob endpoint refuses connections."""
    endpoint = f"http://127.0.0.1:{free_port()}/{ACCOUNT_NAME}"
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};"
        f"AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
    )


def process_next(services: Services, bus: ServiceBusClient) -> tuple[str, str | None, int]:
    """Receive the next request message and process it: (outcome, message id, outage
    retry count)."""
    with bus.get_queue_receiver(QUEUE) as receiver:
        [message] = receiver.receive_messages(1, max_wait_time=30)
        inbound = from_sdk(message, from_receiver=True)
        outcome = services.lanes[Lane.STANDARD].processor.process(
            inbound, ReceiverSettler(receiver)
        )
    return outcome, inbound.message_id, inbound.outage_retry_count


def test_a_message_processed_during_a_storage_outage_is_rescheduled_then_completes(
    install_services: InstallServices,
    bus: ServiceBusClient,
    servicebus_emulator: ServiceBusEmulator,
    tenant: str,
) -> None:
    fast_retries = {"RetryBaseSeconds": "0.5", "RetryMaxSeconds": "1"}
    healthy = install_services(settings=fast_retries)
    request_id = queue_request(healthy, tenant)
    outage = install_services(Storage=refused_storage(), settings=fast_retries)

    outcome, message_id, _ = process_next(outage, bus)

    assert (outcome, message_id) == ("retry-scheduled", request_id)
    counts = servicebus_emulator.runtime_properties(QUEUE)
    assert counts["dead_letter_message_count"] == 0
    assert healthy.jobs.get(tenant, request_id).status is JobStatus.ACCEPTED

    outcome, message_id, outages = process_next(healthy, bus)

    assert (outcome, message_id, outages) == ("completed", f"{request_id}:retry:0:outage:1", 1)
    job = healthy.jobs.get(tenant, request_id)
    assert job.status is JobStatus.COMPLETED
    assert job.result is not None
    assert servicebus_emulator.runtime_properties(QUEUE)["total_message_count"] == 0
