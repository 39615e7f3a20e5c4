"""The model call as telemetry: the ``chat <model>`` span and the GenAI client metrics that
``results.run_model`` emits, read back through the OpenTelemetry SDK's in-memory exporters."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from shared import telemetry
from shared.adapters.models.local import LocalModel
from shared.contracts import InlineText, RequestMessage, TokenUsage
from shared.errors import InvalidModelOutput, PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.prices import Prices
from shared.inference.served import ServedModel
from shared.results import run_model
from tests.support.catalogs import served
from tests.support.telemetry import Telemetry

TEXT = "Invoice 17. Total amount due: 300 EUR. Payment within 30 days."


@dataclass
class ScriptedModel:
    """Raises the scripted error, else answers with the local analyzer."""

    error: Exception | None = None
    system: str = "inferbus.local"
    calls: list[InferenceInput] = field(default_factory=list)
    answer: ModelAnswer | None = None

    def infer(self, request: InferenceInput) -> ModelAnswer:
        self.calls.append(request)
        if self.error is not None:
            raise self.error
        return self.answer or LocalModel().infer(request)


def request() -> RequestMessage:
    return RequestMessage(
        request_id="r-42",
        tenant_id="contoso",
        model="local-analyzer",
        input=InlineText(text=TEXT),
    )


def run(model: Any, attempt: int = 1) -> Any:
    return run_model(request(), TEXT.encode(), "text/plain", served(model), attempt)


def the_span(recorded: Telemetry) -> ReadableSpan:
    (span,) = recorded.finished_spans()
    assert span.name == "chat local-analyzer"
    assert span.kind is SpanKind.CLIENT
    return span


def test_a_completed_call_is_a_chat_span_with_genai_attributes_and_usage(
    recorded: Telemetry,
) -> None:
    document = run(LocalModel(), attempt=2)

    usage = document.result.usage
    assert usage == TokenUsage(
        input_tokens=len(TEXT.split()),
        output_tokens=len(document.result.summary.split()),
        total_tokens=len(TEXT.split()) + len(document.result.summary.split()),
    )
    span = the_span(recorded)
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "inferbus.local",
        "gen_ai.request.model": "local-analyzer",
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.response.finish_reasons": ("stop",),
        "inferbus.task": "document-analysis",
        "inferbus.provider": "local",
        "inferbus.request_id": "r-42",
        "inferbus.tenant": "contoso",
        "inferbus.attempt": 2,
        "inferbus.outcome": "completed",
    }


def test_a_completed_call_records_its_duration_and_tokens_by_type_and_tenant(
    recorded: Telemetry,
) -> None:
    document = run(LocalModel())
    usage = document.result.usage
    points = recorded.collect()

    (duration,) = points[telemetry.MODEL_DURATION]
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "inferbus.local",
        "gen_ai.request.model": "local-analyzer",
        "inferbus.outcome": "completed",
    }
    assert duration.count == 1
    assert duration.sum >= 0
    tokens = {
        point.attributes["gen_ai.token.type"]: point for point in points[telemetry.TOKEN_USAGE]
    }
    assert set(tokens) == {"input", "output"}
    for token_type, expected in (("input", usage.input_tokens), ("output", usage.output_tokens)):
        point = tokens[token_type]
        assert (point.count, point.sum) == (1, expected)
        assert point.attributes["inferbus.tenant"] == "contoso"
        assert point.attributes["gen_ai.system"] == "inferbus.local"
        assert point.attributes["gen_ai.request.model"] == "local-analyzer"


def test_a_refusal_is_an_outcome_on_the_span_not_an_error(recorded: Telemetry) -> None:
    model = ScriptedModel(PolicyRefusal("filtered", "violence"))

    document = run(model)

    assert document.outcome == "refused"
    assert document.refusal == {"category": "violence", "message": "filtered"}
    span = the_span(recorded)
    assert span.status.status_code is StatusCode.UNSET
    assert span.events == ()  # no exception recorded
    attributes = span.attributes or {}
    assert attributes["inferbus.outcome"] == "refused"
    assert attributes["inferbus.refusal.category"] == "violence"
    assert "gen_ai.usage.input_tokens" not in attributes
    points = recorded.collect()
    (duration,) = points[telemetry.MODEL_DURATION]
    assert duration.attributes["inferbus.outcome"] == "refused"
    assert telemetry.TOKEN_USAGE not in points, "the refusal reported no tokens"


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (TransientError("throttled", retry_after=3), "transient_error"),
        (PermanentError("no such deployment"), "permanent_error"),
        (RuntimeError("a bug"), "unexpected_error"),
    ],
)
def test_a_failed_call_marks_the_span_failed_and_records_its_outcome(
    recorded: Telemetry, error: Exception, outcome: str
) -> None:
    with pytest.raises(type(error)):
        run(ScriptedModel(error))

    span = the_span(recorded)
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert (span.attributes or {})["inferbus.outcome"] == outcome
    points = recorded.collect()
    (duration,) = points[telemetry.MODEL_DURATION]
    assert duration.attributes["inferbus.outcome"] == outcome
    assert telemetry.TOKEN_USAGE not in points, "no tokens without an answer"


def test_an_answer_that_breaks_its_task_is_invalid_output_with_its_tokens_counted(
    recorded: Telemetry,
) -> None:
    spent = TokenUsage(input_tokens=40, output_tokens=9, total_tokens=49)
    model = ScriptedModel(answer=ModelAnswer(content={"summary": "no type"}, usage=spent))

    with pytest.raises(InvalidModelOutput, match=r"result\.document_type"):
        run(model)

    span = the_span(recorded)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["inferbus.outcome"] == "invalid_output"
    points = recorded.collect()
    (duration,) = points[telemetry.MODEL_DURATION]
    assert duration.attributes["inferbus.outcome"] == "invalid_output"
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in points[telemetry.TOKEN_USAGE]}
    assert tokens == {"input": 40, "output": 9}, "the answer's tokens were spent all the same"


def test_the_span_is_a_child_of_the_current_span(recorded: Telemetry) -> None:
    with telemetry.span("process inference-requests") as parent:
        run(LocalModel())

    chat, process = recorded.finished_spans()
    assert chat.parent is not None
    assert chat.parent.span_id == parent.get_span_context().span_id
    assert process.name == "process inference-requests"


def test_a_model_client_without_a_system_is_reported_as_unknown(recorded: Telemetry) -> None:
    class Anonymous:
        def infer(self, request: InferenceInput) -> ModelAnswer:
            return LocalModel().infer(request)

    run(Anonymous())

    assert (the_span(recorded).attributes or {})["gen_ai.system"] == "unknown"


def test_a_priced_answer_records_its_cost_by_tenant_model_and_lane(recorded: Telemetry) -> None:
    prices = Prices("EUR", Decimal("2"), Decimal("10"))
    card = replace(served(LocalModel()).card, prices=prices)
    document = run_model(request(), TEXT.encode(), "text/plain", ServedModel(card, LocalModel()), 1)
    usage, cost = document.usage, document.cost
    assert usage is not None
    assert cost is not None
    expected = (usage.input_tokens * 2 + usage.output_tokens * 10) / 1_000_000
    assert float(cost.amount) == pytest.approx(expected)
    (point,) = recorded.collect()[telemetry.COST]
    assert point.value == pytest.approx(expected)
    assert dict(point.attributes) == {
        "inferbus.tenant": "contoso",
        "gen_ai.request.model": "local-analyzer",
        "inferbus.mode": "queue",
        "inferbus.currency": "EUR",
    }


def test_an_answer_without_prices_records_no_cost(recorded: Telemetry) -> None:
    run(LocalModel())
    assert telemetry.COST not in recorded.collect()
