"""``python -m shared.ops``: operations commands.

    python -m shared.ops deadletters list [--prefix P] [--limit N]
    python -m shared.ops deadletters replay (--all | --event-id ID ... | --reason R | --type T)
                                            [--prefix P] [--dry-run]
    python -m shared.ops sb-deadletters list [--queue Q ...] [--limit N] [--json]
    python -m shared.ops sb-deadletters show MESSAGE_ID_OR_SEQUENCE_NUMBER [--queue Q] [--json]
    python -m shared.ops sb-deadletters replay|purge (--all | FILTERS) [--queue Q ...]
                                                      [--dry-run] [--yes]
    python -m shared.ops usage [--day D | --since D [--until D]] [--tenant T] [--json]

``deadletters`` (alias ``eventgrid-deadletters``) reads Event Grid's dead-letter blobs
(commands in ``eventgrid_deadletters``), ``sb-deadletters`` (alias ``servicebus-deadletters``) the
dead-letter queues of the request queues (commands in ``servicebus_deadletters``), ``usage`` the
tokens used per day, tenant, model and lane (``usage``). This module
only assembles their parsers and runs a command, so that the exit codes and the handling
of configuration and availability errors are the same for every area. Settings come
from the environment and ``local.settings.json`` like the app's. Exit codes: 0 done, 1
some were rejected or refused (also: ``show`` found nothing, the operator did not
confirm), 2 usage or configuration error, 3 a dependency was unavailable (the replay
stopped; run it again to continue where it stopped).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from shared.entrypoints.bootstrap import ServicesProvider, get_services
from shared.entrypoints.cli.eventgrid_deadletters import add_eventgrid_commands
from shared.entrypoints.cli.servicebus_deadletters import (
    OperationsFactory,
    add_servicebus_commands,
    servicebus_operations,
)
from shared.entrypoints.cli.usage import add_usage_command
from shared.errors import ConfigurationError, TransientError


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m shared.ops", description="Inferbus operations")
    commands = root.add_subparsers(dest="area", required=True)
    add_eventgrid_commands(commands)
    add_servicebus_commands(commands)
    add_usage_command(commands)
    return root


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
        if getattr(args, "servicebus", False):
            built = services()
            with (servicebus or servicebus_operations)(built) as operations:
                code: int = args.run(args, built, operations)
        else:
            code = args.run(args, services())
    except ConfigurationError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    except TransientError as error:
        print(f"unavailable: {error}", file=sys.stderr)
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
