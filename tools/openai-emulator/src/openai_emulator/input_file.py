"""A batch's input file read and checked as the service checks it in ``validating``.

Every line is a JSON object with a unique ``custom_id``, ``method`` ``POST``, ``url``
``/chat/completions`` (or ``/v1/chat/completions``) and a ``body`` whose ``model`` (the
Global Batch deployment) is the same on every line. Blank lines are skipped. Problems
become the batch's ``errors.data`` entries (``code``, ``message``, ``line`` (1-based),
``param``), with the codes of the service's troubleshooting table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

CHAT_URLS = frozenset({"/chat/completions", "/v1/chat/completions"})
MAX_ERRORS = 100  # errors reported per file, like the service's truncated list


@dataclass(frozen=True)
class BatchRequest:
    """One line of the input file: its id, request body and position (1-based)."""

    custom_id: str
    body: dict[str, Any]
    line: int


@dataclass
class InputFile:
    """The outcome of reading a file: its requests, or why the batch fails."""

    requests: list[BatchRequest] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    tokens: int = 0  # the enqueued-token estimate of the whole file


def error(
    code: str, message: str, line: int | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"code": code, "message": message, "line": line, "param": param}


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def prompt_characters(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(len(message_text(m.get("content"))) for m in messages if isinstance(m, dict))


def estimate_tokens(characters: int) -> int:
    """The emulator's token count: characters / 4, rounded up."""
    return math.ceil(characters / 4)


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _check_line(number: int, document: Any, seen: set[str]) -> list[dict[str, Any]]:
    if not isinstance(document, dict):
        return [error("invalid_json_line", "The line is not a JSON object.", number)]
    problems = []
    custom_id = document.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        problems.append(
            error("invalid_request", "'custom_id' must be a non-empty string.", number, "custom_id")
        )
    elif custom_id in seen:
        problems.append(
            error(
                "duplicate_custom_id",
                f"The custom_id {custom_id!r} appears more than once.",
                number,
                "custom_id",
            )
        )
    if document.get("method") != "POST":
        problems.append(error("invalid_request", "'method' must be 'POST'.", number, "method"))
    if document.get("url") not in CHAT_URLS:
        problems.append(
            error(
                "url_mismatch",
                f"'url' must be '/chat/completions', got {document.get('url')!r}.",
                number,
                "url",
            )
        )
    body = document.get("body")
    if not isinstance(body, dict):
        problems.append(error("invalid_request", "'body' must be a JSON object.", number, "body"))
    elif not isinstance(body.get("model"), str) or not body["model"]:
        problems.append(
            error(
                "model_not_found", "'body.model' (the deployment) is missing.", number, "body.model"
            )
        )
    return problems


def read_input(data: bytes, max_lines: int, max_bytes: int) -> InputFile:
    """Requests and token estimate of ``data``, or the errors that fail the batch."""
    result = InputFile()
    if len(data) > max_bytes:
        result.errors.append(
            error(
                "file_too_large", f"The input file has {len(data)} bytes; the limit is {max_bytes}."
            )
        )
        return result
    seen: set[str] = set()
    characters = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(result.requests) + len(result.errors) >= max_lines:
            result.errors.append(
                error("too_many_tasks", f"The input file has more than {max_lines} requests.")
            )
            break
        try:
            document = json.loads(raw)
        except ValueError:
            result.errors.append(error("invalid_json_line", "The line is not valid JSON.", number))
            continue
        problems = _check_line(number, document, seen)
        if problems:
            result.errors.extend(problems)
            if isinstance(document, dict) and isinstance(document.get("custom_id"), str):
                seen.add(document["custom_id"])
            continue
        body = document["body"]
        seen.add(document["custom_id"])
        if result.model is None:
            result.model = body["model"]
        elif body["model"] != result.model:
            result.errors.append(
                error(
                    "model_mismatch",
                    f"Every line must use the same model: {result.model!r} "
                    f"on the first line, {body['model']!r} here.",
                    number,
                    "body.model",
                )
            )
            continue
        characters += prompt_characters(body)
        result.tokens += _max_tokens(body)
        result.requests.append(BatchRequest(document["custom_id"], body, number))
    if not result.requests and not result.errors:
        result.errors.append(error("empty_batch", "The input file has no requests."))
    result.tokens += estimate_tokens(characters)
    del result.errors[MAX_ERRORS:]
    return result
