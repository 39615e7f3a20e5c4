"""The OpenTelemetry SDK for the unit tests that read what the app's telemetry records."""

from __future__ import annotations

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.telemetry import Telemetry


@pytest.fixture(scope="session")
def sdk() -> Telemetry:
    """SDK providers with in-memory exporters, made once per process, here so that every
    test module that reads metrics shares them. The meter provider becomes the global one
    for good (a global provider cannot be replaced, and ``telemetry`` keeps its
    instruments); histograms and counters are collected as deltas, as the Azure Monitor
    exporter collects them, so each collection holds only what was recorded since the one
    before."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    delta = AggregationTemporality.DELTA
    reader = InMemoryMetricReader(preferred_temporality={Histogram: delta, Counter: delta})
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    if metrics.get_meter_provider() is not meter_provider:
        # A reader cannot join a provider after the fact: whatever installed another
        # global MeterProvider first must use this fixture instead.
        pytest.fail("another test installed the global MeterProvider first")
    return Telemetry(tracer_provider, spans, reader)


@pytest.fixture
def recorded(sdk: Telemetry, monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    """The SDK's tracer provider is the global one for this test only (the global that
    OpenTelemetry's own test utilities reset): with an SDK, spans get real ids, and later
    tests in the process expect the trace context they get without one."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", sdk.tracer_provider)
    sdk.spans.clear()
    sdk.reader.get_metrics_data()  # drain what earlier tests recorded
    return sdk
