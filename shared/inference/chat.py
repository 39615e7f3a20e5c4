"""The chat-completions exchange, as data: the request body for a task, and its answer.

Every model reached over HTTP speaks it: an Azure OpenAI deployment, any
OpenAI-compatible ``/v1/chat/completions`` endpoint (Azure AI Foundry models, vLLM,
Ollama, LiteLLM, a gateway), and the Global Batch lane, whose JSONL lines carry the same
body and whose output lines carry the same answer, hours later. Keeping the body and the
reading of the answer here, free of any SDK, makes a request mean the same thing on every
provider and in both lanes, and makes a content-filter refusal a result everywhere.

The answer's shape is asked for with ``response_format``: ``json_schema`` (structured
outputs: the task's output schema, ``strict`` where the schema allows it) or
``json_object`` (any JSON object, for endpoints without structured outputs; the schema
then travels in the instructions).

The sampling settings go in the body only when the request (or its declaration) sets
them. A request's ``max_tokens`` (the public parameter keeps that name) goes under the
field the provider takes: ``max_completion_tokens``, the only one reasoning models
(gpt-5, o1, o3, o4) accept and the one Azure OpenAI and OpenAI take for every current
chat model, or ``max_tokens`` for OpenAI-compatible servers that know only that one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import ValidationError

from shared.contracts import TokenUsage
from shared.errors import InvalidModelOutput, PolicyRefusal, TransientError
from shared.inference import ModelAnswer
from shared.inference.json_schemas import strict_compatible
from shared.inference.parameters import SAMPLING_PARAMETERS
from shared.inference.tasks import Task

MAX_INPUT_CHARS: Final = 100_000
CONTENT_FILTER: Final = "content_filter"
MODEL_REFUSAL: Final = "model_refusal"
ResponseFormat = Literal["json_schema", "json_object"]
JSON_SCHEMA: Final = "json_schema"
JSON_OBJECT: Final = "json_object"
# The body field of the longest answer: OpenAI's current name, or the one it replaced.
TokenLimitField = Literal["max_completion_tokens", "max_tokens"]
MAX_COMPLETION_TOKENS: Final = "max_completion_tokens"
MAX_TOKENS: Final = "max_tokens"


def schema_name(task: Task) -> str:
    """The task's name as structured outputs take it (letters, digits, ``_`` and ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", task.name)[:64]


def response_format(task: Task, kind: ResponseFormat) -> dict[str, Any]:
    if kind == JSON_OBJECT:
        return {"type": JSON_OBJECT}
    return {
        "type": JSON_SCHEMA,
        "json_schema": {
            "name": schema_name(task),
            "schema": dict(task.output_schema),
            "strict": strict_compatible(task.output_schema),
        },
    }


def chat_request(
    deployment: str,
    task: Task,
    text: str,
    parameters: Mapping[str, Any],
    kind: ResponseFormat = JSON_SCHEMA,
    token_limit: TokenLimitField = MAX_COMPLETION_TOKENS,
) -> dict[str, Any]:
    """The body of a chat-completions call for one input (``model`` is the deployment):
    the sampling settings given, nothing for those not given, and ``max_tokens`` under
    ``token_limit``."""
    instructions = task.instructions(parameters)
    if kind == JSON_OBJECT and not task.instructions_describe_answer:
        schema = json.dumps(task.output_schema, separators=(",", ":"))
        instructions += f"\n\nAnswer with one JSON object that matches this JSON Schema: {schema}"
    body: dict[str, Any] = {
        "model": deployment,
        "messages": [
            {"role": "system", "content": instructions},
            {"role": "user", "content": text[:MAX_INPUT_CHARS]},
        ],
        "response_format": response_format(task, kind),
    }
    for name in SAMPLING_PARAMETERS:
        if parameters.get(name) is not None:
            body[token_limit if name == MAX_TOKENS else name] = parameters[name]
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


def read_completion(completion: Mapping[str, Any], characters: int) -> ModelAnswer:
    """The answer a chat completion carries (``characters``: the length of the input it
    read, a statistic of the result). PolicyRefusal when the content filter stopped the
    answer or the model declined (structured outputs' ``refusal``); InvalidModelOutput
    when the content is not a JSON object; TransientError when there is no choice at all."""
    try:
        choice = completion["choices"][0]
        finish_reason = choice.get("finish_reason")
        message = choice.get("message") or {}
        content = message.get("content") or ""
        refusal = message.get("refusal")
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        raise TransientError(f"the model answered without a choice: {error!r}") from error
    if finish_reason == CONTENT_FILTER:
        raise PolicyRefusal("the model's content filter stopped the answer", CONTENT_FILTER)
    if isinstance(refusal, str) and refusal:
        raise PolicyRefusal(f"the model declined: {refusal[:500]}", MODEL_REFUSAL)
    try:
        document = json.loads(content)
    except json.JSONDecodeError as error:
        cut = (
            " (the answer was cut short: finish_reason length)" if finish_reason == "length" else ""
        )
        raise InvalidModelOutput(f"the model answered malformed JSON: {error}{cut}") from error
    if not isinstance(document, dict):
        raise InvalidModelOutput(
            f"the model answered a JSON {type(document).__name__}, not an object"
        )
    return ModelAnswer(
        content=document,
        usage=token_usage(completion.get("usage")),
        finish_reason=finish_reason,
        statistics={"characters": characters},
        details={"model_response_id": completion.get("id")},
    )
