"""CloudEvents and topic messages of an announcement; the local model's analysis."""

from __future__ import annotations

import pytest

from shared.adapters.models.local import LocalModel
from shared.contracts import InferenceResult
from shared.errors import PermanentError, PolicyRefusal
from shared.events.announcements import Announcement, cloud_events, event_id, topic_message
from shared.inference import InferenceInput
from shared.inference.tasks import DocumentAnalysis


def announcement(**changes: object) -> Announcement:
    fields: dict[str, object] = {
        "request_id": "r1",
        "tenant_id": "t1",
        "model": "local-analyzer",
        "outcome": "completed",
        "priority": "high",
        "task": "document-analysis",
        "document_type": "invoice",
        "review_required": True,
        "result_url": "https://app.example/api/v1/requests/r1/result",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    fields.update(changes)
    return Announcement(**fields)  # type: ignore[arg-type]


def test_events_have_deterministic_ids_subject_paths_and_trace_context() -> None:
    events = cloud_events(announcement())
    assert [e.type for e in events] == [
        "com.inferbus.InferenceCompleted",
        "com.inferbus.ContentClassified",
    ]
    assert events == cloud_events(announcement()), "republication gives the same ids"
    assert events[0].id == event_id("r1", "com.inferbus.InferenceCompleted") != events[1].id
    assert events[0].subject == "/tenants/t1/models/local-analyzer/requests/r1"
    assert events[0].source == "/inferbus/processor"
    assert events[0].extensions["traceparent"].startswith("00-4bf92f")
    assert events[0].data["status"] == "completed"


def test_failures_announce_inference_failed_only() -> None:
    events = cloud_events(announcement(outcome="failed", error_code="max_retries_exceeded"))
    assert [e.type for e in events] == ["com.inferbus.InferenceFailed"]
    assert events[0].data["status"] == "failed"


def test_topic_messages_carry_every_routing_value_as_properties() -> None:
    message = topic_message(announcement())
    assert message.application_properties == {
        "tenant": "t1",
        "model_name": "local-analyzer",
        "priority": "high",
        "review_required": True,
        "outcome": "completed",
        "event_type": "com.inferbus.InferenceCompleted",
        "task": "document-analysis",
        "document_type": "invoice",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    assert message.message_id == event_id("r1", "com.inferbus.InferenceCompleted")


def infer(text: str, **parameters: object) -> InferenceResult:
    """The local model's answer as the built-in task makes a result of it."""
    model = LocalModel(refusal_terms=("forbidden",))
    answer = model.infer(
        InferenceInput(
            request_id="r",
            model="local-analyzer",
            content=text.encode(),
            media_type="text/plain",
            parameters=parameters,
        )
    )
    return DocumentAnalysis().result(answer)


def test_the_local_model_classifies_summarises_and_is_deterministic() -> None:
    text = (
        "This agreement is made between the parties. The contract terms bind both parties. "
        "Each party signed the agreement on the date below. The weather was nice."
    )
    first, second = infer(text), infer(text)
    assert first == second
    assert first.document_type == "contract"
    assert first.language == "en"
    assert "weather" not in first.summary
    assert first.statistics["sentences"] == 4


def test_the_summary_has_the_sentences_asked_for() -> None:
    text = "Invoice 1 is due. The amount is 300 EUR. Pay within 30 days. Thank you."
    assert len(infer(text, summary_sentences=1).summary.split(". ")) == 1
    assert len(infer(text, summary_sentences=3).summary.split(". ")) == 3
    with pytest.raises(PermanentError, match="summary_sentences"):
        infer(text, summary_sentences=99)  # only a message no door checked carries it


def test_sensitive_numbers_require_review_and_urgency_raises_priority() -> None:
    result = infer("Urgent: card 4111 1111 1111 1111 was charged twice, please refund.")
    assert result.review_required is True
    assert result.suggested_priority.value == "high"


def test_policy_refusal() -> None:
    with pytest.raises(PolicyRefusal):
        infer("a FORBIDDEN thing")


def test_the_local_model_reports_deterministic_word_count_usage() -> None:
    text = "Invoice 17. Total amount due: 300 EUR.\n\nPayment within 30 days."
    result = infer(text)
    assert result == infer(text), "the same input costs the same tokens"
    usage = result.usage
    assert usage is not None
    summary_words = len(result.summary.split())
    assert (usage.input_tokens, usage.output_tokens) == (11, summary_words)
    assert usage.total_tokens == 11 + summary_words
    assert result.finish_reason == "stop"
    assert LocalModel.system == "inferbus.local"


def test_a_binary_document_reads_no_tokens() -> None:
    answer = LocalModel().infer(
        InferenceInput(request_id="r", model="m", content=b"%PDF-1.7", media_type="application/pdf")
    )
    result = DocumentAnalysis().result(answer)
    assert result.usage is not None
    assert result.usage.input_tokens == 0
    assert result.usage.output_tokens == len(result.summary.split()) == 5
    assert result.statistics == {"bytes": 8}
