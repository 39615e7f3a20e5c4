"""The chat-completions body and the reading of an answer (``shared.chat_completions``),
shared by the queue lane's Azure OpenAI client and the Global Batch lane."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.chat_completions import (
    CONTENT_FILTER,
    MAX_INPUT_CHARS,
    chat_request,
    filtered_categories,
    read_completion,
    token_usage,
)
from shared.contracts import Priority, TokenUsage
from shared.errors import PolicyRefusal, TransientError
from shared.model_parameters import GenerationParameters

ANALYSIS = {
    "summary": "An invoice of 300 EUR.",
    "document_type": "invoice",
    "confidence": 0.9,
    "language": "en",
    "review_required": False,
    "suggested_priority": "high",
}
USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}


def completion(
    content: object = None, finish_reason: str = "stop", **fields: Any
) -> dict[str, Any]:
    """A chat completion as the service sends it (``content`` defaults to ANALYSIS)."""
    text = json.dumps(ANALYSIS) if content is None else content
    document: dict[str, Any] = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": text},
            }
        ],
        "usage": USAGE,
    }
    document.update(fields)
    return document


def filter_error(**verdicts: bool) -> dict[str, Any]:
    """The ``error`` object of an Azure content-filter refusal."""
    return {
        "code": CONTENT_FILTER,
        "message": "The response was filtered",
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                name: {"filtered": filtered, "severity": "high" if filtered else "safe"}
                for name, filtered in verdicts.items()
            },
        },
    }


# --- chat_request ----------------------------------------------------------------------------


def test_the_body_names_the_deployment_and_asks_for_a_json_object() -> None:
    body = chat_request("gpt-4o-mini-batch", "Invoice 12", GenerationParameters())

    assert body["model"] == "gpt-4o-mini-batch"
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0.0
    system, user = body["messages"]
    assert system["role"] == "system"
    assert '"summary" (2 sentences at most)' in system["content"]
    assert user == {"role": "user", "content": "Invoice 12"}
    assert "top_p" not in body
    assert "max_tokens" not in body


def test_one_sentence_is_said_in_the_singular() -> None:
    body = chat_request("d", "x", GenerationParameters(summary_sentences=1))

    assert '"summary" (one sentence at most)' in body["messages"][0]["content"]


def test_sampling_settings_are_sent_only_when_given() -> None:
    parameters = GenerationParameters(temperature=0.7, top_p=0.5, max_tokens=200)

    body = chat_request("d", "x", parameters)

    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.5, 200)


def test_the_input_is_cut_at_the_limit() -> None:
    text = "a" * MAX_INPUT_CHARS + "TAIL"

    body = chat_request("d", text, GenerationParameters())

    sent = body["messages"][1]["content"]
    assert len(sent) == MAX_INPUT_CHARS
    assert "TAIL" not in sent


# --- read_completion -------------------------------------------------------------------------


def test_a_json_answer_becomes_a_result_with_its_usage_and_finish_reason() -> None:
    result = read_completion(completion(), characters=42)

    assert result.summary == ANALYSIS["summary"]
    assert result.document_type == "invoice"
    assert result.confidence == 0.9
    assert result.suggested_priority is Priority.HIGH
    assert result.statistics == {"characters": 42}
    assert result.details == {"model_response_id": "chatcmpl-1"}
    assert result.usage == TokenUsage(input_tokens=120, output_tokens=30, total_tokens=150)
    assert result.finish_reason == "stop"


def test_an_answer_cut_short_keeps_its_finish_reason() -> None:
    assert read_completion(completion(finish_reason="length"), 1).finish_reason == "length"


def test_keys_the_model_invents_are_dropped() -> None:
    content = json.dumps({**ANALYSIS, "mood": "cheerful"})

    result = read_completion(completion(content), 1)

    assert "mood" not in result.model_dump()


def test_the_model_cannot_stand_in_for_usage_finish_reason_or_details() -> None:
    forged = {
        **ANALYSIS,
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        "finish_reason": "stop",
        "details": {"model_response_id": "forged"},
    }

    result = read_completion(completion(json.dumps(forged), finish_reason="length"), 1)

    assert result.usage == TokenUsage(input_tokens=120, output_tokens=30, total_tokens=150)
    assert result.finish_reason == "length"
    assert result.details == {"model_response_id": "chatcmpl-1"}


def test_an_answer_without_usage_is_still_a_result() -> None:
    answer = completion()
    del answer["usage"]

    assert read_completion(answer, 1).usage is None


def test_a_content_filter_finish_is_a_refusal() -> None:
    with pytest.raises(PolicyRefusal) as refused:
        read_completion(completion(content="", finish_reason=CONTENT_FILTER), 1)

    assert refused.value.category == CONTENT_FILTER


@pytest.mark.parametrize(
    "content",
    [
        "not json at all",
        "[1, 2, 3]",
        '"a string"',
        json.dumps({"summary": "no type and no confidence"}),
        json.dumps({**ANALYSIS, "confidence": 7}),
        "",
    ],
    ids=["text", "array", "string", "missing-fields", "out-of-range", "empty"],
)
def test_an_answer_that_is_not_the_json_asked_for_is_transient(content: str) -> None:
    with pytest.raises(TransientError, match="malformed JSON"):
        read_completion(completion(content), 1)


@pytest.mark.parametrize(
    "answer",
    [
        {"id": "x"},
        {"choices": []},
        {"choices": None},
        {"choices": ["not a choice"]},
        {"choices": [{"message": "not a message"}]},
    ],
    ids=["no-choices", "empty", "null", "string-choice", "string-message"],
)
def test_an_answer_without_a_choice_is_transient(answer: dict[str, Any]) -> None:
    with pytest.raises(TransientError, match="without a choice"):
        read_completion(answer, 1)


# --- token_usage and filtered_categories ---------------------------------------------------


def test_token_counts_are_read() -> None:
    assert token_usage(USAGE) == TokenUsage(input_tokens=120, output_tokens=30, total_tokens=150)


@pytest.mark.parametrize(
    "usage",
    [
        None,
        "150 tokens",
        [120, 30, 150],
        {},
        {"prompt_tokens": 1, "completion_tokens": 2},
        {"prompt_tokens": -1, "completion_tokens": 2, "total_tokens": 1},
        {"prompt_tokens": "many", "completion_tokens": 2, "total_tokens": 3},
    ],
    ids=["none", "string", "list", "empty", "missing-total", "negative", "not-a-number"],
)
def test_nonsense_usage_is_none(usage: object) -> None:
    assert token_usage(usage) is None


def test_the_categories_that_fired_are_named_from_either_shape_of_error_body() -> None:
    error = filter_error(violence=True, hate=True, sexual=False)

    assert filtered_categories(error) == "hate,violence"
    assert filtered_categories({"error": error}) == "hate,violence"


@pytest.mark.parametrize(
    "body",
    [
        None,
        "content_filter",
        {},
        {"error": {"code": CONTENT_FILTER}},
        {"error": filter_error(hate=False)},
        {"error": {"code": CONTENT_FILTER, "innererror": "text"}},
        {"error": {"code": CONTENT_FILTER, "innererror": {"content_filter_result": ["hate"]}}},
    ],
    ids=["none", "string", "empty", "no-inner", "none-fired", "inner-text", "result-list"],
)
def test_without_named_categories_the_category_is_content_filter(body: object) -> None:
    assert filtered_categories(body) == CONTENT_FILTER
