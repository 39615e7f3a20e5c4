"""Storage round trips per request, counted at the HTTP transport of the app's blob client.

Storage calls are most of a request's cost (each one a network round trip to Blob
storage), so their number is a budget a change must not exceed silently: two at intake
(the input, the job), three with an Idempotency-Key (its marker), one more for a tenant
with a budget (its month's document), four in processing (the job, running, the input,
completed with the result), one per status or result poll, and for a page of the
tenant's requests one read per request on it and a listing. The usage ledger's writes
are per flush, not per request: the flush runs when the test says so.
The requests go through the registered functions against Azurite and the Service Bus
emulator; only the transport under azure-storage-blob is wrapped, to count.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from azure.core.pipeline.transport import (
    HttpRequest,
    HttpResponse,
    HttpTransport,
    RequestsTransport,
)
from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver

from shared.accounting.ledger import month_of
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.clock import utc_now
from shared.contracts import JobStatus
from shared.entrypoints.bootstrap import Services
from shared.processing.inbound import normalise_properties
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import (
    Call,
    InstallServices,
    json_body,
    make_settings,
)
from tests.support.functions import indexed_functions
from tests.support.servicebus import ReceiverMessageActions, connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
INTAKE_BUDGET = 2
INTAKE_BUDGET_WITH_KEY = 3
PROCESSING_BUDGET = 4
BUDGET_HOLD = 1  # a tenant with a budget: its month's document, If-Match
# The ledger's timed flush would land in a count: the tests flush themselves.
NO_TIMED_FLUSH = {"Usage__flushSeconds": "300"}
# A page of requests: one GET per request on it, and one List Blobs while the tenant
# keeps no more than a listing's probe (job_listing.PROBE_NAMES); a busier tenant's
# listings follow the id's time prefix, not its number of jobs (tests/unit).
LISTING_CALLS = 1
TEXT = "Invoice 12. Total amount due: 300 EUR. Payment within 30 days."


class CountingTransport(HttpTransport[HttpRequest, HttpResponse]):
    """The SDK's own transport, noting each request as ``METHOD container/blob``."""

    def __init__(self) -> None:
        self._transport: HttpTransport[HttpRequest, HttpResponse] = RequestsTransport()
        self.operations: list[str] = []
        self._lock = threading.Lock()

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        path = unquote(urlsplit(request.url).path).split("/", 2)[-1]  # drop the account
        with self._lock:
            self.operations.append(f"{request.method} {path}")
        return self._transport.send(request, **kwargs)

    def open(self) -> None:
        self._transport.open()

    def close(self) -> None:
        self._transport.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return self.operations[mark:]


@pytest.fixture
def transport() -> CountingTransport:
    return CountingTransport()


@pytest.fixture
def counted(
    install_services: InstallServices, azurite: Azurite, transport: CountingTransport
) -> Services:
    """The app's services with every storage call going through ``transport``."""
    client = blob_service_client(make_settings(azurite), transport=transport)
    return install_services(
        ports={"blobs": AzureBlobStore(client), "documents": BlobJsonDocuments(client)},
        settings=NO_TIMED_FLUSH,
    )


@pytest.fixture
def receiver(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusReceiver]:
    client: ServiceBusClient = connect(servicebus_emulator)
    with client:
        drain(client, QUEUE)
        with client.get_queue_receiver(QUEUE) as queue_receiver:
            yield queue_receiver


def process_one_batch(receiver: ServiceBusReceiver, tenant: str) -> list[tuple[str, Any]]:
    """Receive the tenant's queued messages and hand them to the registered batch function.

    A retry copy another test file scheduled on this worker's emulator can come due here:
    it is not this test's, and is completed unprocessed.
    """
    trigger = indexed_functions()["process_requests"].get_user_function()
    messages: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + 5
    while not messages and time.monotonic() < deadline:
        for message in receiver.receive_messages(max_message_count=8, max_wait_time=5):
            properties = normalise_properties(message.application_properties)
            if properties.get("tenant") == tenant:
                messages.append(message)
            else:
                receiver.complete_message(message)
    assert messages, "the request message was not queued"
    actions = ReceiverMessageActions(receiver)
    trigger(messages=messages, message_actions=actions)
    return actions.calls


def submit(call: Call, **headers: str) -> str:
    body = {"model": "local-analyzer", "input": {"text": TEXT}}
    response = call("submit_request", "POST", "/v1/requests", body=body, headers=headers)
    assert response.status_code == 202, response.get_body()
    return str(json_body(response)["id"])


def submit_within_budget(
    call: Call, transport: CountingTransport, budget: int, **headers: str
) -> str:
    """Submit, and check intake wrote at most ``budget`` times and read nothing."""
    mark = len(transport.operations)
    request_id = submit(call, **headers)
    intake = transport.since(mark)
    assert len(intake) <= budget, intake
    assert not any(op.startswith(("GET", "HEAD")) for op in intake), f"intake reads: {intake}"
    return request_id


def test_a_request_costs_at_most_six_storage_operations(
    call: Call,
    counted: Services,
    transport: CountingTransport,
    receiver: ServiceBusReceiver,
    tenant: str,
) -> None:
    request_id = submit_within_budget(call, transport, INTAKE_BUDGET)

    mark = len(transport.operations)
    assert process_one_batch(receiver, tenant) == [("complete", request_id)]
    processing = transport.since(mark)
    assert len(processing) <= PROCESSING_BUDGET, processing

    route = {"id": request_id}
    for function, suffix in (("get_request", ""), ("get_request_result", "/result")):
        mark = len(transport.operations)
        path = f"/v1/requests/{request_id}{suffix}"
        response = call(function, "GET", path, route_params=route)
        assert response.status_code == 200, response.get_body()
        assert len(transport.since(mark)) == 1, transport.since(mark)
    job = counted.jobs.get(tenant, request_id)
    assert job.status is JobStatus.COMPLETED
    assert job.result is not None


def test_an_idempotency_key_costs_one_more_operation_and_a_replay_sends_nothing(
    call: Call,
    counted: Services,
    transport: CountingTransport,
    receiver: ServiceBusReceiver,
    tenant: str,
) -> None:
    key = {"Idempotency-Key": f"order-{tenant}"}
    request_id = submit_within_budget(call, transport, INTAKE_BUDGET_WITH_KEY, **key)

    assert submit(call, **key) == request_id
    assert process_one_batch(receiver, tenant) == [("complete", request_id)]
    assert not receiver.receive_messages(max_message_count=1, max_wait_time=1), (
        "a replayed submission sent a second message"
    )


def test_a_budget_costs_one_write_at_the_door_and_the_ledger_one_per_flush(
    install_services: InstallServices,
    azurite: Azurite,
    transport: CountingTransport,
    receiver: ServiceBusReceiver,
    call: Call,
    tenant: str,
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "tenants.json"
    budget = {"tokens_per_day": 1_000_000}
    catalog.write_text(json.dumps({"tenants": {tenant: {"budget": budget}}}), encoding="utf-8")
    client = blob_service_client(make_settings(azurite), transport=transport)
    services = install_services(
        ports={"blobs": AzureBlobStore(client), "documents": BlobJsonDocuments(client)},
        settings={**NO_TIMED_FLUSH, "TenantCatalog": str(catalog)},
    )
    first = submit(call)  # the month's document is created (a read finds none first)

    second = submit_within_budget(call, transport, INTAKE_BUDGET + BUDGET_HOLD)
    processed = process_one_batch(receiver, tenant)

    assert sorted(processed) == sorted([("complete", first), ("complete", second)])
    mark = len(transport.operations)
    assert services.spending.flush() == 1
    assert transport.since(mark) == [f"PUT {services.settings.containers.usage}/{tenant}/"
                                     f"{month_of(utc_now())}.json"]  # fmt: skip
    ledger = services.spending.month(tenant, month_of(utc_now()))
    assert ledger.reserved == {}, "the answers released what their requests held"
    assert ledger.used().tokens > 0
    assert sum(row.requests for rows in ledger.days.values() for row in rows.values()) == 2


def test_a_page_of_requests_costs_a_read_per_request_and_a_few_listings(
    call: Call, counted: Services, transport: CountingTransport, tenant: str
) -> None:
    submitted = [submit(call) for _ in range(5)]
    jobs = counted.settings.containers.jobs

    mark = len(transport.operations)
    response = call("list_requests", "GET", "/v1/requests", params={"limit": "2"})
    assert response.status_code == 200, response.get_body()
    assert [item["id"] for item in json_body(response)["requests"]] == submitted[:-3:-1]
    operations = transport.since(mark)
    reads = [op for op in operations if op.startswith(f"GET {jobs}/{tenant}/")]
    listings = [op for op in operations if op == f"GET {jobs}"]
    assert len(reads) == 2, operations
    assert len(listings) == LISTING_CALLS, operations
    assert len(reads) + len(listings) == len(operations), operations
