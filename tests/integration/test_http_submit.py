"""POST /api/v1/requests through the registered function, against Azurite."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func
import pytest

from shared.adapters.blob_storage import AzureBlobStore
from shared.entrypoints.bootstrap import Services
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import Call, json_body, principal_header
from tests.support.servicebus import QueueRecorder, connect

pytestmark = pytest.mark.integration


def submit(call: Call, body: dict[str, Any], **kwargs: Any) -> func.HttpResponse:
    return call("submit_request", "POST", "/v1/requests", body=body, **kwargs)


def test_json_text_is_accepted_stored_recorded_and_enqueued(
    call: Call,
    services: Services,
    servicebus_emulator: ServiceBusEmulator,
    storage: AzureBlobStore,
    tenant: str,
) -> None:
    with connect(servicebus_emulator) as bus:
        sender = QueueRecorder(bus, "inference-priority")  # high priority: its own lane
        response = call(
            "submit_request",
            "POST",
            "/v1/requests",
            body={"model": "local-analyzer", "input": {"text": "hello world"}, "priority": "high"},
        )
        sent = sender.sent

    assert response.status_code == 202
    document = json_body(response)
    request_id = document["id"]
    assert document["status"] == "accepted"
    assert document["status_url"] == f"http://localhost:7071/api/v1/requests/{request_id}"
    assert response.headers["Location"] == document["status_url"]
    assert response.headers["Retry-After"] == "2"

    stored = storage.read("inputs", f"{tenant}/{request_id}")
    assert stored == b"hello world"
    info = storage.info("inputs", f"{tenant}/{request_id}")
    assert info is not None
    assert info.metadata["sha256"] == hashlib.sha256(b"hello world").hexdigest()
    assert info.media_type.startswith("text/plain")

    job = services.jobs.get(tenant, request_id)
    assert job.status.value == "accepted"
    assert job.priority.value == "high"

    assert len(sent) == 1
    message = sent[0]
    assert message.message_id == request_id
    assert message.correlation_id == job.correlation_id
    assert message.application_properties["priority"] == "high"
    assert message.application_properties["tenant"] == tenant
    assert message.application_properties["retry_count"] == 0
    body = json.loads(message.body)
    assert body["schema"] == "inferbus.request/v1"
    assert body["input"]["sha256"] == hashlib.sha256(b"hello world").hexdigest()
    assert body["input"]["blob_uri"].endswith(f"/inputs/{tenant}/{request_id}")
    assert message.time_to_live is not None
    assert timedelta(minutes=59) < message.time_to_live <= timedelta(hours=1)


def test_a_document_id_sends_the_request_to_the_ordered_lane_as_its_session(
    call: Call, services: Services, servicebus_emulator: ServiceBusEmulator, tenant: str
) -> None:
    body = {"model": "local-analyzer", "input": {"text": "step one"}, "document_id": "doc-7"}
    response = submit(call, body)
    assert response.status_code == 202, response.get_body()
    request_id = json_body(response)["id"]
    assert services.jobs.get(tenant, request_id).document_id == "doc-7"
    with (
        connect(servicebus_emulator) as bus,
        bus.get_queue_receiver("inference-ordered", session_id="doc-7") as receiver,
    ):
        (message,) = receiver.receive_messages(max_message_count=5, max_wait_time=5)
        receiver.complete_message(message)
    assert (message.message_id, message.session_id) == (request_id, "doc-7")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"after": "01a22dc7-07d6-795d-b6c8-02d0eda40533"}, "after"),
        ({"not_before": "2099-01-01T00:00:00Z"}, "not_before"),
    ],
)
def test_a_document_step_cannot_also_wait(
    call: Call, services: Services, extra: dict[str, str], field: str
) -> None:
    body = {"model": "local-analyzer", "input": {"text": "x"}, "document_id": "doc-8", **extra}
    response = submit(call, body)
    assert response.status_code in (400, 422)
    problem = json_body(response)
    assert f"cannot also set {field}" in problem["detail"]


def test_raw_upload_is_stored_with_its_media_type(
    call: Call, services: Services, storage: AzureBlobStore, tenant: str
) -> None:
    pdf = b"%PDF-1.7 fake but bytes are bytes"
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=pdf,
        headers={"content-type": "application/pdf"},
        params={"model": "local-analyzer", "deadline_seconds": "120"},
    )

    assert response.status_code == 202, response.get_body()
    request_id = json_body(response)["id"]
    info = storage.info("inputs", f"{tenant}/{request_id}")
    assert info is not None
    assert info.media_type == "application/pdf"
    assert info.size == len(pdf)
    job = services.jobs.get(tenant, request_id)
    assert job.deadline is not None
    assert job.deadline - job.created_at == timedelta(seconds=120)


def test_blob_reference_inside_the_tenant_is_accepted_with_computed_sha256(
    call: Call, services: Services, sender: QueueRecorder, storage: AzureBlobStore, tenant: str
) -> None:
    storage.upload("incoming", f"{tenant}/doc.txt", b"referenced", "text/plain", {})
    uri = f"{storage.account_url}/incoming/{tenant}/doc.txt"

    response = submit(call, {"model": "local-analyzer", "input": {"blob_uri": uri}})

    assert response.status_code == 202, response.get_body()
    body = json.loads(sender.sent[0].body)
    assert body["input"] == {
        "blob_uri": uri,
        "sha256": hashlib.sha256(b"referenced").hexdigest(),
        "size": len(b"referenced"),
        "media_type": "text/plain",
    }


@pytest.mark.parametrize(
    ("make_uri", "reason"),
    [
        (lambda account, t: f"http://169.254.169.254/latest/{t}/x", "storage account"),
        (lambda account, t: f"{account}/jobs/{t}/x.json", "container 'jobs'"),
        (lambda account, t: f"{account}/incoming/someone-else/x", "tenant"),
        (lambda account, t: f"{account}/incoming/{t}/../other/x", "'..'"),
        (lambda account, t: f"{account}/incoming/{t}/x?sv=2020&sig=abc", "SAS"),
        (lambda account, t: f"{account}/incoming/{t}/missing", "no such blob"),
    ],
)
def test_blob_references_outside_the_allowed_space_are_refused(
    call: Call,
    services: Services,
    sender: QueueRecorder,
    storage: AzureBlobStore,
    tenant: str,
    make_uri: Callable[[str, str], str],
    reason: str,
) -> None:
    uri = make_uri(storage.account_url, tenant)
    response = submit(call, {"model": "local-analyzer", "input": {"blob_uri": uri}})

    assert response.status_code == 400
    problem = json_body(response)
    assert response.headers["Content-Type"] == "application/problem+json"
    assert reason in problem["detail"]
    assert problem["errors"][0]["field"] == "input.blob_uri"
    assert sender.sent == []


def test_the_tenant_comes_from_the_app_service_principal(
    call: Call, services: Services, tenant: str
) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body={"model": "local-analyzer", "input": {"text": "x"}},
        headers={"x-ms-client-principal": principal_header(tenant)},
        as_tenant=None,
    )
    assert response.status_code == 202
    assert services.jobs.find(tenant, json_body(response)["id"]) is not None


def test_not_before_and_metadata_travel_with_the_job(
    call: Call, services: Services, sender: QueueRecorder, tenant: str
) -> None:
    not_before = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    response = submit(
        call,
        {
            "model": "other-model",
            "input": {"text": "x"},
            "not_before": not_before.isoformat(),
            "metadata": {"document_type": "invoice"},
            "parameters": {"temperature": 0},
        },
    )
    assert response.status_code == 202
    job = services.jobs.get(tenant, json_body(response)["id"])
    assert job.not_before == not_before
    assert job.metadata == {"document_type": "invoice"}
    message = sender.sent[0]
    assert message.application_properties["document_type"] == "invoice"
    assert message.application_properties["model_name"] == "other-model"


def test_typed_parameters_are_what_the_message_and_the_job_carry(
    call: Call, services: Services, sender: QueueRecorder, tenant: str
) -> None:
    body = {
        "model": "local-analyzer",
        "input": {"text": "x"},
        "parameters": {"summary_sentences": "3", "temperature": 1},
    }
    response = submit(call, body)
    assert response.status_code == 202
    job = services.jobs.get(tenant, json_body(response)["id"])
    assert job.parameters == {"summary_sentences": 3, "temperature": 1.0}
    (message,) = sender.sent
    assert json.loads(message.body)["parameters"] == {"summary_sentences": 3, "temperature": 1.0}
