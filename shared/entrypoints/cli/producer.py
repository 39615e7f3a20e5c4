"""``python -m shared.producer``: send inference requests straight to the request queues.

    python -m shared.producer --tenant T --model M (--text TEXT | --blob-uri URI [--sha256 H])
        [--priority low|normal|high] [--document-id ID] [--parameters JSON]
        [--metadata KEY=VALUE ...] [--not-before ISO] [--deadline-seconds N] [--after ID]
        [--request-id ID]
    python -m shared.producer --file requests.jsonl [--tenant T] [--model M]   (- for stdin)

    common: [--connection CONNECTION_STRING | --namespace FQDN] [--json] [--no-progress]
            [--max-batch-messages N]

Settings come from the environment and ``local.settings.json`` like the app's
(``ServiceBusConnection`` locally, ``ServiceBusConnection__fullyQualifiedNamespace`` with
DefaultAzureCredential in Azure; ``Storage`` for claim checks). With ``--file``,
``--tenant`` and ``--model`` fill lines that leave them out. Progress goes to stderr, the
summary to stdout (``--json``: as JSON). Exit codes: 0 all sent, 1 some requests refused,
2 usage or configuration error, 3 Service Bus (or storage, for a claim check) unavailable:
the run stopped; run it again, request ids repeat and repeats are dropped. ``--help`` says
all of this (``EPILOG``). No ``Storage`` setting only refuses the lines that need storage;
a ``Storage`` connection string the SDK could not sign with is a configuration error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any, BinaryIO, TextIO

from shared.contracts import Priority
from shared.errors import ConfigurationError, UsageError
from shared.producer.lines import LineRefusal, ParsedLine, parse_document, parse_lines
from shared.producer.producer import Producer
from shared.producer.progress import ProgressDisplay
from shared.producer.report import EXIT_CONFIGURATION, SendReport
from shared.settings import Settings, load_settings

SINGLE_ONLY = (
    "sha256",
    "priority",
    "document_id",
    "parameters",
    "metadata",
    "not_before",
    "deadline_seconds",
    "after",
    "request_id",
)


# The end of --help, kept as written: the line format, the exit codes, the settings' source.
EPILOG = """\
a JSONL line:
  {tenant_id, model, input: {text} | {blob_uri, sha256, size, media_type} | {blob_uri,
  sha256?}, request_id?, parameters?, priority?, not_before?, deadline? |
  deadline_seconds?, metadata?, after?, document_id?, schema?}

exit codes:
  0  all sent
  1  some requests were refused (the summary lists them with their reasons)
  2  usage or configuration error: a bad option, a missing or malformed setting
  3  Service Bus (or storage, for a claim check) unavailable: the run stopped; run it
     again (request ids repeat and the broker drops the repeats)

settings: the app's own, from the environment over the Values of local.settings.json
in the current directory (INFERBUS_LOCAL_SETTINGS names another file); a variable of
the environment wins, as under the Functions host. ServiceBusConnection (or
ServiceBusConnection__fullyQualifiedNamespace) is the broker, unless --connection or
--namespace names one; Storage is the account of claim checks and blob references."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m shared.producer",
        description="Send inference requests straight to the Service Bus request queues.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = root.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", help="a JSONL file of requests, - for stdin")
    source.add_argument("--text", help="one request with this inline text")
    source.add_argument("--blob-uri", help="one request for a blob of the app's storage")
    root.add_argument(
        "--tenant", help="the tenant (with --file: for lines without one; default: none)"
    )
    root.add_argument(
        "--model", help="the model alias (with --file: for lines without one; default: none)"
    )
    root.add_argument("--sha256", help="the blob's SHA-256 (default: computed from the blob)")
    root.add_argument(
        "--priority",
        choices=[p.value for p in Priority],
        help="the request's priority; high takes the priority queue (default: normal)",
    )
    root.add_argument(
        "--document-id",
        help="order this request after the document's others (default: unordered)",
    )
    root.add_argument("--parameters", help="model parameters as a JSON object (default: none)")
    root.add_argument(
        "--metadata",
        action="append",
        metavar="KEY=VALUE",
        help="a metadata entry of the request, repeatable (default: none)",
    )
    root.add_argument(
        "--not-before",
        help="ISO 8601 time with a zone: do not start before (default: at once)",
    )
    root.add_argument(
        "--deadline-seconds",
        type=int,
        help="give up this long after sending (default: the DefaultDeadlineSeconds setting)",
    )
    root.add_argument(
        "--after", help="the id of a request that must complete first (default: none)"
    )
    root.add_argument(
        "--request-id", help="the id to send under (default: derived from the request)"
    )
    connection = root.add_mutually_exclusive_group()
    connection.add_argument(
        "--connection",
        help="a Service Bus connection string (default: the ServiceBusConnection setting)",
    )
    connection.add_argument(
        "--namespace",
        help="<name>.servicebus.windows.net, signed in with DefaultAzureCredential "
        "(default: the ServiceBusConnection setting)",
    )
    root.add_argument(
        "--json", action="store_true", help="print the summary as JSON (default: as text)"
    )
    root.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress on stderr (default: progress on stderr)",
    )
    root.add_argument(
        "--max-batch-messages",
        type=int,
        help="at most N messages per batch (default: as many as fit in a batch)",
    )
    return root


def single_request(args: argparse.Namespace) -> dict[str, Any]:
    """The request the flags describe, as a JSONL line would give it."""
    document: dict[str, Any] = {}
    if args.text is not None:
        document["input"] = {"text": args.text}
    else:
        document["input"] = {"blob_uri": args.blob_uri}
        if args.sha256:
            document["input"]["sha256"] = args.sha256
    plain = {
        "tenant_id": args.tenant,
        "model": args.model,
        "priority": args.priority,
        "document_id": args.document_id,
        "not_before": args.not_before,
        "deadline_seconds": args.deadline_seconds,
        "after": args.after,
        "request_id": args.request_id,
    }
    document.update({key: value for key, value in plain.items() if value is not None})
    if args.parameters is not None:
        try:
            document["parameters"] = json.loads(args.parameters)
        except json.JSONDecodeError as error:
            raise UsageError(f"--parameters is not JSON: {error}") from error
    if args.metadata:
        pairs = [item.partition("=") for item in args.metadata]
        if any(not key or not sep for key, sep, _ in pairs):
            raise UsageError("--metadata takes KEY=VALUE")
        document["metadata"] = {key: value for key, _, value in pairs}
    return document


def requests_of(
    args: argparse.Namespace, stack: ExitStack, stdin: BinaryIO
) -> Iterator[ParsedLine | LineRefusal]:
    """The requests to send: the file's lines (streamed), or the one the flags describe."""
    if args.file is None:
        return iter([parse_document(single_request(args), 1)])
    given = [name for name in SINGLE_ONLY if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"{flags}: for one request, not with --file (put it in the lines)")
    defaults = {
        key: value
        for key, value in (("tenant_id", args.tenant), ("model", args.model))
        if value is not None
    }
    if args.file == "-":
        stream = stdin
    else:
        try:
            stream = stack.enter_context(open(args.file, "rb"))  # noqa: SIM115
        except OSError as error:
            raise UsageError(f"cannot read {args.file}: {error.strerror}") from error
    return parse_lines(stream, defaults)


def settings_for(args: argparse.Namespace, settings: Settings | None) -> Settings:
    chosen = settings or load_settings()
    if args.connection:
        connection = {"connection_string": args.connection, "namespace": None}
    elif args.namespace:
        connection = {"connection_string": None, "namespace": args.namespace}
    else:
        return chosen
    servicebus = chosen.servicebus.model_copy(update=connection)
    return chosen.model_copy(update={"servicebus": servicebus})


def send(
    args: argparse.Namespace,
    settings: Settings,
    items: Iterator[ParsedLine | LineRefusal],
    stderr: TextIO,
) -> SendReport:
    """Compose the producer over the real adapters and run it."""
    from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
    from shared.adapters.servicebus import servicebus_client
    from shared.adapters.servicebus_producer import ServiceBusBatchSenders

    # No storage configured: lines that need a claim check are refused, saying so. A
    # configured one the SDK could not sign with is a configuration error (raised here).
    storage = settings.storage
    configured = storage.connection_string or storage.blob_endpoint
    blobs = AzureBlobStore(blob_service_client(settings)) if configured else None
    senders = ServiceBusBatchSenders(servicebus_client(settings))
    progress = None if args.no_progress else ProgressDisplay(stderr)
    producer = Producer.from_settings(
        settings,
        senders,
        blobs,
        progress=progress,
        max_batch_messages=args.max_batch_messages,
        keep_ids=args.file is None,
    )
    try:
        return producer.send(items)
    finally:
        senders.close()


def main(
    argv: Sequence[str] | None = None,
    settings: Settings | None = None,
    *,
    stdin: BinaryIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the command; ``settings`` replaces the app settings (tests)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = parser().parse_args(argv)
    if args.max_batch_messages is not None and args.max_batch_messages < 1:
        print("--max-batch-messages must be at least 1", file=err)
        return EXIT_CONFIGURATION
    with ExitStack() as stack:
        try:
            items = requests_of(args, stack, stdin or sys.stdin.buffer)
            report = send(args, settings_for(args, settings), items, err)
        except UsageError as error:
            print(error, file=err)
            return EXIT_CONFIGURATION
        except ConfigurationError as error:
            print(f"configuration error: {error}", file=err)
            return EXIT_CONFIGURATION
    if args.json:
        print(json.dumps(report.as_dict(), indent=2), file=out)
    else:
        print(report.summary_text(), file=out)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
