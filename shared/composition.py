"""Wiring: build the use cases with their adapters once per process, on first use.

Triggers ask ``get_services()``; nothing is built at import time (the Functions host
imports the app to index it before settings may be complete). Tests build their own
``Services`` with ``build_services(settings, sender=...)`` to swap a port for a fake of
our own, and install it with ``use_services``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from shared.backlog import BacklogGate, BacklogProbe
from shared.claimcheck import BlobStore, ClaimChecks
from shared.clock import Clock, utc_now
from shared.idempotency import IdempotencyGuard
from shared.intake import Intake, IntakePolicy
from shared.jobs import JobRepository
from shared.messaging import MessageSender
from shared.settings import Settings, get_settings


@dataclass(frozen=True)
class Services:
    settings: Settings
    blobs: BlobStore
    jobs: JobRepository
    intake: Intake


def build_services(
    settings: Settings,
    *,
    sender: MessageSender | None = None,
    backlog_probe: BacklogProbe | None = None,
    clock: Clock = utc_now,
) -> Services:
    """Build the object graph; any port passed in replaces its real adapter.

    The backlog probe is built only when MaxQueueBacklog is above zero.
    """
    from shared.adapters.blob_documents import BlobIdempotencyStore, BlobJobStore
    from shared.adapters.blob_storage import AzureBlobStore, blob_service_client

    blobs = AzureBlobStore(blob_service_client(settings))
    jobs = JobRepository(BlobJobStore(blobs, settings.jobs_container), clock)
    if sender is None:
        from shared.adapters.servicebus import ServiceBusMessageSender, servicebus_client

        sender = ServiceBusMessageSender(servicebus_client(settings), settings.requests_queue_name)
    if backlog_probe is None:
        from shared.adapters.backlog import backlog_probe_for

        backlog_probe = backlog_probe_for(settings)
    intake = Intake(
        policy=IntakePolicy(
            allowed_models=settings.allowed_models,
            default_deadline_seconds=settings.default_deadline_seconds,
            max_deadline_seconds=settings.max_deadline_seconds,
        ),
        jobs=jobs,
        claim_checks=ClaimChecks(
            blobs,
            settings.inputs_container,
            settings.allowed_input_containers,
            settings.max_upload_bytes,
        ),
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
    return Services(settings=settings, blobs=blobs, jobs=jobs, intake=intake)


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
