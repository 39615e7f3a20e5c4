"""Wiring: the one place that builds the use cases from the ports it is given.

``build_services(settings, ports)`` takes every port explicitly (``port_sets.Ports``) and
only wires, by the small builders of ``builders`` (intake, the event doors, the lanes,
the maintenance timers, Global Batch, the HTTP endpoints); ``port_sets.azure_ports``
chooses the real adapters and ``port_sets.in_memory_ports`` the in-memory ones (unit
tests, benchmarks). Swap a port with ``dataclasses.replace``::

    services = build_services(settings, replace(azure_ports(settings), events=None))

The Functions triggers and the ops CLI use the process-wide ``get_services()``, built on
first use (the Functions host imports the app to index it before settings may be
complete, so nothing is built at import time); tests install their own with
``use_services``. Use-case code never reaches for it, and neither do the HTTP handlers:
each receives its own endpoints (``HttpEndpoints``), the use cases and values it uses.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared import telemetry
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import TenantCatalog, tenant_catalog_for
from shared.entrypoints import builders
from shared.entrypoints.builders import HttpEndpoints, LaneServices
from shared.entrypoints.port_sets import Ports, azure_ports
from shared.events.dead_letters import DeadLetterReplay
from shared.events.intake import EventIntake
from shared.events.pull import PullDoor
from shared.global_batch.control_plane import GlobalBatchControlPlane
from shared.inference.catalog import ModelCatalog, catalog_for
from shared.inference.served import ServedModels
from shared.jobs import JobRepository
from shared.lanes import Lane
from shared.log_lines import install_one_line_records
from shared.processing.dead_letters.reconciliation import DeadLetterReconciler
from shared.processing.watchdog import JobWatchdog
from shared.settings import Settings, get_settings


@dataclass(frozen=True)
class Services:
    """What the triggers, the timers and the command lines call, no more: a test reads
    the part it needs from the lanes, the endpoints or the ports."""

    settings: Settings
    ports: Ports
    models: ServedModels  # behind their capacity gates
    jobs: JobRepository
    lanes: dict[Lane, LaneServices]
    event_intake: EventIntake
    dead_letters: DeadLetterReplay  # Event Grid's dead-lettered deliveries
    pull_door: PullDoor | None
    http: HttpEndpoints
    # Every accepted request ends (processing.dead_letters.reconciliation, processing.watchdog).
    reconciler: DeadLetterReconciler | None
    watchdog: JobWatchdog
    # The Global Batch lane (None when no alias takes batch mode).
    global_batch: GlobalBatchControlPlane | None
    spending: TenantSpending  # the tenants' usage ledger and budgets


ServicesProvider = Callable[[], Services]


def build_services(settings: Settings, ports: Ports) -> Services:
    """The object graph of the use cases over ``ports``; no adapter is chosen here."""
    shared = builders.commons(settings, ports)
    intake = builders.intake(settings, ports, shared)
    events = builders.event_intake(settings, ports, shared, intake)
    records = builders.batch_records(settings, ports, shared)
    return Services(
        settings=settings,
        ports=ports,
        models=shared.models,
        jobs=shared.jobs,
        lanes=builders.lanes(settings, ports, shared, intake.rules, records),
        event_intake=events,
        dead_letters=builders.dead_letter_replay(settings, ports, events),
        pull_door=builders.pull_door(settings, ports, events),
        http=builders.http_endpoints(settings, ports, intake, shared, events, records),
        reconciler=builders.reconciler(settings, ports, shared),
        watchdog=builders.watchdog(settings, ports, shared),
        global_batch=builders.global_batch(settings, ports, shared, records),
        spending=shared.spending,
    )


def verify_model_catalog(environ: Mapping[str, str] | None = None) -> ModelCatalog:
    """Stop the app's start on a catalog that cannot be served: a file that does not read
    or parse, an alias, task or key given twice, an unknown task or provider, a schema
    that is not JSON Schema, a handler that does not import, an option naming an app
    setting that holds nothing (``api_key_setting``). ``function_app.py`` calls it, so
    the Functions host (and the local host) refuse to index the app, with the file, the
    alias and the field named.

    The app settings are the environment, as the host hands them to the worker. They may
    still change before the services are built (they are not read otherwise at import
    time), so a ``%Name%`` that is unset now is checked then. Returns the catalog, for
    ``verify_tenant_catalog``.
    """
    from shared.adapters.models import check_catalog

    values = os.environ if environ is None else environ
    settings = Settings.model_validate(
        {name: values[name] for name in CATALOG_SETTINGS if values.get(name, "").strip()}
    )
    catalog = catalog_for(settings, values.get)
    check_catalog(catalog, settings_complete=False)
    return catalog


def verify_tenant_catalog(
    models: ModelCatalog, environ: Mapping[str, str] | None = None
) -> TenantCatalog:
    """Stop the app's start on a tenant catalog that breaks a rule: a file that does not
    read or parse (``TenantCatalog`` naming one that is not there), a field it does not
    know, a weight or budget that is not positive, a tenant id the app would never see,
    a tenant or key given twice, or an alias ``models`` does not serve.
    ``function_app.py`` calls it after ``verify_model_catalog``, with its catalog, so a
    broken file stops the indexing with the file, the tenant and the field named instead
    of refusing every request of the tenant later."""
    values = os.environ if environ is None else environ
    setting = values.get("TenantCatalog", "").strip()
    settings = Settings.model_validate({"TenantCatalog": setting} if setting else {})
    return tenant_catalog_for(settings, models)


# The settings that choose the catalog (shared/inference/catalog.py: catalog_for).
CATALOG_SETTINGS = (
    "ModelCatalog",
    "AllowedModels",
    "ModelProvider",
    "GlobalBatch__deployments",
    "GlobalBatch__endpoint",
    "AzureOpenAI__endpoint",
)


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
    """Telemetry of the process (a no-op without an OpenTelemetry SDK): log records are
    one line each (``log_lines``) and carry the ids of the request at hand, and the
    counts of the lanes' queues and of the results topic's subscriptions are gauges, each
    entity read on its own."""
    install_one_line_records()
    telemetry.install_log_dimensions()
    telemetry.observe_queues(lambda: queue_entity_readers(services))


def queue_entity_readers(services: Services) -> dict[str, telemetry.EntityCounts]:
    """A reader of gauge values per observed entity (``processing.backlog.entity_readers``)."""
    from shared.processing.backlog import entity_readers

    return entity_readers(
        [lane.queue for lane in services.lanes.values()],
        services.ports.queue_observer,
        services.settings.queues.results_topic,
        services.ports.subscription_observers,
    )


def use_services(services: Services | None) -> None:
    """Install (or with None, forget) the process-wide services."""
    global _services
    with _lock:
        _services = services
