"""The HTTP API handlers over in-memory ports, called as the HTTP triggers call them:
``/api/v1/requests`` (submit, status, result, cancel) and the ``/api/v1/events`` webhook."""

from __future__ import annotations

import base64
import inspect
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared import bounded_json, errors
from shared.adapters.in_memory import RecordingSettler
from shared.entrypoints.http.messages import ApiResponse
from shared.entrypoints.http.problems import STATUS_BY_ERROR, problem_for
from shared.lanes import Lane
from shared.request_ids import new_request_id
from tests.fakes import ManualClock, broker_down
from tests.support.events import (
    blob_created_event,
    requested_event,
    subscription_validation_event,
)
from tests.support.wiring import BASE_URL, Wired, api_request, wire

TENANT = "contoso"
TEXT = {"model": "local-analyzer", "input": {"text": "Invoice 12: 300 EUR due in 30 days."}}


def body(response: ApiResponse) -> Any:
    return json.loads(response.body)


def submit(wired: Wired, document: Any = TEXT, **options: Any) -> ApiResponse:
    options.setdefault("tenant", TENANT)
    return wired.call(
        wired.http.requests.submit, api_request("POST", "/v1/requests", body=document, **options)
    )


def on_job(
    wired: Wired, handler: Any, method: str, job_id: str, suffix: str = "", **options: Any
) -> ApiResponse:
    options.setdefault("tenant", TENANT)
    path = f"/v1/requests/{job_id}{suffix}"
    return wired.call(handler, api_request(method, path, route_params={"id": job_id}, **options))


def assert_problem(response: ApiResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status == status, response.body
    assert response.headers["Content-Type"] == "application/problem+json"
    problem: dict[str, Any] = body(response)
    assert problem["type"] == "urn:inferbus:problem:" + code
    return problem


def process_queue(wired: Wired) -> RecordingSettler:
    """Deliver what intake sent to the processor, as the batch trigger would."""
    settler = RecordingSettler()
    for sequence, message in enumerate(list(wired.queue.sent), start=1):
        wired.services.lanes[Lane.STANDARD].processor.process(
            wired.deliver(message, sequence), settler
        )
    return settler


# --- /api/v1/requests --------------------------------------------------------------------


def test_submit_answers_202_with_location_and_retry_after(wired: Wired) -> None:
    response = submit(wired)

    assert response.status == 202
    created = body(response)
    status_url = f"{BASE_URL}/v1/requests/{created['id']}"
    assert created == {"id": created["id"], "status": "accepted", "status_url": status_url}
    assert response.headers["Location"] == status_url
    assert response.headers["Retry-After"] == "2"
    assert [m.message_id for m in wired.queue.sent] == [created["id"]]


def test_a_job_is_polled_until_done_and_its_result_fetched(wired: Wired) -> None:
    job_id = body(submit(wired))["id"]

    polled = on_job(wired, wired.http.requests.status, "GET", job_id)
    assert polled.status == 200
    assert body(polled)["status"] == "accepted"
    assert polled.headers["Retry-After"] == "2"
    early = on_job(wired, wired.http.requests.result, "GET", job_id, "/result")
    assert_problem(early, 409, "result-not-ready")
    assert early.headers["Retry-After"] == "2"

    assert process_queue(wired).actions == [("complete", job_id, None, None)]

    done = on_job(wired, wired.http.requests.status, "GET", job_id)
    view = body(done)
    assert view["status"] == "completed"
    assert view["attempts"] == 1
    assert view["result"]["document_type"] == "invoice"
    assert view["result_url"] == f"{BASE_URL}/v1/requests/{job_id}/result"
    assert "Retry-After" not in done.headers
    result = on_job(wired, wired.http.requests.result, "GET", job_id, "/result")
    assert result.status == 200
    assert body(result)["request_id"] == job_id
    assert body(result)["result"]["document_type"] == "invoice"


def test_cancel_is_final(wired: Wired) -> None:
    job_id = body(submit(wired))["id"]

    cancelled = on_job(wired, wired.http.requests.cancel, "DELETE", job_id)
    assert cancelled.status == 200
    assert body(cancelled)["status"] == "cancelled"
    assert_problem(on_job(wired, wired.http.requests.cancel, "DELETE", job_id), 409, "job-terminal")
    assert_problem(
        on_job(wired, wired.http.requests.result, "GET", job_id, "/result"), 409, "no-result"
    )
    assert process_queue(wired).actions == [("complete", job_id, None, None)]
    assert body(on_job(wired, wired.http.requests.status, "GET", job_id))["status"] == "cancelled"


def test_another_tenants_request_does_not_exist(wired: Wired) -> None:
    job_id = body(submit(wired))["id"]
    for handler, method, suffix in (
        (wired.http.requests.status, "GET", ""),
        (wired.http.requests.result, "GET", "/result"),
        (wired.http.requests.cancel, "DELETE", ""),
    ):
        response = on_job(wired, handler, method, job_id, suffix, tenant="fabrikam")
        assert_problem(response, 404, "not-found")
    assert body(on_job(wired, wired.http.requests.status, "GET", job_id))["status"] == "accepted"


def test_a_request_retired_by_the_retention_policy_is_410_gone() -> None:
    """Lifecycle rules delete jobs without a trace; the request id remembers its age."""
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
    wired = wire(clock=clock, JobRetentionDays="30")
    job_id = body(submit(wired))["id"]
    clock.now += timedelta(days=31)
    wired.documents.delete("jobs", f"{TENANT}/{job_id}.json")  # what the lifecycle rule does

    for handler, method, suffix in (
        (wired.http.requests.status, "GET", ""),
        (wired.http.requests.result, "GET", "/result"),
        (wired.http.requests.cancel, "DELETE", ""),
    ):
        problem = assert_problem(
            on_job(wired, handler, method, job_id, suffix), 410, "request-retired"
        )
        assert "30 days" in problem["detail"]
    young = new_request_id(lambda: clock.now - timedelta(days=29))
    assert_problem(on_job(wired, wired.http.requests.status, "GET", young), 404, "not-found")
    assert_problem(
        on_job(wired, wired.http.requests.status, "GET", str(uuid.uuid4())), 404, "not-found"
    )


def test_the_tenant_comes_from_the_principal_and_the_header_only_where_allowed() -> None:
    principal = {"auth_typ": "aad", "claims": [{"typ": "tid", "val": "fabrikam"}]}
    encoded = base64.b64encode(json.dumps(principal).encode()).decode()
    production = wire(AllowTenantHeader="false")

    assert_problem(submit(production), 401, "unauthenticated")
    accepted = submit(production, headers={"x-ms-client-principal": encoded}, tenant=None)
    assert accepted.status == 202
    assert production.services.jobs.get("fabrikam", body(accepted)["id"])


def test_the_same_idempotency_key_returns_the_same_request(wired: Wired) -> None:
    headers = {"Idempotency-Key": "order-4711"}
    first, second = submit(wired, headers=headers), submit(wired, headers=headers)
    other = {**TEXT, "priority": "high"}

    assert (first.status, second.status) == (202, 202)
    assert body(first)["id"] == body(second)["id"]
    assert len(wired.queue.sent) == 1
    assert_problem(submit(wired, other, headers=headers), 409, "idempotency-key-reused")


def test_a_raw_upload_is_accepted_with_its_model_from_the_query(wired: Wired) -> None:
    response = wired.call(
        wired.http.requests.submit,
        api_request(
            "POST",
            "/v1/requests",
            body=b"%PDF-1.7 minimal",
            headers={"Content-Type": "application/pdf"},
            params={"model": "other-model", "priority": "low"},
            tenant=TENANT,
        ),
    )
    assert response.status == 202
    job = wired.services.jobs.get(TENANT, body(response)["id"])
    assert (job.model, job.priority.value) == ("other-model", "low")
    assert wired.blobs.read("inputs", f"{TENANT}/{job.id}") == b"%PDF-1.7 minimal"


@pytest.mark.parametrize(
    ("document", "headers", "status", "code", "field"),
    [
        (b"{not json", {"Content-Type": "application/json"}, 400, "invalid-json", "body"),
        (
            b'{"a": ' * 1000 + b"1" + b"}" * 1000,
            {"Content-Type": "application/json"},
            400,
            "invalid-json",
            "body",
        ),
        (
            {**TEXT, "parameters": {"nested": json.loads("[" * 40 + "]" * 40)}},
            {},
            400,
            "invalid-json",
            "body",
        ),
        (
            b'{"model": "local-analyzer", "input": {"text": "\\ud800"}}',
            {"Content-Type": "application/json"},
            400,
            "invalid-json",
            "body",
        ),
        (
            b'{"deadline_seconds": NaN}',
            {"Content-Type": "application/json"},
            400,
            "invalid-json",
            "body",
        ),
        (
            {**TEXT, "parameters": {"summary_sentences": "x"}},
            {},
            422,
            "invalid-parameters",
            "parameters.summary_sentences",
        ),
        (
            {**TEXT, "parameters": {"summary_sentences": 0, "temperature": 9}},
            {},
            422,
            "invalid-parameters",
            "parameters.temperature",
        ),
        ({**TEXT, "parameters": {"nope": 1}}, {}, 422, "invalid-parameters", "parameters.nope"),
        (
            {**TEXT, "parameters": {"notes": "p" * 20_000}},
            {},
            413,
            "payload-too-large",
            "parameters",
        ),
        ({"model": "local-analyzer"}, {}, 400, "invalid-input", "input"),
        ({**TEXT, "model": "gpt-9"}, {}, 422, "unknown-model", "model"),
        ({**TEXT, "input": {"text": "x" * 2000}}, {}, 413, "payload-too-large", "input.text"),
        (b"<xml/>", {"Content-Type": "application/xml"}, 415, "unsupported-media-type", None),
        (
            {**TEXT, "parameters": {"simulate": {"permanent": True}}},
            {},
            422,
            "invalid-parameters",
            "parameters.simulate",
        ),
    ],
)
def test_invalid_submissions_are_problems_and_nothing_is_sent(
    wired: Wired,
    document: Any,
    headers: dict[str, str],
    status: int,
    code: str,
    field: str | None,
) -> None:
    problem = assert_problem(submit(wired, document, headers=headers), status, code)
    if field:
        assert field in [error["field"] for error in problem["errors"]]
    assert wired.queue.sent == []
    assert wired.documents.list_names("jobs", "") == []


def test_with_faults_enabled_a_simulated_fault_is_accepted_and_injected() -> None:
    development = wire(LocalModelFaults="true")
    response = submit(development, {**TEXT, "parameters": {"simulate": {"permanent": True}}})
    assert response.status == 202
    (action,) = process_queue(development).actions
    assert action[:3] == ("dead_letter", body(response)["id"], "PermanentFailure")


def test_a_failed_send_is_503_with_retry_after_and_nothing_accepted(wired: Wired) -> None:
    wired.queue.fail_with = broker_down()
    response = submit(wired, headers={"Idempotency-Key": "k"})
    assert_problem(response, 503, "service-unavailable")
    assert response.headers["Retry-After"] == "5"
    assert wired.documents.list_names("jobs", f"{TENANT}/") == []

    wired.queue.fail_with = None
    retry = submit(wired, headers={"Idempotency-Key": "k"})
    assert retry.status == 202
    assert (
        body(on_job(wired, wired.http.requests.status, "GET", body(retry)["id"]))["status"]
        == "accepted"
    )


# --- /api/v1/events ----------------------------------------------------------------------


def deliver(wired: Wired, payload: Any, method: str = "POST", **headers: str) -> ApiResponse:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = api_request(
        method,
        "/v1/events",
        body=raw,
        headers={k.replace("_", "-"): v for k, v in headers.items()},
    )
    return wired.call(wired.http.webhook.handle, request)


def test_the_event_grid_validation_handshake_echoes_the_code(wired: Wired) -> None:
    validation = [subscription_validation_event()]
    response = deliver(
        wired, validation, aeg_event_type="SubscriptionValidation", content_type="application/json"
    )
    assert response.status == 200
    assert body(response) == {"validationResponse": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}
    assert wired.queue.sent == []


def test_the_cloudevents_abuse_protection_handshake(wired: Wired) -> None:
    response = deliver(wired, b"", "OPTIONS", webhook_request_origin="eventgrid.azure.net")
    assert response.status == 200
    assert response.headers["WebHook-Allowed-Origin"] == "eventgrid.azure.net"
    assert response.headers["WebHook-Allowed-Rate"] == "*"
    assert_problem(deliver(wired, b"", "OPTIONS"), 400, "invalid-input")


def test_a_delivered_event_is_202_once_and_a_duplicate_is_202_again(wired: Wired) -> None:
    event = requested_event(TENANT, "ev-1")
    first = deliver(wired, event, content_type="application/cloudevents+json")
    again = deliver(wired, event, content_type="application/cloudevents+json")

    assert (first.status, again.status) == (202, 202)
    (accepted,) = body(first)["events"]
    (duplicate,) = body(again)["events"]
    assert (accepted["status"], duplicate["status"]) == ("accepted", "duplicate")
    assert duplicate["request_id"] == accepted["request_id"]
    assert [m.message_id for m in wired.queue.sent] == [accepted["request_id"]]
    assert wired.services.jobs.get(TENANT, accepted["request_id"]).source == "webhook"


def test_blob_created_in_event_grid_schema_makes_one_job(wired: Wired) -> None:
    wired.blobs.upload("incoming", f"{TENANT}/scan.txt", b"a scanned letter", "text/plain", {})
    event = blob_created_event(wired.blobs, "incoming", f"{TENANT}/scan.txt")
    response = deliver(wired, [event], content_type="application/json")
    assert response.status == 202
    assert len(wired.queue.sent) == 1


def test_unknown_types_are_200_and_invalid_data_is_400(wired: Wired) -> None:
    other = {**requested_event(TENANT), "type": "com.example.Other"}
    assert deliver(wired, other, content_type="application/cloudevents+json").status == 200
    bad = requested_event(TENANT, "bad-1")
    bad["data"] = {"tenant_id": TENANT, "input": {"text": ""}, "priority": "urgent"}
    problem = assert_problem(
        deliver(wired, bad, content_type="application/cloudevents+json"), 400, "invalid-input"
    )
    assert problem["errors"][0]["field"] == "event bad-1"
    assert wired.queue.sent == []


def test_the_shared_secret_guards_the_webhook() -> None:
    guarded = wire(WebhookSharedSecret="s3cret")
    event = requested_event(TENANT)
    kind = "application/cloudevents+json"
    assert_problem(deliver(guarded, event, content_type=kind), 401, "unauthenticated")
    wrong = deliver(guarded, event, content_type=kind, x_webhook_secret="nope")
    assert_problem(wrong, 403, "forbidden")
    assert deliver(guarded, event, content_type=kind, x_webhook_secret="s3cret").status == 202
    assert len(guarded.queue.sent) == 1


@pytest.mark.parametrize(
    ("payload", "content_type", "status", "code"),
    [
        (b"[" * 1000 + b"]" * 1000, "application/json", 400, "invalid-json"),
        ({**requested_event(TENANT), "data": None, "data_base64": 12}, None, 400, "invalid-input"),
        (
            {**requested_event(TENANT), "data": None, "data_base64": "@@"},
            None,
            400,
            "invalid-input",
        ),
        ({**requested_event(TENANT), "subject": {"not": "a string"}}, None, 400, "invalid-input"),
        (
            json.dumps(requested_event(TENANT, "ev-\\ud800")).replace("\\\\ud800", "\\ud800"),
            None,
            400,
            "invalid-json",
        ),
        (
            {
                **requested_event(TENANT),
                "data": {
                    "tenant_id": TENANT,
                    "input": {"text": "x"},
                    "parameters": {"summary_sentences": "x"},
                },
            },
            None,
            400,
            "invalid-input",
        ),
    ],
)
def test_what_the_fuzzer_sent_the_webhook_is_a_4xx_and_no_job(
    wired: Wired, payload: Any, content_type: str | None, status: int, code: str
) -> None:
    raw = payload.encode() if isinstance(payload, str) else payload
    response = deliver(wired, raw, content_type=content_type or "application/cloudevents+json")
    assert_problem(response, status, code)
    assert wired.queue.sent == []


def test_every_error_class_maps_to_a_status_and_only_the_deployments_are_5xx() -> None:
    classes = [
        cls
        for module in (errors, bounded_json)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, errors.InferbusError) and cls is not errors.InferbusError
    ]
    statuses = {}
    for cls in classes:
        row = next(row for row in STATUS_BY_ERROR if issubclass(cls, row[0]))
        assert row[0] is not errors.InferbusError, f"{cls.__name__} falls back to a bare 500"
        instance = (
            cls("m", "code")
            if issubclass(cls, errors.Conflict)
            else cls("field", "m")
            if cls is errors.ProviderRefusal
            else cls("where", ["file"])
            if cls is errors.AssetsMissing
            else cls(errors.TransientError("m"))
            if cls in (errors.PlatformUnavailable, errors.ResultNotAnnounced)
            else cls(
                "m",
                budget="tokens_per_day",
                period="2026-12-05",
                limit=1,
                spent=1,
                resets_at="2026-12-06T00:00:00+00:00",
                retry_after=1,
            )
            if cls is errors.BudgetExceeded
            else cls("m")
        )
        statuses[cls.__name__] = problem_for(instance).status
    server_side = {name for name, status in statuses.items() if status >= 500}
    assert server_side == {
        "ConfigurationError",
        "CatalogError",
        "TenantCatalogError",
        "TransientError",
        "InvalidModelOutput",
        "Throttled",
        "CapacityExhausted",
        "ServiceUnavailable",
        "BrokerUnreachable",
        "ConcurrencyConflict",
        "PlatformUnavailable",
        "ResultNotAnnounced",
        "ProviderRefusal",
        "AssetsMissing",
    }
    assert statuses["PermanentError"] == statuses["InvalidParameters"] == 422
    assert statuses["InvalidJson"] == 400
