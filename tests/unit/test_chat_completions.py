"""The chat-completions body and the reading of an answer (``shared.inference.chat``),
shared by every HTTP provider of the queue lane and by the Global Batch lane, and the
built-in task's result of an answer (``shared.inference.tasks``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.contracts import InferenceResult, Priority, TokenUsage
from shared.errors import InvalidModelOutput, PolicyRefusal, TransientError
from shared.inference.chat import (
    CONTENT_FILTER,
    JSON_OBJECT,
    MAX_INPUT_CHARS,
    MAX_TOKENS,
    MODEL_REFUSAL,
    chat_request,
    filtered_categories,
    read_completion,
    token_usage,
)
from shared.inference.parameters import GENERATION_PARAMETERS
from shared.inference.tasks import ANALYSIS_SCHEMA, DocumentAnalysis, SchemaTask

ANALYSE = DocumentAnalysis()
SENTIMENT = SchemaTask(
    "sentiment.v2",
    "Rate the sentiment of the text.",
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["sentiment", "score"],
        "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "score": {"type": "number"},
        },
    },
)

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


def defaults(**given: Any) -> dict[str, Any]:
    """The generation parameters as a model client reads them (defaults filled in)."""
    return GENERATION_PARAMETERS.read(given, "m")


def test_the_body_names_the_deployment_and_asks_for_the_tasks_schema() -> None:
    body = chat_request("gpt-4o-mini-batch", ANALYSE, "Invoice 12", defaults())

    assert body["model"] == "gpt-4o-mini-batch"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "document-analysis", "schema": ANALYSIS_SCHEMA, "strict": True},
    }
    assert "temperature" not in body, "the model's own default: reasoning models take no other"
    system, user = body["messages"]
    assert system["role"] == "system"
    assert '"summary" (2 sentences at most)' in system["content"]
    assert user == {"role": "user", "content": "Invoice 12"}
    assert "top_p" not in body
    assert "max_tokens" not in body
    assert "max_completion_tokens" not in body
    assert "summary_sentences" not in body, "the task's own parameter goes in its prompt"


def test_one_sentence_is_said_in_the_singular() -> None:
    body = chat_request("d", ANALYSE, "x", defaults(summary_sentences=1))

    assert '"summary" (one sentence at most)' in body["messages"][0]["content"]


def test_sampling_settings_are_sent_only_when_given() -> None:
    body = chat_request("d", ANALYSE, "x", defaults(temperature=0.7, top_p=0.5, max_tokens=200))

    assert (body["temperature"], body["top_p"], body["max_completion_tokens"]) == (0.7, 0.5, 200)
    assert "max_tokens" not in body, "reasoning models refuse it"


def test_max_tokens_goes_under_the_older_name_for_servers_that_know_only_it() -> None:
    body = chat_request("llama3", ANALYSE, "x", defaults(max_tokens=200), token_limit=MAX_TOKENS)

    assert body["max_tokens"] == 200
    assert "max_completion_tokens" not in body


def test_the_input_is_cut_at_the_limit() -> None:
    text = "a" * MAX_INPUT_CHARS + "TAIL"

    body = chat_request("d", ANALYSE, text, defaults())

    sent = body["messages"][1]["content"]
    assert len(sent) == MAX_INPUT_CHARS
    assert "TAIL" not in sent


def test_a_catalog_task_sends_its_instructions_its_schema_and_its_own_parameters() -> None:
    body = chat_request("llama3", SENTIMENT, "Great!", {"temperature": 0.2, "scale": "1-5"})

    system = body["messages"][0]["content"]
    assert system.startswith("Rate the sentiment of the text.")
    assert system.endswith('Parameters of this request (JSON): {"scale":"1-5"}')
    assert body["temperature"] == 0.2
    assert "scale" not in body
    assert body["response_format"]["json_schema"]["name"] == "sentiment_v2", "its allowed name"
    assert body["response_format"]["json_schema"]["strict"] is True


def test_a_schema_that_is_not_closed_is_sent_as_guidance_not_strict() -> None:
    loose = SchemaTask("t", "Do it.", {"type": "object", "properties": {"a": {"type": "string"}}})

    body = chat_request("d", loose, "x", {})

    assert body["response_format"]["json_schema"]["strict"] is False


def test_json_object_mode_puts_the_schema_in_the_instructions_of_a_catalog_task() -> None:
    body = chat_request("d", SENTIMENT, "x", {}, JSON_OBJECT)

    assert body["response_format"] == {"type": "json_object"}
    assert '"required":["sentiment","score"]' in body["messages"][0]["content"]
    analysis = chat_request("d", ANALYSE, "x", defaults(), JSON_OBJECT)
    assert "JSON Schema" not in analysis["messages"][0]["content"], "its prompt lists its keys"


# --- read_completion and the built-in task ---------------------------------------------------


def analysis(answer: dict[str, Any], characters: int = 1) -> InferenceResult:
    return ANALYSE.result(read_completion(answer, characters))


def test_a_json_answer_becomes_a_result_with_its_usage_and_finish_reason() -> None:
    result = analysis(completion(), characters=42)

    assert result.summary == ANALYSIS["summary"]
    assert result.document_type == "invoice"
    assert result.confidence == 0.9
    assert result.suggested_priority is Priority.HIGH
    assert result.statistics == {"characters": 42}
    assert result.details == {"model_response_id": "chatcmpl-1"}
    assert result.usage == TokenUsage(input_tokens=120, output_tokens=30, total_tokens=150)
    assert result.finish_reason == "stop"


def test_an_answer_cut_short_keeps_its_finish_reason() -> None:
    assert analysis(completion(finish_reason="length")).finish_reason == "length"


def test_keys_the_model_invents_are_dropped() -> None:
    content = json.dumps({**ANALYSIS, "mood": "cheerful"})

    result = analysis(completion(content))

    assert "mood" not in result.model_dump()


def test_the_model_cannot_stand_in_for_usage_finish_reason_or_details() -> None:
    forged = {
        **ANALYSIS,
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        "finish_reason": "stop",
        "details": {"model_response_id": "forged"},
        "statistics": {"characters": 0},
    }

    result = analysis(completion(json.dumps(forged), finish_reason="length"), 5)

    assert result.usage == TokenUsage(input_tokens=120, output_tokens=30, total_tokens=150)
    assert result.finish_reason == "length"
    assert result.details == {"model_response_id": "chatcmpl-1"}
    assert result.statistics == {"characters": 5}


def test_an_answer_without_usage_is_still_a_result() -> None:
    answer = completion()
    del answer["usage"]

    assert analysis(answer).usage is None


def test_a_content_filter_finish_is_a_refusal() -> None:
    with pytest.raises(PolicyRefusal) as refused:
        read_completion(completion(content="", finish_reason=CONTENT_FILTER), 1)

    assert refused.value.category == CONTENT_FILTER


def test_the_models_own_refusal_under_structured_outputs_is_a_refusal() -> None:
    answer = completion(content=None)
    answer["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "No."}

    with pytest.raises(PolicyRefusal, match=r"declined: No\.") as refused:
        read_completion(answer, 1)

    assert refused.value.category == MODEL_REFUSAL


@pytest.mark.parametrize(
    "content",
    ["not json at all", "[1, 2, 3]", '"a string"', ""],
    ids=["text", "array", "string", "empty"],
)
def test_an_answer_that_is_not_a_json_object_is_invalid_output(content: str) -> None:
    with pytest.raises(InvalidModelOutput, match=r"malformed JSON|not an object"):
        read_completion(completion(content), 1)


def test_a_cut_short_answer_that_does_not_parse_says_so() -> None:
    with pytest.raises(InvalidModelOutput, match="cut short"):
        read_completion(completion('{"summary": "An inv', finish_reason="length"), 1)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (json.dumps({"summary": "no type and no confidence"}), "result.document_type"),
        (json.dumps({**ANALYSIS, "confidence": 7}), "result.confidence"),
    ],
    ids=["missing-fields", "out-of-range"],
)
def test_an_answer_that_is_not_an_analysis_is_invalid_output(content: str, field: str) -> None:
    with pytest.raises(InvalidModelOutput, match=field):
        analysis(completion(content))


def test_a_catalog_tasks_answer_is_its_object_checked_against_its_schema() -> None:
    good = SENTIMENT.result(read_completion(completion('{"sentiment": "positive", "score": 1}'), 1))
    assert good == {"sentiment": "positive", "score": 1}
    with pytest.raises(InvalidModelOutput) as invalid:
        SENTIMENT.result(read_completion(completion('{"sentiment": "great", "extra": 1}'), 1))
    message = str(invalid.value)
    assert "output schema of task 'sentiment.v2'" in message
    assert "result.sentiment: 'great' is not one of" in message
    assert "'score' is a required property" in message
    assert "('extra' was unexpected)" in message


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
