"""Event Grid and blob (Event Grid source) triggers through the host's webhooks."""

from __future__ import annotations

import json
import uuid

import pytest
from azure.storage.blob import BlobServiceClient

from hostproc import SampleHost, http, wait_for

pytestmark = pytest.mark.integration


def _event_grid_url(host: SampleHost, key: str | None) -> str:
    url = f"{host.base_url}/runtime/webhooks/eventgrid?functionName=on_event"
    return f"{url}&code={key}" if key else url


def test_event_grid_handshake(sample_host: SampleHost) -> None:
    key = sample_host.keys["systemKeys"]["eventgrid_extension"]
    validation = [
        {
            "id": str(uuid.uuid4()),
            "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
            "subject": "",
            "data": {"validationCode": "code-123", "validationUrl": "https://example"},
            "eventTime": "2026-11-29T00:00:00Z",
            "dataVersion": "2",
        }
    ]
    body = json.dumps(validation).encode()
    headers = {"aeg-event-type": "SubscriptionValidation", "Content-Type": "application/json"}
    assert http("POST", _event_grid_url(sample_host, None), body, headers)[0] == 401
    status, _, answer = http("POST", _event_grid_url(sample_host, key), body, headers)
    assert status == 200
    assert json.loads(answer) == {"validationResponse": "code-123"}
    status, response_headers, _ = http(
        "OPTIONS", _event_grid_url(sample_host, key), None, {"WebHook-Request-Origin": "eg.azure"}
    )
    assert status == 200
    assert response_headers["webhook-allowed-origin"] == ["eg.azure"]


def test_event_grid_events_reach_the_function(sample_host: SampleHost) -> None:
    key = sample_host.keys["systemKeys"]["eventgrid_extension"]
    event_id = str(uuid.uuid4())
    events = [
        {
            "id": event_id,
            "topic": "/subscriptions/x/resourceGroups/y/providers/Microsoft.EventGrid/topics/z",
            "subject": "/tenants/contoso/things/1",
            "eventType": "Contoso.Thing.Created",
            "eventTime": "2026-11-29T10:00:00Z",
            "data": {"size": 3},
            "dataVersion": "1.0",
        }
    ]
    status, _, _ = http(
        "POST",
        _event_grid_url(sample_host, key),
        json.dumps(events).encode(),
        {"aeg-event-type": "Notification", "Content-Type": "application/json"},
    )
    assert status == 200
    rows = [r for r in sample_host.records("on_event") if r["id"] == event_id]
    assert rows == [
        {
            "function": "on_event",
            "id": event_id,
            "subject": "/tenants/contoso/things/1",
            "type": "Contoso.Thing.Created",
            "data": {"size": 3},
        }
    ]


def _watched(host: SampleHost, connection_string: str) -> tuple[BlobServiceClient, str]:
    values = json.loads(host.settings_path.read_text())["Values"]
    client = BlobServiceClient.from_connection_string(connection_string)
    container = values["WatchedContainer"]
    if not client.get_container_client(container).exists():
        client.create_container(container)
    return client, container


def test_blob_upload_invokes_the_blob_trigger_once(sample_host: SampleHost) -> None:
    values = json.loads(sample_host.settings_path.read_text())["Values"]
    client, container = _watched(sample_host, values["Storage"])
    name = f"doc-{uuid.uuid4().hex[:8]}.txt"
    client.get_blob_client(container, name).upload_blob(b"hello blob")
    full_name = f"{container}/{name}"

    def delivered() -> list[dict[str, object]]:
        return [r for r in sample_host.records("on_blob") if r["name"] == full_name]

    rows = wait_for(delivered, what="blob trigger")
    assert rows[0]["length"] == 10
    assert rows[0]["content"] == "hello blob"
    assert str(rows[0]["uri"]).endswith(f"/{container}/{name}")
    # A later upload delivered means the watcher scanned the container again since: the
    # first blob still had exactly one invocation.
    later = f"doc-{uuid.uuid4().hex[:8]}.txt"
    client.get_blob_client(container, later).upload_blob(b"later")
    wait_for(
        lambda: [r for r in sample_host.records("on_blob") if r["name"] == f"{container}/{later}"],
        what="the later blob",
    )
    assert len(delivered()) == 1


def test_failed_blob_delivery_is_retried_like_event_grid(sample_host: SampleHost) -> None:
    values = json.loads(sample_host.settings_path.read_text())["Values"]
    client, container = _watched(sample_host, values["Storage"])
    name = f"flaky-{uuid.uuid4().hex[:8]}.txt"
    client.get_blob_client(container, name).upload_blob(b"retry me")
    full_name = f"{container}/{name}"
    # The first attempt fails (500); Event Grid's 10 s first retry is scaled down here.
    wait_for(
        lambda: [r for r in sample_host.records("on_blob") if r["name"] == full_name],
        what="retried blob delivery",
    )
    attempts = [r for r in sample_host.records("on_blob_attempt") if r["name"] == full_name]
    assert len(attempts) == 1
    assert f"BlobCreated {full_name} -> on_blob answered 500 (attempt 1); retrying in" in (
        sample_host.log()
    )


def test_blobs_webhook_requires_its_system_key(sample_host: SampleHost) -> None:
    url = f"{sample_host.base_url}/runtime/webhooks/blobs?functionName=Host.Functions.on_blob"
    wrong = sample_host.keys["systemKeys"]["eventgrid_extension"]
    assert http("POST", url, b"[]")[0] == 401
    assert http("POST", f"{url}&code={wrong}", b"[]")[0] == 401
    right = sample_host.keys["systemKeys"]["blobs_extension"]
    assert http("POST", f"{url}&code={right}", b"[]")[0] == 202
