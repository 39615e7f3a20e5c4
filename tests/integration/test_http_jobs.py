"""Polling, results and cancellation of jobs through the registered functions."""

from __future__ import annotations

from typing import Any

import azure.functions as func
import pytest

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus, ResultDocument
from shared.entrypoints.bootstrap import Services
from shared.jobs import transition
from tests.integration.conftest import Call, json_body

pytestmark = pytest.mark.integration


def accepted_id(call: Call) -> str:
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body={"model": "local-analyzer", "input": {"text": "poll me"}},
    )
    assert response.status_code == 202
    return str(json_body(response)["id"])


def get(call: Call, request_id: str, **kwargs: Any) -> func.HttpResponse:
    return call(
        "get_request",
        "GET",
        f"/v1/requests/{request_id}",
        route_params={"id": request_id},
        **kwargs,
    )


def test_status_of_an_accepted_job(call: Call, services: Services) -> None:
    request_id = accepted_id(call)
    response = get(call, request_id)
    assert response.status_code == 200
    view = json_body(response)
    assert view["id"] == request_id
    assert view["status"] == "accepted"
    assert view["attempts"] == 0
    assert view["status_url"].endswith(f"/api/v1/requests/{request_id}")
    assert "result_url" not in view
    assert response.headers["Retry-After"] == "2"


def test_unknown_and_foreign_jobs_are_both_404(call: Call, services: Services) -> None:
    request_id = accepted_id(call)
    foreign = get(call, request_id, as_tenant="another-tenant")
    unknown = get(call, "00000000-0000-0000-0000-000000000000")
    for response in (foreign, unknown):
        assert response.status_code == 404
        assert json_body(response)["type"] == "urn:inferbus:problem:not-found"


def test_result_is_409_with_retry_after_until_completed_then_served(
    call: Call, services: Services, storage: AzureBlobStore, tenant: str
) -> None:
    request_id = accepted_id(call)
    route = {"id": request_id}
    early = call(
        "get_request_result", "GET", f"/v1/requests/{request_id}/result", route_params=route
    )
    assert early.status_code == 409
    assert early.headers["Retry-After"] == "2"
    assert json_body(early)["type"] == "urn:inferbus:problem:result-not-ready"

    result = ResultDocument(
        request_id=request_id,
        tenant_id=tenant,
        model="local-analyzer",
        outcome="refused",
        refusal={"category": "configured_term", "message": "declined"},
        completed_at="2026-11-30T12:00:00+00:00",
    )
    services.jobs.update(
        tenant,
        request_id,
        lambda job: transition(job, JobStatus.COMPLETED, result=result),
    )

    status = json_body(get(call, request_id))
    assert status["status"] == "completed"
    assert status["result"] == {
        "outcome": "refused",
        "task": "document-analysis",
        "refusal": {"category": "configured_term", "message": "declined"},
    }
    assert status["result_url"].endswith(f"/v1/requests/{request_id}/result")
    served = call(
        "get_request_result", "GET", f"/v1/requests/{request_id}/result", route_params=route
    )
    assert served.status_code == 200
    assert json_body(served) == result.model_dump(mode="json", by_alias=True)


def test_cancel_then_cancel_again_is_409(call: Call, services: Services, tenant: str) -> None:
    request_id = accepted_id(call)
    route = {"id": request_id}
    first = call("cancel_request", "DELETE", f"/v1/requests/{request_id}", route_params=route)
    assert first.status_code == 200
    assert json_body(first)["status"] == "cancelled"
    assert services.jobs.get(tenant, request_id).status is JobStatus.CANCELLED

    second = call("cancel_request", "DELETE", f"/v1/requests/{request_id}", route_params=route)
    assert second.status_code == 409
    assert json_body(second)["type"] == "urn:inferbus:problem:job-terminal"

    result = call(
        "get_request_result", "GET", f"/v1/requests/{request_id}/result", route_params=route
    )
    assert result.status_code == 409
    assert "Retry-After" not in result.headers


def test_cancel_of_another_tenants_job_is_404(call: Call, services: Services, tenant: str) -> None:
    request_id = accepted_id(call)
    response = call(
        "cancel_request",
        "DELETE",
        f"/v1/requests/{request_id}",
        route_params={"id": request_id},
        as_tenant="intruder",
    )
    assert response.status_code == 404
    assert services.jobs.get(tenant, request_id).status is JobStatus.ACCEPTED
