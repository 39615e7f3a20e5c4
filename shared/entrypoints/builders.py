"""Small builders of the object graph, one per part of the app, each with its inputs named.

``bootstrap.build_services`` calls them in order; each takes the settings, the ports and
what the parts before it built (``Commons``: what several parts share), and reads the
settings it needs into the values its part takes. None chooses an adapter
(``port_sets`` does).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from shared import telemetry
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import TenantCatalog, tenant_catalog_for
from shared.contracts import Door
from shared.entrypoints.http.batches import BatchEndpoints
from shared.entrypoints.http.listing import RequestListEndpoint
from shared.entrypoints.http.openapi import OpenApiEndpoint
from shared.entrypoints.http.requests import RequestEndpoints, RequestLimits
from shared.entrypoints.http.usage import UsageEndpoint
from shared.entrypoints.http.webhook import WebhookEndpoint
from shared.entrypoints.port_sets import Ports
from shared.errors import ConfigurationError
from shared.events.announcements import Announcer
from shared.events.dead_letters import DeadLetterReplay
from shared.events.intake import EventIntake
from shared.events.pull import PullDoor, PullPolicy
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.control_plane import ControlPolicy, GlobalBatchControlPlane
from shared.global_batch.planning import PlanningPolicy
from shared.global_batch.staging import BatchStager, StagingPolicy
from shared.global_batch.store import BatchRecords
from shared.inference.capacity import BudgetedModel, DeploymentGate, ServedPace, gate_key
from shared.inference.catalog import Capacity
from shared.inference.instances import InstanceRegistry
from shared.inference.served import ServedModels
from shared.intake.backpressure import LaneBacklogGates, WaitAdmission
from shared.intake.breaker import SendBreaker
from shared.intake.claim_checks import ClaimChecks
from shared.intake.idempotency import DocumentIdempotencyStore, IdempotencyGuard
from shared.intake.releases import LOOK_SECONDS, ScheduledReleases
from shared.intake.request_rules import RequestRules
from shared.intake.submissions import Intake
from shared.intake.tenancy import CallerTenancy
from shared.job_index import JobIndex
from shared.job_listing import JobListing
from shared.jobs import DocumentJobStore, JobRepository
from shared.lanes import Lane, LaneQueues
from shared.processing.assembly import lane_processor
from shared.processing.batches import BatchProcessor
from shared.processing.dead_letters.reconciliation import DeadLetterReconciler
from shared.processing.deferral import DeferredSweeper, DocumentDeferralLedger
from shared.processing.endings import JobEndings
from shared.processing.pipeline import MessageProcessor
from shared.processing.policy import ProcessingPolicy, ordered_retry_max_wait
from shared.processing.resends import JobResender, ResendPolicy
from shared.processing.watchdog import JobWatchdog, WatchdogPolicy
from shared.settings import Settings


@dataclass(frozen=True)
class Commons:
    """What several parts share: the gated models, the tenant catalog, the jobs, the
    claim checks, the announcer, the job endings and the deferral ledger."""

    models: ServedModels
    tenants: TenantCatalog
    jobs: JobRepository
    claim_checks: ClaimChecks
    announcer: Announcer
    endings: JobEndings
    ledger: DocumentDeferralLedger
    spending: TenantSpending  # the tenants' usage ledger and budgets


@dataclass(frozen=True)
class LaneServices:
    """What processes one lane's queue (``shared.lanes``)."""

    lane: Lane
    queue: str
    processor: MessageProcessor
    message_batches: BatchProcessor  # the trigger's Service Bus batches, a message each
    sweeper: DeferredSweeper | None  # None: a session queue defers nothing
    ledger: DocumentDeferralLedger  # the deferred messages of every lane
    stager: BatchStager | None  # batch-mode work to Global Batch (None: no such lane)


@dataclass(frozen=True)
class HttpEndpoints:
    """What the HTTP triggers serve: each handler's use cases and values, no more."""

    requests: RequestEndpoints
    listing: RequestListEndpoint
    batches: BatchEndpoints
    webhook: WebhookEndpoint
    openapi: OpenApiEndpoint
    usage: UsageEndpoint


def commons(settings: Settings, ports: Ports) -> Commons:
    tenants = tenant_catalog_for(settings, ports.models.catalog)
    models = gated_models(settings, ports, tenants)
    check_models(settings, models)
    jobs = JobRepository(DocumentJobStore(ports.documents, settings.containers.jobs), ports.clock)
    announcer = Announcer(ports.events, ports.results_topic)
    spending = TenantSpending(ports.documents, settings.containers.usage, tenants, ports.clock)
    spending.start_flushing(settings.usage.flush_seconds)
    return Commons(
        models=models,
        tenants=tenants,
        jobs=jobs,
        claim_checks=ClaimChecks.from_settings(ports.blobs, settings),
        announcer=announcer,
        endings=JobEndings(jobs, announcer, ports.clock, spending),
        ledger=DocumentDeferralLedger(ports.documents, settings.containers.ledgers),
        spending=spending,
    )


def intake(settings: Settings, ports: Ports, shared: Commons) -> Intake:
    """The doors' one intake; its sends go through the broker breaker, it admits by
    depth and by expected wait, each tenant only to the models it may use, and paces
    each tenant's requests into the queue."""
    backlog = LaneBacklogGates.from_settings(settings, ports.backlogs)
    pace = ServedPace(shared.models, settings.model_capacity.fair_share_seconds)
    sender = SendBreaker(
        ports.intake_requests or ports.requests, settings.servicebus.breaker_open_seconds
    )
    releases = ScheduledReleases(sender, pace, ports.clock)
    releases.start_looking(LOOK_SECONDS)
    return Intake(
        policy=RequestRules.from_settings(settings, shared.models.catalog, shared.tenants),
        jobs=shared.jobs,
        claim_checks=shared.claim_checks,
        idempotency=IdempotencyGuard(
            DocumentIdempotencyStore(ports.documents, settings.containers.idempotency),
            accepted=shared.jobs.find,
            clock=ports.clock,
        ),
        sender=sender,
        backlog=backlog,
        admission=WaitAdmission(backlog, pace),
        pacing=pace,
        releases=releases,
        longest_pacing=settings.job_resend.after_seconds / 2,
        spending=shared.spending,
        announce_end=shared.endings.announce,
        clock=ports.clock,
    )


def event_intake(settings: Settings, ports: Ports, shared: Commons, door: Intake) -> EventIntake:
    """The event doors (Blob-created, Event Grid push and pull), each with its model."""
    models = shared.models
    chosen = {
        Door.BLOB: ("IncomingBlobModel", settings.models.incoming_blob),
        Door.EVENTGRID: ("WebhookModel", settings.webhook.model),
        Door.WEBHOOK: ("WebhookModel", settings.webhook.model),
        Door.EVENTGRID_PULL: ("EventGridPull__model", settings.eventgrid_pull.model),
    }
    return EventIntake(
        intake=door,
        blobs=ports.blobs,
        claim_checks=shared.claim_checks,
        incoming_container=settings.containers.incoming,
        default_model=models.alias_for("DefaultModel", settings.models.default),
        max_inline_text_bytes=settings.limits.max_inline_text_bytes,
        door_models={
            name: models.alias_for(setting, model or settings.models.default)
            for name, (setting, model) in chosen.items()
        },
    )


def pull_door(settings: Settings, ports: Ports, events: EventIntake) -> PullDoor | None:
    """The Event Grid namespace pull door (None without a namespace to pull from)."""
    if ports.event_queue is None:
        return None
    pull = settings.eventgrid_pull
    policy = PullPolicy(
        max_events=pull.max_events,
        max_wait_seconds=pull.max_wait_seconds,
        drain_seconds=pull.drain_seconds,
    )
    return PullDoor(ports.event_queue, events, policy)


def batch_records(settings: Settings, ports: Ports, shared: Commons) -> BatchRecords | None:
    """The Global Batch lane's records (None when no alias takes batch mode)."""
    if not shared.models.catalog.batch_deployments:
        return None
    return BatchRecords(ports.documents, ports.blobs, settings.containers.batches)


def lanes(
    settings: Settings,
    ports: Ports,
    shared: Commons,
    rules: RequestRules,
    records: BatchRecords | None,
) -> dict[Lane, LaneServices]:
    """The three request lanes; batch-mode work is staged for Global Batch when the lane
    has records."""
    stager = (
        BatchStager(
            records,
            StagingPolicy(shared.models.catalog, settings.global_batch.max_bytes_per_file),
            ports.clock,
        )
        if records is not None
        else None
    )
    concurrency = {
        Lane.STANDARD: settings.processing.model_concurrency,
        Lane.PRIORITY: settings.processing.priority_model_concurrency,
        Lane.ORDERED: settings.processing.model_concurrency,
    }
    return {
        lane: lane_services(settings, ports, shared, rules, stager, lane, slots)
        for lane, slots in concurrency.items()
    }


def lane_services(
    settings: Settings,
    ports: Ports,
    shared: Commons,
    rules: RequestRules,
    stager: BatchStager | None,
    lane: Lane,
    concurrency: int,
) -> LaneServices:
    queue = LaneQueues.from_settings(settings).queue(lane)
    processor = lane_processor(
        policy=processing_policy(settings, shared, lane, queue),
        jobs=shared.jobs,
        claim_checks=shared.claim_checks,
        models=shared.models,
        announcer=shared.announcer,
        retry_sender=ports.requests,
        ledger=shared.ledger,
        rules=rules,
        clock=ports.clock,
        stager=stager,
        spending=shared.spending,
    )
    renewal = (
        settings.processing.lock_renewal_seconds,
        settings.processing.max_lock_renewal_seconds,
    )
    sweeper = (
        None
        if lane.is_ordered
        else DeferredSweeper(
            shared.ledger,
            processor,
            ports.clock,
            endings=shared.endings,
            missing_retries=settings.processing.deferred_missing_retries,
            missing_retry_seconds=settings.processing.deferred_missing_retry_seconds,
        )
    )
    return LaneServices(
        lane=lane,
        queue=queue,
        processor=processor,
        message_batches=BatchProcessor(processor, concurrency, *renewal),
        sweeper=sweeper,
        ledger=shared.ledger,
        stager=stager,
    )


def processing_policy(
    settings: Settings, shared: Commons, lane: Lane, queue: str
) -> ProcessingPolicy:
    retries = settings.retries
    return ProcessingPolicy(
        queue_name=queue,
        aliases=shared.models.catalog.aliases,
        max_retries=retries.max_retries,
        retry_base_seconds=retries.base_seconds,
        retry_max_seconds=retries.max_seconds,
        api_base_url=settings.site.api_base_url,
        ordered=lane.is_ordered,
        lane=lane.value,
        retry_jitter_floor=retries.jitter_floor,
        invalid_output_retries=retries.invalid_output_retries,
        faults_allowed=settings.local_model.faults,
        max_lock_renewal_seconds=settings.processing.max_lock_renewal_seconds,
        ordered_retry_max_wait_seconds=ordered_retry_max_wait(
            settings.processing.max_lock_renewal_seconds
        ),
        fair_share_seconds=settings.model_capacity.fair_share_seconds,
        fair_share_longest_wait=settings.job_resend.after_seconds / 2,
    )


def reconciler(settings: Settings, ports: Ports, shared: Commons) -> DeadLetterReconciler | None:
    """The dead-letter reconciler (None without the queues' dead-letter sub-queues)."""
    if ports.dead_letter_queues is None:
        return None
    return DeadLetterReconciler(
        dead_letters=ports.dead_letter_queues,
        documents=ports.documents,
        marker_container=settings.containers.ledgers,
        jobs=shared.jobs,
        endings=shared.endings,
        clock=ports.clock,
        page_size=settings.maintenance.dead_letter_reconcile_page_size,
    )


def watchdog(settings: Settings, ports: Ports, shared: Commons) -> JobWatchdog:
    """The job watchdog: stuck and overdue jobs end, lost messages are sent again."""
    return JobWatchdog(
        index=JobIndex(ports.documents, settings.containers.jobs),
        documents=ports.documents,
        checkpoint_container=settings.containers.ledgers,
        jobs=shared.jobs,
        endings=shared.endings,
        policy=WatchdogPolicy(
            grace=timedelta(seconds=settings.jobs.watchdog_grace_seconds),
            stale=timedelta(seconds=settings.jobs.watchdog_stale_seconds),
            max_run=timedelta(seconds=settings.jobs.watchdog_max_run_seconds),
        ),
        clock=ports.clock,
        resender=JobResender(
            sender=ports.requests,
            jobs=shared.jobs,
            policy=ResendPolicy.from_settings(settings),
            count_resent=telemetry.count_resent,
            clock=ports.clock,
        ),
    )


def dead_letter_replay(settings: Settings, ports: Ports, events: EventIntake) -> DeadLetterReplay:
    """Replay of Event Grid's dead-lettered deliveries through the event doors."""
    return DeadLetterReplay(
        ports.blobs,
        settings.containers.eventgrid_dead_letters,
        settings.containers.ledgers,
        events,
        ports.clock,
    )


def global_batch(
    settings: Settings, ports: Ports, shared: Commons, records: BatchRecords | None
) -> GlobalBatchControlPlane | None:
    """The Global Batch control plane, when the lane has records and a batch service."""
    if records is None or ports.batch_service is None:
        return None
    conclusion = Conclusion(
        records=records,
        jobs=shared.jobs,
        endings=shared.endings,
        announcer=shared.announcer,
        requeue=ports.requests,
        policy=ConclusionPolicy(
            failed_lines=settings.global_batch.failed_lines,
            max_resubmissions=settings.global_batch.max_resubmissions,
            api_base_url=settings.site.api_base_url,
        ),
        catalog=shared.models.catalog,
        spending=shared.spending,
        clock=ports.clock,
    )
    return GlobalBatchControlPlane(
        records=records,
        service=ports.batch_service,
        jobs=shared.jobs,
        conclusion=conclusion,
        policy=global_batch_policy(settings),
        clock=ports.clock,
    )


def global_batch_policy(settings: Settings) -> ControlPolicy:
    """The Global Batch control plane's policy of the ``GlobalBatch__*`` settings."""
    batch = settings.global_batch
    return ControlPolicy(
        planning=PlanningPolicy(
            max_lines_per_file=batch.max_lines_per_file,
            max_bytes_per_file=batch.max_bytes_per_file,
            submit_at_lines=batch.submit_at_lines,
            submit_after=timedelta(seconds=batch.submit_after_seconds),
            enqueued_tokens=batch.enqueued_tokens,
        ),
        output_expiry_seconds=batch.output_expiry_days * 86_400,
        quota_retry=timedelta(seconds=batch.quota_retry_seconds),
        quota_retry_max=timedelta(seconds=batch.quota_retry_max_seconds),
        poll_interval=timedelta(seconds=batch.poll_seconds),
        run_budget=timedelta(seconds=batch.run_seconds),
        quota_wait_limit=timedelta(seconds=batch.quota_wait_limit_seconds),
    )


def http_endpoints(
    settings: Settings,
    ports: Ports,
    door: Intake,
    shared: Commons,
    events: EventIntake,
    records: BatchRecords | None,
) -> HttpEndpoints:
    """The HTTP handlers' endpoints: the settings are read here, once, into values."""
    tenancy = CallerTenancy(settings.tenancy.claim_types, settings.tenancy.allow_tenant_header)
    catalog = shared.models.catalog
    batches = BatchEndpoints(records, catalog.batch_deployments, tenancy)
    limits = RequestLimits(
        max_inline_text_bytes=settings.limits.max_inline_text_bytes,
        max_upload_bytes=settings.limits.max_upload_bytes,
        upload_media_types=settings.limits.allowed_upload_media_types,
        status_poll_seconds=settings.limits.status_poll_seconds,
        retention_days=settings.jobs.retention_days,
    )
    webhook = settings.webhook
    return HttpEndpoints(
        requests=RequestEndpoints(door, shared.jobs, tenancy, limits, batches, shared.spending),
        listing=RequestListEndpoint(job_listing(settings, ports), tenancy),
        batches=batches,
        webhook=WebhookEndpoint(
            events, webhook.shared_secret, ports.webhook_tokens, webhook.tenants
        ),
        openapi=OpenApiEndpoint(
            settings.limits.allowed_upload_media_types, catalog, settings.site.api_token_audience
        ),
        usage=UsageEndpoint(shared.spending, tenancy, catalog.currency, ports.clock),
    )


def job_listing(settings: Settings, ports: Ports) -> JobListing:
    """The tenants' job listings, over the job documents' paged listing."""
    container = settings.containers.jobs
    store = DocumentJobStore(ports.documents, container)
    return JobListing(ports.documents, store, container, ports.clock)


def gated_models(settings: Settings, ports: Ports, tenants: TenantCatalog) -> ServedModels:
    """Every alias's client behind its deployment's capacity gate (aliases on one
    deployment share it), unless ModelCapacity__enabled is off. A quota flows to the
    instances by their demand, which their heartbeats in the app's storage carry; within
    an instance, to the tenants by their weights."""
    models = ports.models
    if not settings.model_capacity.enabled:
        return models
    limited = any(served.card.capacity for served in models.values())
    registry = (
        InstanceRegistry(
            ports.documents,
            settings.containers.ledgers,
            settings.site.instance_id or f"{socket.gethostname()}-{os.getpid()}",
            heartbeat_seconds=settings.model_capacity.heartbeat_seconds,
        )
        if limited
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
                fleet=registry,
                key=key,
                max_wait=settings.model_capacity.wait_seconds,
                weight_of=lambda tenant: tenants.policy(tenant).weight,
            )
            if registry is not None:
                registry.watch(key, gates[key].demand)
        clients[alias] = BudgetedModel(card, served.client, gates[key])
    if registry is not None:
        registry.start()
    return ServedModels(models.catalog, clients)


def check_models(settings: Settings, models: ServedModels) -> None:
    """What the catalog asks of the other settings: a batch deployment needs the batch
    lane's Azure OpenAI resource."""
    catalog = models.catalog
    if catalog.batch_deployments and not settings.batch_endpoint:
        aliases = ", ".join(catalog.batch_deployments)
        raise ConfigurationError(
            f"{catalog.source}: {aliases} take mode=batch (batch_deployment), which needs "
            "GlobalBatch__endpoint (or AzureOpenAI__endpoint)"
        )
