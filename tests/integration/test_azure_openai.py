"""AzureOpenAIModel against a loopback server speaking the chat-completions wire format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.adapters.azure_openai import SYSTEM, azure_openai_model
from shared.contracts import TokenUsage
from shared.errors import PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput
from shared.settings import Settings
from tests.support.http_recorder import Recorder, Reply, recording_server

pytestmark = pytest.mark.integration

ANSWER = {
    "summary": "An invoice for 300 EUR.",
    "document_type": "invoice",
    "confidence": 0.91,
    "language": "en",
    "review_required": False,
    "suggested_priority": "normal",
}


def completion(
    content: str, finish_reason: str = "stop", usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": usage or {"prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80},
    }


def azure_error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "param": None, "type": None, **extra}}


@pytest.fixture
def service() -> Iterator[Recorder]:
    with recording_server() as recorder:
        yield recorder


def model(service: Recorder):  # type: ignore[no-untyped-def]
    settings = Settings.model_validate(
        {
            "ModelProvider": "azure_openai",
            "AzureOpenAI__endpoint": service.base_url,
            "AzureOpenAI__apiKey": "test-key",
            "AzureOpenAI__timeoutSeconds": "5",
        }
    )
    return azure_openai_model(settings)


REQUEST = InferenceInput(
    request_id="r1",
    model="gpt-4o-mini",
    content=b"Invoice 17: 300 EUR due.",
    media_type="text/plain",
)


def test_a_json_mode_completion_becomes_the_result(service: Recorder) -> None:
    service.reply(Reply(200, completion(json.dumps(ANSWER))))

    result = model(service).infer(REQUEST)

    assert result.document_type == "invoice"
    assert result.confidence == 0.91
    assert result.details["model_response_id"] == "chatcmpl-123"
    assert result.usage == TokenUsage(input_tokens=50, output_tokens=30, total_tokens=80)
    assert result.finish_reason == "stop"
    (request,) = service.requests
    assert request.path == "/openai/deployments/gpt-4o-mini/chat/completions"
    assert request.query["api-version"] == ["2024-10-21"]
    assert request.headers["api-key"] == "test-key"
    body = request.json()
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][1] == {"role": "user", "content": "Invoice 17: 300 EUR due."}
    assert body["temperature"] == 0


def test_usage_and_finish_reason_are_the_services_not_the_models_json(
    service: Recorder,
) -> None:
    claims = {**ANSWER, "usage": {"input_tokens": 1}, "finish_reason": "made-up"}
    usage = {"prompt_tokens": 1200, "completion_tokens": 64, "total_tokens": 1264}
    service.reply(Reply(200, completion(json.dumps(claims), "length", usage)))

    result = model(service).infer(REQUEST)

    assert result.usage == TokenUsage(input_tokens=1200, output_tokens=64, total_tokens=1264)
    assert result.finish_reason == "length", "a cut-short answer says so"
    assert model(service).system == SYSTEM == "az.ai.openai"


def test_a_completion_without_usage_still_answers(service: Recorder) -> None:
    body = completion(json.dumps(ANSWER))
    del body["usage"]
    service.reply(Reply(200, body))

    result = model(service).infer(REQUEST)

    assert result.usage is None
    assert result.document_type == "invoice"


def test_throttling_is_transient_with_the_services_retry_after(service: Recorder) -> None:
    service.reply(
        Reply(
            429,
            azure_error("429", "Rate limit is exceeded."),
            {"retry-after-ms": "2500", "retry-after": "3"},
        )
    )
    with pytest.raises(TransientError) as error:
        model(service).infer(REQUEST)
    assert error.value.retry_after == 2.5
    assert len(service.requests) == 1, "the client does not retry on its own"


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_transient(service: Recorder, status: int) -> None:
    service.reply(Reply(status, azure_error("InternalServerError", "boom"), {"retry-after": "7"}))
    with pytest.raises(TransientError) as error:
        model(service).infer(REQUEST)
    assert error.value.retry_after == 7


def test_a_filtered_prompt_is_a_refusal_naming_the_categories(service: Recorder) -> None:
    filtered = azure_error(
        "content_filter",
        "The response was filtered due to the prompt triggering content management policy.",
        status=400,
        innererror={
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": False, "severity": "safe"},
                "violence": {"filtered": True, "severity": "high"},
            },
        },
    )
    service.reply(Reply(400, filtered))
    with pytest.raises(PolicyRefusal) as refusal:
        model(service).infer(REQUEST)
    assert refusal.value.category == "violence"


def test_a_filtered_answer_is_a_refusal(service: Recorder) -> None:
    service.reply(Reply(200, completion("", finish_reason="content_filter")))
    with pytest.raises(PolicyRefusal):
        model(service).infer(REQUEST)


@pytest.mark.parametrize("status", [400, 404])
def test_other_client_errors_are_permanent(service: Recorder, status: int) -> None:
    service.reply(Reply(status, azure_error("DeploymentNotFound", "no such deployment")))
    with pytest.raises(PermanentError):
        model(service).infer(REQUEST)


def test_malformed_json_from_the_model_is_retried(service: Recorder) -> None:
    service.reply(Reply(200, completion("this is not json")))
    with pytest.raises(TransientError):
        model(service).infer(REQUEST)


def test_binary_documents_are_not_sent(service: Recorder) -> None:
    pdf = REQUEST.model_copy(update={"media_type": "application/pdf"})
    with pytest.raises(PermanentError):
        model(service).infer(pdf)
    assert service.requests == []
