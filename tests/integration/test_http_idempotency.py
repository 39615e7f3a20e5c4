"""Idempotency-Key semantics on real Blob storage, including concurrent duplicates."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import azure.functions as func
import pytest

from shared.adapters.blob_storage import AzureBlobStore
from shared.entrypoints.bootstrap import Services
from tests.integration.conftest import Call, json_body
from tests.support.servicebus import QueueRecorder

pytestmark = pytest.mark.integration

BODY: dict[str, Any] = {"model": "local-analyzer", "input": {"text": "same work"}}


def post(call: Call, body: dict[str, Any], key: str) -> func.HttpResponse:
    return call(
        "submit_request", "POST", "/v1/requests", body=body, headers={"idempotency-key": key}
    )


def test_same_key_same_body_returns_the_same_job_and_sends_once(
    call: Call, services: Services, sender: QueueRecorder
) -> None:
    first = post(call, BODY, "k-1")
    second = post(call, {"input": {"text": "same work"}, "model": "local-analyzer"}, "k-1")
    assert first.status_code == second.status_code == 202
    assert json_body(first)["id"] == json_body(second)["id"]
    assert len(sender.sent) == 1


def test_same_key_different_body_is_409(
    call: Call, services: Services, sender: QueueRecorder
) -> None:
    assert post(call, BODY, "k-2").status_code == 202
    conflict = post(call, {**BODY, "priority": "high"}, "k-2")
    assert conflict.status_code == 409
    assert json_body(conflict)["type"] == "urn:inferbus:problem:idempotency-key-reused"
    assert len(sender.sent) == 1


def test_keys_are_scoped_to_the_tenant(call: Call, services: Services) -> None:
    mine = post(call, BODY, "k-3")
    theirs = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body=BODY,
        headers={"idempotency-key": "k-3"},
        as_tenant="other-tenant-k3",
    )
    assert json_body(mine)["id"] != json_body(theirs)["id"]


def test_concurrent_duplicates_make_exactly_one_job_and_one_message(
    call: Call, services: Services, sender: QueueRecorder, storage: AzureBlobStore, tenant: str
) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda _: post(call, BODY, "burst"), range(8)))

    statuses = [r.status_code for r in responses]
    ids = {json_body(r)["id"] for r in responses if r.status_code == 202}
    assert set(statuses) <= {202, 409}
    assert statuses.count(202) >= 1
    assert len(ids) == 1
    assert len(sender.sent) == 1
    assert storage.list_names("jobs", f"{tenant}/") == [f"{tenant}/{ids.pop()}.json"]


def test_an_invalid_key_is_400(call: Call, services: Services) -> None:
    response = post(call, BODY, "has spaces in it")
    assert response.status_code == 400
    assert json_body(response)["errors"][0]["field"] == "Idempotency-Key"
