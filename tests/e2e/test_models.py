"""Bring your own inference, on the whole local stack: every kind of provider of the
catalog (``tests/e2e/models.json``) answers through the request API, as a user runs it.

Beside the local analyzer: Python handlers of a test package (sync, async with a parameter
of its own, one that breaks its task's schema) and an OpenAI-compatible endpoint (the
project's OpenAI emulator on its v1 route, the model behind a bearer key).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_journeys import poll, submit, tenant

pytestmark = pytest.mark.e2e


def result_of(stack: Stack, who: str, request_id: str) -> dict[str, Any]:
    status, _, raw = stack.request(
        "GET", f"/api/v1/requests/{request_id}/result", headers={"X-Tenant-Id": who}
    )
    assert status == 200, raw
    return dict(json.loads(raw))


def completed(
    stack: Stack, who: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Submit ``body``, wait until its request ends completed: its job and its result."""
    request_id = submit(stack, who, body)
    finished = poll(stack, who, request_id)
    assert finished["status"] == "completed", finished
    return finished, result_of(stack, who, request_id)


def test_a_python_handler_answers_with_its_tasks_shape_and_usage(stack: Stack) -> None:
    body = {"model": "sentiment-handler", "input": {"text": "Thanks, a great and happy visit!"}}

    finished, document = completed(stack, tenant(), body)

    assert finished["result"] == {"outcome": "completed", "task": "sentiment"}
    assert document["schema"] == "inferbus.result/v1"
    assert document["task"] == "sentiment"
    assert document["result"] == {"sentiment": "positive", "score": 1.0}
    assert document["usage"] == {"input_tokens": 6, "output_tokens": 2, "total_tokens": 8}
    assert document["finish_reason"] == "stop"


def test_an_async_handler_takes_the_parameters_its_alias_declares(stack: Stack) -> None:
    who = tenant()
    text = "Quarterly revenue grew while logistics costs shrank"
    body = {"model": "keywords-handler", "input": {"text": text}, "parameters": {"top": 2}}

    _, document = completed(stack, who, body)

    assert document["result"] == {"keywords": ["Quarterly", "logistics"]}
    status, _, raw = stack.request(
        "POST",
        "/api/v1/requests",
        {"model": "keywords-handler", "input": {"text": text}, "parameters": {"top": 99}},
        {"X-Tenant-Id": who},
    )
    assert status == 422
    problem = json.loads(raw)
    assert problem["errors"][0]["field"] == "parameters.top"


def test_an_openai_compatible_endpoint_answers_its_tasks_schema(stack: Stack) -> None:
    body = {"model": "sentiment-llm", "input": {"text": "The parcel came late. It was broken."}}

    _, document = completed(stack, tenant(), body)

    # The emulator's structured output: the schema's first enum value, the middle of its
    # bounds (tools/openai-emulator/README.md).
    assert document["result"] == {"sentiment": "positive", "score": 0.0}
    assert document["usage"]["total_tokens"] > 0


def test_an_answer_that_breaks_the_schema_ends_failed_invalid_model_output(stack: Stack) -> None:
    who = tenant()
    request_id = submit(
        stack, who, {"model": "sentiment-off-schema", "input": {"text": "anything"}}
    )

    finished = poll(stack, who, request_id, timeout=90)

    assert finished["status"] == "failed", finished
    assert finished["error"]["code"] == "invalid_model_output"
    assert "result.score: 7 is greater than the maximum of 1" in finished["error"]["message"]
    assert finished["attempts"] == 3, "tried again twice (InvalidOutputRetries), then ended"


def test_an_unknown_alias_is_422_naming_the_aliases_served(stack: Stack) -> None:
    status, _, raw = stack.request(
        "POST",
        "/api/v1/requests",
        {"model": "gpt-9", "input": {"text": "x"}},
        {"X-Tenant-Id": tenant()},
    )

    assert status == 422
    detail = json.loads(raw)["detail"]
    assert "local-analyzer, sentiment-handler, keywords-handler" in detail


def test_the_api_document_shows_each_aliases_parameters_and_each_tasks_result(
    stack: Stack,
) -> None:
    status, _, raw = stack.request("GET", "/api/openapi.json", key=None)

    assert status == 200
    document = json.loads(raw)
    assert document["x-model-tasks"]["sentiment-llm"] == "sentiment"
    assert document["x-model-parameters"]["keywords-handler"] == {
        "$ref": "#/components/schemas/keywords-handler.parameters"
    }
    schemas = document["components"]["schemas"]
    assert schemas["sentiment.result"]["required"] == ["sentiment", "score"]
