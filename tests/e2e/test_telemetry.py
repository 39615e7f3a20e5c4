"""What the app's telemetry shows of one request, as Application Insights would receive it.

One request goes in over HTTP with a caller's ``traceparent`` (and its function key in the
URL, as ``?code=``, the way a careless caller sends it); once it has completed, everything
the worker exported is read back from the ingestion endpoint the stack fixture runs
(``Stack.telemetry``). Names come from ``shared.telemetry``.

The request's operation is found through its ``intake`` span (``inferbus.request_id``), so
that each test checks one fact: whether that operation is the caller's trace is a test of
its own.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from devtools.appinsights import IngestionRecorder, MetricPoint, Span
from local_processes import ACCOUNT_KEY
from shared import telemetry
from tests.e2e.conftest import Stack
from tests.e2e.test_journeys import poll, tenant

pytestmark = pytest.mark.e2e

QUEUE = "inference-requests"
MODEL = "local-analyzer"
SPAN_TIMEOUT_S = 30.0
METRIC_TIMEOUT_S = 30.0  # OTEL_METRIC_EXPORT_INTERVAL is 5 s in the e2e settings


@dataclass(frozen=True)
class Journey:
    trace_id: str
    caller_span_id: str
    request_id: str
    tenant: str
    text: str
    marker: str


@pytest.fixture(scope="module")
def journey(stack: Stack) -> Journey:
    """One request, submitted with a caller traceparent and ``?code=``, run to completion."""
    trace_id, caller_span_id = secrets.token_hex(16), secrets.token_hex(8)
    marker = f"Zebracorn{uuid.uuid4().hex[:12]}"
    text = f"Invoice 12. {marker} owes 90 EUR. Total amount due within 14 days."
    who = tenant()
    status, _, raw = stack.request(
        "POST",
        f"/api/v1/requests?code={stack.key}",
        {"model": MODEL, "input": {"text": text}},
        {"X-Tenant-Id": who, "traceparent": f"00-{trace_id}-{caller_span_id}-01"},
        key=None,
    )
    assert status == 202, raw
    request_id = str(json.loads(raw)["id"])
    assert poll(stack, who, request_id)["status"] == "completed"
    return Journey(trace_id, caller_span_id, request_id, who, text, marker)


def intake_span(recorder: IngestionRecorder, journey: Journey) -> Span:
    """The request's ``intake`` span (it names the request id)."""

    def found() -> list[Span]:
        return [
            span
            for span in recorder.spans()
            if span.name == telemetry.SPAN_INTAKE
            and span.properties.get("inferbus.request_id") == journey.request_id
        ]

    try:
        return recorder.wait_for(found, SPAN_TIMEOUT_S)[0]
    except TimeoutError:
        seen = sorted({span.name for span in recorder.spans_of(journey.trace_id)})
        raise AssertionError(
            f"no '{telemetry.SPAN_INTAKE}' span with inferbus.request_id={journey.request_id} "
            f"after {SPAN_TIMEOUT_S:.0f}s; the caller's operation {journey.trace_id} has {seen}"
        ) from None


def spans_named(recorder: IngestionRecorder, journey: Journey) -> dict[str, Span]:
    """The spans of the request's operation once the app's own have all arrived, by name."""
    operation = intake_span(recorder, journey).operation_id

    def arrived() -> dict[str, Span]:
        spans = {span.name: span for span in recorder.spans_of(operation)}
        wanted = {
            telemetry.SPAN_INTAKE,
            f"{telemetry.SPAN_SEND} {QUEUE}",
            f"{telemetry.SPAN_PROCESS} {QUEUE}",
            f"{telemetry.SPAN_CHAT} {MODEL}",
            telemetry.SPAN_STORE_RESULT,
        }
        published = any(name.startswith(f"{telemetry.SPAN_PUBLISH} ") for name in spans)
        return spans if wanted <= set(spans) and published else {}

    try:
        return recorder.wait_for(arrived, SPAN_TIMEOUT_S)
    except TimeoutError:
        seen = sorted({span.name for span in recorder.spans_of(operation)})
        raise AssertionError(
            f"operation {operation} lacks app spans after {SPAN_TIMEOUT_S:.0f}s; it has {seen}"
        ) from None


def by_id(recorder: IngestionRecorder, operation_id: str) -> dict[str, Span]:
    return {span.id: span for span in recorder.spans_of(operation_id)}


def ancestors(span: Span, by_id: dict[str, Span]) -> list[Span]:
    """The span's parents within its operation, nearest first."""
    chain: list[Span] = []
    parent = by_id.get(span.parent_id or "")
    while parent is not None and parent not in chain:
        chain.append(parent)
        parent = by_id.get(parent.parent_id or "")
    return chain


def test_the_workers_telemetry_reaches_the_ingestion_endpoint(
    stack: Stack, journey: Journey
) -> None:
    """The pipe itself: the worker configured Azure Monitor, and what it exported under
    this request's operation (its own log lines, the SDKs' spans) arrived here."""
    recorder = stack.telemetry
    recorder.wait_for(
        lambda: [
            item
            for item in [*recorder.logs(), *recorder.spans()]
            if getattr(item, "operation_id", None) == journey.trace_id
        ],
        SPAN_TIMEOUT_S,
    )
    assert all(envelope["iKey"] for envelope in recorder.envelopes())


def test_the_request_continues_the_callers_trace(stack: Stack, journey: Journey) -> None:
    """The operation id is the trace id of the caller's traceparent (which is the job's
    correlation id), and intake is a child of the caller's span."""
    intake = intake_span(stack.telemetry, journey)
    assert (intake.operation_id, intake.parent_id) == (journey.trace_id, journey.caller_span_id)


def test_intake_sends_the_request_message_in_the_same_operation(
    stack: Stack, journey: Journey
) -> None:
    spans = spans_named(stack.telemetry, journey)
    intake = spans[telemetry.SPAN_INTAKE]
    assert intake.kind == "dependency"
    assert intake.type == "InProc"
    assert intake.success is True
    send = spans[f"{telemetry.SPAN_SEND} {QUEUE}"]
    assert send.kind == "dependency"
    assert (send.type or "").startswith("Queue Message")  # an OpenTelemetry PRODUCER span
    assert intake in ancestors(send, by_id(stack.telemetry, intake.operation_id))


def test_the_consumer_continues_the_producer_across_the_queue(
    stack: Stack, journey: Journey
) -> None:
    spans = spans_named(stack.telemetry, journey)
    intake = spans[telemetry.SPAN_INTAKE]
    process = spans[f"{telemetry.SPAN_PROCESS} {QUEUE}"]
    assert process.kind == "request"  # an OpenTelemetry CONSUMER span
    assert process.success is True
    producer_side = {intake.id, spans[f"{telemetry.SPAN_SEND} {QUEUE}"].id}
    parents = {span.id for span in ancestors(process, by_id(stack.telemetry, intake.operation_id))}
    linked = {link.id for link in process.links if link.operation_id == intake.operation_id}
    assert producer_side & (parents | linked), (
        f"process span's parent {process.parent_id} and links {process.links} "
        f"do not lead to the intake/send spans {producer_side}"
    )


def test_the_model_call_result_and_announcement_are_children_of_the_processing(
    stack: Stack, journey: Journey
) -> None:
    spans = spans_named(stack.telemetry, journey)
    operation = by_id(stack.telemetry, spans[telemetry.SPAN_INTAKE].operation_id)
    process = spans[f"{telemetry.SPAN_PROCESS} {QUEUE}"]
    chat = spans[f"{telemetry.SPAN_CHAT} {MODEL}"]
    assert chat.kind == "dependency"
    assert (chat.type or "").startswith("GenAI | ")  # gen_ai.system names the service
    assert chat.properties.get("gen_ai.request.model") == MODEL
    assert chat.properties.get("gen_ai.operation.name") == "chat"
    assert "gen_ai.usage.input_tokens" in chat.properties
    store = spans[telemetry.SPAN_STORE_RESULT]
    (publish,) = [s for name, s in spans.items() if name.startswith(f"{telemetry.SPAN_PUBLISH} ")]
    assert publish.name == f"{telemetry.SPAN_PUBLISH} com.inferbus.InferenceCompleted"
    for child in (chat, store, publish):
        assert process in ancestors(child, operation), f"{child.name} is not under {process.name}"


def wait_for_point(
    recorder: IngestionRecorder, name: str, matches: Callable[[MetricPoint], bool]
) -> MetricPoint:
    def found() -> list[MetricPoint]:
        return [p for p in recorder.metrics() if p.name == name and matches(p)]

    try:
        return recorder.wait_for(found, METRIC_TIMEOUT_S)[0]
    except TimeoutError:
        seen = [p.dimensions for p in recorder.metrics() if p.name == name]
        raise AssertionError(f"no {name} point as expected; its points: {seen[:5]}") from None


def test_the_metrics_carry_their_dimensions(stack: Stack, journey: Journey) -> None:
    recorder = stack.telemetry
    accepted = wait_for_point(
        recorder,
        telemetry.REQUESTS_ACCEPTED,
        lambda p: p.dimensions.get("gen_ai.request.model") == MODEL,
    )
    assert {"inferbus.door", "inferbus.priority"} <= set(accepted.dimensions)
    settled = wait_for_point(
        recorder,
        telemetry.MESSAGES_SETTLED,
        lambda p: p.dimensions.get("inferbus.outcome") == "completed",
    )
    assert "inferbus.lane" in settled.dimensions
    duration = wait_for_point(
        recorder,
        telemetry.MODEL_DURATION,
        lambda p: p.dimensions.get("gen_ai.request.model") == MODEL,
    )
    assert duration.dimensions.get("gen_ai.operation.name") == "chat"
    assert "gen_ai.system" in duration.dimensions
    assert duration.count is not None
    tokens = wait_for_point(
        recorder,
        telemetry.TOKEN_USAGE,
        lambda p: p.dimensions.get("inferbus.tenant") == journey.tenant,
    )
    assert tokens.dimensions.get("gen_ai.token.type") in ("input", "output")
    gauge = next(iter(telemetry.QUEUE_GAUGES))
    queue_point = wait_for_point(
        recorder, gauge, lambda p: "messaging.destination.name" in p.dimensions
    )
    assert queue_point.dimensions["messaging.destination.name"]


def test_log_records_carry_the_request_id(stack: Stack, journey: Journey) -> None:
    recorder = stack.telemetry

    def carrying() -> list[Any]:
        return [
            record
            for record in recorder.logs()
            if record.dimensions.get("inferbus.request_id") == journey.request_id
        ]

    operation = intake_span(recorder, journey).operation_id
    try:
        records = recorder.wait_for(carrying, SPAN_TIMEOUT_S)
    except TimeoutError:
        ours = [
            (r.message, {k: v for k, v in r.dimensions.items() if k.startswith("inferbus.")})
            for r in recorder.logs()
            if r.operation_id == operation
        ]
        raise AssertionError(
            f"no log record with inferbus.request_id={journey.request_id}; the log records "
            f"of its operation {operation}: {ours[:10]}"
        ) from None
    for record in records:
        assert record.operation_id == operation
        assert record.dimensions.get("inferbus.correlation_id") in (None, operation)
        assert record.dimensions.get("inferbus.tenant_id") in (None, journey.tenant)


def test_no_secret_and_no_input_text_is_exported(stack: Stack, journey: Journey) -> None:
    recorder = stack.telemetry
    spans_named(recorder, journey)  # everything of the journey has arrived
    time.sleep(1.5)  # and the batches exported right after it
    exported = "\n".join(json.dumps(envelope) for envelope in recorder.envelopes())
    forbidden = {
        "the function key": stack.key,
        "a key in a URL (?code=)": "code=",
        "the storage account key": ACCOUNT_KEY,
        "a storage connection string": "AccountKey=",
        "a Service Bus key": "SharedAccessKey=",
        "a SAS signature": "sig=",
        "the Event Grid key": stack.eventgrid_key,
        "the input text": journey.text,
        "a word of the input text": journey.marker,
    }
    leaked = [what for what, value in forbidden.items() if value and value in exported]
    assert not leaked, f"exported telemetry contains {leaked}"
