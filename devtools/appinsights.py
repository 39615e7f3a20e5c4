"""A local Application Insights ingestion endpoint: what the Azure Monitor exporter posts to.

``configure_azure_monitor`` (called by the Functions Python worker runtime when
``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY`` is true) exports through
``azure-monitor-opentelemetry-exporter``, which POSTs a JSON array of envelopes to
``<IngestionEndpoint>/v2.1/track`` and expects ``200 {"itemsReceived": n, "itemsAccepted": n,
"errors": []}`` (``206`` with per-item ``errors`` for a partial accept). Any other answer
makes it retry, or park the batch on disk, so this server answers like the service.
Envelopes are kept in memory and parsed into typed records: spans (``RequestData``: SERVER
and CONSUMER spans; ``RemoteDependencyData``: CLIENT, PRODUCER and INTERNAL spans), metric
points (``MetricData``), log records (``MessageData``) and exceptions (``ExceptionData``).

The connection string also names this server as ``LiveEndpoint``: live metrics (on by
default in the distro) then ping here, and are told nobody is watching
(``x-ms-qps-subscribed: false``), instead of calling Microsoft's service from a laptop.

``python -m devtools.appinsights [--port N]`` runs it alone and prints one line per item;
``python -m devtools.stack --telemetry`` runs it for the app (see docs/local-stack.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TextIO, TypeVar

ZERO_INSTRUMENTATION_KEY = "00000000-0000-0000-0000-000000000000"
TRACK_PATHS = ("/v2.1/track", "/v2/track")  # the exporter's api version is v2.1
LIVE_METRICS_PATHS = ("/QuickPulseService.svc/ping", "/QuickPulseService.svc/post")
LINKS_PROPERTY = "_MS.links"  # span links: JSON [{"operation_Id": trace id, "id": span id}]
MAX_BODY_BYTES = 64 * 1024 * 1024

T = TypeVar("T")

# --- records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SpanLink:
    operation_id: str
    id: str


@dataclass(frozen=True)
class Span:
    """One span. ``kind`` is the envelope type: ``request`` (RequestData, an OpenTelemetry
    SERVER or CONSUMER span) or ``dependency`` (RemoteDependencyData: CLIENT, PRODUCER or
    INTERNAL; ``type`` then tells which: ``InProc``, ``Queue Message``, ``HTTP``,
    ``GenAI | <system>``...)."""

    name: str
    kind: Literal["request", "dependency"]
    operation_id: str
    id: str
    parent_id: str | None
    links: tuple[SpanLink, ...]
    properties: Mapping[str, str]
    success: bool | None
    duration: timedelta | None
    type: str | None
    target: str | None
    result_code: str | None
    time: datetime | None
    envelope: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class MetricPoint:
    """One metric data point: ``value`` is the sum for a histogram (``count`` values)."""

    name: str
    value: float
    count: int | None
    min: float | None
    max: float | None
    dimensions: Mapping[str, str]
    time: datetime | None
    envelope: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class _Logged:
    """What a log record and an exception share (keyword arguments, after their own)."""

    severity: str | None  # Verbose, Information, Warning, Error, Critical
    dimensions: Mapping[str, str]
    operation_id: str | None
    parent_id: str | None
    time: datetime | None
    envelope: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class LogRecord(_Logged):
    message: str


@dataclass(frozen=True)
class ExceptionRecord(_Logged):
    type_name: str
    message: str
    stack: str | None


Item = Span | MetricPoint | LogRecord | ExceptionRecord

# --- parsing ----------------------------------------------------------------------------

_DURATION = re.compile(r"(?:(\d+)\.)?(\d+):(\d{2}):(\d{2})(?:\.(\d+))?")


def parse_duration(text: object) -> timedelta | None:
    """The service's ``d.hh:mm:ss.fff`` duration."""
    match = _DURATION.fullmatch(str(text or "").strip())
    if not match:
        return None
    days, hours, minutes, seconds, fraction = match.groups()
    return timedelta(
        days=int(days or 0),
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=int(((fraction or "") + "000000")[:6]),
    )


def _time(envelope: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(envelope.get("time")))
    except ValueError:
        return None


SEVERITIES = ("Verbose", "Information", "Warning", "Error", "Critical")


def _severity(value: object) -> str | None:
    """The exporter sends the level as its number (0-4); the schema also allows the name."""
    if isinstance(value, int) and 0 <= value < len(SEVERITIES):
        return SEVERITIES[value]
    return None if value is None else str(value)


def _strings(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _links(properties: Mapping[str, str]) -> tuple[SpanLink, ...]:
    try:
        raw = json.loads(properties.get(LINKS_PROPERTY, "[]"))
    except ValueError:
        return ()
    return tuple(
        SpanLink(str(link.get("operation_Id", "")), str(link.get("id", "")))
        for link in raw
        if isinstance(link, dict)
    )


def parse_envelope(envelope: Mapping[str, Any]) -> list[Item]:
    """The typed records of one envelope (several for a MetricData with several points;
    none for a type this recorder does not parse, such as EventData)."""
    data = envelope.get("data") or {}
    base_type = data.get("baseType")
    base = data.get("baseData") or {}
    tags = _strings(envelope.get("tags"))
    operation_id = tags.get("ai.operation.id")
    parent_id = tags.get("ai.operation.parentId")
    properties = _strings(base.get("properties"))
    when = _time(envelope)
    if base_type in ("RequestData", "RemoteDependencyData"):
        request = base_type == "RequestData"
        return [
            Span(
                name=str(base.get("name") or tags.get("ai.operation.name") or ""),
                kind="request" if request else "dependency",
                operation_id=operation_id or "",
                id=str(base.get("id") or ""),
                parent_id=parent_id,
                links=_links(properties),
                properties=properties,
                success=base.get("success"),
                duration=parse_duration(base.get("duration")),
                type=None if request else base.get("type"),
                target=base.get("source") if request else base.get("target"),
                result_code=base.get("responseCode" if request else "resultCode"),
                time=when,
                envelope=envelope,
            )
        ]
    if base_type == "MetricData":
        return [
            MetricPoint(
                name=str(point.get("name", "")),
                value=float(point.get("value", 0)),
                count=point.get("count"),
                min=point.get("min"),
                max=point.get("max"),
                dimensions=properties,
                time=when,
                envelope=envelope,
            )
            for point in base.get("metrics") or []
            if isinstance(point, dict)
        ]
    if base_type not in ("MessageData", "ExceptionData"):
        return []
    logged: dict[str, Any] = {
        "severity": _severity(base.get("severityLevel")),
        "dimensions": properties,
        "operation_id": operation_id,
        "parent_id": parent_id,
        "time": when,
        "envelope": envelope,
    }
    if base_type == "MessageData":
        return [LogRecord(message=str(base.get("message", "")), **logged)]
    first = (base.get("exceptions") or [{}])[0]
    return [
        ExceptionRecord(
            type_name=str(first.get("typeName", "")),
            message=str(first.get("message", "")),
            stack=first.get("stack"),
            **logged,
        )
    ]


def _problem(envelope: object) -> str | None:
    """Why the service would refuse this item (400), or None."""
    if not isinstance(envelope, dict):
        return "an item is not a JSON object"
    for name in ("name", "time", "iKey"):
        if not isinstance(envelope.get(name), str) or not envelope[name]:
            return f"Field '{name}' on type 'Envelope' is required but missing or empty"
    data = envelope.get("data")
    if data is not None and not isinstance(data, dict):
        return "Field 'data' on type 'Envelope' must be an object"
    return None


def _decode(body: bytes, encoding: str) -> list[Any]:
    """The envelopes of a track body: gzip or deflate or plain; a JSON array, one object,
    or one object per line (``application/x-json-stream``)."""
    if "gzip" in encoding or body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    elif "deflate" in encoding:
        body = zlib.decompress(body)
    text = body.decode("utf-8").strip()
    if not text:
        return []
    try:
        document = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return document if isinstance(document, list) else [document]


# --- the server -------------------------------------------------------------------------


class IngestionRecorder:
    """An ingestion endpoint on ``host:port`` (0: a free port), recording in memory.

    ``on_items`` (optional) is called with each batch's records, from the request thread.
    Use as a context manager, or ``start()``/``stop()``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        on_items: Callable[[Sequence[Item]], None] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._envelopes: list[dict[str, Any]] = []
        self._items: list[Item] = []
        self._on_items = on_items
        self.batches = 0  # track requests answered
        self.gzip_batches = 0
        self.live_metrics_pings = 0
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # lifecycle

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}/"

    @property
    def connection_string(self) -> str:
        """What ``APPLICATIONINSIGHTS_CONNECTION_STRING`` must say to export here."""
        return (
            f"InstrumentationKey={ZERO_INSTRUMENTATION_KEY};"
            f"IngestionEndpoint={self.endpoint};LiveEndpoint={self.endpoint}"
        )

    def start(self) -> IngestionRecorder:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name="appinsights-ingestion",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> IngestionRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # recording (called by the handler)

    def record(self, envelopes: Sequence[dict[str, Any]], gzipped: bool = False) -> None:
        items = [item for envelope in envelopes for item in parse_envelope(envelope)]
        with self._changed:
            self._envelopes.extend(envelopes)
            self._items.extend(items)
            self.batches += 1
            self.gzip_batches += int(gzipped)
            self._changed.notify_all()
        if self._on_items is not None and items:
            self._on_items(items)

    def count_live_metrics_call(self) -> None:
        with self._lock:
            self.live_metrics_pings += 1

    # reading

    def envelopes(self) -> list[dict[str, Any]]:
        """Every envelope received, as posted (JSON objects)."""
        with self._lock:
            return list(self._envelopes)

    def items(self) -> list[Item]:
        with self._lock:
            return list(self._items)

    def spans(self) -> list[Span]:
        return [item for item in self.items() if isinstance(item, Span)]

    def metrics(self) -> list[MetricPoint]:
        return [item for item in self.items() if isinstance(item, MetricPoint)]

    def logs(self) -> list[LogRecord]:
        return [item for item in self.items() if isinstance(item, LogRecord)]

    def exceptions(self) -> list[ExceptionRecord]:
        return [item for item in self.items() if isinstance(item, ExceptionRecord)]

    def spans_of(self, operation_id: str) -> list[Span]:
        """The spans of one operation (trace id), oldest first."""
        found = [span for span in self.spans() if span.operation_id == operation_id]
        return sorted(found, key=lambda span: span.time.timestamp() if span.time else 0.0)

    def clear(self) -> None:
        with self._lock:
            self._envelopes.clear()
            self._items.clear()

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0) -> T:
        """Until ``predicate()`` is truthy (re-checked on each batch); returns its value.
        Raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = predicate()
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"telemetry condition not met within {timeout:.0f}s")
                self._changed.wait(min(remaining, 1.0))

    def wait_for_spans(
        self, operation_id: str, names: Iterable[str], timeout: float = 30.0
    ) -> list[Span]:
        """The operation's spans once every name in ``names`` is among them."""
        wanted = set(names)

        def arrived() -> list[Span]:
            spans = self.spans_of(operation_id)
            return spans if wanted <= {span.name for span in spans} else []

        try:
            return self.wait_for(arrived, timeout)
        except TimeoutError:
            seen = sorted({span.name for span in self.spans_of(operation_id)})
            missing = sorted(wanted - set(seen))
            raise TimeoutError(
                f"operation {operation_id}: no span named {missing} within {timeout:.0f}s "
                f"(it has {seen})"
            ) from None


def _handler_for(recorder: IngestionRecorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "inferbus-appinsights"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the exporter posts every few hundred milliseconds."""

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            body = self._body()
            if path.endswith(LIVE_METRICS_PATHS):
                recorder.count_live_metrics_call()
                self._answer(HTTPStatus.OK, b"", {"x-ms-qps-subscribed": "false"})
            elif path.endswith(TRACK_PATHS):
                self._track(body)
            else:
                self._answer(HTTPStatus.NOT_FOUND, b"")

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] in ("/", "/health"):
                summary = {"status": "ok", "envelopes": len(recorder.envelopes())}
                self._answer(HTTPStatus.OK, json.dumps(summary).encode())
            else:
                self._answer(HTTPStatus.NOT_FOUND, b"")

        def _track(self, body: bytes) -> None:
            encoding = self.headers.get("Content-Encoding", "").lower()
            try:
                envelopes = _decode(body, encoding)
            except (OSError, ValueError, zlib.error) as error:
                problem = {"index": 0, "statusCode": 400, "message": f"invalid body: {error}"}
                self._json(HTTPStatus.BAD_REQUEST, 0, 0, [problem])
                return
            errors: list[dict[str, Any]] = []
            accepted: list[dict[str, Any]] = []
            for index, envelope in enumerate(envelopes):
                reason = _problem(envelope)
                if reason:
                    errors.append({"index": index, "statusCode": 400, "message": reason})
                else:
                    accepted.append(envelope)
            gzipped = "gzip" in encoding or body[:2] == b"\x1f\x8b"
            recorder.record(accepted, gzipped=gzipped)
            if not errors:
                status = HTTPStatus.OK
            elif accepted:
                status = HTTPStatus.PARTIAL_CONTENT
            else:
                status = HTTPStatus.BAD_REQUEST
            self._json(status, len(envelopes), len(accepted), errors)

        def _body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(min(length, MAX_BODY_BYTES))

        def _json(
            self, status: HTTPStatus, received: int, accepted: int, errors: list[dict[str, Any]]
        ) -> None:
            document = {"itemsReceived": received, "itemsAccepted": accepted, "errors": errors}
            self._answer(status, json.dumps(document).encode(), json_body=True)

        def _answer(
            self,
            status: HTTPStatus,
            body: bytes,
            headers: Mapping[str, str] | None = None,
            *,
            json_body: bool = False,
        ) -> None:
            self.send_response(status)
            if json_body or body:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


# --- printing ---------------------------------------------------------------------------

_QUIET_PREFIXES = ("_MS.", "code.")
_EXPORTER_LOGGERS = "azure.monitor.opentelemetry"


def is_bookkeeping(item: Item) -> bool:
    """What Azure Monitor adds on its own: the resource point (``_OTELRESOURCE_``),
    performance counters (``\\Processor(_Total)\\...``), the standard metrics it derives
    from spans (``_MS.MetricId``) and the exporter's own log lines ("Transmission
    succeeded..."). Recorded like the rest; not printed."""
    if isinstance(item, MetricPoint):
        return (
            item.name == "_OTELRESOURCE_"
            or item.name.startswith("\\")
            or "_MS.MetricId" in item.dimensions
        )
    if isinstance(item, LogRecord):
        return item.dimensions.get("logger_name", "").startswith(_EXPORTER_LOGGERS)
    return False


def _dimensions(values: Mapping[str, str], limit: int = 8) -> str:
    shown = [f"{k}={v[:60]}" for k, v in values.items() if not k.startswith(_QUIET_PREFIXES)]
    more = f", +{len(shown) - limit}" if len(shown) > limit else ""
    return "{" + ", ".join(shown[:limit]) + more + "}" if shown else ""


def _ms(duration: timedelta | None) -> str:
    return f"{duration.total_seconds() * 1000:.0f}ms" if duration is not None else "?ms"


def format_item(item: Item) -> str:
    """One compact line for a record."""
    if isinstance(item, Span):
        kind = item.kind if item.kind == "request" else f"dependency[{item.type or '?'}]"
        outcome = "ok" if item.success else "FAILED"
        links = f" links={','.join(link.id for link in item.links)}" if item.links else ""
        return (
            f"span {kind} '{item.name}' {_ms(item.duration)} {outcome} "
            f"op={item.operation_id} id={item.id} parent={item.parent_id or '-'}{links} "
            f"{_dimensions(item.properties)}"
        ).rstrip()
    if isinstance(item, MetricPoint):
        count = f" (count {item.count})" if item.count not in (None, 1) else ""
        return f"metric {item.name} = {item.value:g}{count} {_dimensions(item.dimensions)}".rstrip()
    if isinstance(item, LogRecord):
        message = item.message.replace("\n", " ")[:200]
        return (
            f"log {item.severity or '-'} {message!r} op={item.operation_id or '-'} "
            f"{_dimensions(item.dimensions)}"
        ).rstrip()
    message = item.message.replace("\n", " ")[:200]
    return f"exception {item.type_name}: {message} op={item.operation_id or '-'}"


class LinePrinter:
    """``on_items`` for the recorder: one ``telemetry:`` line per record on ``stream``
    (stdout by default), leaving out Azure Monitor's bookkeeping (``is_bookkeeping``).
    Metrics named in ``unless_changed`` (gauges, collected at every export) are printed
    only when a value differs from the last one printed for the same dimensions."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        prefix: str = "telemetry",
        unless_changed: Iterable[str] = (),
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._unless_changed = frozenset(unless_changed)
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()

    def _unchanged(self, item: Item) -> bool:
        if not isinstance(item, MetricPoint) or item.name not in self._unless_changed:
            return False
        key = (item.name, tuple(sorted(item.dimensions.items())))
        unchanged = self._last.get(key) == item.value
        self._last[key] = item.value
        return unchanged

    def __call__(self, items: Sequence[Item]) -> None:
        with self._lock:
            lines = [
                format_item(item)
                for item in items
                if not is_bookkeeping(item) and not self._unchanged(item)
            ]
            if not lines:
                return
            stream = self._stream or sys.stdout
            for line in lines:
                stream.write(f"{self._prefix}: {line}\n")
            stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.appinsights", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # also when started with SIGINT ignored
        signal.signal(signum, lambda *_: stop.set())
    with IngestionRecorder(port=args.port, on_items=LinePrinter()) as recorder:
        print(f"APPLICATIONINSIGHTS_CONNECTION_STRING={recorder.connection_string}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
