"""JSONL in and out of the Global Batch lane (``shared.global_batch.files``): packing staged
requests into input files and reading the service's output and error files back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.contracts import InlineText, RequestMessage, TokenUsage
from shared.global_batch.files import (
    CHAT_COMPLETIONS_URL,
    Answered,
    LineFailed,
    Refused,
    answer,
    answer_lines,
    encoded,
    input_file,
    input_line,
    pack,
)
from shared.global_batch.records import PendingRequest
from shared.inference.chat import CONTENT_FILTER, chat_request
from shared.inference.parameters import GENERATION_PARAMETERS
from shared.inference.tasks import DocumentAnalysis

DEPLOYMENT = "gpt-4o-mini-batch"
START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ANALYSIS = {"summary": "An invoice.", "document_type": "invoice", "confidence": 0.8}


def pending(request_id: str, minutes: int = 0, text: str = "Invoice 12") -> PendingRequest:
    """A staged request, staged ``minutes`` after START."""
    body = chat_request(DEPLOYMENT, DocumentAnalysis(), text, GENERATION_PARAMETERS.read({}, "m"))
    return PendingRequest(
        request=RequestMessage(
            request_id=request_id,
            tenant_id="contoso",
            model="local-analyzer",
            input=InlineText(text=text),
        ),
        deployment=DEPLOYMENT,
        correlation_id=f"corr-{request_id}",
        line=input_line(request_id, body),
        staged_at=START + timedelta(minutes=minutes),
    )


def size(member: PendingRequest) -> int:
    return len(encoded(member.line))


def ids(files: list[list[PendingRequest]]) -> list[list[str]]:
    return [[member.request_id for member in file] for file in files]


def output_line(custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": "r", "body": body},
        "error": None,
    }


def completion(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": {"content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def jsonl(*lines: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


# --- input files ------------------------------------------------------------------------------


def test_an_input_line_is_a_post_to_chat_completions_named_by_the_request_id() -> None:
    body = chat_request(DEPLOYMENT, DocumentAnalysis(), "x", GENERATION_PARAMETERS.read({}, "m"))

    assert input_line("r1", body) == {
        "custom_id": "r1",
        "method": "POST",
        "url": CHAT_COMPLETIONS_URL,
        "body": body,
    }
    assert CHAT_COMPLETIONS_URL == "/chat/completions"


def test_an_input_file_is_one_json_line_per_request_keyed_by_request_id() -> None:
    members = [pending("r1", text="first é"), pending("r2", text="second")]

    content = input_file(members)

    assert content.endswith(b"\n")
    lines = [json.loads(raw) for raw in content.splitlines()]
    assert [line["custom_id"] for line in lines] == ["r1", "r2"]
    assert lines == [members[0].line, members[1].line]
    assert lines[0]["body"]["messages"][1]["content"] == "first é"
    assert len(content) == sum(size(member) for member in members)


def test_a_pack_puts_the_oldest_first() -> None:
    waiting = [pending("c", 3), pending("a", 1), pending("b", 2)]

    assert ids(pack(waiting, max_lines=10, max_bytes=10_000)) == [["a", "b", "c"]]


def test_requests_staged_at_the_same_moment_are_ordered_by_id() -> None:
    waiting = [pending("r2"), pending("r1")]

    assert ids(pack(waiting, max_lines=10, max_bytes=10_000)) == [["r1", "r2"]]


def test_a_file_full_of_lines_is_closed_and_the_next_request_starts_a_new_one() -> None:
    waiting = [pending(f"r{n}", n) for n in range(5)]

    assert ids(pack(waiting, max_lines=2, max_bytes=10_000_000)) == [
        ["r0", "r1"],
        ["r2", "r3"],
        ["r4"],
    ]


def test_a_file_full_of_bytes_is_closed_before_it_would_overflow() -> None:
    waiting = [pending(f"r{n}", n) for n in range(3)]
    line = size(waiting[0])
    assert all(size(member) == line for member in waiting)

    files = pack(waiting, max_lines=100, max_bytes=2 * line)
    assert ids(files) == [["r0", "r1"], ["r2"]]
    assert all(len(input_file(file)) <= 2 * line for file in files)

    assert ids(pack(waiting, max_lines=100, max_bytes=2 * line - 1)) == [["r0"], ["r1"], ["r2"]]


def test_every_request_is_packed_exactly_once_within_both_limits() -> None:
    waiting = [pending(f"r{n:02}", n % 7, text="word " * (n * 13 % 50 + 1)) for n in range(40)]
    max_bytes = max(size(member) for member in waiting) * 3

    files = pack(waiting, max_lines=4, max_bytes=max_bytes)

    packed = [member.request_id for file in files for member in file]
    assert sorted(packed) == sorted(member.request_id for member in waiting)
    assert len(packed) == len(set(packed))
    assert all(1 <= len(file) <= 4 for file in files)
    assert all(len(input_file(file)) <= max_bytes for file in files)
    staged = [member.staged_at for file in files for member in file]
    assert staged == sorted(staged), "files go out oldest first"


def test_nothing_waiting_packs_no_file() -> None:
    assert pack([], max_lines=10, max_bytes=10_000) == []


# --- reading answers ------------------------------------------------------------------------


def test_answers_are_found_by_custom_id_in_the_output_and_the_error_file() -> None:
    done = output_line("r1", 200, completion(json.dumps(ANALYSIS)))
    failed = output_line("r2", 500, {"error": {"code": "server_error", "message": "boom"}})
    output = jsonl(done) + b"\n   \nnot json\n" + jsonl({"no": "custom_id"}, {"custom_id": 7})
    errors = b"[1, 2]\n" + jsonl(failed) + b"\r\n"

    lines = answer_lines(output, errors)

    assert lines == {"r1": done, "r2": failed}


def test_no_files_mean_no_answers() -> None:
    assert answer_lines(None, None) == {}
    assert answer_lines(b"", b"\n\n") == {}


def test_a_200_answer_is_answered_with_its_usage() -> None:
    line = output_line("r1", 200, completion(json.dumps(ANALYSIS)))

    result = answer(line, characters=321)

    assert isinstance(result, Answered)
    assert result.answer.content == ANALYSIS
    analysis = DocumentAnalysis().result(result.answer)
    assert analysis.document_type == "invoice"
    assert analysis.statistics == {"characters": 321}
    assert analysis.usage == TokenUsage(input_tokens=100, output_tokens=20, total_tokens=120)
    assert analysis.finish_reason == "stop"


def test_a_200_answer_stopped_by_the_content_filter_is_refused() -> None:
    line = output_line("r1", 200, completion("", finish_reason=CONTENT_FILTER))

    assert answer(line, 1) == Refused(
        "the model's content filter stopped the answer", CONTENT_FILTER
    )


def test_a_prompt_refused_by_the_content_filter_is_refused_with_its_categories() -> None:
    error = {
        "code": CONTENT_FILTER,
        "message": "The prompt was filtered",
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": False, "severity": "safe"},
                "self_harm": {"filtered": True, "severity": "medium"},
                "violence": {"filtered": True, "severity": "high"},
            },
        },
    }

    refused = answer(output_line("r1", 400, {"error": error}), 1)

    assert isinstance(refused, Refused)
    assert refused.categories == "self_harm,violence"


def test_a_server_error_is_a_failed_line_with_its_code_and_message() -> None:
    line = output_line("r1", 500, {"error": {"code": "server_error", "message": "try later"}})

    assert answer(line, 1) == LineFailed("server_error", "try later")


def test_an_error_without_code_or_message_says_its_status() -> None:
    failed = answer(output_line("r1", 429, {"error": {}}), 1)

    assert failed == LineFailed("http_429", "the service gave no message")


def test_a_200_answer_with_malformed_content_is_invalid_model_output() -> None:
    failed = answer(output_line("r1", 200, completion("{not json")), 1)

    assert isinstance(failed, LineFailed)
    assert failed.code == "invalid_model_output"
    assert "malformed JSON" in failed.message


def test_a_200_answer_without_choices_is_a_malformed_answer() -> None:
    failed = answer(output_line("r1", 200, {"id": "chatcmpl-9"}), 1)

    assert isinstance(failed, LineFailed)
    assert failed.code == "malformed_answer"


def test_a_line_with_only_an_error_object_is_a_failed_line() -> None:
    line = {
        "custom_id": "r1",
        "response": None,
        "error": {"code": "invalid_request", "message": "the line could not be parsed"},
    }

    assert answer(line, 1) == LineFailed("invalid_request", "the line could not be parsed")


@pytest.mark.parametrize(
    "line",
    [
        {"custom_id": "r1"},
        {"custom_id": "r1", "response": "garbage", "error": "garbage"},
        {"custom_id": "r1", "response": {"status_code": 200, "body": "not an object"}},
    ],
    ids=["empty", "strings", "body-string"],
)
def test_a_line_that_says_nothing_usable_is_a_failed_line(line: dict[str, Any]) -> None:
    failed = answer(line, 1)

    assert isinstance(failed, LineFailed)
    assert failed.code.startswith("http_")
