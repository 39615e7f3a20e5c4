"""The chat-completions providers (``azure_openai``, ``openai_compatible``) against a loopback
server speaking the wire format, through the real ``openai`` SDK and the provider registry
(``shared.adapters.models.serve_catalog``), as the app serves a catalog's aliases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.adapters.models import serve_catalog
from shared.contracts import InferenceResult, TokenUsage
from shared.errors import (
    InvalidModelOutput,
    PermanentError,
    PolicyRefusal,
    Throttled,
    TransientError,
)
from shared.inference import InferenceInput
from shared.inference.served import ServedModel
from shared.settings import Settings
from tests.support.catalogs import catalog
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
SENTIMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment"],
    "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
}
PROVIDERS = ["azure_openai", "openai_compatible"]


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


def service_error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "param": None, "type": None, **extra}}


@pytest.fixture(scope="module")
def server() -> Iterator[Recorder]:
    with recording_server() as recorder:
        yield recorder


@pytest.fixture
def service(server: Recorder) -> Recorder:
    """The module's server, with nothing recorded or scripted (one server for every test:
    stopping one takes half a second)."""
    server.requests.clear()
    server.replies.clear()
    return server


def serve(
    service: Recorder, provider: str, task: str = "document-analysis", **entry: Any
) -> ServedModel:
    """One alias of ``provider`` pointed at the recorder, served as the app serves it."""
    settings = {
        "AzureOpenAI__endpoint": service.base_url,
        "AzureOpenAI__apiKey": "test-key",
        "AzureOpenAI__timeoutSeconds": "5",
        "VllmKey": "sk-local",
    }
    model: dict[str, Any] = {"provider": provider, "task": task, "deployment": "gpt-4o-mini"}
    if provider == "openai_compatible":
        model |= {"endpoint": f"{service.base_url}/v1", "api_key_setting": "VllmKey"}
    document = {
        "tasks": {"sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT}},
        "models": {"m": {**model, **entry}},
    }
    models = serve_catalog(catalog(document, settings), Settings.model_validate(settings))
    return models["m"]


REQUEST = InferenceInput(
    request_id="r1",
    model="m",
    content=b"Invoice 17: 300 EUR due.",
    media_type="text/plain",
)


def test_azure_openai_calls_the_deployment_on_the_v1_api_with_its_key(service: Recorder) -> None:
    service.reply(Reply(200, completion(json.dumps(ANSWER))))
    served = serve(service, "azure_openai")

    result = served.card.task.result(served.client.infer(REQUEST))
    assert isinstance(result, InferenceResult), "document analysis answers with its own type"

    assert result.document_type == "invoice"
    assert result.confidence == 0.91
    assert result.details["model_response_id"] == "chatcmpl-123"
    assert result.usage == TokenUsage(input_tokens=50, output_tokens=30, total_tokens=80)
    assert result.finish_reason == "stop"
    (request,) = service.requests
    assert request.path == "/openai/v1/chat/completions", "the v1 API by default"
    assert "api-version" not in request.query
    assert request.headers["authorization"] == "Bearer test-key"
    body = request.json()
    assert body["model"] == "gpt-4o-mini", "the deployment"
    assert body["response_format"]["type"] == "json_schema", "the v1 API has structured outputs"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["messages"][1] == {"role": "user", "content": "Invoice 17: 300 EUR due."}
    assert "temperature" not in body, "reasoning models refuse any but their default"
    assert served.client.system == "az.ai.openai"


def test_azure_openai_at_a_dated_api_version_calls_the_deployments_route(
    service: Recorder,
) -> None:
    service.reply(Reply(200, completion(json.dumps(ANSWER))))

    serve(service, "azure_openai", api_version="2024-10-21").client.infer(REQUEST)

    (request,) = service.requests
    assert request.path == "/openai/deployments/gpt-4o-mini/chat/completions"
    assert request.query["api-version"] == ["2024-10-21"]
    assert request.headers["api-key"] == "test-key"
    assert request.json()["response_format"]["type"] == "json_schema", "2024-10-21 has them"


@pytest.mark.parametrize(
    ("provider", "options", "field"),
    [
        ("azure_openai", {}, "max_completion_tokens"),
        ("openai_compatible", {}, "max_tokens"),
        ("openai_compatible", {"token_limit_parameter": "max_completion_tokens"}, None),
        ("azure_openai", {"token_limit_parameter": "max_tokens"}, None),
    ],
)
def test_max_tokens_goes_under_the_field_the_provider_takes(
    service: Recorder, provider: str, options: dict[str, str], field: str | None
) -> None:
    service.reply(Reply(200, completion(json.dumps(ANSWER))))
    bounded = REQUEST.model_copy(update={"parameters": {"max_tokens": 300, "temperature": 0.2}})

    serve(service, provider, options=options).client.infer(bounded)

    body = service.requests[0].json()
    expected = field or options["token_limit_parameter"]
    other = ({"max_tokens", "max_completion_tokens"} - {expected}).pop()
    assert body[expected] == 300
    assert other not in body
    assert body["temperature"] == 0.2, "a temperature the request sets is sent"


def test_an_older_azure_api_version_asks_for_any_json_object(service: Recorder) -> None:
    service.reply(Reply(200, completion(json.dumps(ANSWER))))

    serve(service, "azure_openai", api_version="2024-06-01").client.infer(REQUEST)

    (request,) = service.requests
    assert request.query["api-version"] == ["2024-06-01"]
    assert request.json()["response_format"] == {"type": "json_object"}


def test_openai_compatible_posts_to_v1_with_a_bearer_key(service: Recorder) -> None:
    service.reply(Reply(200, completion('{"sentiment": "positive"}')))
    served = serve(service, "openai_compatible", task="sentiment", deployment="llama3.1")

    answer = served.client.infer(REQUEST)

    assert served.card.task.result(answer) == {"sentiment": "positive"}
    assert answer.usage == TokenUsage(input_tokens=50, output_tokens=30, total_tokens=80)
    (request,) = service.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-local"
    body = request.json()
    assert body["model"] == "llama3.1"
    assert body["messages"][0]["content"] == "Rate it."
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "sentiment", "schema": SENTIMENT, "strict": True},
    }
    assert served.client.system == "openai"


def test_an_endpoint_without_structured_outputs_gets_the_schema_in_its_instructions(
    service: Recorder,
) -> None:
    service.reply(Reply(200, completion('{"sentiment": "neutral"}')))

    serve(
        service, "openai_compatible", task="sentiment", response_format="json_object"
    ).client.infer(REQUEST)

    body = service.requests[0].json()
    assert body["response_format"] == {"type": "json_object"}
    assert '"required":["sentiment"]' in body["messages"][0]["content"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_and_finish_reason_are_the_services_not_the_models_json(
    service: Recorder, provider: str
) -> None:
    claims = {**ANSWER, "usage": {"input_tokens": 1}, "finish_reason": "made-up"}
    usage = {"prompt_tokens": 1200, "completion_tokens": 64, "total_tokens": 1264}
    service.reply(Reply(200, completion(json.dumps(claims), "length", usage)))
    served = serve(service, provider)

    result = served.card.task.result(served.client.infer(REQUEST))
    assert isinstance(result, InferenceResult), "document analysis answers with its own type"

    assert result.usage == TokenUsage(input_tokens=1200, output_tokens=64, total_tokens=1264)
    assert result.finish_reason == "length", "a cut-short answer says so"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_completion_without_usage_still_answers(service: Recorder, provider: str) -> None:
    body = completion(json.dumps(ANSWER))
    del body["usage"]
    service.reply(Reply(200, body))

    answer = serve(service, provider).client.infer(REQUEST)

    assert answer.usage is None
    assert answer.content["document_type"] == "invoice"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after-ms": "2500", "retry-after": "3"}, 2.5), ({"retry-after": "3"}, 3.0)],
    ids=["retry-after-ms", "retry-after"],
)
def test_throttling_is_transient_with_the_services_retry_after(
    service: Recorder, provider: str, headers: dict[str, str], wait: float
) -> None:
    service.reply(Reply(429, service_error("429", "Rate limit is exceeded."), headers))
    with pytest.raises(TransientError) as error:
        serve(service, provider).client.infer(REQUEST)
    assert error.value.retry_after == wait
    assert len(service.requests) == 1, "the client does not retry on its own"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_429_is_throttling_with_what_the_service_says_is_left(
    service: Recorder, provider: str
) -> None:
    headers = {"retry-after-ms": "1200", "x-ratelimit-remaining-tokens": "0",
               "x-ratelimit-remaining-requests": "17"}  # fmt: skip
    service.reply(Reply(429, service_error("429", "Rate limit is exceeded."), headers))
    with pytest.raises(Throttled) as throttled:
        serve(service, provider).client.infer(REQUEST)
    assert throttled.value.retry_after == 1.2
    assert (throttled.value.remaining_tokens, throttled.value.remaining_requests) == (0, 17)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_answer_carries_the_deployments_remaining_quota(
    service: Recorder, provider: str
) -> None:
    headers = {"x-ratelimit-remaining-tokens": "29120", "x-ratelimit-remaining-requests": "nope"}
    service.reply(Reply(200, completion(json.dumps(ANSWER)), headers))

    answer = serve(service, provider).client.infer(REQUEST)

    assert answer.remaining_tokens == 29_120
    assert answer.remaining_requests is None, "a header that is not a count is ignored"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [408, 500, 503])
def test_timeouts_and_server_errors_are_transient(
    service: Recorder, provider: str, status: int
) -> None:
    service.reply(Reply(status, service_error("InternalServerError", "boom"), {"retry-after": "7"}))
    with pytest.raises(TransientError) as error:
        serve(service, provider).client.infer(REQUEST)
    assert error.value.retry_after == 7


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unreachable_endpoint_is_transient(service: Recorder, provider: str) -> None:
    served = serve(service, provider, endpoint="http://127.0.0.1:9/v1")
    if provider == "azure_openai":
        served = serve(service, provider, endpoint="http://127.0.0.1:9")
    with pytest.raises(TransientError, match="unreachable"):
        served.client.infer(REQUEST)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_filtered_prompt_is_a_refusal_naming_the_categories(
    service: Recorder, provider: str
) -> None:
    filtered = service_error(
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
        serve(service, provider).client.infer(REQUEST)
    assert refusal.value.category == "violence"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_filtered_answer_is_a_refusal(service: Recorder, provider: str) -> None:
    service.reply(Reply(200, completion("", finish_reason="content_filter")))
    with pytest.raises(PolicyRefusal):
        serve(service, provider).client.infer(REQUEST)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 401, 404])
def test_other_client_errors_are_permanent(service: Recorder, provider: str, status: int) -> None:
    service.reply(Reply(status, service_error("DeploymentNotFound", "no such deployment")))
    with pytest.raises(PermanentError):
        serve(service, provider).client.infer(REQUEST)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_malformed_json_from_the_model_is_invalid_output(service: Recorder, provider: str) -> None:
    service.reply(Reply(200, completion("this is not json")))
    with pytest.raises(InvalidModelOutput):
        serve(service, provider).client.infer(REQUEST)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_binary_documents_are_not_sent(service: Recorder, provider: str) -> None:
    pdf = REQUEST.model_copy(update={"media_type": "application/pdf"})
    with pytest.raises(PermanentError):
        serve(service, provider).client.infer(pdf)
    assert service.requests == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_parameters_outside_the_declaration_fail_permanently_unsent(
    service: Recorder, provider: str
) -> None:
    unchecked = REQUEST.model_copy(update={"parameters": {"temperature": 9}})
    with pytest.raises(PermanentError, match=r"parameters\.temperature"):
        serve(service, provider).client.infer(unchecked)
    assert service.requests == []
