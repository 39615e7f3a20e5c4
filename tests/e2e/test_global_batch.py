"""The Global Batch lane through `make run`'s stack: the local host's timer drives the
control plane against the Azure OpenAI batch emulator, which moves each batch one status
every 2 seconds by itself (as the service does, only faster)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from openai_emulator.process import OpenAIEmulator
from tests.e2e.conftest import PRODUCER_TENANT, Stack
from tests.e2e.test_journeys import job, poll, submit, tenant, text_request

pytestmark = pytest.mark.e2e

BATCH_TIMEOUT = 90.0  # submit after 5 s, timer every 2 s, four status steps of 2 s


def batch_request(text: str) -> dict[str, Any]:
    return text_request(text, mode="batch")


def wait_for_batch(stack: Stack, who: str, request_id: str) -> str:
    """The service batch a request went out in, once it has gone out."""
    deadline = time.monotonic() + BATCH_TIMEOUT
    while time.monotonic() < deadline:
        batch = job(stack, who, request_id).get("batch") or {}
        if batch.get("batch_id"):
            return str(batch["batch_id"])
        time.sleep(0.2)
    raise AssertionError(f"request {request_id} never went out in a batch")


def test_batch_requests_from_every_door_complete_through_the_control_plane(stack: Stack) -> None:
    # One tenant's waiting requests go out together: the producer's tenant, which
    # ProducerTenants lists, for the HTTP requests too.
    who = PRODUCER_TENANT
    ids = [submit(stack, who, batch_request(f"Batch document {n}. It is short.")) for n in range(3)]
    cancelled = submit(stack, who, batch_request("A document its caller gives up on."))
    status, _, raw = stack.request(
        "DELETE", f"/api/v1/requests/{cancelled}", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    produced = str(uuid.uuid4())
    message = {
        "schema": "inferbus.request/v1",
        "request_id": produced,
        "tenant_id": who,
        "model": "local-analyzer",
        "input": {"text": "A producer's batch document. Sent to the queue."},
        "mode": "batch",
    }
    stack.produce("inference-requests", message, tenant=who)

    finished = [poll(stack, who, i, timeout=BATCH_TIMEOUT) for i in [*ids, produced]]

    assert [view["status"] for view in finished] == ["completed"] * 4
    assert all(view["mode"] == "batch" for view in finished)
    submission = finished[0]["batch"]["submission_id"]
    assert {view["batch"]["submission_id"] for view in finished} == {submission}
    assert job(stack, who, cancelled)["status"] == "cancelled"
    status, _, raw = stack.request(
        "GET", f"/api/v1/batches/{submission}", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    batch = json.loads(raw)
    assert batch["requests"] == 4  # the cancelled request never went out
    assert batch["request_counts"]["completed"] == 4
    status, _, raw = stack.request(
        "GET", f"/api/v1/requests/{ids[0]}/result", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    assert json.loads(raw)["result"]["summary"] == "Batch document 0."


def test_an_expired_batch_is_submitted_again(stack: Stack) -> None:
    who = tenant()
    ids = [submit(stack, who, batch_request(f"Expiring document {n}.")) for n in range(2)]
    batch_id = wait_for_batch(stack, who, ids[0])
    # The emulator's own control client (the key opens only the service's API).
    OpenAIEmulator(stack.openai_endpoint, api_key="").expire(batch_id, completed_lines=1)

    finished = [poll(stack, who, i, timeout=BATCH_TIMEOUT) for i in ids]

    assert [view["status"] for view in finished] == ["completed"] * 2
    batches = {view["batch"]["batch_id"] for view in finished}
    assert len(batches) == 2, "the unanswered request went out again, in a batch of its own"
