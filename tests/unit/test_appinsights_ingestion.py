"""The local ingestion endpoint (devtools.appinsights) against the real Azure Monitor exporter.

Providers are local to each test (never the global ones), and the exporters are told not to
reach Microsoft's services (statsbeat, the OneSettings control plane, SDK stats) nor to
keep failed batches on disk, so nothing outlives a test.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from azure.monitor.opentelemetry.exporter import (
    AzureMonitorLogExporter,
    AzureMonitorMetricExporter,
    AzureMonitorTraceExporter,
)
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExportResult,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from devtools.appinsights import (
    IngestionRecorder,
    LinePrinter,
    LogRecord,
    MetricPoint,
    Span,
    format_item,
    parse_duration,
)
from devtools.stack import local_telemetry_settings, telemetry_destination

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[IngestionRecorder]:
    for name in (
        "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL",
        "APPLICATIONINSIGHTS_CONTROLPLANE_DISABLED",
        "APPLICATIONINSIGHTS_SDKSTATS_DISABLED",
    ):
        monkeypatch.setenv(name, "true")
    monkeypatch.delenv("APPLICATIONINSIGHTS_CONNECTION_STRING", raising=False)
    with IngestionRecorder() as running:
        yield running


def export(recorder: IngestionRecorder, exporter_type: Any, batch: Any, **options: Any) -> Any:
    """Export one batch to the recorder with a fresh exporter; the exporter's result
    (SUCCESS: it took the answer as the service's: no retry, nothing stored)."""
    exporter = exporter_type(
        connection_string=recorder.connection_string, disable_offline_storage=True, **options
    )
    try:
        return exporter.export(batch)
    finally:
        exporter.shutdown()


def test_spans_arrive_with_their_operation_parent_links_and_properties(
    recorder: IngestionRecorder,
) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("inferbus")
    caller = TraceContextTextMapPropagator().extract(
        {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    )
    with (
        tracer.start_as_current_span("intake", context=caller) as intake,
        tracer.start_as_current_span(
            "send inference-requests",
            kind=SpanKind.PRODUCER,
            attributes={"messaging.system": "servicebus", "inferbus.request_id": "r-1"},
        ),
    ):
        pass
    with (
        tracer.start_as_current_span(
            "process inference-requests",
            context=caller,
            kind=SpanKind.CONSUMER,
            links=[Link(intake.get_span_context())],
        ) as process,
        tracer.start_as_current_span(
            "chat local-analyzer",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.system": "local", "gen_ai.request.model": "local-analyzer"},
        ) as chat,
    ):
        chat.set_status(Status(StatusCode.ERROR, "refused"))
    spans_sent = memory.get_finished_spans()
    result = export(recorder, AzureMonitorTraceExporter, spans_sent, tracer_provider=provider)
    assert result == SpanExportResult.SUCCESS

    spans = {span.name: span for span in recorder.spans_of(CALLER_TRACE)}
    assert set(spans) == {
        "intake",
        "send inference-requests",
        "process inference-requests",
        "chat local-analyzer",
    }
    intake_id = f"{intake.get_span_context().span_id:016x}"
    assert spans["intake"].kind == "dependency"
    assert spans["intake"].type == "InProc"
    assert spans["intake"].id == intake_id
    assert spans["intake"].parent_id == CALLER_SPAN
    send = spans["send inference-requests"]
    assert (send.kind, send.parent_id) == ("dependency", intake_id)
    assert send.type == "Queue Message | servicebus"
    assert send.properties["inferbus.request_id"] == "r-1"
    assert "messaging.system" not in send.properties  # the exporter keeps standard ones out
    consumer = spans["process inference-requests"]
    assert consumer.kind == "request"
    assert consumer.id == f"{process.get_span_context().span_id:016x}"
    assert [(link.operation_id, link.id) for link in consumer.links] == [(CALLER_TRACE, intake_id)]
    model = spans["chat local-analyzer"]
    assert (model.kind, model.type, model.success) == ("dependency", "GenAI | local", False)
    assert model.parent_id == consumer.id
    assert model.properties["gen_ai.request.model"] == "local-analyzer"
    assert isinstance(model.duration, timedelta)
    assert all(envelope["iKey"] for envelope in recorder.envelopes())
    # The exporter's own resource point comes with every span batch.
    assert [point.name for point in recorder.metrics()] == ["_OTELRESOURCE_"]
    line = format_item(consumer)
    assert "process inference-requests" in line
    assert f"op={CALLER_TRACE}" in line


def test_metrics_arrive_as_points_with_dimensions(recorder: IngestionRecorder) -> None:
    reader = InMemoryMetricReader(
        preferred_temporality={
            Counter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA,
        }
    )
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("inferbus")
    meter.create_counter("inferbus.requests.accepted").add(
        2, {"inferbus.door": "http", "gen_ai.request.model": "local-analyzer"}
    )
    duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
    for seconds in (0.25, 0.75):
        duration.record(seconds, {"gen_ai.operation.name": "chat"})
    data = reader.get_metrics_data()
    assert data is not None
    assert export(recorder, AzureMonitorMetricExporter, data) == MetricExportResult.SUCCESS
    provider.shutdown()

    points = {point.name: point for point in recorder.metrics()}
    accepted = points["inferbus.requests.accepted"]
    assert accepted.value == 2
    assert accepted.dimensions == {
        "inferbus.door": "http",
        "gen_ai.request.model": "local-analyzer",
    }
    histogram = points["gen_ai.client.operation.duration"]
    assert (histogram.value, histogram.count) == (1.0, 2)
    assert (histogram.min, histogram.max) == (0.25, 0.75)
    assert histogram.dimensions == {"gen_ai.operation.name": "chat"}


def test_log_records_and_exceptions_arrive_with_their_dimensions(
    recorder: IngestionRecorder,
) -> None:
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = logging.getLogger("inferbus.test.appinsights")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    try:
        logger.warning("request settled", extra={"inferbus.request_id": "r-7"})
        try:
            raise ValueError("bad payload")
        except ValueError:
            logger.exception("could not process", extra={"inferbus.message_id": "m-7"})
    finally:
        logger.removeHandler(handler)
    result = export(recorder, AzureMonitorLogExporter, memory.get_finished_logs())
    assert result == LogRecordExportResult.SUCCESS

    recorder.wait_for(lambda: recorder.logs() and recorder.exceptions(), timeout=5)
    (log,) = recorder.logs()
    assert isinstance(log, LogRecord)
    assert (log.message, log.severity) == ("request settled", "Warning")
    assert log.dimensions["inferbus.request_id"] == "r-7"
    (exception,) = recorder.exceptions()
    assert exception.type_name == "ValueError"
    assert exception.severity == "Error"
    assert exception.dimensions["inferbus.message_id"] == "m-7"
    assert exception.stack is not None
    assert "bad payload" in exception.stack


def post(
    recorder: IngestionRecorder, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(  # noqa: S310 (the recorder on loopback)
        recorder.endpoint.rstrip("/") + path, data=body, method="POST", headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def envelope(name: str = "m", **overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ver": 1,
        "name": "Microsoft.ApplicationInsights.Metric",
        "time": "2025-01-01T00:00:00.000000Z",
        "iKey": "00000000-0000-0000-0000-000000000000",
        "tags": {},
        "data": {
            "baseType": "MetricData",
            "baseData": {"ver": 2, "metrics": [{"name": name, "value": 1.5}], "properties": {}},
        },
    }
    item.update(overrides)
    return item


def test_gzip_bodies_and_the_v2_path_are_accepted(recorder: IngestionRecorder) -> None:
    body = gzip.compress(json.dumps([envelope("a"), envelope("b")]).encode())
    status, _, raw = post(
        recorder,
        "/v2/track",
        body,
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert status == 200
    assert json.loads(raw) == {"itemsReceived": 2, "itemsAccepted": 2, "errors": []}
    assert [point.name for point in recorder.metrics()] == ["a", "b"]
    assert recorder.gzip_batches == 1


def test_invalid_items_are_refused_like_the_service(recorder: IngestionRecorder) -> None:
    status, _, raw = post(
        recorder, "/v2.1/track", json.dumps([envelope("good"), envelope(iKey="")]).encode()
    )
    assert status == 206
    answer = json.loads(raw)
    assert (answer["itemsReceived"], answer["itemsAccepted"]) == (2, 1)
    assert [(e["index"], e["statusCode"]) for e in answer["errors"]] == [(1, 400)]
    assert [point.name for point in recorder.metrics()] == ["good"]
    assert post(recorder, "/v2.1/track", b"not json")[0] == 400
    assert post(recorder, "/elsewhere", b"[]")[0] == 404


def test_live_metrics_are_told_nobody_is_watching(recorder: IngestionRecorder) -> None:
    status, headers, _ = post(recorder, "/QuickPulseService.svc/ping?ikey=x", b"{}")
    assert status == 200
    assert headers["x-ms-qps-subscribed"] == "false"
    assert recorder.envelopes() == []
    assert recorder.live_metrics_pings == 1


def test_wait_for_times_out_with_what_was_seen(recorder: IngestionRecorder) -> None:
    with pytest.raises(TimeoutError, match=r"no span named \['intake'\]"):
        recorder.wait_for_spans(CALLER_TRACE, ["intake"], timeout=0.3)


def test_durations_parse_from_the_service_format() -> None:
    assert parse_duration("0.00:00:01.250") == timedelta(seconds=1, milliseconds=250)
    assert parse_duration("2.03:04:05.006") == timedelta(
        days=2, hours=3, minutes=4, seconds=5, milliseconds=6
    )
    assert parse_duration("nonsense") is None


def metric(name: str, value: float, **dimensions: str) -> MetricPoint:
    return MetricPoint(name, value, 1, None, None, dimensions, None, {})


def test_the_printer_shows_the_apps_telemetry_not_azure_monitors_bookkeeping() -> None:
    stream = io.StringIO()
    printer = LinePrinter(stream, unless_changed=["inferbus.queue.active_messages"])
    span = Span(
        "store result", "dependency", "a" * 32, "b" * 16, None, (), {}, True,
        timedelta(milliseconds=3), "InProc", None, "0", None, {},
    )  # fmt: skip
    exporter_log = LogRecord(
        "Transmission succeeded: Item received: 1. Items accepted: 1",
        severity="Information",
        dimensions={"logger_name": "azure.monitor.opentelemetry.exporter.export._base"},
        operation_id=None,
        parent_id=None,
        time=None,
        envelope={},
    )
    printer([span, metric("_OTELRESOURCE_", 0), metric("\\Memory\\Available Bytes", 1e9)])
    printer([metric("http.client.duration", 3, **{"_MS.MetricId": "dependencies/duration"})])
    printer([exporter_log, metric("inferbus.requests.accepted", 1, **{"inferbus.door": "http"})])
    for active in (0, 0, 2):
        printer([metric("inferbus.queue.active_messages", active, queue="q")])
    assert stream.getvalue().splitlines() == [
        f"telemetry: span dependency[InProc] 'store result' 3ms ok op={'a' * 32} id={'b' * 16} "
        "parent=-",
        "telemetry: metric inferbus.requests.accepted = 1 {inferbus.door=http}",
        "telemetry: metric inferbus.queue.active_messages = 0 {queue=q}",
        "telemetry: metric inferbus.queue.active_messages = 2 {queue=q}",
    ]


def test_the_launcher_points_the_worker_at_the_recorder(recorder: IngestionRecorder) -> None:
    settings = local_telemetry_settings(
        recorder.connection_string, {"OTEL_BSP_SCHEDULE_DELAY": "9"}
    )
    assert settings["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] == "true"
    connection = dict(
        part.split("=", 1) for part in settings["APPLICATIONINSIGHTS_CONNECTION_STRING"].split(";")
    )
    assert connection["IngestionEndpoint"] == connection["LiveEndpoint"] == recorder.endpoint
    assert "OTEL_BSP_SCHEDULE_DELAY" not in settings  # what the settings choose stays
    assert settings["OTEL_METRIC_EXPORT_INTERVAL"] == "5000"
    assert settings["APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL"] == "true"


def test_the_banner_says_where_telemetry_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
    ):
        monkeypatch.delenv(name, raising=False)
    switch = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
    assert telemetry_destination({switch: "false"}).startswith("off")
    assert "is empty" in telemetry_destination({switch: "true"})
    real = (
        "InstrumentationKey=11111111-1111-1111-1111-111111111111;"
        "IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/"
    )
    described = telemetry_destination(
        {switch: "true", "APPLICATIONINSIGHTS_CONNECTION_STRING": real}
    )
    assert described == "exported to https://westeurope-5.in.applicationinsights.azure.com/"
    assert "11111111" not in described
