"""Wiring: build the use cases with their adapters once per process, on first use.

Triggers ask ``get_services()``; nothing is built at import time (the Functions host
imports the app to index it before settings may be complete). Tests build their own
``Services`` with ``build_services(settings, sender=..., model=...)`` to swap a port for a
fake of our own, and install it with ``use_services``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from shared.clock import Clock, utc_now
from shared.events.announcements import Announcer, EventPublisher
from shared.events.intake import EventIntake
from shared.events.webhook_auth import TokenValidator
from shared.inference import ModelClient
from shared.intake.backpressure import BacklogGate, BacklogProbe
from shared.intake.claim_checks import BlobStore, ClaimChecks
from shared.intake.idempotency import IdempotencyGuard
from shared.intake.submissions import Intake, IntakePolicy
from shared.jobs import JobRepository
from shared.messaging import MessageSender
from shared.ops.backlog_report import QueueObserver
from shared.processing.batches import BatchProcessor
from shared.processing.deferral import DeferralLedger, DeferredSource, DeferredSweeper
from shared.processing.pipeline import MessageProcessor, ProcessingPolicy
from shared.results import ResultStore
from shared.settings import Settings, get_settings

DeferredSourceFactory = Callable[[], AbstractContextManager[DeferredSource]]


@dataclass(frozen=True)
class Services:
    settings: Settings
    blobs: BlobStore
    jobs: JobRepository
    intake: Intake
    processor: MessageProcessor
    batch: BatchProcessor
    ledger: DeferralLedger
    sweeper: DeferredSweeper
    deferred_source: DeferredSourceFactory
    event_intake: EventIntake
    webhook_tokens: TokenValidator | None
    queue_observer: Callable[[], QueueObserver]


def model_client_for(settings: Settings) -> ModelClient:
    """The configured model: the local analyzer, or Azure OpenAI."""
    if settings.model_provider == "azure_openai":
        from shared.adapters.azure_openai import azure_openai_model

        return azure_openai_model(settings)
    from shared.adapters.local_model import LocalModel

    return LocalModel(
        refusal_terms=settings.local_model_refusal_terms,
        latency_ms=settings.local_model_latency_ms,
        transient_rate=settings.local_model_transient_rate,
    )


def build_services(
    settings: Settings,
    *,
    sender: MessageSender | None = None,
    backlog_probe: BacklogProbe | None = None,
    model: ModelClient | None = None,
    events: EventPublisher | Any | None = ...,
    topic: MessageSender | Any | None = ...,
    clock: Clock = utc_now,
) -> Services:
    """Build the object graph; any port passed in replaces its real adapter.

    The backlog probe is built only when MaxQueueBacklog is above zero, the Event Grid
    publisher only when a topic endpoint is configured. Pass ``events=None`` or
    ``topic=None`` to switch a publication channel off.
    """
    from shared.adapters.blob_documents import BlobIdempotencyStore, BlobJobStore
    from shared.adapters.blob_ledger import BlobDeferralLedger
    from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
    from shared.adapters.servicebus import servicebus_client

    blobs = AzureBlobStore(blob_service_client(settings))
    jobs = JobRepository(BlobJobStore(blobs, settings.jobs_container), clock)
    bus = _Lazy(lambda: servicebus_client(settings))
    if sender is None:
        sender = _queue_sender(bus, settings.requests_queue_name)
    if backlog_probe is None:
        from shared.adapters.backlog import backlog_probe_for

        backlog_probe = backlog_probe_for(settings)
    if events is ...:
        from shared.adapters.eventgrid import event_grid_publisher

        events = event_grid_publisher(settings)
    if topic is ...:
        topic = _queue_sender(bus, settings.results_topic_name, topic=True)
    claim_checks = ClaimChecks(
        blobs,
        settings.inputs_container,
        settings.allowed_input_containers,
        settings.max_upload_bytes,
    )
    intake = Intake(
        policy=IntakePolicy(
            allowed_models=settings.allowed_models,
            default_deadline_seconds=settings.default_deadline_seconds,
            max_deadline_seconds=settings.max_deadline_seconds,
        ),
        jobs=jobs,
        claim_checks=claim_checks,
        idempotency=IdempotencyGuard(
            BlobIdempotencyStore(blobs, settings.idempotency_container), clock
        ),
        sender=sender,
        backlog=BacklogGate(
            backlog_probe,
            settings.max_queue_backlog,
            settings.backlog_cache_seconds,
            retry_after=max(5, settings.status_poll_seconds),
        ),
        clock=clock,
    )
    ledger = BlobDeferralLedger(blobs, settings.ledger_container)
    processor = MessageProcessor(
        policy=ProcessingPolicy(
            queue_name=settings.requests_queue_name,
            allowed_models=settings.allowed_models,
            max_retries=settings.max_retries,
            retry_base_seconds=settings.retry_base_seconds,
            retry_max_seconds=settings.retry_max_seconds,
        ),
        jobs=jobs,
        claim_checks=claim_checks,
        model=model or model_client_for(settings),
        results=ResultStore(blobs, settings.results_container, clock),
        announcer=Announcer(events, topic),
        retry_sender=sender,
        ledger=ledger,
        clock=clock,
    )
    event_intake = EventIntake(
        intake=intake,
        blobs=blobs,
        claim_checks=claim_checks,
        incoming_container=settings.incoming_container,
        default_model=settings.model_for_untagged_work,
        max_inline_text_bytes=settings.max_inline_text_bytes,
    )
    webhook_tokens: TokenValidator | None = None
    if settings.webhook_token_audience and settings.webhook_token_issuer:
        from shared.adapters.entra_tokens import JwtValidator

        webhook_tokens = JwtValidator(
            settings.webhook_token_audience,
            settings.webhook_token_issuer,
            settings.webhook_jwks_uri,
        )
    return Services(
        settings=settings,
        blobs=blobs,
        jobs=jobs,
        intake=intake,
        processor=processor,
        batch=BatchProcessor(
            processor,
            settings.model_concurrency,
            settings.lock_renewal_seconds,
            settings.max_lock_renewal_seconds,
        ),
        ledger=ledger,
        sweeper=DeferredSweeper(ledger, processor, clock),
        deferred_source=lambda: _deferred_source(bus, settings.requests_queue_name),
        queue_observer=_Lazy(lambda: _queue_observer(settings, bus)).get,
        event_intake=event_intake,
        webhook_tokens=webhook_tokens,
    )


class _Lazy:
    """A Service Bus client made on first use: HTTP-only processes never open one."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value


def _queue_sender(bus: _Lazy, entity: str, *, topic: bool = False) -> MessageSender:
    from shared.adapters.servicebus import LazyServiceBusSender

    return LazyServiceBusSender(bus.get, entity, topic=topic)


def _queue_observer(settings: Settings, bus: _Lazy) -> QueueObserver:
    from shared.adapters.backlog import queue_observer_for

    return queue_observer_for(settings, bus.get())


def _deferred_source(bus: _Lazy, queue: str) -> AbstractContextManager[DeferredSource]:
    from shared.adapters.servicebus_inbound import deferred_source

    source: AbstractContextManager[DeferredSource] = deferred_source(bus.get(), queue)
    return source


_lock = threading.Lock()
_services: Services | None = None


def get_services() -> Services:
    """The process-wide services, built on first use."""
    global _services
    with _lock:
        if _services is None:
            _services = build_services(get_settings())
        return _services


def use_services(services: Services | None) -> None:
    """Install (or with None, forget) the process-wide services."""
    global _services
    with _lock:
        _services = services
