"""AzureOpenAIModel: chat completions in JSON mode behind the ModelClient port.

The model name of a request is the Azure OpenAI deployment name. Authentication is
Microsoft Entra ID (``get_bearer_token_provider`` over the managed identity; role
"Cognitive Services OpenAI User") or, for local tests only, an API key.

Failures are sorted for the processor: throttling (429), server errors and timeouts are
transient, with the service's ``retry-after-ms``/``retry-after`` as the floor for the next
attempt; a content-filter refusal (finish_reason ``content_filter``, or a 400 with code
``content_filter``) is a PolicyRefusal, i.e. a result; any other 4xx is permanent. The
client's own retries are off: Service Bus scheduling does the retrying, visibly.

The completion's ``usage`` (prompt, completion and total tokens) and the first choice's
``finish_reason`` go on the result: tokens are what the service bills and throttles by.
"""

from __future__ import annotations

import json
from typing import Any

from openai import (
    APIConnectionError,
    APIStatusError,
    AzureOpenAI,
    BadRequestError,
)
from pydantic import ValidationError

from shared.adapters.identity import azure_credential
from shared.contracts import InferenceResult, TokenUsage
from shared.errors import (
    ConfigurationError,
    InvalidInput,
    PermanentError,
    PolicyRefusal,
    TransientError,
)
from shared.inference import InferenceInput
from shared.model_parameters import AzureOpenAIParameters, parse_parameters
from shared.settings import Settings

COGNITIVE_SERVICES_SCOPE = "https://cognitiveservices.azure.com/.default"
# The OpenTelemetry GenAI ``gen_ai.system`` value of Azure OpenAI.
SYSTEM = "az.ai.openai"
MAX_INPUT_CHARS = 100_000
SYSTEM_PROMPT = (
    "You analyse one document for a processing pipeline. Answer with a JSON object only, "
    'with keys: "summary" ({sentences} at most), "document_type" (one of invoice, '
    'contract, resume, support_ticket, report, email, other), "confidence" (0 to 1), '
    '"language" (ISO 639-1 code), "review_required" (true when a human should check it), '
    '"suggested_priority" (low, normal or high).'
)


def retry_after_seconds(headers: Any) -> float | None:
    """The wait the service asked for, from ``retry-after-ms`` or ``retry-after``."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    seconds = headers.get("retry-after")
    try:
        if milliseconds is not None:
            return float(milliseconds) / 1000
        if seconds is not None:
            return float(seconds)
    except ValueError:
        return None
    return None


def _filtered_categories(body: Any) -> str:
    """The content-filter categories that fired, from an Azure error body."""
    if not isinstance(body, dict):
        return "content_filter"
    inner = body.get("innererror") or {}
    results = inner.get("content_filter_result") or {}
    fired = [
        name
        for name, verdict in results.items()
        if isinstance(verdict, dict) and verdict.get("filtered")
    ]
    return ",".join(sorted(fired)) or "content_filter"


def token_usage(completion: Any) -> TokenUsage | None:
    """The completion's token counts (None when the service sent none or nonsense: a
    missing count must not fail an answer the tenant has already paid for)."""
    usage = completion.usage
    if usage is None:
        return None
    try:
        return TokenUsage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        )
    except (AttributeError, ValidationError):
        return None


class AzureOpenAIModel:
    """Implements ``inference.ModelClient``."""

    system = SYSTEM

    def __init__(self, client: AzureOpenAI) -> None:
        self._client = client

    def infer(self, request: InferenceInput) -> InferenceResult:
        if not request.media_type.startswith(("text/", "application/json")):
            raise PermanentError(f"the model reads text only, not {request.media_type}")
        completion = self._complete(request)
        choice = completion.choices[0]
        if choice.finish_reason == "content_filter":
            raise PolicyRefusal("the model's content filter stopped the answer", "content_filter")
        content = choice.message.content or ""
        try:
            document = json.loads(content)
            return InferenceResult.model_validate(
                {
                    "statistics": {"characters": len(request.text())},
                    **{k: v for k, v in document.items() if k in InferenceResult.model_fields},
                    "details": {"model_response_id": completion.id},
                    # Last, so that keys of the model's own JSON cannot stand in for them.
                    "usage": token_usage(completion),
                    "finish_reason": choice.finish_reason,
                }
            )
        except (json.JSONDecodeError, AttributeError, ValidationError) as error:
            raise TransientError(f"the model answered malformed JSON: {error}") from error

    def _complete(self, request: InferenceInput) -> Any:
        try:
            parameters = parse_parameters(AzureOpenAIParameters, request.parameters, request.model)
        except InvalidInput as error:  # intake refuses these: only an unchecked message has one
            raise PermanentError(error.message) from error
        count = parameters.summary_sentences
        sentences = "one sentence" if count == 1 else f"{count} sentences"
        optional: dict[str, Any] = {}
        if parameters.top_p is not None:
            optional["top_p"] = parameters.top_p
        if parameters.max_tokens is not None:
            optional["max_tokens"] = parameters.max_tokens
        try:
            return self._client.chat.completions.create(
                model=request.model,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT.format(sentences=sentences)},
                    {"role": "user", "content": request.text()[:MAX_INPUT_CHARS]},
                ],
                response_format={"type": "json_object"},
                temperature=parameters.temperature,
                **optional,
            )
        except BadRequestError as error:
            if error.code == "content_filter":
                raise PolicyRefusal(
                    "the prompt was refused by the content filter", _filtered_categories(error.body)
                ) from error
            raise PermanentError(f"the model refused the request: {error.message}") from error
        except APIStatusError as error:
            status = error.status_code
            if status in (408, 409, 429) or status >= 500:
                raise TransientError(
                    f"the model answered {status}", retry_after_seconds(error.response.headers)
                ) from error
            raise PermanentError(f"the model answered {status}: {error.message}") from error
        except APIConnectionError as error:
            raise TransientError(f"the model is unreachable: {type(error).__name__}") from error


def azure_openai_model(settings: Settings) -> AzureOpenAIModel:
    if not settings.azure_openai_endpoint:
        raise ConfigurationError("ModelProvider=azure_openai needs AzureOpenAI__endpoint")
    common: dict[str, Any] = {
        "azure_endpoint": settings.azure_openai_endpoint,
        "api_version": settings.azure_openai_api_version,
        "timeout": settings.azure_openai_timeout_seconds,
        "max_retries": 0,
    }
    if settings.azure_openai_api_key:
        return AzureOpenAIModel(AzureOpenAI(api_key=settings.azure_openai_api_key, **common))
    from azure.identity import get_bearer_token_provider

    token_provider = get_bearer_token_provider(
        azure_credential(settings.azure_openai_client_id), COGNITIVE_SERVICES_SCOPE
    )
    return AzureOpenAIModel(AzureOpenAI(azure_ad_token_provider=token_provider, **common))
