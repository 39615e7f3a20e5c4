"""``python -m shared.ops``: operations commands.

    python -m shared.ops deadletters list [--prefix P] [--limit N]
    python -m shared.ops deadletters replay (--all | --event-id ID ... | --reason R | --type T)
                                            [--prefix P] [--dry-run] [--yes]
                                            [--extend-deadline DURATION]
    python -m shared.ops sb-deadletters list [--queue Q ...] [--limit N] [--json]
    python -m shared.ops sb-deadletters show MESSAGE_ID_OR_SEQUENCE_NUMBER [--queue Q] [--json]
    python -m shared.ops sb-deadletters replay|purge (--all | FILTERS) [--queue Q ...]
                                                      [--dry-run] [--yes]
    python -m shared.ops usage [--day D | --since D [--until D]] [--tenant T] [--from-jobs]
                               [--json]
    python -m shared.ops jobs reindex [--dry-run] [--json]

``deadletters`` (also ``eg-deadletters``, ``eventgrid-deadletters``) reads Event Grid's
dead-letter blobs (commands in ``eventgrid_dead_letters``), ``sb-deadletters`` (also
``servicebus-deadletters``) the dead-letter queues of the request queues (commands in
``servicebus_dead_letters``), ``usage`` the tokens and cost per day, tenant, model and
lane and the budgets (``usage``), ``jobs reindex`` tags the jobs an earlier version
stored without the job index's tags (``jobs``). This module assembles their parsers and
is the command line's wiring: it builds what each area's commands use, and no more, so
the commands never see the settings:

- ``usage``: the usage ledger's documents of the ``Storage`` connection, the tenant
  catalog's budgets and the model catalog's currency (``LedgerStorage``, read as the app
  reads them; a ``LedgerUsage`` and the clock); with ``--from-jobs`` the job documents
  instead (``JobStorage``; a ``UsageReader`` and the clock);
- ``jobs reindex``: the job documents (``JobStorage``; a ``JobReindexer``). Neither
  command builds more: they need no Service Bus connection, no model client, none of the
  app's services;
- ``sb-deadletters``: from the app's services, the ``DeadLetterScope`` and the
  ``DeadLetterOperations`` over azure-servicebus, imported lazily so that the other areas,
  and callers that pass their own operations (the unit tests), do not load the SDK;
- ``deadletters``: the app's ``DeadLetterReplay`` and an ``EventReplayScope``.

Settings come from the environment and ``local.settings.json`` like the app's. A
``Storage`` connection string the storage SDK could not sign a request with (a part that
is not Name=Value, an AccountKey that is not base64) is a configuration error before
anything is built, not a traceback at the first request. The exit codes and the handling
of configuration and availability errors are the same for every area, and every
command's ``--help`` states them (``ops_help.OPS_EPILOG``): 0 done, 1 some were rejected
or refused (also: ``show`` found nothing, the operator did not confirm), 2 usage or
configuration error, 3 a dependency was unavailable (the replay stopped; run it again to
continue where it stopped).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta

from shared.accounting.ledger_report import BudgetOf, LedgerReader
from shared.accounting.tenants import Budget, tenant_catalog_for
from shared.accounting.usage_report import UsageReader
from shared.clock import Clock, utc_now
from shared.contracts import Door, ProcessingMode, RequestedMode
from shared.documents import JsonDocuments, ListedDocuments
from shared.entrypoints.bootstrap import Services, ServicesProvider, get_services
from shared.entrypoints.cli.eventgrid_dead_letters import EventReplayScope, add_eventgrid_commands
from shared.entrypoints.cli.jobs import add_jobs_commands
from shared.entrypoints.cli.ledger_usage import LedgerUsage
from shared.entrypoints.cli.ops_help import root_parser
from shared.entrypoints.cli.servicebus_dead_letters import DeadLetterScope, add_servicebus_commands
from shared.entrypoints.cli.usage import add_usage_command
from shared.errors import ConfigurationError, InvalidInput, TransientError
from shared.events.intake import InferenceRequestedData
from shared.inference.catalog import catalog_for
from shared.intake.request_rules import RequestRules
from shared.job_index import JobIndex
from shared.job_reindex import JobReindexer
from shared.lanes import LaneQueues
from shared.processing.dead_letters.operations import DeadLetterOperations
from shared.settings import get_settings

OperationsFactory = Callable[[Services], AbstractContextManager[DeadLetterOperations]]


@contextmanager
def servicebus_operations(services: Services) -> Iterator[DeadLetterOperations]:
    """The dead-letter operations over azure-servicebus (one client, closed afterwards)."""
    from shared.adapters.servicebus_dead_letters import dead_letter_tools

    settings = services.settings
    with dead_letter_tools(settings) as (queues, sender_for):
        yield DeadLetterOperations(
            queues,
            sender_for,
            services.jobs,
            services.ports.documents,
            settings.containers.ledgers,
            services.models.aliases,
            services.ports.clock,
        )


def dead_letter_scope(services: Services) -> DeadLetterScope:
    settings = services.settings
    return DeadLetterScope(
        lanes=LaneQueues.from_settings(settings),
        results_topic=settings.queues.results_topic,
        max_deadline=timedelta(seconds=settings.limits.max_deadline_seconds),
    )


@dataclass(frozen=True)
class JobStorage:
    """What ``usage`` and ``jobs reindex`` are built from: the job documents, their
    container (JobsContainer) and the clock."""

    documents: ListedDocuments
    container: str
    clock: Clock

    @classmethod
    def of(cls, services: Services) -> JobStorage:
        """The job storage of services built already (the tests')."""
        return cls(
            services.ports.documents, services.settings.containers.jobs, services.ports.clock
        )


StorageProvider = Callable[[], JobStorage]


def app_job_storage() -> JobStorage:
    """The job documents of the app's ``Storage`` connection, and nothing else."""
    settings = get_settings()
    from shared.adapters.blob_documents import BlobJsonDocuments
    from shared.adapters.blob_storage import blob_service_client

    documents = BlobJsonDocuments(blob_service_client(settings))
    return JobStorage(documents, settings.containers.jobs, utc_now)


def usage_reader(storage: JobStorage) -> UsageReader:
    """The job store's reader: the job index finds the jobs, the documents are read."""
    documents = storage.documents
    return UsageReader(documents, JobIndex(documents, storage.container), storage.container)


@dataclass(frozen=True)
class LedgerStorage:
    """What ``usage`` reads the ledger with: the month documents, their container
    (UsageContainer), each tenant's budget, the catalog's currency and the clock."""

    documents: JsonDocuments
    container: str
    budget_of: BudgetOf
    currency: str | None
    clock: Clock

    @classmethod
    def of(cls, services: Services) -> LedgerStorage:
        """The ledger of services built already (the tests'): their tenant catalog."""
        return cls(
            services.ports.documents,
            services.settings.containers.usage,
            services.spending.budget_of,
            services.models.catalog.currency,
            services.ports.clock,
        )


LedgerProvider = Callable[[], LedgerStorage]


def app_ledger_storage() -> LedgerStorage:
    """The usage ledger of the app's ``Storage`` connection, with the model and tenant
    catalogs read as the app reads them (a catalog that breaks a rule is a configuration
    error here too); no model client is built."""
    settings = get_settings()
    from shared.adapters.blob_documents import BlobJsonDocuments
    from shared.adapters.blob_storage import blob_service_client

    models = catalog_for(settings)
    tenants = tenant_catalog_for(settings, models)
    documents = BlobJsonDocuments(blob_service_client(settings))

    def budget_of(tenant: str) -> Budget | None:
        return tenants.policy(tenant).budget

    return LedgerStorage(documents, settings.containers.usage, budget_of, models.currency, utc_now)


def ledger_usage(storage: LedgerStorage) -> LedgerUsage:
    reader = LedgerReader(storage.documents, storage.container, storage.budget_of, storage.clock)
    return LedgerUsage(reader, storage.currency)


def event_replay_scope(services: Services) -> EventReplayScope:
    """The cap of ``--extend-deadline`` and the deadline intake gives a replayed
    ``InferenceRequested`` event's request, decided as ``Intake`` decides it: its own
    ``deadline_seconds``, else DefaultDeadlineSeconds, else none for a batch request."""
    settings = services.settings
    rules = RequestRules.from_settings(settings, services.models.catalog)
    replay_model = services.event_intake.model_for(Door.REPLAY)

    def deadline_of(data: InferenceRequestedData) -> int | None:
        model, ordered = data.model or replay_model, data.document_id is not None
        try:
            requested, _ = RequestedMode.intake_choice(data.mode)
            mode = rules.mode_for(requested, model, data.priority, ordered)
        except InvalidInput:  # intake rejects it, with the reason
            mode = ProcessingMode.QUEUE
        try:
            return rules.deadline_for(data.deadline_seconds, mode)
        except InvalidInput:  # over MaxDeadlineSeconds: intake rejects it, with the reason
            return data.deadline_seconds

    return EventReplayScope(timedelta(seconds=settings.limits.max_deadline_seconds), deadline_of)


def parser() -> argparse.ArgumentParser:
    root = root_parser("python -m shared.ops", "Inferbus operations")
    commands = root.add_subparsers(dest="area", required=True)
    add_eventgrid_commands(commands)
    add_servicebus_commands(commands)
    add_usage_command(commands)
    add_jobs_commands(commands)
    return root


@dataclass(frozen=True)
class Providers:
    """What each area's commands are built from, each built only when one runs."""

    services: ServicesProvider
    storage: StorageProvider
    ledger: LedgerProvider
    servicebus: OperationsFactory


def _run(args: argparse.Namespace, providers: Providers) -> int:
    """The chosen command, with what its area uses (``tools``, set by its parser)."""
    run: Callable[..., int] = args.run
    if args.tools == "usage" and not args.from_jobs:
        ledger = providers.ledger()
        return run(args, ledger_usage(ledger), ledger.clock)
    if args.tools == "usage":
        jobs = providers.storage()
        return run(args, usage_reader(jobs), jobs.clock)
    if args.tools == "jobs":
        jobs = providers.storage()
        return run(args, JobReindexer(jobs.documents, jobs.container))
    built = providers.services()
    if args.tools == "servicebus":
        with providers.servicebus(built) as operations:
            return run(args, dead_letter_scope(built), operations)
    return run(args, built.dead_letters, event_replay_scope(built))


def _providers(
    services: ServicesProvider | None,
    servicebus: OperationsFactory | None,
    storage: StorageProvider | None,
    ledger: LedgerProvider | None,
) -> Providers:
    """The app's own providers, except those given; given services give the job storage
    and the ledger too, unless those are given as well."""
    if services is None:
        return Providers(
            get_services,
            storage or app_job_storage,
            ledger or app_ledger_storage,
            servicebus or servicebus_operations,
        )
    built = services
    return Providers(
        services,
        storage or (lambda: JobStorage.of(built())),
        ledger or (lambda: LedgerStorage.of(built())),
        servicebus or servicebus_operations,
    )


def main(
    argv: Sequence[str] | None = None,
    services: ServicesProvider | None = None,
    servicebus: OperationsFactory | None = None,
    storage: StorageProvider | None = None,
    ledger: LedgerProvider | None = None,
) -> int:
    """Run a command with what the app's settings build: the usage ledger and the
    catalogs for ``usage`` (``app_ledger_storage``), the job storage alone for ``usage
    --from-jobs`` and ``jobs`` (``app_job_storage``), the app's services for the dead
    letters (``bootstrap.get_services``). ``services`` replaces the app's services, and
    gives the job storage and the ledger too unless ``storage`` or ``ledger`` do (the
    tests); ``servicebus`` builds the dead-letter operations (default: over
    azure-servicebus)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    try:
        return _run(args, _providers(services, servicebus, storage, ledger))
    except ConfigurationError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    except TransientError as error:
        print(f"unavailable: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
