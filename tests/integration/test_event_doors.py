"""The event doors into intake: the webhook (both schemas, all CloudEvents modes, both
handshakes), the Event Grid trigger and the blob trigger, on Azurite and the emulator.
Each door makes exactly one job and one message per event, however often it is delivered."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func
import jwt
import pytest
from azure.functions.blob import InputStream
from azure.servicebus import ServiceBusClient
from cryptography.hazmat.primitives.asymmetric import rsa

from shared.adapters.blob_storage import AzureBlobStore
from shared.entrypoints.bootstrap import Services
from shared.processing.inbound import normalise_properties
from tests.fixtures.azurite import Azurite, free_port
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.events import (
    blob_created_event,
    requested_event,
    subscription_validation_event,
)
from tests.support.functions import indexed_functions
from tests.support.http_recorder import Recorder, Reply, recording_server
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    with connect(servicebus_emulator) as client:
        drain(client, QUEUE)
        yield client


@pytest.fixture
def doors(install_services: InstallServices, bus: ServiceBusClient) -> Services:
    return install_services()


def webhook(
    body: bytes | list[Any] | dict[str, Any], method: str = "POST", **headers: str
) -> func.HttpResponse:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = func.HttpRequest(
        method=method,
        url="http://localhost:7071/api/v1/events",
        headers={k.replace("_", "-"): v for k, v in headers.items()},
        params={},
        route_params={},
        body=raw,
    )
    webhook: Callable[[func.HttpRequest], func.HttpResponse]
    webhook = indexed_functions()["event_webhook"].get_user_function()
    return webhook(request)


def queued_ids(bus: ServiceBusClient, queue: str = QUEUE) -> list[str]:
    return [str(m.message_id) for m in drain(bus, queue)]


def json_of(response: func.HttpResponse) -> Any:
    return json.loads(response.get_body())


# --- handshakes ---------------------------------------------------------------------------


def test_event_grid_subscription_validation_answers_200_with_the_code(doors: Services) -> None:
    validation = [subscription_validation_event()]
    response = webhook(
        validation, aeg_event_type="SubscriptionValidation", content_type="application/json"
    )
    assert response.status_code == 200
    assert json_of(response) == {"validationResponse": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}


def test_cloudevents_abuse_protection_handshake(doors: Services) -> None:
    response = webhook(b"", method="OPTIONS", webhook_request_origin="eventgrid.azure.net")
    assert response.status_code == 200
    assert response.headers["WebHook-Allowed-Origin"] == "eventgrid.azure.net"
    assert response.headers["WebHook-Allowed-Rate"] == "*"


# --- one job per event, however often delivered -------------------------------------------


def test_a_custom_event_delivered_three_times_makes_one_job_and_one_message(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    event = requested_event(tenant, priority="high")
    responses = [
        webhook(event, content_type="application/cloudevents+json; charset=utf-8") for _ in range(3)
    ]

    assert [r.status_code for r in responses] == [202, 202, 202]
    outcomes = [json_of(r)["events"][0] for r in responses]
    assert [o["status"] for o in outcomes] == ["accepted", "duplicate", "duplicate"]
    request_ids = {o["request_id"] for o in outcomes}
    assert len(request_ids) == 1
    request_id = request_ids.pop()
    assert doors.jobs.get(tenant, request_id).source == "webhook"
    assert queued_ids(bus, "inference-priority") == [request_id], "high priority: its own lane"
    assert queued_ids(bus) == []


def test_batch_and_binary_modes_are_accepted(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    batch = [requested_event(tenant), requested_event(tenant)]
    assert webhook(batch, content_type="application/cloudevents-batch+json").status_code == 202
    binary = webhook(
        json.dumps({"tenant_id": tenant, "input": {"text": "binary mode"}}).encode(),
        content_type="application/json",
        ce_specversion="1.0",
        ce_type="com.inferbus.InferenceRequested",
        ce_source="/apps/crm",
        ce_id=str(uuid.uuid4()),
    )
    assert binary.status_code == 202
    assert len(queued_ids(bus)) == 3


def test_blob_created_from_every_door_is_one_job(
    doors: Services, bus: ServiceBusClient, storage: AzureBlobStore, tenant: str
) -> None:
    content = b"Quarterly report. Results improved. Findings below."
    name = f"{tenant}/q3-report.txt"
    storage.upload("incoming", name, content, "text/plain", {"priority": "high"})
    event = blob_created_event(storage, "incoming", name)

    deliveries = [
        webhook([event], aeg_event_type="Notification", content_type="application/json")
        for _ in range(3)
    ]
    blob_door = indexed_functions()["blob_intake"].get_user_function()
    for _ in range(3):
        blob_door(
            InputStream(
                data=content, name=f"incoming/{name}", uri=event["data"]["url"], length=len(content)
            )
        )
    eventgrid_door = indexed_functions()["eventgrid_intake"].get_user_function()
    for _ in range(3):
        eventgrid_door(
            func.EventGridEvent(
                id=event["id"],
                data=event["data"],
                topic=event["topic"],
                subject=event["subject"],
                event_type=event["eventType"],
                event_time=datetime.now(UTC),
                data_version="",
            )
        )

    request_ids = {json_of(r)["events"][0]["request_id"] for r in deliveries}
    assert len(request_ids) == 1
    (request_id,) = request_ids
    assert queued_ids(bus, "inference-priority") == [request_id]
    job = doors.jobs.get(tenant, request_id)
    assert job.priority.value == "high"
    assert job.input is not None
    assert job.input.blob_uri == event["data"]["url"]  # type: ignore[union-attr]
    assert job.input.sha256 == hashlib.sha256(content).hexdigest()  # type: ignore[union-attr]


def test_a_new_version_of_a_blob_is_new_work(
    doors: Services, bus: ServiceBusClient, storage: AzureBlobStore, tenant: str
) -> None:
    blob_door = indexed_functions()["blob_intake"].get_user_function()
    name = f"{tenant}/doc.txt"
    for version in (b"first version", b"second version"):
        storage.upload("incoming", name, version, "text/plain", {})
        blob_door(InputStream(data=version, name=f"incoming/{name}", length=len(version)))
    assert len(queued_ids(bus)) == 2


def test_the_event_grid_trigger_makes_one_job_per_event(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    eventgrid_door = indexed_functions()["eventgrid_intake"].get_user_function()
    event = func.EventGridEvent(
        id="evt-42",
        data={"tenant_id": tenant, "input": {"text": "from the trigger"}},
        topic="/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventGrid/topics/apps",
        subject=f"/tenants/{tenant}",
        event_type="com.inferbus.InferenceRequested",
        event_time=datetime.now(UTC),
        data_version="1",
    )
    for _ in range(3):
        eventgrid_door(event)
    (message_id,) = queued_ids(bus)
    assert doors.jobs.get(tenant, message_id).source == "eventgrid"


def test_outputs_of_the_app_never_trigger_work(
    doors: Services, bus: ServiceBusClient, storage: AzureBlobStore, tenant: str
) -> None:
    storage.upload("jobs", f"{tenant}/r.json", b"{}", "application/json", {})
    response = webhook(
        [blob_created_event(storage, "jobs", f"{tenant}/r.json")],
        content_type="application/json",
    )
    assert response.status_code == 200
    assert json_of(response)["events"][0]["status"] == "ignored"
    blob_door = indexed_functions()["blob_intake"].get_user_function()
    blob_door(InputStream(data=b"{}", name=f"jobs/{tenant}/r.json", length=2))
    assert queued_ids(bus) == []


# --- status codes for Event Grid's retry rules --------------------------------------------


def test_unknown_event_types_are_acknowledged_with_200(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    event = {**requested_event(tenant), "type": "com.example.SomethingElse"}
    response = webhook(event, content_type="application/cloudevents+json")
    assert response.status_code == 200
    assert json_of(response)["events"][0]["status"] == "ignored"
    assert queued_ids(bus) == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{broken", 400),
        ([{"eventType": "Microsoft.Storage.BlobCreated"}], 400),
        (b"[" + b" " * 1_048_576 + b"]", 413),
    ],
)
def test_malformed_and_oversized_deliveries_are_not_retried(
    doors: Services, body: Any, status: int
) -> None:
    response = webhook(body, content_type="application/json")
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/problem+json"


def test_an_event_with_invalid_data_is_400_and_names_the_event(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    bad = requested_event(tenant, "bad-1")
    bad["data"] = {"tenant_id": tenant, "input": {"text": ""}, "priority": "urgent"}
    response = webhook(bad, content_type="application/cloudevents+json")
    assert response.status_code == 400
    assert json_of(response)["errors"][0]["field"] == "event bad-1"
    assert queued_ids(bus) == []


def test_unavailable_storage_is_503_with_retry_after(
    azurite: Azurite, install_services: InstallServices, tenant: str
) -> None:
    dead = azurite.connection_string.replace(
        azurite.blob_endpoint, f"http://127.0.0.1:{free_port()}/devstoreaccount1"
    )
    install_services(Storage=dead)
    response = webhook(requested_event(tenant), content_type="application/cloudevents+json")
    assert response.status_code == 503
    assert "Retry-After" in response.headers


def test_the_shared_secret_is_enforced(
    install_services: InstallServices, bus: ServiceBusClient, tenant: str
) -> None:
    install_services(WebhookSharedSecret="s3cret")
    missing = webhook(requested_event(tenant), content_type="application/cloudevents+json")
    wrong = webhook(
        requested_event(tenant),
        content_type="application/cloudevents+json",
        x_webhook_secret="nope",
    )
    right = webhook(
        requested_event(tenant),
        content_type="application/cloudevents+json",
        x_webhook_secret="s3cret",
    )
    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 403, 202)
    assert len(queued_ids(bus)) == 1


def test_webhook_tenants_bind_each_secret_to_its_tenants(
    install_services: InstallServices, bus: ServiceBusClient, tenant: str
) -> None:
    secret, other = "crm-secret", f"x-{uuid.uuid4().hex[:8]}"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    services = install_services(WebhookTenants=f"{digest}={tenant}")
    kind = "application/cloudevents+json"
    foreign = webhook(
        requested_event(other, "ev-foreign"), content_type=kind, x_webhook_secret=secret
    )
    missing = webhook(requested_event(tenant), content_type=kind)
    unknown = webhook(requested_event(tenant), content_type=kind, x_webhook_secret="guess")
    own = webhook(requested_event(tenant), content_type=kind, x_webhook_secret=secret)

    assert (foreign.status_code, missing.status_code, unknown.status_code) == (400, 401, 403)
    (error,) = json_of(foreign)["errors"]
    assert error["field"] == "event ev-foreign"
    assert f"tenant '{other}' is not one this webhook credential may submit" in error["message"]
    assert services.ports.blobs.list_names(services.settings.containers.jobs, f"{other}/") == []
    assert own.status_code == 202
    (outcome,) = json_of(own)["events"]
    assert queued_ids(bus) == [outcome["request_id"]]


def test_malformed_deliveries_are_400_not_500(doors: Services, bus: ServiceBusClient) -> None:
    deep = webhook(b"[" * 1000 + b"]" * 1000, content_type="application/json")
    not_base64 = webhook(
        {**requested_event("contoso"), "data": None, "data_base64": {"not": "base64"}},
        content_type="application/cloudevents+json",
    )
    surrogate = webhook(
        json.dumps(requested_event("contoso", "ev-X")).replace("ev-X", "ev-\\udc80").encode(),
        content_type="application/cloudevents+json",
    )
    assert (deep.status_code, not_base64.status_code, surrogate.status_code) == (400, 400, 400)
    assert json_of(deep)["type"] == "urn:inferbus:problem:invalid-json"
    assert "data_base64 must be a base64 string" in json_of(not_base64)["detail"]
    assert "surrogate" in json_of(surrogate)["detail"]
    assert queued_ids(bus) == []


@pytest.fixture
def issuer() -> Iterator[tuple[Recorder, Any]]:
    """A local JWKS endpoint and the private key whose public half it serves."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "test-key", "use": "sig", "alg": "RS256"})
    with recording_server() as server:
        server.default = lambda request: Reply(200, {"keys": [jwk]})
        yield server, key


def token(key: Any, audience: str, issuer: str, expires_in: int = 300) -> str:
    now = int(time.time())
    claims = {
        "aud": audience,
        "iss": issuer,
        "iat": now,
        "nbf": now,
        "exp": now + expires_in,
        "appid": "eventgrid",
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "test-key"})


def test_entra_bearer_tokens_are_validated(
    install_services: InstallServices,
    bus: ServiceBusClient,
    tenant: str,
    issuer: tuple[Recorder, Any],
) -> None:
    server, key = issuer
    audience, issuer_uri = (
        "api://inferbus-webhook",
        "https://sts.windows.net/00000000-0000-0000-0000-000000000001/",
    )
    install_services(
        WebhookTokenAudience=audience,
        WebhookTokenIssuer=issuer_uri,
        WebhookJwksUri=f"{server.base_url}/keys",
    )

    def deliver(authorization: str | None) -> int:
        headers = {"content_type": "application/cloudevents+json"}
        if authorization:
            headers["authorization"] = authorization
        return int(webhook(requested_event(tenant), **headers).status_code)

    statuses = {
        "valid": deliver("Bearer " + token(key, audience, issuer_uri)),
        "none": deliver(None),
        "wrong audience": deliver("Bearer " + token(key, "api://other", issuer_uri)),
        "wrong issuer": deliver("Bearer " + token(key, audience, "https://evil.example/")),
        "expired": deliver("Bearer " + token(key, audience, issuer_uri, expires_in=-120)),
        "not a jwt": deliver("Bearer abc.def.ghi"),
    }
    assert statuses == {
        "valid": 202,
        "none": 401,
        "wrong audience": 403,
        "wrong issuer": 403,
        "expired": 403,
        "not a jwt": 403,
    }
    assert len(queued_ids(bus)) == 1
    assert all(r.path == "/keys" for r in server.requests)


def test_a_deadline_and_schedule_travel_with_a_custom_event(
    doors: Services, bus: ServiceBusClient, tenant: str
) -> None:
    not_before = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    event = requested_event(
        tenant,
        not_before=not_before.isoformat(),
        deadline_seconds=900,
        metadata={"document_type": "email"},
    )
    request_id = json_of(webhook(event, content_type="application/cloudevents+json"))["events"][0][
        "request_id"
    ]
    job = doors.jobs.get(tenant, request_id)
    assert job.not_before == not_before
    assert job.deadline is not None
    assert job.deadline - job.created_at == timedelta(seconds=900)
    (message,) = drain(bus, QUEUE)
    assert normalise_properties(message.application_properties)["document_type"] == "email"
