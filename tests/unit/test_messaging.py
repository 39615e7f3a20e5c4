"""The request message contract, and the real Service Bus adapter's message construction."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from shared.adapters.servicebus import to_servicebus_message
from shared.contracts import ClaimCheck, Priority, RequestMessage
from shared.messaging import request_envelope
from shared.tracing import continue_or_start

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
CALLER_TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def request() -> RequestMessage:
    return RequestMessage(
        request_id="r-1",
        tenant_id="t-1",
        model="local-analyzer",
        input=ClaimCheck(
            blob_uri="https://a/inputs/t-1/r-1", sha256="0" * 64, size=3, media_type="text/plain"
        ),
        priority=Priority.HIGH,
        deadline=NOW + timedelta(minutes=10),
        metadata={"document_type": "invoice"},
    )


def test_the_envelope_follows_the_contract() -> None:
    trace = continue_or_start(CALLER_TRACE, "vendor=1")
    envelope = request_envelope(request(), correlation_id="corr", trace=trace, now=NOW)

    assert envelope.message_id == "r-1"
    assert envelope.correlation_id == "corr"
    assert envelope.content_type == "application/json"
    assert envelope.time_to_live == timedelta(minutes=10)
    assert envelope.application_properties == {
        "priority": "high",
        "model_name": "local-analyzer",
        "tenant": "t-1",
        "retry_count": 0,
        "traceparent": trace.traceparent,
        "Diagnostic-Id": trace.traceparent,
        "tracestate": "vendor=1",
        "schema_version": "inferbus.request/v1",
        "document_type": "invoice",
    }
    body = json.loads(envelope.body)
    assert body["schema"] == "inferbus.request/v1"
    assert RequestMessage.model_validate(body) == request()


def test_a_deadline_already_passed_still_gets_a_positive_ttl() -> None:
    envelope = request_envelope(
        request(), correlation_id="c", trace=continue_or_start(None), now=NOW + timedelta(hours=1)
    )
    assert envelope.time_to_live == timedelta(seconds=1)


def test_the_caller_trace_is_continued_with_a_new_span() -> None:
    trace = continue_or_start(CALLER_TRACE)
    assert trace.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace.traceparent != CALLER_TRACE
    assert continue_or_start("garbage").trace_id != trace.trace_id
    assert continue_or_start("00-" + "0" * 32 + "-00f067aa0ba902b7-01").trace_id != "0" * 32


def test_the_adapter_sets_every_system_and_application_property() -> None:
    envelope = request_envelope(
        request(), correlation_id="corr", trace=continue_or_start(None), now=NOW
    )
    message = to_servicebus_message(envelope)

    assert message.message_id == "r-1"
    assert message.correlation_id == "corr"
    assert message.content_type == "application/json"
    assert message.subject == "inferbus.request"
    assert message.time_to_live == timedelta(minutes=10)
    assert message.session_id is None
    assert message.application_properties is not None
    assert message.application_properties["priority"] == "high"
    assert message.application_properties["retry_count"] == 0
    assert b"".join(message.body) == envelope.body
