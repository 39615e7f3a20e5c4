"""``GET /api/v1/requests`` through the registered functions on Azurite, and the paged
listing it stands on (``documents.PagedListing``) against both adapters."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shared.clock import utc_now
from shared.documents import ListedDocuments
from shared.entrypoints.bootstrap import Services
from tests.integration.conftest import Call, Documents, json_body
from tests.support.jobs import accepted_job

pytestmark = pytest.mark.integration


@pytest.fixture
def documents(own_container: tuple[Documents, str]) -> tuple[ListedDocuments, str]:
    """Documents and a container of their own, on Azurite and in memory."""
    return own_container


def test_pages_follow_their_markers_to_the_end(documents: tuple[ListedDocuments, str]) -> None:
    store, container = documents
    names = [f"a/{n:02d}.json" for n in range(7)]
    for name in [*names, "b/00.json", "a0.json"]:
        store.put(container, name, {"name": name})

    seen: list[str] = []
    page = store.list_page(container, "a/", 3)
    seen.extend(page.names)
    while page.marker is not None:
        page = store.list_page(container, "a/", 3, page.marker)
        seen.extend(page.names)
    assert seen == names
    whole = store.list_page(container, "a/", 50)
    assert (list(whole.names), whole.marker) == (names, None)
    assert store.list_page(container, "c/", 5).names == ()


def submit(call: Call, text: str) -> str:
    body = {"model": "local-analyzer", "input": {"text": text}}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    assert response.status_code == 202, response.get_body()
    return str(json_body(response)["id"])


def list_page(call: Call, **params: str) -> tuple[int, Any]:
    response = call("list_requests", "GET", "/v1/requests", params=params)
    return response.status_code, json_body(response)


def test_a_tenant_pages_through_its_own_requests_newest_first(
    call: Call, services: Services, tenant: str
) -> None:
    submitted = [submit(call, f"Invoice {n}: 300 EUR due.") for n in range(5)]
    producer_job = accepted_job(tenant, utc_now()).model_copy(
        update={"id": str(uuid.uuid5(uuid.NAMESPACE_URL, tenant))}
    )
    assert services.jobs.create(producer_job) is not None
    call(
        "submit_request",
        "POST",
        "/v1/requests",
        body={"model": "local-analyzer", "input": {"text": "theirs"}},
        as_tenant="another-tenant",
    )

    listed: list[dict[str, Any]] = []
    status, body = list_page(call, limit="2")
    while True:
        assert status == 200, body
        assert len(body["requests"]) <= 2
        listed.extend(body["requests"])
        if "continuation" not in body:
            break
        assert body["next"].endswith("continuation=" + body["continuation"])
        status, body = list_page(call, limit="2", continuation=body["continuation"])

    ids = [item["id"] for item in listed]
    timed = ids[:-1]
    assert ids[-1] == producer_job.id, "an id without a time comes after the minted ones"
    assert timed == sorted(timed, reverse=True)
    assert sorted(timed) == sorted(submitted)
    created = [item["created_at"] for item in listed[:-1]]
    assert created == sorted(created, reverse=True)
    first = listed[0]
    assert first["status"] == "accepted"
    assert first["model"] == "local-analyzer"
    assert first["status_url"].endswith(f"/api/v1/requests/{first['id']}")


def test_filters_and_bad_queries(call: Call, services: Services, tenant: str) -> None:
    kept, cancelled = submit(call, "keep me"), submit(call, "cancel me")
    route = {"id": cancelled}
    assert call("cancel_request", "DELETE", f"/v1/requests/{cancelled}", route_params=route)
    status, body = list_page(call, status="cancelled,failed")
    assert status == 200
    assert [item["id"] for item in body["requests"]] == [cancelled]
    status, body = list_page(call, status="accepted", model="local-analyzer")
    assert [item["id"] for item in body["requests"]] == [kept]
    status, body = list_page(call, model="another-model")
    assert (status, body["requests"]) == (200, [])

    status, problem = list_page(call, status="done")
    assert (status, problem["errors"][0]["field"]) == (400, "query.status")
    status, problem = list_page(call, limit="500")
    assert (status, problem["errors"][0]["field"]) == (400, "query.limit")
    status, first = list_page(call, limit="1")
    token = first["continuation"]
    response = call(
        "list_requests",
        "GET",
        "/v1/requests",
        params={"continuation": token},
        as_tenant="another-tenant",
    )
    assert response.status_code == 400
    assert json_body(response)["type"] == "urn:inferbus:problem:invalid-continuation"
    status, problem = list_page(call, continuation="bm90IGEgdG9rZW4")
    assert (status, problem["type"]) == (400, "urn:inferbus:problem:invalid-continuation")
