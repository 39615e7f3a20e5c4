"""Event Grid deliveries: both schemas, the three CloudEvents modes, handshakes, limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.errors import Forbidden, InvalidInput, PayloadTooLarge, Unauthenticated
from shared.events.dead_letters import parse_dead_letter_blob
from shared.events.incoming import IncomingEvent, ValidationRequest, parse_delivery
from shared.events.webhook_auth import authenticate_delivery

# Shapes as documented for Event Grid (storage BlobCreated and the validation event).
BLOB_CREATED = {
    "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/acct",
    "subject": "/blobServices/default/containers/incoming/blobs/contoso/report.txt",
    "eventType": "Microsoft.Storage.BlobCreated",
    "id": "831e1650-001e-001b-66ab-eeb76e069631",
    "data": {
        "api": "PutBlockList",
        "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca89a99",
        "requestId": "831e1650-001e-001b-66ab-eeb76e000000",
        "eTag": "0x8D4BCC2E4835CD0",
        "contentType": "text/plain",
        "contentLength": 524288,
        "blobType": "BlockBlob",
        "url": "https://acct.blob.core.windows.net/incoming/contoso/report.txt",
        "sequencer": "00000000000004420000000000028963",
        "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"},
    },
    "dataVersion": "",
    "metadataVersion": "1",
    "eventTime": "2026-11-29T10:00:00.0000000Z",
}
VALIDATION = {
    "id": "2d1781af-3a4c-4d7c-bd0c-e34b19da4e66",
    "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventGrid/topics/t",
    "subject": "",
    "data": {
        "validationCode": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6",
        "validationUrl": "https://rp/validate",
    },
    "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
    "eventTime": "2026-11-29T10:00:00Z",
    "metadataVersion": "1",
    "dataVersion": "1",
}
CLOUD_EVENT: dict[str, Any] = {
    "specversion": "1.0",
    "type": "com.inferbus.InferenceRequested",
    "source": "/apps/intake",
    "id": "A234-1234-1234",
    "time": "2026-11-29T17:31:00Z",
    "subject": "/tenants/contoso",
    "datacontenttype": "application/json",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "data": {"tenant_id": "contoso", "input": {"text": "hello"}},
}


def parse(body: object, **headers: str) -> ValidationRequest | list[IncomingEvent]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_delivery({k.replace("_", "-"): v for k, v in headers.items()}, raw)


def test_event_grid_schema_arrays_are_parsed() -> None:
    events = parse([BLOB_CREATED], aeg_event_type="Notification", content_type="application/json")
    assert isinstance(events, list)
    (event,) = events
    assert (event.id, event.type, event.schema) == (
        BLOB_CREATED["id"],
        "Microsoft.Storage.BlobCreated",
        "eventgrid",
    )
    assert event.data["url"].endswith("/incoming/contoso/report.txt")


def test_the_subscription_validation_event_is_the_handshake() -> None:
    handshake = parse(
        [VALIDATION], aeg_event_type="SubscriptionValidation", content_type="application/json"
    )
    assert handshake == ValidationRequest(
        "512d38b6-c7b8-40c8-89fe-f46f9e9622b6", "https://rp/validate"
    )


def test_cloudevents_structured_batch_and_binary_modes() -> None:
    structured = parse(CLOUD_EVENT, content_type="application/cloudevents+json; charset=utf-8")
    batch = parse(
        [CLOUD_EVENT, {**CLOUD_EVENT, "id": "B"}], content_type="application/cloudevents-batch+json"
    )
    binary = parse(
        json.dumps(CLOUD_EVENT["data"]).encode(),
        content_type="application/json",
        ce_specversion="1.0",
        ce_type="com.inferbus.InferenceRequested",
        ce_source="/apps/intake",
        ce_id="C",
        ce_traceparent=CLOUD_EVENT["traceparent"],
    )
    assert isinstance(structured, list)
    assert isinstance(batch, list)
    assert isinstance(binary, list)
    assert [e.id for e in structured + batch + binary] == [
        "A234-1234-1234",
        "A234-1234-1234",
        "B",
        "C",
    ]
    assert all(
        e.schema == "cloudevents" and e.data == CLOUD_EVENT["data"] for e in structured + binary
    )
    assert structured[0].extensions["traceparent"] == CLOUD_EVENT["traceparent"]
    assert binary[0].extensions["traceparent"] == CLOUD_EVENT["traceparent"]


@pytest.mark.parametrize(
    ("body", "headers", "why"),
    [
        (b"{nope", {"content_type": "application/json"}, "not valid JSON"),
        ([], {"content_type": "application/json"}, "no events"),
        ([{"eventType": "x"}], {"content_type": "application/json"}, "lacks"),
        (
            {"specversion": "1.0", "id": "1"},
            {"content_type": "application/cloudevents+json"},
            "required attributes",
        ),
        (
            {**CLOUD_EVENT, "specversion": "0.3"},
            {"content_type": "application/cloudevents+json"},
            "specversion",
        ),
        ({"a": 1}, {"content_type": "application/cloudevents-batch+json"}, "array"),
        ([{**VALIDATION, "data": {}}], {"content_type": "application/json"}, "validationCode"),
    ],
)
def test_malformed_deliveries_are_invalid_input(
    body: object, headers: dict[str, str], why: str
) -> None:
    with pytest.raises(InvalidInput, match=why):
        parse(body, **headers)


def test_deliveries_over_a_megabyte_are_too_large() -> None:
    with pytest.raises(PayloadTooLarge):
        parse_delivery({"content-type": "application/json"}, b"[" + b" " * 1_048_576 + b"]")


class Tokens:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def validate(self, token: str) -> dict[str, object]:
        self.seen.append(token)
        if token != "good":
            raise Forbidden("bad token")
        return {}


def test_the_shared_secret_and_the_bearer_token_are_both_required_when_configured() -> None:
    tokens = Tokens()
    authenticate_delivery({"x-webhook-secret": "s3", "authorization": "Bearer good"}, "s3", tokens)
    assert tokens.seen == ["good"]
    with pytest.raises(Unauthenticated):
        authenticate_delivery({"authorization": "Bearer good"}, "s3", tokens)
    with pytest.raises(Forbidden):
        authenticate_delivery(
            {"x-webhook-secret": "wrong", "authorization": "Bearer good"}, "s3", tokens
        )
    with pytest.raises(Unauthenticated):
        authenticate_delivery({"x-webhook-secret": "s3"}, "s3", tokens)
    with pytest.raises(Forbidden):
        authenticate_delivery({"authorization": "Bearer bad"}, None, tokens)
    authenticate_delivery({}, None, None)


def test_dead_letter_blobs_of_both_schemas_are_read() -> None:
    eventgrid_entry = {
        **BLOB_CREATED,
        "deadLetterReason": "MaxDeliveryAttemptsExceeded",
        "deliveryAttempts": 30,
        "lastDeliveryOutcome": "Busy",
        "lastHttpStatusCode": 503,
        "publishTime": "2026-11-28T10:00:00.0000000Z",
        "lastDeliveryAttemptTime": "2026-11-29T10:00:00.0000000Z",
    }
    cloud_entry = {
        "event": CLOUD_EVENT,
        "deadLetterReason": "TimeToLiveExceeded",
        "deliveryAttempts": 3,
        "lastDeliveryOutcome": "TimedOut",
        "publishTime": "2026-11-28T11:00:00Z",
    }
    items = parse_dead_letter_blob(
        "T/S/2026/11/29/10/x.json", json.dumps([eventgrid_entry, cloud_entry]).encode()
    )
    assert [(i.event.type, i.reason, i.attempts, i.last_outcome) for i in items] == [
        ("Microsoft.Storage.BlobCreated", "MaxDeliveryAttemptsExceeded", 30, "Busy"),
        ("com.inferbus.InferenceRequested", "TimeToLiveExceeded", 3, "TimedOut"),
    ]
    assert items[0].last_http_status == 503
    assert items[0].key != items[1].key
