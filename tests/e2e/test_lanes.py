"""The request lanes through `make run`'s stack: ordered documents, direct producers."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.conftest import PRODUCER_TENANT, Stack
from tests.e2e.test_journeys import poll, submit, tenant, text_request

pytestmark = pytest.mark.e2e

STEPS = 4


def finished_at(view: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(view["completed_at"])


def test_the_steps_of_a_document_run_in_order_while_documents_run_in_parallel(
    stack: Stack,
) -> None:
    """Document a's second step meets a transient fault whose Retry-After is 2 s. It is
    retried in place, so a's later steps wait for it (no scheduled copy lets them
    overtake), while documents b and c, other sessions, finish meanwhile."""
    who = tenant()
    run = uuid.uuid4().hex[:8]
    documents = {name: f"{run}-{name}" for name in "abc"}
    ids: dict[str, list[str]] = {name: [] for name in documents}
    for step in range(STEPS):
        for name, document_id in documents.items():
            parameters: dict[str, Any] = {}
            if (name, step) == ("a", 1):
                parameters = {"simulate": {"transient_attempts": 1, "retry_after": 2}}
            body = text_request(
                f"Step {step} of document {name}. Total amount due: {step} EUR.",
                document_id=document_id,
                parameters=parameters,
            )
            ids[name].append(submit(stack, who, body))

    views = {name: [poll(stack, who, i) for i in ids[name]] for name in documents}

    for name, steps in views.items():
        assert [v["status"] for v in steps] == ["completed"] * STEPS, name
        times = [finished_at(v) for v in steps]
        assert times == sorted(times), f"document {name}'s steps finished out of order"
    assert views["a"][1]["attempts"] == 2
    waited_for_a = finished_at(views["a"][2])
    for name in "bc":
        assert finished_at(views[name][-1]) < waited_for_a, (
            f"document {name} waited for document a's retry: sessions did not run in parallel"
        )


def test_a_producer_sending_straight_to_the_queue_gets_its_job_and_result(stack: Stack) -> None:
    who = PRODUCER_TENANT
    request_id = f"ext-{uuid.uuid4().hex}"
    body = {
        "schema": "inferbus.request/v1",
        "request_id": request_id,
        "tenant_id": who,
        "model": "local-analyzer",
        "input": {"text": "Invoice 8. Total amount due: 40 EUR. Payment within 7 days."},
        "priority": "high",
    }
    stack.produce("inference-priority", body)
    finished = poll(stack, who, request_id)
    assert finished["status"] == "completed"
    assert finished["result"]["document_type"] == "invoice"
