"""The tenant catalog's ``models`` at every door that goes through intake, wired over the
in-memory ports: a tenant asking for an alias it may not use is refused before anything
is stored (HTTP 403 ``model-not-allowed``), and the event doors refuse such work as they
refuse an unknown model, for good (rejected, never released for a retry)."""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.adapters.in_memory import RecordingSettler
from shared.contracts import Door, InlineText, JobStatus, RequestMessage
from shared.entrypoints import functions as entry_points
from shared.events.incoming import event_from_cloudevent
from shared.events.pull import PullDoor, PullPolicy
from shared.lanes import Lane
from shared.messaging import request_envelope
from shared.tracing import continue_or_start
from tests.support.events import requested_event
from tests.support.wiring import Wired, api_request, tenant_catalog, wire
from tests.unit.test_event_pull import ScriptedQueue, pulled

TEXT = "Please summarise this report."
REFUSAL = "tenant 'support' may not use model 'local-analyzer' on this service"
TENANTS = {
    "tenants": {
        "support": {"weight": 3, "models": ["other-model"]},
        "suspended": {"models": []},
    }
}


@pytest.fixture
def wired(tmp_path: Path) -> Wired:
    """The in-memory app (aliases local-analyzer and other-model) with the tenant catalog
    read from its file, as the app reads it."""
    return wire(settings=tenant_catalog(tmp_path, TENANTS))


def submit(wired: Wired, tenant: str, model: str, **headers: str) -> tuple[int, dict[str, str]]:
    body = {"model": model, "input": {"text": TEXT}}
    request = api_request("POST", "/v1/requests", body=body, tenant=tenant, headers=headers)
    response = wired.call(wired.http.requests.submit, request)
    return response.status, {**json.loads(response.body), **response.headers}


def test_the_wiring_reads_the_catalog_the_setting_names(wired: Wired) -> None:
    assert wired.tenants.policy("support").weight == 3
    assert wired.tenants.policy("contoso").models is None


def test_an_alias_the_tenant_may_not_use_is_a_403_and_nothing_is_stored(wired: Wired) -> None:
    status, problem = submit(wired, "support", "local-analyzer", **{"Idempotency-Key": "k-1"})

    assert status == 403
    assert problem["Content-Type"] == "application/problem+json"
    assert problem["type"] == "urn:inferbus:problem:model-not-allowed"
    assert problem["title"] == "Model not allowed"
    assert problem["detail"] == REFUSAL
    assert wired.queue.sent == []
    assert wired.blobs.stored == {}, "no claim check, no job, no idempotency marker"


def test_the_tenants_own_alias_and_any_alias_for_a_tenant_not_named_are_accepted(
    wired: Wired,
) -> None:
    allowed, _ = submit(wired, "support", "other-model")
    unnamed, _ = submit(wired, "contoso", "local-analyzer")

    assert (allowed, unnamed) == (202, 202)
    assert [json.loads(m.body)["tenant_id"] for m in wired.queue.sent] == ["support", "contoso"]


def test_a_tenant_with_an_empty_list_may_use_no_model(wired: Wired) -> None:
    refusals = [submit(wired, "suspended", alias)[0] for alias in ("local-analyzer", "other-model")]

    assert refusals == [403, 403]
    assert wired.queue.sent == []


def test_an_event_for_a_model_the_tenant_may_not_use_is_rejected_as_an_unknown_model_is(
    wired: Wired,
) -> None:
    intake = wired.services.event_intake
    not_allowed = intake.accept_event(
        event_from_cloudevent(requested_event("support", "ev-1", model="local-analyzer"))
    )
    unknown = intake.accept_event(
        event_from_cloudevent(requested_event("support", "ev-2", model="gpt-9"))
    )

    assert (not_allowed.status, unknown.status) == ("rejected", "rejected")
    assert not_allowed.reason == REFUSAL
    assert wired.queue.sent == []
    assert wired.blobs.stored == {}


def test_the_pull_door_rejects_it_for_good_as_it_rejects_an_unknown_model(wired: Wired) -> None:
    queue = ScriptedQueue(
        [
            [
                pulled("not-allowed", requested_event("support", model="local-analyzer")),
                pulled("unknown", requested_event("support", model="gpt-9")),
                pulled("ok", requested_event("support", model="other-model")),
            ]
        ]
    )

    report = PullDoor(queue, wired.services.event_intake, PullPolicy()).drain()

    assert sorted(queue.calls) == [
        ("acknowledge", ("ok",), 0),
        ("reject", ("not-allowed", "unknown"), 0),
    ]
    assert report.outcomes == Counter({"rejected": 2, "accepted": 1})
    assert [json.loads(m.body)["model"] for m in wired.queue.sent] == ["other-model"]
    assert wired.services.jobs.get("support", wired.queue.sent[0].message_id).source == (
        Door.EVENTGRID_PULL
    )


def test_a_dropped_document_naming_a_model_the_tenant_may_not_use_is_acknowledged_unaccepted(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    wired.blobs.upload(
        "incoming", "support/memo.txt", TEXT.encode(), "text/plain", {"model": "local-analyzer"}
    )

    with caplog.at_level(logging.ERROR):
        entry_points.handle_new_blob(
            wired.services, "incoming/support/memo.txt", io.BytesIO(TEXT.encode()).read
        )

    assert "may not use model 'local-analyzer'" in caplog.text
    assert wired.queue.sent == []


def test_a_producers_message_for_a_model_the_tenant_may_not_use_is_refused(
    tmp_path: Path,
) -> None:
    wired = wire(settings={**tenant_catalog(tmp_path, TENANTS), "ProducerTenants": "support"})
    request = RequestMessage(
        request_id="producer-1", tenant_id="support", model="local-analyzer",
        input=InlineText(text=TEXT),
    )  # fmt: skip
    message = request_envelope(
        request, correlation_id="c-1", trace=continue_or_start(None), now=datetime.now(UTC)
    )
    settler = RecordingSettler()

    outcome = wired.services.lanes[Lane.STANDARD].processor.process(wired.deliver(message), settler)

    assert outcome == "dead-lettered"
    [(action, message_id, reason, description)] = settler.actions
    assert (action, message_id, reason) == ("dead_letter", "producer-1", "InvalidPayload")
    assert REFUSAL in str(description)
    job = wired.services.jobs.get("support", "producer-1")
    assert job.status is JobStatus.FAILED
