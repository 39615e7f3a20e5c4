"""What the chaos run sends: HTTP requests, direct producers' messages, poison of every kind.

Each HTTP request has its own tenant; direct producers' messages all name
``PRODUCER_TENANT``, the one tenant the chaos settings list in ``ProducerTenants`` (a
deployment lists its producers' tenants; any other is dead-lettered ``TenantNotAllowed``).
Requests are told apart by their ids. What was sent
and what the run expects of it are kept in ``Sent`` records for the checks afterwards.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState
from azure.storage.blob import BlobServiceClient

REQUESTS_QUEUE = "inference-requests"
PRODUCER_TENANT = "chaos-producer"
TEXT = "Invoice {n}. Total amount due: {n}0 EUR. Payment within 14 days. Thank you."


@dataclass(frozen=True)
class Sent:
    """One request the run made, and the outcome it must reach.

    ``expected`` is the terminal status a correct system gives it (``completed`` for a
    healthy request, ``failed`` for poison); ``dead_letter_reason`` is the reason its
    message must carry in the dead-letter queue (poison only); ``has_job`` is False for a
    message that names no request (bad JSON): there is no job to look up.
    """

    request_id: str
    tenant: str
    kind: str
    expected: str
    dead_letter_reason: str | None = None
    has_job: bool = True


def new_tenant(kind: str) -> str:
    return f"chaos-{kind[:12]}-{uuid.uuid4().hex[:10]}"


def http_call(
    base_url: str,
    key: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    tenant: str | None = None,
) -> tuple[int, bytes]:
    """One call to the host; status 0 when nothing answers (the host is down)."""
    headers = {"x-functions-key": key}
    if tenant:
        headers["X-Tenant-Id"] = tenant
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    url = base_url + path
    assert url.startswith("http://127.0.0.1:"), "chaos traffic stays on loopback"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def healthy_body(index: int) -> tuple[str, dict[str, Any]]:
    """The ``index``-th healthy request: a kind and its body. Some ask the local model for
    transient faults (retried: still healthy), some take the priority or the ordered lane."""
    body: dict[str, Any] = {"model": "local-analyzer", "input": {"text": TEXT.format(n=index)}}
    if index % 10 == 3:
        body["parameters"] = {"simulate": {"transient_attempts": 2}}
        return "transient", body
    if index % 10 == 7:
        body["priority"] = "high"
        return "priority", body
    if index % 15 == 11:
        body["document_id"] = f"chaos-doc-{index % 2}"
        return "ordered", body
    return "plain", body


def submit(base_url: str, key: str, tenant: str, body: dict[str, Any]) -> str | None:
    """POST one request; its id when accepted (202), None when refused or the host is down
    (a refused request was never accepted, so it is owed nothing)."""
    status, raw = http_call(base_url, key, "POST", "/api/v1/requests", body, tenant)
    if status != 202:
        return None
    return str(json.loads(raw)["id"])


def request_message(request_id: str, tenant: str, **changes: Any) -> dict[str, Any]:
    return {
        "schema": "inferbus.request/v1",
        "request_id": request_id,
        "tenant_id": tenant,
        "model": "local-analyzer",
        "input": {"text": TEXT.format(n=7)},
        **changes,
    }


def send_direct(connection_string: str, messages: list[tuple[str, str, bytes]]) -> None:
    """Send (request id, tenant, body) messages straight to the queue, as a producer does."""
    with (
        ServiceBusClient.from_connection_string(connection_string) as bus,
        bus.get_queue_sender(REQUESTS_QUEUE) as sender,
    ):
        sender.send_messages(
            [
                ServiceBusMessage(
                    body,
                    message_id=request_id,
                    content_type="application/json",
                    application_properties={"tenant": tenant, "model_name": "local-analyzer"},
                )
                for request_id, tenant, body in messages
            ]
        )


def direct_poison(connection_string: str) -> list[Sent]:
    """Poison a producer sends: a body that is not JSON, an unknown schema version, and
    parameters the model cannot take. Each must be dead-lettered ``InvalidPayload``."""
    bad_json = Sent(f"chaos-badjson-{uuid.uuid4().hex[:10]}", PRODUCER_TENANT,
                    "bad-json", "failed", "InvalidPayload", has_job=False)  # fmt: skip
    # An unknown schema version cannot be read, so nothing in it (tenant, request id) can
    # be trusted to name a job: the dead letter and its reason are the whole record.
    schema = Sent(f"chaos-schema-{uuid.uuid4().hex[:10]}", PRODUCER_TENANT,
                  "unknown-schema", "failed", "InvalidPayload", has_job=False)  # fmt: skip
    params = Sent(f"chaos-params-{uuid.uuid4().hex[:10]}", PRODUCER_TENANT,
                  "invalid-parameters", "failed", "InvalidPayload")  # fmt: skip
    bodies = [
        b'{"schema": "inferbus.request/v1", "request_id": ',
        json.dumps(
            request_message(schema.request_id, schema.tenant, schema="inferbus.request/v9")
        ).encode(),
        json.dumps(
            request_message(params.request_id, params.tenant, parameters={"summary_sentences": "x"})
        ).encode(),
    ]
    sent = [bad_json, schema, params]
    send_direct(
        connection_string,
        [(s.request_id, s.tenant, body) for s, body in zip(sent, bodies, strict=True)],
    )
    return sent


def direct_healthy(connection_string: str, count: int) -> list[Sent]:
    """Valid producer messages: each must become a job that completes."""
    sent = [
        Sent(f"chaos-direct-{uuid.uuid4().hex[:12]}", PRODUCER_TENANT, "direct", "completed")
        for _ in range(count)
    ]
    send_direct(
        connection_string,
        [
            (s.request_id, s.tenant, json.dumps(request_message(s.request_id, s.tenant)).encode())
            for s in sent
        ],
    )
    return sent


def submit_claim_check_victims(base_url: str, key: str, delay_s: float) -> list[Sent]:
    """Two requests due ``delay_s`` from now (their messages wait, deferred), whose
    claim-check blobs the run then deletes and overwrites (``tamper_claim_checks``)."""
    due = (datetime.now(UTC) + timedelta(seconds=delay_s)).isoformat()
    victims = []
    for kind in ("claim-check-deleted", "claim-check-overwritten"):
        tenant = new_tenant(kind)
        body = {"model": "local-analyzer", "input": {"text": f"{kind}."}, "not_before": due}
        request_id = submit(base_url, key, tenant, body)
        assert request_id, f"the {kind} request was not accepted"
        victims.append(Sent(request_id, tenant, kind, "failed", "ClaimCheckInvalid"))
    return victims


def submit_due_later(base_url: str, key: str, delay_s: float, count: int = 2) -> list[Sent]:
    """Healthy requests due ``delay_s`` from now: their messages wait, deferred, until the
    deferral sweeper hands them over."""
    due = (datetime.now(UTC) + timedelta(seconds=delay_s)).isoformat()
    sent = []
    for index in range(count):
        tenant = new_tenant("deferred")
        body = {
            "model": "local-analyzer",
            "input": {"text": TEXT.format(n=index)},
            "not_before": due,
        }
        request_id = submit(base_url, key, tenant, body)
        assert request_id, "a deferred request was not accepted"
        sent.append(Sent(request_id, tenant, "deferred-over-outage", "completed"))
    return sent


def wait_until_deferred(connection_string: str, requests: list[Sent], timeout: float) -> bool:
    """Whether every request's message is deferred in the standard queue (peeked) within
    ``timeout`` seconds."""
    wanted = {s.request_id for s in requests}
    deadline = time.monotonic() + timeout
    with (
        ServiceBusClient.from_connection_string(connection_string) as bus,
        bus.get_queue_receiver(REQUESTS_QUEUE) as receiver,
    ):
        while time.monotonic() < deadline:
            page = receiver.peek_messages(max_message_count=1000, sequence_number=0)
            deferred = {
                str(m.message_id) for m in page if m.state == ServiceBusMessageState.DEFERRED
            }
            if wanted <= deferred:
                return True
            time.sleep(0.2)
    return False


def tamper_claim_checks(storage_connection_string: str, victims: list[Sent]) -> None:
    """Delete one claim-check blob and overwrite the other (``inputs/<tenant>/<id>``)."""
    blobs = BlobServiceClient.from_connection_string(storage_connection_string)
    for victim in victims:
        blob = blobs.get_blob_client("inputs", f"{victim.tenant}/{victim.request_id}")
        if victim.kind == "claim-check-deleted":
            blob.delete_blob()
        else:
            blob.upload_blob(b"Not the document that was submitted.", overwrite=True)
