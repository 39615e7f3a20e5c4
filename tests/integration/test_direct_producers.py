"""Producers that send straight to the request queue: the queue is a door like the others.

Messages are sent with the unmodified SDK to the emulator, received in peek-lock as the
Functions host does and handed to the registered trigger. A valid message gets its job
(the status API serves it) and its result; an invalid one is dead-lettered with the rule
it broke, as the HTTP door would have refused it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiver

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.entrypoints.bootstrap import Services
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body
from tests.support.functions import indexed_functions
from tests.support.servicebus import ReceiverMessageActions, connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    client = connect(servicebus_emulator)
    with client:
        for sub_queue in (None, "deadletter"):
            drain(client, QUEUE, sub_queue=sub_queue)
        yield client


@pytest.fixture
def services(install_services: InstallServices, tenant: str) -> Services:
    return install_services(ProducerTenants=f"{tenant},another-tenant")


def request(tenant: str, request_id: str, **changes: Any) -> bytes:
    body = {
        "schema": "inferbus.request/v1",
        "request_id": request_id,
        "tenant_id": tenant,
        "model": "local-analyzer",
        "input": {"text": "Invoice 4. Total amount due: 120 EUR. Payment within 14 days."},
        **changes,
    }
    return json.dumps(body).encode()


def process_everything(bus: ServiceBusClient, expected: int) -> list[tuple[str, Any]]:
    trigger = indexed_functions()["process_requests"].get_user_function()
    settled: list[tuple[str, Any]] = []
    deadline = time.monotonic() + 20
    receiver: ServiceBusReceiver
    with bus.get_queue_receiver(QUEUE) as receiver:
        while len(settled) < expected and time.monotonic() < deadline:
            messages = receiver.receive_messages(max_message_count=50, max_wait_time=1)
            actions = ReceiverMessageActions(receiver)
            if messages:
                trigger(messages=messages, message_actions=actions)
            settled += actions.calls
    return settled


def test_a_producer_message_becomes_a_job_with_a_result_the_api_serves(
    call: Call, services: Services, bus: ServiceBusClient, tenant: str
) -> None:
    with bus.get_queue_sender(QUEUE) as sender:
        sender.send_messages(
            ServiceBusMessage(
                request(tenant, "ext-1"),
                message_id="ext-1",
                content_type="application/json",
                application_properties={"tenant": tenant, "source": "erp"},
            )
        )
    assert process_everything(bus, 1) == [("complete", "ext-1")]

    job = services.jobs.get(tenant, "ext-1")
    assert (job.status, job.source) == (JobStatus.COMPLETED, "erp")
    assert job.deadline is not None, "the default deadline, as the HTTP door gives"
    response = call(
        "get_request",
        "GET",
        "/v1/requests/ext-1",
        route_params={"id": "ext-1"},
    )
    assert response.status_code == 200
    assert json_body(response)["status"] == "completed"


def test_invalid_producer_messages_are_dead_lettered_with_the_rule_they_broke(
    services: Services, bus: ServiceBusClient, tenant: str, storage: AzureBlobStore
) -> None:
    outside = f"{storage.account_url}/inputs/someone-else/doc.txt"
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "bad-params": ({"parameters": {"simulate": "transient"}}, "fault injection"),
        "bad-tenant": ({"tenant_id": "not-listed"}, "ProducerTenants"),
        "bad-blob": (
            {
                "input": {
                    "blob_uri": outside,
                    "sha256": "0" * 64,
                    "size": 3,
                    "media_type": "text/plain",
                }
            },
            f"must start with the caller's tenant '{tenant}/'",
        ),
        "bad-ssrf": (
            {
                "input": {
                    "blob_uri": "http://169.254.169.254/metadata/instance",
                    "sha256": "0" * 64,
                    "size": 3,
                    "media_type": "text/plain",
                }
            },
            "this service's storage account",
        ),
    }
    with bus.get_queue_sender(QUEUE) as sender:
        sender.send_messages(
            [
                ServiceBusMessage(request(tenant, name, **changes), message_id=name)
                for name, (changes, _) in cases.items()
            ]
        )
    process_everything(bus, len(cases))

    dead = {str(m.message_id): m for m in drain(bus, QUEUE, sub_queue="deadletter")}
    assert set(dead) == set(cases)
    for name, (_, words) in cases.items():
        reason = "TenantNotAllowed" if name == "bad-tenant" else "InvalidPayload"
        assert dead[name].dead_letter_reason == reason, name
        assert words in str(dead[name].dead_letter_error_description), name
    failed = services.jobs.get(tenant, "bad-params")
    assert failed.status is JobStatus.FAILED
    assert services.jobs.find("not-listed", "bad-tenant") is None, "no job for a refused tenant"


def test_with_no_tenant_listed_every_producer_message_is_refused(
    install_services: InstallServices, bus: ServiceBusClient, tenant: str
) -> None:
    services = install_services(ProducerTenants="")
    with bus.get_queue_sender(QUEUE) as sender:
        sender.send_messages(
            ServiceBusMessage(
                request(tenant, "ext-open"),
                message_id="ext-open",
                content_type="application/json",
                application_properties={"tenant": tenant},
            )
        )
    assert process_everything(bus, 1) == [("deadletter", "ext-open")]

    [dead] = drain(bus, QUEUE, sub_queue="deadletter")
    assert dead.dead_letter_reason == "TenantNotAllowed"
    description = str(dead.dead_letter_error_description)
    assert f"tenant '{tenant}'" in description
    assert "ProducerTenants" in description
    assert services.jobs.find(tenant, "ext-open") is None, "no job for a refused tenant"
