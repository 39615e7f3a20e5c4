"""JSONL in and out: packing staged requests into input files, reading the answers back.

The service reads one request per line and answers in an output file (successes) and an
error file (lines it could not answer), in no particular order: ``custom_id`` (the request
id) is the only way back to the request, so every line carries it and every answer is
looked up by it. Pure functions: no storage, no SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidModelOutput, PolicyRefusal, TransientError
from shared.global_batch.quota import line_tokens
from shared.global_batch.records import PendingRequest
from shared.inference import ModelAnswer
from shared.inference.chat import CONTENT_FILTER, filtered_categories, read_completion

CHAT_COMPLETIONS_URL = "/chat/completions"


def input_line(custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """One request of an input file (``body.model`` is the Global Batch deployment)."""
    return {"custom_id": custom_id, "method": "POST", "url": CHAT_COMPLETIONS_URL, "body": body}


def encoded(line: dict[str, Any]) -> bytes:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def pack(
    waiting: Sequence[PendingRequest],
    max_lines: int,
    max_bytes: int,
    max_tokens: int | None = None,
) -> list[list[PendingRequest]]:
    """Consecutive groups of ``waiting`` (oldest first) that each fit one input file:
    at most ``max_lines`` lines, ``max_bytes`` bytes and, when given, ``max_tokens``
    estimated tokens (``quota.line_tokens``: the deployment's enqueued-token quota). A
    full file is closed and the next request starts a new one (staging refuses a request
    whose line alone is larger than a file may be; a line whose tokens alone pass
    ``max_tokens`` goes alone in its file, which the control plane fails at once)."""
    files: list[list[PendingRequest]] = []
    current: list[PendingRequest] = []
    size = tokens = 0
    for pending in sorted(waiting, key=lambda p: (p.staged_at, p.request_id)):
        line_bytes = len(encoded(pending.line))
        line_cost = line_tokens(pending.line) if max_tokens is not None else 0
        over_tokens = max_tokens is not None and tokens + line_cost > max_tokens
        if current and (len(current) >= max_lines or size + line_bytes > max_bytes or over_tokens):
            files.append(current)
            current, size, tokens = [], 0, 0
        current.append(pending)
        size += line_bytes
        tokens += line_cost
    if current:
        files.append(current)
    return files


def input_file(members: Iterable[PendingRequest]) -> bytes:
    return b"".join(encoded(pending.line) for pending in members)


# --- answers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """The model's answer (its alias's task makes the result of it)."""

    answer: ModelAnswer


@dataclass(frozen=True)
class Refused:
    """The content filter stopped the prompt or the answer: a result, not a failure."""

    reason: str
    categories: str


@dataclass(frozen=True)
class NotAnswered:
    """The service never ran this line: its batch expired (``batch_expired``) or was
    cancelled (``batch_cancelled``) first. The same as no line at all."""

    code: str


@dataclass(frozen=True)
class LineFailed:
    """The service could not answer this line (a server error, a malformed answer)."""

    code: str
    message: str


Answer = Answered | Refused | LineFailed | NotAnswered

# Error codes of lines the service wrote for requests it never ran.
NOT_RUN = frozenset({"batch_expired", "batch_cancelled"})


def answer_lines(output: bytes | None, errors: bytes | None) -> dict[str, dict[str, Any]]:
    """Every line of an output file and an error file, by ``custom_id`` (``answer``
    reads one)."""
    answers: dict[str, dict[str, Any]] = {}
    for content in (output, errors):
        for raw in (content or b"").splitlines():
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
                custom_id = line["custom_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # no custom_id: it cannot belong to any request
            if isinstance(custom_id, str) and isinstance(line, dict):
                answers[custom_id] = line
    return answers


def answer(line: dict[str, Any], characters: int) -> Answer:
    """What one answer line means for its request (``characters``: its input's length,
    a statistic of the result)."""
    response = line.get("response")
    if not isinstance(response, dict):
        response = {}
    error = line.get("error")
    if isinstance(error, dict) and error.get("code") in NOT_RUN:
        return NotAnswered(str(error["code"]))
    status = response.get("status_code")
    body = response.get("body")
    if status == 200 and isinstance(body, dict):
        try:
            return Answered(read_completion(body, characters))
        except PolicyRefusal as refusal:
            return Refused(refusal.message, refusal.category or CONTENT_FILTER)
        except InvalidModelOutput as malformed:
            return LineFailed(malformed.code, str(malformed))
        except TransientError as malformed:
            return LineFailed("malformed_answer", str(malformed))
    error_body = body.get("error") if isinstance(body, dict) else None
    if isinstance(error_body, dict) and error_body.get("code") == CONTENT_FILTER:
        return Refused("the prompt was refused by the content filter", filtered_categories(body))
    source = error_body if isinstance(error_body, dict) else error
    if isinstance(source, dict):
        code = str(source.get("code") or f"http_{status}")
        return LineFailed(code, str(source.get("message") or "the service gave no message"))
    return LineFailed(f"http_{status}", "the service answered this line with an error")
