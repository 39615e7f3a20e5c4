"""Event intake over in-memory ports: dropped blobs, BlobCreated and InferenceRequested
events, each with a durable dedupe key (one job and one message per event)."""

from __future__ import annotations

import hashlib
import io
import json
import logging

import pytest

from shared.contracts import Door, Priority
from shared.entrypoints import functions as entry_points
from shared.errors import ConfigurationError, InvalidInput, NotOurs
from shared.events.incoming import IncomingEvent, event_from_cloudevent, event_from_eventgrid
from shared.events.intake import dedupe_key
from shared.events.webhook_tenancy import TenantScope
from shared.intake.idempotency import hash_key
from tests.support.events import blob_created_event, requested_event
from tests.support.wiring import Wired, wire

TEXT = b"Dear team, the quarterly report is attached. Please review it by Friday."


def drop(wired: Wired, name: str, data: bytes = TEXT, **metadata: str) -> None:
    wired.blobs.upload("incoming", name, data, "text/plain", metadata)


def test_a_dropped_document_is_its_own_claim_check_and_counts_once_per_version(
    wired: Wired,
) -> None:
    drop(wired, "contoso/report.txt", model="other-model", priority="high")

    first = wired.services.event_intake.accept_blob("incoming", "contoso/report.txt")
    again = wired.services.event_intake.accept_blob("incoming", "contoso/report.txt")

    job = first.job
    assert (job.tenant_id, job.model, job.priority, job.source) == (
        "contoso",
        "other-model",
        Priority.HIGH,
        "blob",
    )
    assert job.input is not None
    assert job.input.blob_uri == f"{wired.blobs.account_url}/incoming/contoso/report.txt"  # type: ignore[union-attr]
    assert job.input.sha256 == hashlib.sha256(TEXT).hexdigest()  # type: ignore[union-attr]
    assert again.replayed is True
    assert again.job.id == job.id
    assert [m.message_id for m in wired.queue.sent] == [job.id]

    drop(wired, "contoso/report.txt", b"a new version")  # a new ETag: a new document
    newer = wired.services.event_intake.accept_blob("incoming", "contoso/report.txt")
    assert newer.replayed is False
    assert newer.job.model == "local-analyzer", "without metadata: DefaultModel"
    assert len(wired.queue.sent) == 2


def test_the_blob_dedupe_key_is_container_name_and_etag(wired: Wired) -> None:
    drop(wired, "contoso/a.txt")
    info = wired.blobs.info("incoming", "contoso/a.txt")
    assert info is not None
    wired.services.event_intake.accept_blob("incoming", "contoso/a.txt")
    key = dedupe_key("blob", "incoming", "contoso/a.txt", info.etag or "")
    assert wired.documents.load("idempotency", f"contoso/{hash_key(key)}.json") is not None


@pytest.mark.parametrize(
    ("container", "name", "metadata", "error"),
    [
        ("inputs", "contoso/x.txt", {}, NotOurs),
        ("incoming", "x.txt", {}, InvalidInput),
        ("incoming", "contoso/x.txt", {"tenant_id": "fabrikam"}, InvalidInput),
        ("incoming", "contoso/x.txt", {"priority": "urgent"}, InvalidInput),
        ("incoming", "contoso/absent.txt", {}, InvalidInput),
    ],
)
def test_blobs_that_are_not_ours_or_not_valid_make_no_job(
    wired: Wired, container: str, name: str, metadata: dict[str, str], error: type[Exception]
) -> None:
    if "absent" not in name:
        wired.blobs.upload(container, name, TEXT, "text/plain", metadata)
    with pytest.raises(error):
        wired.services.event_intake.accept_blob(container, name)
    assert wired.documents.list_names("jobs", "") == []
    assert wired.queue.sent == []


def test_blob_created_is_the_same_door_and_the_same_dedupe_key_as_the_blob_trigger(
    wired: Wired,
) -> None:
    drop(wired, "contoso/scan.txt")
    event = event_from_eventgrid(blob_created_event(wired.blobs, "incoming", "contoso/scan.txt"))

    from_event = wired.services.event_intake.accept_event(event, source=Door.WEBHOOK)
    from_trigger = wired.services.event_intake.accept_blob("incoming", "contoso/scan.txt")

    assert from_event.status == "accepted"
    assert from_trigger.replayed is True
    assert from_trigger.job.id == from_event.request_id
    redelivered = wired.services.event_intake.accept_event(event, source=Door.WEBHOOK)
    assert (redelivered.status, redelivered.request_id) == ("duplicate", from_event.request_id)
    assert len(wired.queue.sent) == 1


def test_blob_created_for_another_account_or_container_is_ignored(wired: Wired) -> None:
    drop(wired, "contoso/scan.txt")
    document = blob_created_event(wired.blobs, "incoming", "contoso/scan.txt")
    elsewhere = {**document, "data": {**document["data"], "url": "https://other.example/x/y"}}
    wired.blobs.upload("results", "contoso/r.json", b"{}", "application/json", {})
    output = blob_created_event(wired.blobs, "results", "contoso/r.json")

    for raw in (elsewhere, output):
        outcome = wired.services.event_intake.accept_event(event_from_eventgrid(raw))
        assert outcome.status == "ignored"
    assert wired.queue.sent == []


def test_inference_requested_is_deduplicated_by_source_and_id(wired: Wired) -> None:
    event = event_from_cloudevent(requested_event("contoso", "ev-1", priority="high"))
    first = wired.services.event_intake.accept_event(event)
    again = wired.services.event_intake.accept_event(event)
    other_source = IncomingEvent(
        id="ev-1",
        type=event.type,
        source="/apps/erp",
        subject=None,
        data=event.data,
        schema="cloudevents",
    )
    third = wired.services.event_intake.accept_event(other_source)

    assert (first.status, again.status, third.status) == ("accepted", "duplicate", "accepted")
    assert again.request_id == first.request_id
    assert third.request_id != first.request_id
    job = wired.services.jobs.get("contoso", str(first.request_id))
    assert (job.priority, job.source) == (Priority.HIGH, "eventgrid")
    sent = [m.message_id for m in wired.queue.sent]
    assert sent == [first.request_id, third.request_id]
    assert json.loads(wired.queue.sent[0].body)["tenant_id"] == "contoso"


@pytest.mark.parametrize(
    "data",
    [
        {"tenant_id": "contoso", "input": {"text": ""}, "priority": "urgent"},
        {"tenant_id": "not a tenant!", "input": {"text": "x"}},
        {"tenant_id": "contoso", "input": {"text": "x"}, "model": "gpt-9"},
        {"tenant_id": "contoso", "input": {"text": "x" * 2000}},
    ],
)
def test_invalid_inference_requests_are_rejected_with_a_reason(
    wired: Wired, data: dict[str, object]
) -> None:
    raw = requested_event("contoso")
    raw["data"] = data
    outcome = wired.services.event_intake.accept_event(event_from_cloudevent(raw))
    assert outcome.status == "rejected"
    assert outcome.reason
    assert wired.queue.sent == []


def test_unknown_event_types_are_ignored(wired: Wired) -> None:
    raw = {**requested_event("contoso"), "type": "com.example.Other"}
    outcome = wired.services.event_intake.accept_event(event_from_cloudevent(raw))
    assert (outcome.status, outcome.reason) == ("ignored", "unhandled event type")


def test_the_blob_entry_point_streams_the_digest_and_acknowledges_invalid_documents(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    drop(wired, "contoso/memo.txt")
    entry_points.handle_new_blob(wired.services, "incoming/contoso/memo.txt", io.BytesIO(TEXT).read)
    (message,) = wired.queue.sent
    assert json.loads(message.body)["input"]["sha256"] == hashlib.sha256(TEXT).hexdigest()

    drop(wired, "memo-without-tenant.txt")
    with caplog.at_level(logging.ERROR):
        entry_points.handle_new_blob(
            wired.services, "incoming/memo-without-tenant.txt", io.BytesIO(TEXT).read
        )
    assert "was not accepted" in caplog.text
    assert len(wired.queue.sent) == 1


def test_the_event_grid_entry_point_makes_the_job(wired: Wired) -> None:
    entry_points.handle_event(
        wired.services, event_from_cloudevent(requested_event("contoso", "ev-9"))
    )
    (message,) = wired.queue.sent
    assert wired.services.jobs.get("contoso", message.message_id).source == "eventgrid"


def test_an_identity_with_a_lone_surrogate_still_has_a_dedupe_key() -> None:
    assert dedupe_key("event", "/apps/crm", "ev-\udc80") != dedupe_key("event", "/apps/crm", "ev-")


def test_an_event_outside_the_credentials_tenants_is_rejected_with_the_reason(
    wired: Wired,
) -> None:
    scope = TenantScope(frozenset({"contoso"}))
    intake = wired.services.event_intake
    foreign = event_from_cloudevent(requested_event("fabrikam", "ev-f"))
    own = event_from_cloudevent(requested_event("contoso", "ev-o"))

    refused = intake.accept_event(foreign, source=Door.WEBHOOK, tenants=scope)
    accepted = intake.accept_event(own, source=Door.WEBHOOK, tenants=scope)

    assert (refused.status, accepted.status) == ("rejected", "accepted")
    assert refused.reason is not None
    assert "tenant 'fabrikam' is not one this webhook credential may submit" in refused.reason
    assert [m.message_id for m in wired.queue.sent] == [accepted.request_id]


@pytest.mark.parametrize(
    "change",
    [
        {"data": None, "data_base64": 7},
        {"data": None, "data_base64": "not base64!"},
        {"time": 12},
        {"id": ["a"]},
    ],
)
def test_a_cloudevent_with_attributes_of_the_wrong_kind_is_invalid(
    change: dict[str, object],
) -> None:
    with pytest.raises(InvalidInput):
        event_from_cloudevent({**requested_event("contoso"), **change})


def test_each_door_uses_the_alias_its_setting_names_for_work_that_names_none() -> None:
    doors = wire(
        DefaultModel="other-model",
        IncomingBlobModel="local-analyzer",
        EventGridPull__model="local-analyzer",
    )
    intake = doors.services.event_intake
    drop(doors, "contoso/report.txt")
    assert intake.accept_blob("incoming", "contoso/report.txt").job.model == "local-analyzer"
    drop(doors, "contoso/named.txt", model="other-model")
    named = intake.accept_blob("incoming", "contoso/named.txt")
    assert named.job.model == "other-model", "the blob's metadata wins"

    def model_of(source: Door) -> str:
        event = event_from_cloudevent(requested_event("contoso"))
        outcome = intake.accept_event(event, source=source)
        return doors.services.jobs.get("contoso", str(outcome.request_id)).model

    assert model_of(Door.EVENTGRID_PULL) == "local-analyzer"  # EventGridPull__model
    assert model_of(Door.WEBHOOK) == "other-model"  # WebhookModel unset: DefaultModel
    assert model_of(Door.EVENTGRID) == "other-model"


def test_a_door_setting_that_names_an_alias_not_served_stops_the_services() -> None:
    with pytest.raises(ConfigurationError) as refused:
        wire(WebhookModel="gpt-9")
    assert str(refused.value) == (
        "WebhookModel is 'gpt-9', which AllowedModels/ModelProvider does not serve "
        "(served: local-analyzer, other-model)"
    )
