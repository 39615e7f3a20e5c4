"""Wiring: the one place that picks adapters and builds the use cases from them.

``build_services(settings, ports)`` takes every port explicitly (``Ports``) and only
wires; ``azure_ports(settings)`` chooses the real adapters and ``in_memory_ports`` the
in-memory ones (unit tests, benchmarks). Swap a port with ``dataclasses.replace``::

    services = build_services(settings, replace(azure_ports(settings), events=None))

The Functions triggers and the ops CLI use the process-wide ``get_services()``, built on
first use (the Functions host imports the app to index it before settings may be
complete, so nothing is built at import time); tests install their own with
``use_services``. Use-case code never reaches for it, and neither do the HTTP handlers:
each receives its own endpoints (``HttpEndpoints``), the use cases and values it uses.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta

from shared import telemetry
from shared.blobs import BlobStore
from shared.clock import Clock, utc_now
from shared.documents import DocumentListing, JsonDocuments, ListedDocuments
from shared.entrypoints.http.batches import BatchEndpoints
from shared.entrypoints.http.openapi import OpenApiEndpoint
from shared.entrypoints.http.requests import RequestEndpoints, RequestLimits
from shared.entrypoints.http.webhook import WebhookEndpoint
from shared.errors import ConfigurationError
from shared.events.announcements import Announcer
from shared.events.dead_letters import DeadLetterReplay
from shared.events.intake import BLOB_DOOR, EventIntake
from shared.events.ports import EventPublisher, EventQueue, TokenValidator
from shared.events.pull import SOURCE as PULL_DOOR
from shared.events.pull import PullDoor, PullPolicy
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.control_plane import ControlPolicy, GlobalBatchControlPlane
from shared.global_batch.planning import PlanningPolicy
from shared.global_batch.ports import BatchService
from shared.global_batch.staging import BatchStager, StagingPolicy
from shared.global_batch.store import BatchRecords
from shared.inference.capacity import BudgetedModel, DeploymentGate, gate_key
from shared.inference.catalog import Capacity, ModelCatalog, catalog_for
from shared.inference.instances import InstanceRegistry
from shared.inference.served import ServedModels
from shared.intake.backpressure import LaneBacklogGates
from shared.intake.breaker import SendBreaker
from shared.intake.claim_checks import ClaimChecks
from shared.intake.idempotency import DocumentIdempotencyStore, IdempotencyGuard
from shared.intake.ports import BacklogProbe
from shared.intake.request_rules import RequestRules
from shared.intake.submissions import Intake
from shared.intake.tenancy import CallerTenancy
from shared.jobs import DocumentJobStore, JobRepository
from shared.lanes import Lane, LaneQueues, LaneRouter
from shared.messaging import MessageSender
from shared.processing.backlog import SubscriptionObservers
from shared.processing.batches import BatchProcessor
from shared.processing.dead_letters.reconciliation import DeadLetterReconciler
from shared.processing.deferral import (
    DeferredSources,
    DeferredSweeper,
    DocumentDeferralLedger,
)
from shared.processing.endings import JobEndings
from shared.processing.failures import ordered_retry_max_wait
from shared.processing.pipeline import MessageProcessor, ProcessingPolicy
from shared.processing.ports import DeadLetterQueues, QueueObserver
from shared.processing.resends import JobResender, ResendPolicy
from shared.processing.watchdog import JobWatchdog, WatchdogPolicy
from shared.settings import Settings, get_settings

QueueObserverFactory = Callable[[str], QueueObserver]  # by queue name


@dataclass(frozen=True)
class Ports:
    """Every port the use cases depend on (None switches an optional channel off)."""

    blobs: BlobStore
    documents: JsonDocuments
    requests: MessageSender  # the request lanes (lanes.LaneRouter): sends and retry copies
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


@dataclass(frozen=True)
class LaneServices:
    """What processes one lane's queue (``shared.lanes``)."""

    lane: Lane
    queue: str
    processor: MessageProcessor
    batch: BatchProcessor
    sweeper: DeferredSweeper | None  # None: a session queue defers nothing


@dataclass(frozen=True)
class HttpEndpoints:
    """What the HTTP triggers serve: each handler's use cases and values, no more."""

    requests: RequestEndpoints
    batches: BatchEndpoints
    webhook: WebhookEndpoint
    openapi: OpenApiEndpoint


@dataclass(frozen=True)
class Services:
    settings: Settings
    ports: Ports
    models: ServedModels
    blobs: BlobStore
    jobs: JobRepository
    intake: Intake
    lanes: dict[Lane, LaneServices]
    processor: MessageProcessor  # the standard lane's (lanes[Lane.STANDARD])
    batch: BatchProcessor
    ledger: DocumentDeferralLedger
    sweeper: DeferredSweeper
    event_intake: EventIntake
    dead_letters: DeadLetterReplay
    pull_door: PullDoor | None
    http: HttpEndpoints
    # Every accepted request ends (processing.dead_letters.reconciliation, processing.watchdog).
    reconciler: DeadLetterReconciler | None = None
    watchdog: JobWatchdog | None = None
    # The Global Batch lane (None when GlobalBatch__deployments is empty).
    batch_records: BatchRecords | None = None
    batch_stager: BatchStager | None = None  # what the processors stage batch-mode work with
    global_batch: GlobalBatchControlPlane | None = None


ServicesProvider = Callable[[], Services]


def build_services(settings: Settings, ports: Ports) -> Services:
    """The object graph of the use cases over ``ports``; no adapter is chosen here."""
    clock = ports.clock
    models = gated_models(settings, ports.models, ports.documents)
    catalog = models.catalog
    _check_models(settings, catalog)
    untagged = models.alias_for("DefaultModel", settings.default_model)
    door_models = {
        door: models.alias_for(setting, chosen or settings.default_model)
        for door, setting, chosen in (
            (BLOB_DOOR, "IncomingBlobModel", settings.incoming_blob_model),
            ("eventgrid", "WebhookModel", settings.webhook.model),
            ("webhook", "WebhookModel", settings.webhook.model),
            (PULL_DOOR, "EventGridPull__model", settings.eventgrid_pull.model),
        )
    }
    jobs = JobRepository(DocumentJobStore(ports.documents, settings.jobs_container), clock)
    claim_checks = ClaimChecks.from_settings(ports.blobs, settings)
    intake = Intake(
        policy=RequestRules.from_settings(settings, catalog),
        jobs=jobs,
        claim_checks=claim_checks,
        idempotency=IdempotencyGuard(
            DocumentIdempotencyStore(ports.documents, settings.idempotency_container),
            accepted=jobs.find,
            clock=clock,
        ),
        sender=SendBreaker(ports.requests, settings.servicebus_breaker_open_seconds),
        backlog=LaneBacklogGates.from_settings(settings, ports.backlogs),
        clock=clock,
    )
    ledger = DocumentDeferralLedger(ports.documents, settings.ledger_container)
    queues = LaneQueues.from_settings(settings)
    announcer = Announcer(ports.events, ports.results_topic)
    endings = JobEndings(jobs, announcer, clock)
    batch_records = (
        BatchRecords(ports.documents, ports.blobs, settings.batch_container)
        if catalog.batch_deployments and isinstance(ports.documents, ListedDocuments)
        else None
    )
    stager = (
        BatchStager(
            batch_records,
            StagingPolicy(catalog, settings.global_batch.max_bytes_per_file),
            clock,
        )
        if batch_records is not None
        else None
    )

    def lane_services(lane: Lane, concurrency: int) -> LaneServices:
        processor = MessageProcessor(
            policy=ProcessingPolicy(
                queue_name=queues.queue(lane),
                aliases=catalog.aliases,
                max_retries=settings.retries.max_retries,
                retry_base_seconds=settings.retries.base_seconds,
                retry_max_seconds=settings.retries.max_seconds,
                api_base_url=settings.api_base_url,
                ordered=lane.is_ordered,
                lane=lane.value,
                retry_jitter_floor=settings.retries.jitter_floor,
                invalid_output_retries=settings.retries.invalid_output_retries,
                faults_allowed=settings.local_model.faults,
                max_lock_renewal_seconds=settings.max_lock_renewal_seconds,
                ordered_retry_max_wait_seconds=ordered_retry_max_wait(
                    settings.max_lock_renewal_seconds
                ),
            ),
            jobs=jobs,
            claim_checks=claim_checks,
            models=models,
            announcer=announcer,
            retry_sender=ports.requests,
            ledger=ledger,
            rules=intake.rules,
            clock=clock,
            stager=stager,
        )
        return LaneServices(
            lane=lane,
            queue=queues.queue(lane),
            processor=processor,
            batch=BatchProcessor(
                processor,
                concurrency,
                settings.lock_renewal_seconds,
                settings.max_lock_renewal_seconds,
            ),
            sweeper=None
            if lane.is_ordered
            else DeferredSweeper(
                ledger,
                processor,
                clock,
                endings=endings,
                missing_retries=settings.deferred_missing_retries,
                missing_retry_seconds=settings.deferred_missing_retry_seconds,
            ),
        )

    lanes = {
        Lane.STANDARD: lane_services(Lane.STANDARD, settings.model_concurrency),
        Lane.PRIORITY: lane_services(Lane.PRIORITY, settings.priority_model_concurrency),
        Lane.ORDERED: lane_services(Lane.ORDERED, settings.model_concurrency),
    }
    standard = lanes[Lane.STANDARD]
    assert standard.sweeper is not None
    event_intake = EventIntake(
        intake=intake,
        blobs=ports.blobs,
        claim_checks=claim_checks,
        incoming_container=settings.incoming_container,
        default_model=untagged,
        max_inline_text_bytes=settings.max_inline_text_bytes,
        door_models=door_models,
    )
    return Services(
        http=http_endpoints(settings, ports, intake, jobs, event_intake, batch_records),
        settings=settings,
        ports=ports,
        models=models,
        blobs=ports.blobs,
        jobs=jobs,
        intake=intake,
        lanes=lanes,
        processor=standard.processor,
        batch=standard.batch,
        ledger=ledger,
        sweeper=standard.sweeper,
        event_intake=event_intake,
        dead_letters=DeadLetterReplay(
            ports.blobs,
            settings.event_grid_dead_letter_container,
            settings.ledger_container,
            event_intake,
            clock,
        ),
        pull_door=PullDoor(
            ports.event_queue,
            event_intake,
            PullPolicy(
                max_events=settings.eventgrid_pull.max_events,
                max_wait_seconds=settings.eventgrid_pull.max_wait_seconds,
                drain_seconds=settings.eventgrid_pull.drain_seconds,
            ),
        )
        if ports.event_queue is not None
        else None,
        reconciler=DeadLetterReconciler(
            dead_letters=ports.dead_letter_queues,
            documents=ports.documents,
            marker_container=settings.ledger_container,
            jobs=jobs,
            endings=endings,
            clock=clock,
            page_size=settings.deadletter_reconcile_page_size,
        )
        if ports.dead_letter_queues is not None
        else None,
        watchdog=JobWatchdog(
            listing=ports.documents,
            documents=ports.documents,
            jobs_container=settings.jobs_container,
            checkpoint_container=settings.ledger_container,
            jobs=jobs,
            endings=endings,
            policy=WatchdogPolicy(
                grace=timedelta(seconds=settings.jobs.watchdog_grace_seconds),
                stale=timedelta(seconds=settings.jobs.watchdog_stale_seconds),
            ),
            clock=clock,
            resender=JobResender(
                sender=ports.requests,
                jobs=jobs,
                policy=ResendPolicy.from_settings(settings),
                count_resent=telemetry.count_resent,
                clock=clock,
            ),
        )
        if isinstance(ports.documents, DocumentListing)
        else None,
        batch_records=batch_records,
        batch_stager=stager,
        global_batch=global_batch_for(settings, ports, batch_records, jobs, endings, announcer),
    )


def http_endpoints(
    settings: Settings,
    ports: Ports,
    intake: Intake,
    jobs: JobRepository,
    event_intake: EventIntake,
    batch_records: BatchRecords | None,
) -> HttpEndpoints:
    """The HTTP handlers' endpoints: the settings are read here, once, into values."""
    tenancy = CallerTenancy(settings.tenant_claim_types, settings.allow_tenant_header)
    catalog = ports.models.catalog
    batches = BatchEndpoints(batch_records, catalog.batch_deployments, tenancy)
    limits = RequestLimits(
        max_inline_text_bytes=settings.max_inline_text_bytes,
        max_upload_bytes=settings.max_upload_bytes,
        upload_media_types=settings.allowed_upload_media_types,
        status_poll_seconds=settings.status_poll_seconds,
        retention_days=settings.jobs.retention_days,
    )
    return HttpEndpoints(
        requests=RequestEndpoints(intake, jobs, tenancy, limits, batches),
        batches=batches,
        webhook=WebhookEndpoint(
            event_intake,
            settings.webhook.shared_secret,
            ports.webhook_tokens,
            settings.webhook.tenants,
        ),
        openapi=OpenApiEndpoint(settings.allowed_upload_media_types, catalog),
    )


def gated_models(
    settings: Settings, models: ServedModels, documents: JsonDocuments
) -> ServedModels:
    """Every alias's client behind its deployment's capacity gate (aliases on one
    deployment share it), unless ModelCapacity__enabled is off. A quota is shared out
    by the live instances, counted from their heartbeats in the app's storage."""
    if not settings.model_capacity.enabled:
        return models
    limited = any(served.card.capacity for served in models.values())
    registry = (
        InstanceRegistry(
            documents,
            documents,
            settings.ledger_container,
            settings.website_instance_id or f"{socket.gethostname()}-{os.getpid()}",
            heartbeat_seconds=settings.model_capacity.heartbeat_seconds,
        )
        if limited and isinstance(documents, DocumentListing)
        else None
    )
    gates: dict[str, DeploymentGate] = {}
    clients = {}
    for alias, served in models.items():
        card = served.card
        key = gate_key(card)
        if key not in gates:
            gates[key] = DeploymentGate(
                card.deployment or alias,
                card.capacity or Capacity(),
                instances=registry.count if registry is not None else lambda: 1,
                max_wait=settings.model_capacity.wait_seconds,
            )
        clients[alias] = BudgetedModel(card, served.client, gates[key])
    return ServedModels(models.catalog, clients)


def _check_models(settings: Settings, catalog: ModelCatalog) -> None:
    """What the catalog asks of the other settings: a batch deployment needs the batch
    lane's Azure OpenAI resource."""
    if catalog.batch_deployments and not settings.batch_endpoint:
        aliases = ", ".join(catalog.batch_deployments)
        raise ConfigurationError(
            f"{catalog.source}: {aliases} take mode=batch (batch_deployment), which needs "
            "GlobalBatch__endpoint (or AzureOpenAI__endpoint)"
        )


def global_batch_for(
    settings: Settings,
    ports: Ports,
    records: BatchRecords | None,
    jobs: JobRepository,
    endings: JobEndings,
    announcer: Announcer,
) -> GlobalBatchControlPlane | None:
    """The control plane, when the lane is configured and its storage can be listed."""
    if records is None or ports.batch_service is None:
        return None
    return GlobalBatchControlPlane(
        records=records,
        service=ports.batch_service,
        jobs=jobs,
        conclusion=Conclusion(
            records=records,
            jobs=jobs,
            endings=endings,
            announcer=announcer,
            requeue=ports.requests,
            policy=ConclusionPolicy(
                failed_lines=settings.global_batch.failed_lines,
                max_resubmissions=settings.global_batch.max_resubmissions,
                api_base_url=settings.api_base_url,
            ),
            catalog=ports.models.catalog,
            clock=ports.clock,
        ),
        policy=global_batch_policy(settings),
        clock=ports.clock,
    )


# --- choosing adapters -------------------------------------------------------------------


def global_batch_policy(settings: Settings) -> ControlPolicy:
    """The Global Batch control plane's policy of the ``GlobalBatch__*`` settings."""
    return ControlPolicy(
        planning=PlanningPolicy(
            max_lines_per_file=settings.global_batch.max_lines_per_file,
            max_bytes_per_file=settings.global_batch.max_bytes_per_file,
            submit_at_lines=settings.global_batch.submit_at_lines,
            submit_after=timedelta(seconds=settings.global_batch.submit_after_seconds),
            enqueued_tokens=settings.global_batch.enqueued_tokens,
        ),
        output_expiry_seconds=settings.global_batch.output_expiry_days * 86_400,
        quota_retry=timedelta(seconds=settings.global_batch.quota_retry_seconds),
        quota_retry_max=timedelta(seconds=settings.global_batch.quota_retry_max_seconds),
        poll_interval=timedelta(seconds=settings.global_batch.poll_seconds),
        run_budget=timedelta(seconds=settings.global_batch.run_seconds),
        quota_wait_limit=timedelta(seconds=settings.global_batch.quota_wait_limit_seconds),
    )


def served_models(settings: Settings) -> ServedModels:
    """The catalog of this deployment with the clients of its aliases."""
    from shared.adapters.models import serve_catalog

    return serve_catalog(catalog_for(settings), settings)


def verify_model_catalog(environ: Mapping[str, str] | None = None) -> None:
    """Stop the app's start on a catalog that cannot be served: a file that does not read
    or parse, an unknown task or provider, a schema that is not JSON Schema, a handler
    that does not import. ``function_app.py`` calls it, so the Functions host (and the
    local host) refuse to index the app, with the file, the alias and the field named.

    The app settings are the environment, as the host hands them to the worker. They may
    still change before the services are built (they are not read otherwise at import
    time), so a ``%Name%`` that is unset now is checked then.
    """
    from shared.adapters.models import check_catalog

    values = os.environ if environ is None else environ
    settings = Settings.model_validate(
        {name: values[name] for name in CATALOG_SETTINGS if values.get(name, "").strip()}
    )
    check_catalog(catalog_for(settings, values.get), settings_complete=False)


# The settings that choose the catalog (shared/inference/catalog.py: catalog_for).
CATALOG_SETTINGS = (
    "ModelCatalog",
    "AllowedModels",
    "ModelProvider",
    "GlobalBatch__deployments",
    "GlobalBatch__endpoint",
    "AzureOpenAI__endpoint",
)


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
        subscription_observers_for,
    )
    from shared.adapters.servicebus import LazyServiceBusSender, servicebus_client
    from shared.adapters.servicebus_dead_letters import ServiceBusDeadLetterQueues
    from shared.adapters.servicebus_inbound import deferred_source

    storage = blob_service_client(settings)
    models = served_models(settings)
    bus = _Lazy(lambda: servicebus_client(settings))
    # The deferred sweeper's own client, with no SDK retries: a receive by sequence number
    # that names a vanished message answers "not found" every time (the SDK would ask
    # three more times, 11 s), and any other failure leaves the ledger for the next sweep.
    sweeps = _Lazy(lambda: servicebus_client(settings, retry_total=0))
    queues = LaneQueues.from_settings(settings)

    observers: dict[str, QueueObserver] = {}
    observers_lock = threading.Lock()

    def observer(queue: str) -> QueueObserver:
        from shared.adapters.queue_counts import queue_observer_for

        with observers_lock:
            if queue not in observers:
                observers[queue] = queue_observer_for(settings, bus.get(), queue)
            return observers[queue]

    return Ports(
        blobs=AzureBlobStore(storage),
        documents=BlobJsonDocuments(storage),
        requests=LaneRouter(
            {lane: LazyServiceBusSender(bus.get, queues.queue(lane)) for lane in Lane}
        ),
        results_topic=LazyServiceBusSender(bus.get, settings.results_topic_name, topic=True),
        events=event_grid_publisher(settings),
        models=models,
        deferred_source=lambda queue: deferred_source(sweeps.get(), queue),
        queue_observer=observer,
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


# --- the process-wide services (triggers and the ops CLI) -------------------------------

_lock = threading.Lock()
_services: Services | None = None


def get_services() -> Services:
    """The process-wide services over the real adapters, built on first use."""
    global _services
    with _lock:
        if _services is None:
            settings = get_settings()
            _services = build_services(settings, azure_ports(settings))
            observe(_services)
        return _services


def observe(services: Services) -> None:
    """Telemetry of the process (a no-op without an OpenTelemetry SDK): log records carry
    the ids of the request at hand, and the counts of the lanes' queues and of the results
    topic's subscriptions are gauges, each entity read on its own."""
    telemetry.install_log_dimensions()
    telemetry.observe_queues(lambda: queue_entity_readers(services))


def queue_entity_readers(services: Services) -> dict[str, telemetry.EntityCounts]:
    """A reader of gauge values per observed entity (``processing.backlog.entity_readers``)."""
    from shared.processing.backlog import entity_readers

    return entity_readers(
        [lane.queue for lane in services.lanes.values()],
        services.ports.queue_observer,
        services.settings.results_topic_name,
        services.ports.subscription_observers,
    )


def use_services(services: Services | None) -> None:
    """Install (or with None, forget) the process-wide services."""
    global _services
    with _lock:
        _services = services
