"""What the OpenTelemetry SDK recorded, read back through its in-memory exporters (the
``sdk`` and ``recorded`` fixtures of tests/unit/conftest.py make it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Telemetry:
    """What the SDK recorded since the test began."""

    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished_spans(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def collect(self) -> dict[str, list[Any]]:
        """The data points recorded since the last collection, by metric name."""
        return collected_points(self.reader)


def collected_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """The data points of one collection of ``reader``, by metric name."""
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points
