"""Every error status of the request API, produced by the input that should produce it."""

from __future__ import annotations

import base64
from typing import Any

import azure.functions as func
import pytest

from shared.adapters.blob_storage import AzureBlobStore
from shared.adapters.in_memory import FixedBacklog, RecordingSender
from shared.contracts import Job
from shared.entrypoints.bootstrap import Services
from shared.lanes import Lane
from tests.fakes import broker_down
from tests.fixtures.azurite import Azurite, free_port
from tests.integration.conftest import Call, InstallServices, json_body
from tests.support.servicebus import QueueRecorder

pytestmark = pytest.mark.integration

TEXT = {"model": "local-analyzer", "input": {"text": "hello"}}


def assert_problem(response: func.HttpResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_body()
    assert response.headers["Content-Type"] == "application/problem+json"
    problem: dict[str, Any] = json_body(response)
    assert problem["status"] == status
    assert problem["type"] == "urn:inferbus:problem:" + code
    assert problem["title"]
    assert problem["detail"]
    return problem


def test_missing_identity_is_401(call: Call, services: Services) -> None:
    response = call("submit_request", "POST", "/v1/requests", body=TEXT, as_tenant=None)
    assert_problem(response, 401, "unauthenticated")


def test_tenant_header_is_ignored_unless_allowed(
    call: Call, install_services: InstallServices
) -> None:
    sender = RecordingSender()
    install_services(AllowTenantHeader="false", ports={"requests": sender})
    response = call("submit_request", "POST", "/v1/requests", body=TEXT)
    assert_problem(response, 401, "unauthenticated")
    assert sender.sent == []


def test_malformed_principal_is_401(call: Call, services: Services) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=TEXT,
        headers={"x-ms-client-principal": base64.b64encode(b"not json").decode()},
        as_tenant=None,
    )
    assert_problem(response, 401, "unauthenticated")


def test_fault_injection_is_422_unless_the_development_stack_enables_it(
    call: Call, services: Services, sender: QueueRecorder
) -> None:
    body = {**TEXT, "parameters": {"simulate": {"permanent": True}}}
    problem = assert_problem(
        call("submit_request", "POST", "/v1/requests", body=body), 422, "invalid-parameters"
    )
    assert problem["errors"] == [
        {"field": "parameters.simulate", "message": "fault injection is not enabled"}
    ]
    assert sender.sent == []


def test_invalid_json_is_400(call: Call, services: Services) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=b"{not json",
        headers={"content-type": "application/json"},
    )
    problem = assert_problem(response, 400, "invalid-json")
    assert "not valid JSON" in str(problem["detail"])


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"a":' * 1000 + b"1" + b"}" * 1000, "nested more than 32 levels"),
        (b'{"model": "local-analyzer", "input": {"text": "\\udc00"}}', "lone UTF-16 surrogate"),
        (b'{"model": "local-analyzer", "deadline_seconds": Infinity}', "Infinity"),
        (b'{"deadline_seconds": ' + b"9" * 5000 + b"}", "digits"),
    ],
)
def test_json_that_used_to_crash_the_api_is_400(
    call: Call, services: Services, sender: QueueRecorder, raw: bytes, words: str
) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=raw,
        headers={"content-type": "application/json"},
    )
    problem = assert_problem(response, 400, "invalid-json")
    assert words in str(problem["detail"])
    assert sender.sent == []


def test_parameters_nested_300_deep_are_400_and_nothing_is_stored(
    call: Call, services: Services, sender: QueueRecorder, tenant: str
) -> None:
    deep = b'{"model": "local-analyzer", "input": {"text": "x"}, "parameters": {"p": '
    raw = deep + b'{"p":' * 300 + b"1" + b"}" * 302
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=raw,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 400, "invalid-json")
    assert sender.sent == []
    assert _jobs_of(services, tenant) == []


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"summary_sentences": "x"}, "parameters.summary_sentences"),
        ({"summary_sentences": 99}, "parameters.summary_sentences"),
        ({"temperature": 3}, "parameters.temperature"),
        ({"colour": "blue"}, "parameters.colour"),
    ],
)
def test_parameters_that_break_the_models_declaration_are_422(
    call: Call, services: Services, sender: QueueRecorder, tenant: str, parameters: Any, field: str
) -> None:
    body = {**TEXT, "parameters": parameters}
    problem = assert_problem(
        call("submit_request", "POST", "/v1/requests", body=body), 422, "invalid-parameters"
    )
    assert [error["field"] for error in problem["errors"]] == [field]
    assert "local-analyzer" in str(problem["detail"])
    assert sender.sent == []
    assert _jobs_of(services, tenant) == []


def test_parameters_too_large_for_a_message_are_413_before_anything_is_stored(
    call: Call, install_services: InstallServices, sender: QueueRecorder, tenant: str
) -> None:
    services = install_services(MaxInlineTextBytes="262144")
    body = {**TEXT, "parameters": {"notes": "p" * 270_000}}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    problem = assert_problem(response, 413, "payload-too-large")
    assert problem["errors"] == [{"field": "parameters", "message": "too large"}]
    assert sender.sent == []
    assert _jobs_of(services, tenant) == []
    assert services.ports.blobs.list_names(services.settings.containers.inputs, f"{tenant}/") == []


def test_schema_violations_name_every_failing_field(call: Call, services: Services) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body={"model": "local-analyzer", "input": {"text": ""}, "priority": "urgent", "extra": 1},
    )
    problem = assert_problem(response, 400, "invalid-input")
    fields = {error["field"] for error in problem["errors"]}
    assert {"priority", "extra"} <= fields
    assert any(field.startswith("input") for field in fields)


def test_out_of_range_deadline_is_400(call: Call, services: Services) -> None:
    response = call(
        "submit_request", "POST", "/v1/requests", body={**TEXT, "deadline_seconds": 10**9}
    )
    problem = assert_problem(response, 400, "invalid-input")
    assert problem["errors"] == [{"field": "deadline_seconds", "message": "too large"}]


def test_unknown_model_is_422(call: Call, services: Services, sender: QueueRecorder) -> None:
    response = call(
        "submit_request", "POST", "/v1/requests", body={"model": "gpt-9", "input": {"text": "x"}}
    )
    problem = assert_problem(response, 422, "unknown-model")
    assert "local-analyzer" in str(problem["detail"])
    assert sender.sent == []


def test_inline_text_over_the_limit_is_413(call: Call, services: Services) -> None:
    body = {"model": "local-analyzer", "input": {"text": "x" * 1025}}
    assert_problem(
        call("submit_request", "POST", "/v1/requests", body=body), 413, "payload-too-large"
    )


def test_upload_over_the_limit_is_413(call: Call, services: Services) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=b"x" * 4097,
        headers={"content-type": "text/plain"},
        params={"model": "local-analyzer"},
    )
    assert_problem(response, 413, "payload-too-large")


def test_upload_without_a_model_is_400(call: Call, services: Services) -> None:
    response = call(
        "submit_request", "POST", "/v1/requests", body=b"x", headers={"content-type": "text/plain"}
    )
    problem = assert_problem(response, 400, "invalid-input")
    assert problem["errors"][0]["field"] == "query.model"


def test_unsupported_media_type_is_415(call: Call, services: Services) -> None:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=b"<x/>",
        headers={"content-type": "application/xml"},
        params={"model": "local-analyzer"},
    )
    assert_problem(response, 415, "unsupported-media-type")


def test_backlog_over_the_limit_is_503_with_retry_after(
    call: Call, install_services: InstallServices
) -> None:
    backlog = FixedBacklog(depth=10)
    install_services(
        MaxQueueBacklog="10",
        ports={"requests": RecordingSender(), "backlogs": {Lane.STANDARD: backlog}},
    )
    first = call("submit_request", "POST", "/v1/requests", body=TEXT)
    second = call("submit_request", "POST", "/v1/requests", body=TEXT)
    assert_problem(first, 503, "service-unavailable")
    assert first.headers["Retry-After"] == "5"
    assert second.status_code == 503
    assert backlog.reads == 1, "the depth is cached between submissions"


def test_storage_unavailable_is_503(
    call: Call, azurite: Azurite, install_services: InstallServices
) -> None:
    dead = azurite.connection_string.replace(
        azurite.blob_endpoint, f"http://127.0.0.1:{free_port()}/devstoreaccount1"
    )
    sender = RecordingSender()
    install_services(Storage=dead, ports={"requests": sender})
    response = call("submit_request", "POST", "/v1/requests", body=TEXT)
    problem = assert_problem(response, 503, "transient")
    assert "Retry-After" in response.headers
    assert "unreachable" in str(problem["detail"])
    assert sender.sent == []


def test_send_failure_records_nothing_releases_the_key_and_answers_503(
    call: Call, install_services: InstallServices, tenant: str
) -> None:
    # The outage is injected at the sender port: the broker must fail, then recover.
    sender = RecordingSender(fail_with=broker_down())
    services = install_services(ports={"requests": sender})
    headers = {"idempotency-key": "order-42"}
    response = call("submit_request", "POST", "/v1/requests", body=TEXT, headers=headers)
    assert_problem(response, 503, "service-unavailable")
    assert _jobs_of(services, tenant) == [], "no job for work that was not queued"

    sender.fail_with = None
    retry = call("submit_request", "POST", "/v1/requests", body=TEXT, headers=headers)
    assert retry.status_code == 202
    assert [job.id for job in _jobs_of(services, tenant)] == [json_body(retry)["id"]]
    assert [message.message_id for message in sender.sent] == [json_body(retry)["id"]]


def _jobs_of(services: Services, tenant: str) -> list[Job]:
    assert isinstance(services.ports.blobs, AzureBlobStore)
    names = services.ports.blobs.list_names(services.settings.containers.jobs, f"{tenant}/")
    return [services.jobs.get(tenant, name.split("/")[1].removesuffix(".json")) for name in names]
