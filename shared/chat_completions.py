"""The chat-completions exchange with an Azure OpenAI deployment, as data.

Both lanes ask the same question and read the same answer: the queue lane through the
SDK's ``chat.completions.create`` (``adapters.azure_openai``), the Global Batch lane as
one JSONL line per request, whose answer comes back hours later in an output file
(``global_batch``). Keeping the request body and the reading of the answer here, free of
any SDK, makes a request mean the same thing in both lanes, and makes a content-filter
refusal a result in both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from shared.contracts import InferenceResult, TokenUsage
from shared.errors import PolicyRefusal, TransientError
from shared.model_parameters import GenerationParameters

MAX_INPUT_CHARS: Final = 100_000
SYSTEM_PROMPT: Final = (
    "You analyse one document for a processing pipeline. Answer with a JSON object only, "
    'with keys: "summary" ({sentences} at most), "document_type" (one of invoice, '
    'contract, resume, support_ticket, report, email, other), "confidence" (0 to 1), '
    '"language" (ISO 639-1 code), "review_required" (true when a human should check it), '
    '"suggested_priority" (low, normal or high).'
)
CONTENT_FILTER: Final = "content_filter"


def reads_as_text(media_type: str) -> bool:
    """Whether a chat model can read a document of this media type (as text)."""
    return media_type.startswith(("text/", "application/json"))


def chat_request(deployment: str, text: str, parameters: GenerationParameters) -> dict[str, Any]:
    """The body of a chat-completions call for one document (``model`` is the deployment)."""
    count = parameters.summary_sentences
    sentences = "one sentence" if count == 1 else f"{count} sentences"
    body: dict[str, Any] = {
        "model": deployment,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT.format(sentences=sentences)},
            {"role": "user", "content": text[:MAX_INPUT_CHARS]},
        ],
        "response_format": {"type": "json_object"},
        "temperature": parameters.temperature,
    }
    if parameters.top_p is not None:
        body["top_p"] = parameters.top_p
    if parameters.max_tokens is not None:
        body["max_tokens"] = parameters.max_tokens
    return body


def token_usage(usage: object) -> TokenUsage | None:
    """A completion's token counts (None when the service sent none or nonsense: a
    missing count must not fail an answer the tenant has already paid for)."""
    if not isinstance(usage, Mapping):
        return None
    try:
        return TokenUsage(
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"),
        )
    except ValidationError:
        return None


def filtered_categories(error_body: object) -> str:
    """The content-filter categories that fired, from an Azure error body (either the
    ``error`` object itself or a body that holds one)."""
    if not isinstance(error_body, Mapping):
        return CONTENT_FILTER
    inner_error = error_body.get("error")
    error = inner_error if isinstance(inner_error, Mapping) else error_body
    inner = error.get("innererror")
    results = inner.get("content_filter_result") if isinstance(inner, Mapping) else None
    if not isinstance(results, Mapping):
        return CONTENT_FILTER
    fired = [
        name
        for name, verdict in results.items()
        if isinstance(verdict, Mapping) and verdict.get("filtered")
    ]
    return ",".join(sorted(fired)) or CONTENT_FILTER


def read_completion(completion: Mapping[str, Any], characters: int) -> InferenceResult:
    """The result a chat completion carries; PolicyRefusal when the content filter stopped
    the answer, TransientError when the answer is not the JSON the prompt asked for."""
    try:
        choice = completion["choices"][0]
        finish_reason = choice.get("finish_reason")
        content = (choice.get("message") or {}).get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        raise TransientError(f"the model answered without a choice: {error!r}") from error
    if finish_reason == CONTENT_FILTER:
        raise PolicyRefusal("the model's content filter stopped the answer", CONTENT_FILTER)
    try:
        document = json.loads(content)
        if not isinstance(document, dict):
            raise TypeError(f"a JSON {type(document).__name__}, not an object")
        return InferenceResult.model_validate(
            {
                **{k: v for k, v in document.items() if k in InferenceResult.model_fields},
                "statistics": {"characters": characters},
                "details": {"model_response_id": completion.get("id")},
                # Last, so that keys of the model's own JSON cannot stand in for them.
                "usage": token_usage(completion.get("usage")),
                "finish_reason": finish_reason,
            }
        )
    except (json.JSONDecodeError, TypeError, ValidationError) as error:
        raise TransientError(f"the model answered malformed JSON: {error}") from error
