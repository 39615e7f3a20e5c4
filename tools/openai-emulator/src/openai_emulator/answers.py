"""The answer to one request: deterministic content, and failures driven by markers.

The assistant's content is a JSON object string built from the request alone, so tests
can predict it: a value of the request's ``response_format`` JSON Schema
(``schema_instance``: strings are the first sentence of the last user message), or,
without one, a document analysis whose summary is that sentence. Markers in the user
message choose a failure instead:

* ``[[refuse-prompt]]``: an error-file line, status 400, the service's content-filter
  body for a filtered prompt;
* ``[[refuse-answer]]``: an output line whose choice ends with ``content_filter`` and no
  content;
* ``[[fail-line]]``: an error-file line, status 500 ``server_error``;
* ``[[invalid-answer]]``: an answer, but ``{"unexpected": true}``, which no task's schema
  of required or closed properties allows (a model that breaks its schema).

Batch lines and chat completions (``chat``) are answered the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .input_file import BatchRequest, estimate_tokens, message_text, prompt_characters
from .schema_instance import instance

REFUSE_PROMPT = "[[refuse-prompt]]"
REFUSE_ANSWER = "[[refuse-answer]]"
FAIL_LINE = "[[fail-line]]"
INVALID_ANSWER = "[[invalid-answer]]"
SUMMARY_LIMIT = 200
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
PROMPT_FILTERED = {
    "code": "content_filter",
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
    "management policy.",
    "innererror": {
        "code": "ResponsibleAIPolicyViolation",
        "content_filter_result": {"hate": {"filtered": True, "severity": "high"}},
    },
}


@dataclass(frozen=True)
class Answer:
    """One result line and whether it belongs to the output file (2xx) or the error file."""

    custom_id: str
    line: dict[str, Any]
    succeeded: bool


def user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    texts = [
        message_text(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "user"
    ]
    return texts[-1] if texts else ""


def first_sentence(text: str) -> str:
    stripped = " ".join(text.split())
    end = _SENTENCE_END.search(stripped)
    sentence = stripped[: end.end()] if end else stripped
    return sentence[:SUMMARY_LIMIT]


def requested_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a request's ``response_format`` asks for, if any."""
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    described = response_format.get("json_schema")
    schema = described.get("schema") if isinstance(described, dict) else None
    return schema if isinstance(schema, dict) else None


def answer_content(body: dict[str, Any]) -> str:
    text = user_text(body)
    if INVALID_ANSWER in text:
        return json.dumps({"unexpected": True})
    schema = requested_schema(body)
    if schema is not None:
        return json.dumps(instance(schema, first_sentence(text)))
    return json.dumps(
        {
            "summary": first_sentence(text),
            "document_type": "other",
            "confidence": 0.5,
            "language": "en",
            "review_required": False,
            "suggested_priority": "normal",
        }
    )


def completion(
    body: dict[str, Any], model: str, content: str | None, finish: str
) -> dict[str, Any]:
    """A ``chat.completion`` of ``content`` (usage estimated: characters / 4)."""
    prompt_tokens = estimate_tokens(prompt_characters(body))
    completion_tokens = estimate_tokens(len(content or ""))
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _line(request: BatchRequest, status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"batch_req_{secrets.token_hex(16)}",
        "custom_id": request.custom_id,
        "response": {"status_code": status, "request_id": str(uuid.uuid4()), "body": body},
        "error": None,
    }


def answer(request: BatchRequest, model: str) -> Answer:
    """The result of ``request`` (deterministic but for ids and timestamps)."""
    status, body = response(request.body, model)
    return Answer(request.custom_id, _line(request, status, body), status == 200)


def response(body: dict[str, Any], model: str) -> tuple[int, dict[str, Any]]:
    """The status and body the service answers a chat-completions request with, as the
    markers in it choose (a batch line carries them; a chat completion is them)."""
    text = user_text(body)
    if REFUSE_PROMPT in text:
        return 400, {"error": PROMPT_FILTERED}
    if FAIL_LINE in text:
        failure = {
            "code": "server_error",
            "message": "The server had an error processing the request.",
        }
        return 500, {"error": failure}
    if REFUSE_ANSWER in text:
        return 200, completion(body, model, None, "content_filter")
    return 200, completion(body, model, answer_content(body), "stop")


def expired(request: BatchRequest) -> Answer:
    """The error-file line of a request the batch's window ran out on (as the service
    writes it: no response, error code ``batch_expired``)."""
    line = {
        "id": f"batch_req_{secrets.token_hex(16)}",
        "custom_id": request.custom_id,
        "response": None,
        "error": {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        },
    }
    return Answer(request.custom_id, line, False)


def result_order(answers: list[Answer]) -> list[Answer]:
    """Answers in a deterministic order unrelated to the input's (by a hash of custom_id).

    The service does not keep the input order either: readers must join on custom_id.
    """
    shuffled = sorted(answers, key=lambda a: hashlib.sha256(a.custom_id.encode()).hexdigest())
    if len(shuffled) > 1 and [a.custom_id for a in shuffled] == [a.custom_id for a in answers]:
        shuffled.reverse()  # a hash order that happens to equal the input order
    return shuffled


def jsonl(answers: list[Answer]) -> bytes:
    return b"".join(json.dumps(a.line).encode() + b"\n" for a in answers)
