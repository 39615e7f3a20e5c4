"""``python -m shared.ops``: operations commands.

    python -m shared.ops deadletters list [--prefix P] [--limit N]
    python -m shared.ops deadletters replay (--all | --event-id ID ... | --reason R | --type T)
                                            [--prefix P] [--dry-run]
    python -m shared.ops sb-deadletters list [--queue Q ...] [--limit N] [--json]
    python -m shared.ops sb-deadletters show MESSAGE_ID_OR_SEQUENCE_NUMBER [--queue Q] [--json]
    python -m shared.ops sb-deadletters replay|purge (--all | FILTERS) [--queue Q ...]
                                                      [--dry-run] [--yes]
    python -m shared.ops usage [--day D | --since D [--until D]] [--tenant T] [--json]
    python -m shared.ops jobs reindex [--dry-run] [--json]

``deadletters`` (alias ``eventgrid-deadletters``) reads Event Grid's dead-letter blobs
(commands in ``eventgrid_dead_letters``), ``sb-deadletters`` (alias ``servicebus-deadletters``) the
dead-letter queues of the request queues (commands in ``servicebus_dead_letters``), ``usage`` the
tokens used per day, tenant, model and lane (``usage``), ``jobs reindex`` tags the jobs an
earlier version stored without the job index's tags (``jobs``). This module
assembles their parsers and is the command line's wiring: from the app's services it
builds what each area's commands use (the ``DeadLetterReplay``; the ``DeadLetterScope`` and
the ``DeadLetterOperations`` over azure-servicebus, imported lazily so that the other
areas, and callers that pass their own operations (the unit tests), do not load the SDK;
a ``UsageReader`` and the clock; a ``JobReindexer``), so the commands never see the
settings. The exit codes and the handling of configuration and availability errors are
the same for every area. Settings come from the environment and ``local.settings.json``
like the app's. Exit codes: 0 done, 1 some were rejected or refused (also: ``show``
found nothing, the operator did not confirm), 2 usage or configuration error, 3 a
dependency was unavailable (the replay stopped; run it again to continue where it
stopped).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

from shared.accounting.usage_report import UsageReader
from shared.entrypoints.bootstrap import Services, ServicesProvider, get_services
from shared.entrypoints.cli.eventgrid_dead_letters import add_eventgrid_commands
from shared.entrypoints.cli.jobs import add_jobs_commands
from shared.entrypoints.cli.servicebus_dead_letters import DeadLetterScope, add_servicebus_commands
from shared.entrypoints.cli.usage import add_usage_command
from shared.errors import ConfigurationError, TransientError
from shared.job_index import JobIndex
from shared.job_reindex import JobReindexer
from shared.lanes import LaneQueues
from shared.processing.dead_letters.operations import DeadLetterOperations

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


def usage_reader(services: Services) -> UsageReader:
    """The job store's reader: the job index finds the jobs, the documents are read."""
    documents = services.ports.documents
    container = services.settings.containers.jobs
    return UsageReader(documents, JobIndex(documents, container), container)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m shared.ops", description="Inferbus operations")
    commands = root.add_subparsers(dest="area", required=True)
    add_eventgrid_commands(commands)
    add_servicebus_commands(commands)
    add_usage_command(commands)
    add_jobs_commands(commands)
    return root


def _run(args: argparse.Namespace, services: Services, servicebus: OperationsFactory) -> int:
    """The chosen command, with what its area uses (``tools``, set by its parser)."""
    run: Callable[..., int] = args.run
    if args.tools == "servicebus":
        with servicebus(services) as operations:
            return run(args, dead_letter_scope(services), operations)
    if args.tools == "usage":
        return run(args, usage_reader(services), services.ports.clock)
    if args.tools == "jobs":
        documents = services.ports.documents
        return run(args, JobReindexer(documents, services.settings.containers.jobs))
    return run(args, services.dead_letters)


def main(
    argv: Sequence[str] | None = None,
    services: ServicesProvider = get_services,
    servicebus: OperationsFactory | None = None,
) -> int:
    """Run a command with the services the app composes (``bootstrap.get_services``);
    ``servicebus`` builds the dead-letter operations (default: over azure-servicebus)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    try:
        return _run(args, services(), servicebus or servicebus_operations)
    except ConfigurationError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    except TransientError as error:
        print(f"unavailable: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
