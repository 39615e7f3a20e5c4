"""What a user does with Inferbus, through its real interfaces only."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from azure.core.credentials import AzureKeyCredential
from azure.core.messaging import CloudEvent
from azure.eventgrid import EventGridPublisherClient
from azure.servicebus import ServiceBusClient
from azure.storage.blob import BlobServiceClient, ContentSettings

from shared.processing.inbound import normalise_properties
from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def tenant() -> str:
    return f"e2e-{uuid.uuid4().hex[:10]}"


def submit(stack: Stack, who: str, body: dict[str, Any]) -> str:
    status, headers, raw = stack.request("POST", "/api/v1/requests", body, {"X-Tenant-Id": who})
    assert status == 202, raw
    document = json.loads(raw)
    assert headers["Location"] == document["status_url"]
    return str(document["id"])


def job(stack: Stack, who: str, request_id: str) -> dict[str, Any]:
    status, _, raw = stack.request(
        "GET", f"/api/v1/requests/{request_id}", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    return dict(json.loads(raw))


def poll(stack: Stack, who: str, request_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = job(stack, who, request_id)
        if current["status"] in TERMINAL:
            return current
        time.sleep(0.3)
    raise AssertionError(f"request {request_id} still {current['status']} after {timeout}s")


def wait_until_settled(stack: Stack, message_id: str, timeout: float) -> None:
    """Until no message with this id is in the request queue (peek sees deferred ones too)."""
    deadline = time.monotonic() + timeout
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus,
        bus.get_queue_receiver("inference-requests") as receiver,
    ):
        while time.monotonic() < deadline:
            queued = receiver.peek_messages(max_message_count=1000, sequence_number=0)
            if all(str(m.message_id) != message_id for m in queued):
                return
            time.sleep(0.3)
    raise AssertionError(f"message {message_id} still in the queue after {timeout}s")


def text_request(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "local-analyzer", "input": {"text": text}, **fields}


def test_submit_poll_and_fetch_the_result(stack: Stack) -> None:
    who = tenant()
    request_id = submit(
        stack, who, text_request("Invoice 7. Total amount due: 90 EUR. Pay within 14 days.")
    )
    finished = poll(stack, who, request_id)
    assert finished["status"] == "completed"
    assert finished["result"]["document_type"] == "invoice"
    result_path = urlsplit(finished["result_url"]).path
    assert result_path == f"/api/v1/requests/{request_id}/result"
    status, _, raw = stack.request("GET", result_path, headers={"X-Tenant-Id": who})
    assert status == 200, raw
    result = json.loads(raw)
    assert result["outcome"] == "completed"
    assert result["request_id"] == request_id
    assert "Invoice 7." in result["result"]["summary"]


def test_a_forged_log_line_in_a_request_stays_one_escaped_line(stack: Stack) -> None:
    """The problem details echo the caller's ``after``; the host's log gets exactly one
    line for it, its CR and LF written out, and no line of its own."""
    marker = f"injected-{uuid.uuid4().hex[:8]}"
    forged = f"zz\r\n2026-12-04 00:00:00,000 ERROR {marker}: FAKE"
    status, _, raw = stack.request(
        "POST", "/api/v1/requests", text_request("x", after=forged), {"X-Tenant-Id": tenant()}
    )
    assert status == 400, raw
    assert forged in json.loads(raw)["detail"], "the answer keeps the caller's text"
    deadline = time.monotonic() + 15
    lines: list[str] = []
    while time.monotonic() < deadline and not lines:
        log = stack.log_path.read_text(encoding="utf-8", errors="replace")
        lines = [line for line in log.split("\n") if marker in line]
        time.sleep(0.2)
    assert len(lines) == 1, lines
    assert not lines[0].startswith("2026-12-04 00:00:00,000"), "a line of its own"
    assert f"zz\\r\\n2026-12-04 00:00:00,000 ERROR {marker}: FAKE" in lines[0]


def test_the_api_needs_a_key_and_an_identity(stack: Stack) -> None:
    assert (
        stack.request(
            "POST", "/api/v1/requests", text_request("x"), {"X-Tenant-Id": "t"}, key=None
        )[0]
        == 401
    )
    status, headers, raw = stack.request("POST", "/api/v1/requests", text_request("x"))
    assert status == 401
    assert headers["Content-Type"] == "application/problem+json"
    assert json.loads(raw)["type"] == "urn:inferbus:problem:unauthenticated"


def test_a_dropped_document_becomes_a_completed_job(stack: Stack) -> None:
    who = tenant()
    blobs = BlobServiceClient.from_connection_string(stack.storage_connection_string)
    blobs.get_blob_client("incoming", f"{who}/minutes.txt").upload_blob(
        b"Meeting report. Results: the findings were approved. Summary follows.",
        content_settings=ContentSettings(content_type="text/plain"),
        metadata={"priority": "high"},
    )
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus:
        announced = _announcements(bus, "audit", who, count=1)
    request_id = announced[0]["request_id"]
    finished = poll(stack, who, request_id)
    assert finished["status"] == "completed"
    assert finished["priority"] == "high"


def test_an_event_published_to_the_namespace_is_pulled_and_completes(stack: Stack) -> None:
    """The pull door: a CloudEvent on the namespace topic, taken by the pull timer."""
    who = tenant()
    event = CloudEvent(
        source="/apps/crm",
        type="com.inferbus.InferenceRequested",
        data={"tenant_id": who, "input": {"text": "Invoice 9. Amount due: 40 EUR."}},
    )
    with EventGridPublisherClient(
        stack.eventgrid_endpoint,
        AzureKeyCredential(stack.eventgrid_key),
        namespace_topic="inference-requests",
    ) as publisher:
        publisher.send([event, event])  # a duplicate delivery makes no second job
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus:
        announced = _announcements(bus, "audit", who, count=1)  # exactly one
    finished = poll(stack, who, announced[0]["request_id"])
    assert finished["status"] == "completed"
    assert finished["result"]["document_type"] == "invoice"
    assert announced[0]["result_url"].endswith(f"/api/v1/requests/{finished['id']}/result")


def test_a_transient_model_fault_is_retried_and_completes(stack: Stack) -> None:
    who = tenant()
    request_id = submit(
        stack, who, text_request("Flaky model.", parameters={"simulate": {"transient_attempts": 1}})
    )
    finished = poll(stack, who, request_id)
    assert finished["status"] == "completed"
    assert finished["attempts"] == 2


def test_a_poison_request_is_dead_lettered_and_its_job_failed(stack: Stack) -> None:
    who = tenant()
    request_id = submit(
        stack, who, text_request("Poison.", parameters={"simulate": {"permanent": True}})
    )
    finished = poll(stack, who, request_id)
    assert finished["status"] == "failed"
    assert finished["error"]["code"] == "permanent"
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus,
        bus.get_queue_receiver("inference-requests", sub_queue="deadletter") as receiver,
    ):
        dead = [
            m
            for m in receiver.peek_messages(max_message_count=100)
            if str(m.message_id) == request_id
        ]
    assert len(dead) == 1
    assert dead[0].dead_letter_reason == "PermanentFailure"
    assert "simulated permanent model failure" in str(dead[0].dead_letter_error_description)


def test_a_queued_job_can_be_cancelled_and_stays_cancelled(stack: Stack) -> None:
    who = tenant()
    later = (datetime.now(UTC) + timedelta(seconds=4)).isoformat()
    request_id = submit(stack, who, text_request("Not yet.", not_before=later))
    status, _, raw = stack.request(
        "DELETE", f"/api/v1/requests/{request_id}", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    assert json.loads(raw)["status"] == "cancelled"
    # Its message is delivered (at once, or deferred and swept once not_before has passed)
    # and settled: when it has left the queue, the job must still be cancelled.
    wait_until_settled(stack, request_id, timeout=30)
    assert job(stack, who, request_id)["status"] == "cancelled"
    assert (
        stack.request("DELETE", f"/api/v1/requests/{request_id}", headers={"X-Tenant-Id": who})[0]
        == 409
    )


def test_the_event_grid_webhook_handshakes(stack: Stack) -> None:
    validation = [
        {
            "id": str(uuid.uuid4()),
            "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventGrid/topics/apps",
            "subject": "",
            "data": {"validationCode": "code-123"},
            "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
            "eventTime": datetime.now(UTC).isoformat(),
            "metadataVersion": "1",
            "dataVersion": "1",
        }
    ]
    status, _, raw = stack.request(
        "POST", "/api/v1/events", validation, {"aeg-event-type": "SubscriptionValidation"}
    )
    assert (status, json.loads(raw)) == (200, {"validationResponse": "code-123"})
    status, headers, _ = stack.request(
        "OPTIONS", "/api/v1/events", headers={"WebHook-Request-Origin": "eventgrid.azure.net"}
    )
    assert status == 200
    assert headers["WebHook-Allowed-Origin"] == "eventgrid.azure.net"
    assert headers["WebHook-Allowed-Rate"] == "*"


def test_results_topic_subscriptions_receive_what_their_filters_select(stack: Stack) -> None:
    who = tenant()
    urgent = submit(stack, who, text_request("Report of results.", priority="high"))
    sensitive = submit(stack, who, text_request("Refund card 4111 1111 1111 1111 please."))
    plain = submit(stack, who, text_request("A weekly report with findings and results."))
    for request_id in (urgent, sensitive, plain):
        assert poll(stack, who, request_id)["status"] == "completed"
    reviewed = {
        r for r in (urgent, sensitive, plain) if job(stack, who, r)["result"]["review_required"]
    }
    assert sensitive in reviewed
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus:
        audit = {a["request_id"] for a in _announcements(bus, "audit", who, count=3)}
        per_model = {
            a["request_id"] for a in _announcements(bus, "model-local-analyzer", who, count=3)
        }
        high = {a["request_id"] for a in _announcements(bus, "high-priority", who, count=1)}
        review = {
            a["request_id"] for a in _announcements(bus, "human-review", who, count=len(reviewed))
        }
    assert audit == per_model == {urgent, sensitive, plain}
    assert high == {urgent}
    assert review == reviewed


def _announcements(
    bus: ServiceBusClient, subscription: str, who: str, count: int, timeout: float = 45
) -> list[dict[str, Any]]:
    """This tenant's result messages on a subscription: waits for ``count`` of them, then a
    little longer, so that a message the filter should have kept out would be caught too.

    Messages of other tenants are left-overs of earlier tests (each test reads only its own
    tenant's, within the test) and are completed out of the way.
    """
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    settle_until: float | None = None
    with bus.get_subscription_receiver("inference-results", subscription) as receiver:
        while time.monotonic() < (settle_until or deadline):
            for message in receiver.receive_messages(max_message_count=50, max_wait_time=0.5):
                if normalise_properties(message.application_properties).get("tenant") == who:
                    found.append(json.loads(b"".join(message.body)))
                receiver.complete_message(message)
            if len(found) >= count and settle_until is None:
                settle_until = time.monotonic() + 1.5
    assert len(found) == count, (
        f"{subscription} gave {len(found)} messages for {who}, expected {count}"
    )
    return found


def test_two_tenants_each_list_their_own_requests_and_read_their_own_usage(
    stack: Stack,
) -> None:
    first, second = tenant(), tenant()
    mine = [submit(stack, first, text_request(f"Invoice {n}: {n}0 EUR due.")) for n in (1, 2)]
    theirs = submit(stack, second, text_request("Invoice 9: 90 EUR due."))
    for request_id in mine:
        assert poll(stack, first, request_id)["status"] == "completed"
    assert poll(stack, second, theirs)["status"] == "completed"

    status, _, raw = stack.request("GET", "/api/v1/requests", headers={"X-Tenant-Id": first})
    assert status == 200, raw
    assert [item["id"] for item in json.loads(raw)["requests"]] == mine[::-1], "newest first"

    def usage(who: str) -> dict[str, Any]:
        status, _, raw = stack.request("GET", "/api/v1/usage", headers={"X-Tenant-Id": who})
        assert status == 200, raw
        return dict(json.loads(raw))

    deadline = time.monotonic() + 30  # the ledger is written every Usage__flushSeconds
    counted = (0, 0)
    while counted != (2, 1) and time.monotonic() < deadline:
        time.sleep(0.5)
        counted = (usage(first)["total"]["requests"], usage(second)["total"]["requests"])
    own = usage(first)
    assert counted == (2, 1), "each tenant's answers, and only its own, are counted"
    assert own["tenant"] == first
    assert own["total"]["input_tokens"] > 0
    assert [row["model"] for row in own["days"]] == ["local-analyzer"]
    assert own["budgets"] == [], "no tenant catalog: no budget"
