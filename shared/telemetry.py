"""Telemetry: spans, metrics and log dimensions through the OpenTelemetry API.

One setup path: the Functions Python worker itself configures OpenTelemetry with the
Azure Monitor distro (``azure-monitor-opentelemetry``'s ``configure_azure_monitor``) when
the app setting ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY`` is true, exporting to
``APPLICATIONINSIGHTS_CONNECTION_STRING`` (with ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING``
for Entra ID), and it attaches each invocation's trace context before calling the
function. The app never configures anything: it only uses the API, whose calls are
no-ops until an SDK is installed, so tests and tools without telemetry pay nothing, and
``shared.tracing`` still makes the W3C ids that travel with a request.

Names follow the OpenTelemetry semantic conventions where they exist (messaging spans
``send``/``process <queue>``, GenAI ``chat <model>`` spans and the
``gen_ai.client.*`` metrics); the app's own are under ``inferbus.``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Counter, Observation
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.contracts import Door, Priority
from shared.tracing import TraceContext

INSTRUMENTATION: Final = "inferbus"
_PROPAGATOR = TraceContextTextMapPropagator()

# --- spans ------------------------------------------------------------------------------

SPAN_INTAKE: Final = "intake"  # INTERNAL: one submission through a door
SPAN_SEND: Final = "send"  # PRODUCER "send <queue>": the request message
SPAN_PROCESS: Final = "process"  # CONSUMER "process <queue>": one message of a batch
SPAN_CHAT: Final = "chat"  # CLIENT "chat <model>": the model call (GenAI conventions)
SPAN_STORE_RESULT: Final = "store result"  # INTERNAL: the job write that holds the result
SPAN_PUBLISH: Final = "publish"  # PRODUCER "publish <event type>": the announcement

INTERNAL: Final = SpanKind.INTERNAL
PRODUCER: Final = SpanKind.PRODUCER
CONSUMER: Final = SpanKind.CONSUMER
CLIENT: Final = SpanKind.CLIENT


def _tracer() -> trace.Tracer:
    return trace.get_tracer(INSTRUMENTATION)


def parent_context(traceparent: str | None, tracestate: str | None = None) -> Any:
    """The OpenTelemetry context of a W3C ``traceparent`` (the current one when None)."""
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)


def _link(traceparent: str) -> Link | None:
    span_context = trace.get_current_span(parent_context(traceparent)).get_span_context()
    return Link(span_context) if span_context.is_valid else None


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: str | None = None,
    links: Iterable[str] = (),
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span (current for the block); ``parent`` a traceparent to continue instead of the
    current context, ``links`` traceparents it relates to. An exception marks it failed."""
    linked = [link for link in (_link(t) for t in links if t) if link is not None]
    with _tracer().start_as_current_span(
        name,
        context=parent_context(parent),
        kind=kind,
        links=linked,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        record_exception=True,
        set_status_on_exception=True,
    ) as current:
        yield current


def fail(current: Span, description: str) -> None:
    """Mark ``current`` failed without an exception (an outcome such as a dead letter)."""
    current.set_status(Status(StatusCode.ERROR, description))


def _current_carrier() -> dict[str, str]:
    """The current span's W3C headers; empty when nothing records spans (no SDK)."""
    carrier: dict[str, str] = {}
    if trace.get_current_span().get_span_context().is_valid:
        _PROPAGATOR.inject(carrier)
    return carrier


def current_trace(fallback: TraceContext) -> TraceContext:
    """The current span as a W3C trace context, or ``fallback`` when nothing records spans:
    the ids that travel with a request are then ``shared.tracing``'s."""
    carrier = _current_carrier()
    if "traceparent" not in carrier:
        return fallback
    return TraceContext(carrier["traceparent"], carrier.get("tracestate") or fallback.tracestate)


def current_traceparent() -> str | None:
    """The current span's ``traceparent``, or None when nothing records spans."""
    return _current_carrier().get("traceparent")


@contextmanager
def invocation(traceparent: str | None, tracestate: str | None = None) -> Iterator[None]:
    """Run the block in the context of the Functions invocation (its ``trace_context``).

    The Python worker attaches that context in its event loop, but a synchronous function
    runs on a worker thread that does not inherit it: triggers pass it on with this.
    """
    parent = parent_context(traceparent, tracestate)
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def detached() -> Iterator[None]:
    """Run the block in an empty context (a message's span must not nest in another's)."""
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


# --- metrics ----------------------------------------------------------------------------

REQUESTS_ACCEPTED: Final = "inferbus.requests.accepted"
REQUESTS_REFUSED: Final = "inferbus.requests.refused"
MESSAGES_SETTLED: Final = "inferbus.messages.settled"
MODEL_DURATION: Final = "gen_ai.client.operation.duration"
TOKEN_USAGE: Final = "gen_ai.client.token.usage"  # noqa: S105 (a metric name)
BATCH_ENDED: Final = "inferbus.batch.ended"
BATCH_REQUESTS: Final = "inferbus.batch.requests"
JOBS_RESENT: Final = "inferbus.jobs.resent"
COST: Final = "inferbus.cost"
BUDGET_UTILIZATION: Final = "inferbus.budget.utilization"
# The budgets of the tenant catalog (``shared.accounting.tenants.Budget``), the values of
# ``inferbus.budget``: the alert and the workbook split by them.
BUDGETS: Final = ("tokens_per_day", "tokens_per_month", "cost_per_month")
QUEUE_GAUGES: Final = {
    "inferbus.queue.active_messages": "active_message_count",
    "inferbus.queue.dead_lettered_messages": "dead_letter_message_count",
    "inferbus.queue.scheduled_messages": "scheduled_message_count",
    "inferbus.queue.deferred_messages": "deferred_message_count",
    "inferbus.queue.oldest_message_age": "oldest_message_age_seconds",
}


class _Instruments:
    """The app's instruments, made on first use from the global meter provider."""

    def __init__(self) -> None:
        meter = metrics.get_meter(INSTRUMENTATION)
        self.accepted = meter.create_counter(
            REQUESTS_ACCEPTED, unit="{request}", description="Requests accepted, by door"
        )
        self.refused = meter.create_counter(
            REQUESTS_REFUSED, unit="{request}", description="Requests refused, by door and reason"
        )
        self.settled = meter.create_counter(
            MESSAGES_SETTLED, unit="{message}", description="Request messages, by lane and outcome"
        )
        self.model_duration = meter.create_histogram(
            MODEL_DURATION, unit="s", description="Model call duration"
        )
        self.tokens = meter.create_histogram(
            TOKEN_USAGE, unit="{token}", description="Tokens per model call, by type"
        )
        self.batches_ended = meter.create_counter(
            BATCH_ENDED, unit="{batch}", description="Global Batch batches, by final status"
        )
        self.batch_requests = meter.create_counter(
            BATCH_REQUESTS,
            unit="{request}",
            description="Requests of the Global Batch lane, by tenant and what became of them",
        )
        self.cost = meter.create_counter(
            COST,
            unit="{currency}",
            description="What the answers cost at their models' catalog prices, by tenant",
        )
        # A histogram, not a gauge, though each value is a level. The Azure Monitor
        # exporter collects histograms as deltas and sends each as one customMetrics row
        # per export interval that recorded something, with its valueMax: the highest
        # fraction of the interval, however many checks it held. A synchronous gauge keeps
        # only its last value, and the exporter leaves it cumulative (the SDK's default),
        # under which the SDK sends that value again at every export until the process
        # ends: a past period's 0.9 would hold the alert on.
        self.budget_utilization = meter.create_histogram(
            BUDGET_UTILIZATION,
            unit="1",
            description="Fraction of a tenant's budget used in its period, by tenant and budget",
        )
        self.jobs_resent = meter.create_counter(
            JOBS_RESENT,
            unit="{request}",
            description="Request messages the job watchdog sent again from the job, by lane",
        )


_instruments: _Instruments | None = None
_instruments_lock = threading.Lock()


def instruments() -> _Instruments:
    """The instruments, made once (the lock is taken only until they exist: every
    request counts through here)."""
    global _instruments
    made = _instruments
    if made is not None:
        return made
    with _instruments_lock:
        if _instruments is None:
            _instruments = _Instruments()
        return _instruments


def count_accepted(door: Door, model: str, priority: Priority) -> None:
    instruments().accepted.add(
        1, {"inferbus.door": door, "gen_ai.request.model": model, "inferbus.priority": priority}
    )


def count_refused(door: Door, reason: str) -> None:
    instruments().refused.add(1, {"inferbus.door": door, "inferbus.reason": reason})


def count_settled(lane: str, outcome: str) -> None:
    instruments().settled.add(1, {"inferbus.lane": lane, "inferbus.outcome": outcome})


def count_resent(lane: str) -> None:
    """A job's message sent again by the job watchdog (``processing.resends``)."""
    instruments().jobs_resent.add(1, {"inferbus.lane": lane})


def count_batch_ended(status: str, deployment: str) -> None:
    instruments().batches_ended.add(
        1, {"inferbus.batch.status": status, "gen_ai.request.model": deployment}
    )


def record_batch_answer(
    *, model: str, tenant: str, outcome: str, input_tokens: int | None, output_tokens: int | None
) -> None:
    """One Global Batch answer: the request counted by outcome, and its tokens in the same
    ``gen_ai.client.token.usage`` histogram as the queue lane's calls (``inferbus.mode``
    tells the two apart), so one query sums a tenant's tokens over both lanes."""
    instruments().batch_requests.add(
        1, {"inferbus.tenant": tenant, "gen_ai.request.model": model, "inferbus.outcome": outcome}
    )
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "az.ai.openai",
        "gen_ai.request.model": model,
        "inferbus.tenant": tenant,
        "inferbus.mode": "batch",
    }
    _record_tokens(common, input_tokens, output_tokens)


def record_cost(*, model: str, tenant: str, mode: str, amount: float, currency: str) -> None:
    """What one answer cost (``shared.accounting.cost``), by tenant, model, lane
    (``inferbus.mode``) and currency: a tenant's spend, summed in one query over both
    lanes. An answer of an alias without prices records nothing."""
    instruments().cost.add(
        amount,
        {
            "inferbus.tenant": tenant,
            "gen_ai.request.model": model,
            "inferbus.mode": mode,
            "inferbus.currency": currency,
        },
    )


def record_budget_use(*, tenant: str, budget: str, period: str, used: float, limit: float) -> None:
    """How much of one budget a tenant has used: ``used / limit`` in
    ``inferbus.budget.utilization``, each time its spend is checked or changes.

    ``budget`` is one of ``BUDGETS`` (``used`` and ``limit`` in its unit: tokens, or the
    model catalog's currency); ``period`` the UTC period it covers (``2026-12-05`` for a
    day, ``2026-12`` for a month), a dimension so that a new period's readings are never
    mixed with the last one's. A fraction, not the amounts, so that one alert threshold
    (``budgetUtilizationThresholdPercent``) holds for every tenant and budget whatever its
    size; it goes past 1 when a check lets a tenant overspend. Recorded in a histogram
    (see ``_Instruments``): an alert on the maximum over the last minutes reads
    ``valueMax``. A limit that is not positive is no budget (the tenant catalog refuses
    one): nothing is recorded, rather than raising in the caller's accounting.
    """
    if limit <= 0:
        return
    instruments().budget_utilization.record(
        used / limit,
        {"inferbus.tenant": tenant, "inferbus.budget": budget, "inferbus.period": period},
    )


def _record_tokens(
    attributes: Mapping[str, str], input_tokens: int | None, output_tokens: int | None
) -> None:
    """The ``gen_ai.client.token.usage`` points of one answer (a count not reported: none)."""
    for token_type, count in (("input", input_tokens), ("output", output_tokens)):
        if count is not None:
            instruments().tokens.record(count, {**attributes, "gen_ai.token.type": token_type})


def record_model_call(
    *,
    system: str,
    model: str,
    tenant: str,
    seconds: float,
    outcome: str,
    input_tokens: int | None,
    output_tokens: int | None,
) -> None:
    """The GenAI client metrics of one model call (tokens by tenant and model)."""
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": system,
        "gen_ai.request.model": model,
    }
    instruments().model_duration.record(seconds, {**common, "inferbus.outcome": outcome})
    _record_tokens({**common, "inferbus.tenant": tenant}, input_tokens, output_tokens)


QUEUE_UNREADABLE: Final = "inferbus.queue.unreadable"
EntityCounts = Callable[[], Mapping[str, float]]  # one entity's ``QUEUE_GAUGES`` values
EntityReaders = Callable[[], Mapping[str, EntityCounts]]  # by entity name
_gauges_registered = False


class QueueGauges:
    """The ``inferbus.queue.*`` gauges, each entity read on its own.

    ``readers`` gives, per entity (a queue, or ``topic/subscription``), a reader of its
    ``QUEUE_GAUGES`` values. The metric reader collects every gauge in turn (about once
    a minute): one reading of every entity, reused for ``max_age_seconds``, serves them
    all. An entity whose read fails drops only its own points, counts one
    ``inferbus.queue.unreadable`` (an alert fires on it) and is logged once per failure
    streak, with the reason; its recovery is logged too.
    """

    def __init__(
        self,
        readers: EntityReaders,
        max_age_seconds: float = 5.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._readers = readers
        self._max_age = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: tuple[float, Mapping[str, Mapping[str, float]]] | None = None
        self._unreadable: set[str] = set()
        self._failures: Counter | None = None  # made by register()

    def register(self, meter: metrics.Meter) -> None:
        """Create the gauges and the unreadable counter on ``meter``."""
        self._failures = meter.create_counter(
            QUEUE_UNREADABLE,
            unit="{read}",
            description="Reads of a queue's or subscription's counts that failed",
        )
        for name, key in QUEUE_GAUGES.items():

            def observe(options: CallbackOptions, key: str = key) -> Iterable[Observation]:
                return [
                    Observation(values[key], {"messaging.destination.name": entity})
                    for entity, values in self.reading().items()
                    if key in values
                ]

            meter.create_observable_gauge(name, callbacks=[observe])

    def reading(self) -> Mapping[str, Mapping[str, float]]:
        """The values of every entity that could be read (a fresh reading when the last is
        older than ``max_age_seconds``)."""
        with self._lock:
            now = self._clock()
            if self._reading is None or now - self._reading[0] > self._max_age:
                self._reading = (now, self._read_all())
            return self._reading[1]

    def _read_all(self) -> dict[str, Mapping[str, float]]:
        try:
            readers = self._readers()
        except Exception:
            logging.getLogger(__name__).warning("the queue entities are unknown", exc_info=True)
            return {}
        values: dict[str, Mapping[str, float]] = {}
        for entity, read in readers.items():
            try:
                values[entity] = read()
            except Exception as error:
                self._failed(entity, error)
            else:
                self._recovered(entity)
        return values

    def _failed(self, entity: str, error: Exception) -> None:
        if self._failures is not None:
            self._failures.add(1, {"messaging.destination.name": entity})
        if entity not in self._unreadable:
            self._unreadable.add(entity)
            logging.getLogger(__name__).warning(
                "the counts of %s cannot be read (%s: %s); its queue gauges are left out "
                "until they can",
                entity,
                type(error).__name__,
                error,
            )

    def _recovered(self, entity: str) -> None:
        if entity in self._unreadable:
            self._unreadable.discard(entity)
            logging.getLogger(__name__).info("the counts of %s can be read again", entity)


def observe_queues(readers: EntityReaders, max_age_seconds: float = 5.0) -> None:
    """Register the queue gauges once per process, on the global meter provider (see
    ``QueueGauges``)."""
    global _gauges_registered
    with _instruments_lock:
        if _gauges_registered:
            return
        _gauges_registered = True
    QueueGauges(readers, max_age_seconds).register(metrics.get_meter(INSTRUMENTATION))


# --- log dimensions ---------------------------------------------------------------------

LOG_DIMENSIONS: Final = ("request_id", "message_id", "correlation_id", "tenant_id")
_dimensions: ContextVar[Mapping[str, str] | None] = ContextVar(
    "inferbus_log_dimensions", default=None
)
_factory_installed = False


@contextmanager
def log_dimensions(**ids: str | None) -> Iterator[None]:
    """Every log record made in the block carries these ids (``inferbus.<name>``), which
    the Azure Monitor log exporter sends as custom dimensions. Ids only: never input text
    or credentials."""
    unknown = set(ids) - set(LOG_DIMENSIONS)
    if unknown:
        raise ValueError(f"not log dimensions: {sorted(unknown)}")
    merged = {**(_dimensions.get() or {}), **{k: v for k, v in ids.items() if v}}
    token = _dimensions.set(merged)
    try:
        yield
    finally:
        _dimensions.reset(token)


# Loggers whose routine lines are about telemetry itself: exported, each export would log
# another ("Transmission succeeded"), a trickle that never ends and is billed.
QUIET_LOGGERS: Final = ("azure.monitor.opentelemetry", "azure.core.pipeline.policies")


def install_log_dimensions() -> None:
    """Make every log record carry the current ``log_dimensions`` (idempotent), and keep
    the exporter's own routine lines out of what is exported."""
    global _factory_installed
    with _instruments_lock:
        if _factory_installed:
            return
        _factory_installed = True
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        for name, value in (_dimensions.get() or {}).items():
            setattr(record, f"inferbus.{name}", value)
        return record

    logging.setLogRecordFactory(factory)


@dataclass
class MessageProcessing:
    """One message's ``process <queue>`` span, told how the message was settled."""

    span: Span
    outcome: str | None = None

    def settled(self, outcome: str, dead_letter_reason: str | None, failed: bool) -> None:
        """The outcome on the span (failed for a dead letter or an abandon), counted in
        ``inferbus.messages.settled`` once the span ends."""
        self.outcome = outcome
        self.span.set_attribute("inferbus.outcome", outcome)
        if dead_letter_reason:
            self.span.set_attribute("inferbus.dead_letter_reason", dead_letter_reason)
        if failed:
            fail(self.span, outcome)


@contextmanager
def processing(
    *,
    queue: str,
    lane: str,
    message_id: str | None,
    correlation_id: str | None,
    delivery_count: int | None,
    retry_count: int,
    properties: Mapping[str, Any],
    invocation: str | None,
) -> Iterator[MessageProcessing]:
    """The block that processes one Service Bus message: its ``process <queue>`` span, a
    child of the trace the message carries (``Diagnostic-Id``, else ``traceparent``) and
    linked to the invocation that received it (``invocation``, a traceparent: a batch
    holds messages of many traces), in a context of its own, with the message's ids on
    every log record; the outcome given to ``settled`` is counted when the block ends."""
    carried = properties.get("Diagnostic-Id") or properties.get("traceparent")
    tenant = properties.get("tenant")
    attributes = {
        "messaging.system": "servicebus",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": message_id,
        "messaging.message.delivery_count": delivery_count,
        "inferbus.retry_count": retry_count,
    }
    with (
        detached(),
        span(
            f"{SPAN_PROCESS} {queue}",
            kind=CONSUMER,
            parent=carried if isinstance(carried, str) else None,
            links=[invocation] if invocation else (),
            attributes=attributes,
        ) as current,
        log_dimensions(
            message_id=message_id,
            correlation_id=correlation_id,
            tenant_id=tenant if isinstance(tenant, str) else None,
        ),
    ):
        processed = MessageProcessing(current)
        yield processed
    if processed.outcome is not None:
        count_settled(lane, processed.outcome)
