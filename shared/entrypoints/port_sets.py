"""The ports the use cases get, and the two sets of adapters that fill them.

``Ports`` names every port explicitly (None switches an optional channel off);
``azure_ports`` chooses the real adapters (Blob storage, Service Bus, Event Grid, the
catalog's model providers) and ``in_memory_ports`` the in-memory ones with the same rules
(unit tests, benchmarks). The adapters' modules are imported here, lazily: a process
imports only the SDKs of the ports it builds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from shared.blobs import BlobStore
from shared.clock import Clock, utc_now
from shared.documents import ListedDocuments
from shared.events.ports import EventPublisher, EventQueue, TokenValidator
from shared.global_batch.ports import BatchService
from shared.inference.catalog import catalog_for
from shared.inference.served import ServedModels
from shared.intake.ports import BacklogProbe
from shared.lanes import Lane
from shared.messaging import MessageSender, SchedulingSender
from shared.processing.backlog import SubscriptionObservers
from shared.processing.deferral import DeferredSources
from shared.processing.ports import DeadLetterQueues, QueueObserver
from shared.settings import Settings

QueueObserverFactory = Callable[[str], QueueObserver]  # by queue name
# What one try of an intake send may take: a refused connection fails at once; one that
# is never answered stops here. Above a cold connection's open (TLS, a managed
# identity's token, the AMQP link), so a healthy broker is never refused for it.
INTAKE_SEND_TRY_SECONDS = 5.0


@dataclass(frozen=True)
class Ports:
    """Every port the use cases depend on (None switches an optional channel off)."""

    blobs: BlobStore
    # JSON documents whose listing carries last-modified times: the watchdog, the batch
    # lane's records and the instance registry list them.
    documents: ListedDocuments
    requests: SchedulingSender  # the request lanes (lanes.LaneRouter): sends and retry copies
    results_topic: MessageSender | None
    events: EventPublisher | None
    models: ServedModels  # the catalog's aliases and their clients
    deferred_source: DeferredSources  # by queue name
    queue_observer: QueueObserverFactory
    webhook_tokens: TokenValidator | None  # None: no bearer tokens required
    clock: Clock
    event_queue: EventQueue | None = None  # None: no Event Grid namespace pull door
    # The request queues' dead-letter sub-queues (None: no dead-letter reconciler).
    dead_letter_queues: DeadLetterQueues | None = None
    # Azure OpenAI files and batches (None: no Global Batch lane).
    batch_service: BatchService | None = None
    # Each lane's queue depth (a lane missing: not gated).
    backlogs: Mapping[Lane, BacklogProbe] = field(default_factory=dict)
    # The results topic's subscriptions, for their gauges (None: not observed).
    subscription_observers: SubscriptionObservers | None = None
    # Intake's own sends to the request lanes (None: ``requests``): one try, bounded, so
    # that a caller hears at once that the broker is down (``intake.breaker``).
    intake_requests: SchedulingSender | None = None


def replaced(ports: Ports, **changes: Any) -> Ports:
    """``ports`` with some replaced (``dataclasses.replace``); a new ``requests`` takes
    intake's sends too unless ``intake_requests`` is named: both are the same lanes."""
    if "requests" in changes:
        changes.setdefault("intake_requests", None)
    return replace(ports, **changes)


def served_models(settings: Settings) -> ServedModels:
    """The catalog of this deployment with the clients of its aliases."""
    from shared.adapters.models import serve_catalog

    return serve_catalog(catalog_for(settings), settings)


def webhook_tokens_for(settings: Settings) -> TokenValidator | None:
    """Entra token validation of webhook deliveries, when an audience is configured."""
    if not (settings.webhook.token_audience and settings.webhook.token_issuer):
        return None
    from shared.adapters.entra_tokens import JwtValidator

    return JwtValidator(
        settings.webhook.token_audience, settings.webhook.token_issuer, settings.webhook.jwks_uri
    )


def azure_ports(settings: Settings) -> Ports:
    """The real adapters: Blob storage, Service Bus, Event Grid, the configured model.

    Clients are created once here and reused; the Service Bus client is opened on first
    use (HTTP-only processes never open one). A lane's backlog probe exists only when its
    limit (MaxQueueBacklog, MaxPriorityQueueBacklog, MaxOrderedQueueBacklog) is above
    zero, the Event Grid publisher only when a topic endpoint is configured.
    """
    from shared.adapters.blob_documents import BlobJsonDocuments
    from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
    from shared.adapters.eventgrid import event_grid_publisher
    from shared.adapters.eventgrid_pull import namespace_queue
    from shared.adapters.openai_batch import openai_batch_service
    from shared.adapters.queue_counts import (
        lane_backlog_probes,
        queue_observers,
        subscription_observers_for,
    )
    from shared.adapters.servicebus import LazyServiceBusSender, lane_senders, servicebus_client
    from shared.adapters.servicebus_dead_letters import ServiceBusDeadLetterQueues
    from shared.adapters.servicebus_inbound import deferred_source

    storage = blob_service_client(settings)
    models = served_models(settings)
    bus = _Lazy(lambda: servicebus_client(settings))
    # The deferred sweeper's own client, with no SDK retries: a receive by sequence number
    # that names a vanished message answers "not found" every time (the SDK would ask
    # three more times, 11 s), and any other failure leaves the ledger for the next sweep.
    sweeps = _Lazy(lambda: servicebus_client(settings, retry_total=0))
    # Intake's client: a request waits for no SDK retry loop (11 s against a broker that
    # is gone); the breaker answers the next ones, and the caller retries.
    intake_bus = _Lazy(
        lambda: servicebus_client(settings, retry_total=0, try_timeout=INTAKE_SEND_TRY_SECONDS)
    )
    return Ports(
        blobs=AzureBlobStore(storage),
        documents=BlobJsonDocuments(storage),
        requests=lane_senders(settings, bus.get),
        intake_requests=lane_senders(settings, intake_bus.get),
        results_topic=LazyServiceBusSender(bus.get, settings.queues.results_topic, topic=True),
        events=event_grid_publisher(settings),
        models=models,
        deferred_source=lambda queue: deferred_source(sweeps.get(), queue),
        queue_observer=queue_observers(settings, bus.get),
        webhook_tokens=webhook_tokens_for(settings),
        clock=utc_now,
        event_queue=namespace_queue(settings),
        dead_letter_queues=ServiceBusDeadLetterQueues(bus.get),
        batch_service=openai_batch_service(settings) if models.catalog.batch_deployments else None,
        backlogs=lane_backlog_probes(settings),
        subscription_observers=subscription_observers_for(settings),
    )


def in_memory_ports(settings: Settings, *, clock: Clock = utc_now) -> Ports:
    """In-memory adapters with the real adapters' rules (``adapters.in_memory``): storage,
    recording sender, topic and publisher, no backpressure; the catalog's models."""
    from shared.adapters.in_memory import (
        FixedQueueObserver,
        InMemoryBlobs,
        InMemoryDeadLetterQueues,
        InMemoryDeferredSource,
        InMemoryDocuments,
        RecordingPublisher,
        RecordingSender,
    )

    blobs = InMemoryBlobs(clock=clock)
    source = InMemoryDeferredSource()
    observer = FixedQueueObserver()
    return Ports(
        blobs=blobs,
        documents=InMemoryDocuments(blobs),
        requests=RecordingSender(),
        results_topic=RecordingSender(),
        events=RecordingPublisher(),
        models=served_models(settings),
        deferred_source=lambda queue: nullcontext(source),
        queue_observer=lambda queue: observer,
        webhook_tokens=None,
        clock=clock,
        dead_letter_queues=InMemoryDeadLetterQueues(),
    )


class _Lazy[T]:
    """A value made on first use, once, whichever thread asks first."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value
