"""The ``sb-deadletters`` (alias ``servicebus-deadletters``) commands of ``python -m shared.ops``.

    python -m shared.ops sb-deadletters list [--queue Q ...] [--limit N] [--json]
    python -m shared.ops sb-deadletters show MESSAGE_ID_OR_SEQUENCE_NUMBER [--queue Q] [--json]
    python -m shared.ops sb-deadletters replay|purge (--all | FILTERS) [--queue Q ...]
                                                      [--dry-run] [--yes]
    python -m shared.ops sb-deadletters replay ... --extend-deadline DURATION

    python -m shared.ops sb-deadletters ACTION --subscription NAME   (the results topic's)

They work on the dead-letter queues of the request queues, or of the results topic's
subscriptions (``--subscription NAME`` or ``--queue <topic>/subscriptions/NAME``; a replay
sends to the topic, see ``processing.dead_letters.subscriptions``), through the
``DeadLetterOperations`` that ``ops`` builds (over azure-servicebus, or the caller's own:
the unit tests), within a ``DeadLetterScope`` (the request queues, the results topic and
the deadline cap). Here live the argument parsing, the queue and filter choice and the
command flow; the operator's confirmation and ``--extend-deadline`` are those of every
replay (``replay_options``), the printing is in ``servicebus_output``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from shared.documents import Document
from shared.entrypoints.cli.ops_help import command_parser
from shared.entrypoints.cli.replay_options import (
    add_extend_deadline,
    add_yes,
    confirmed,
    deadline_extension,
)
from shared.entrypoints.cli.servicebus_output import (
    describe_outcome,
    format_age,
    label,
    message_details,
    message_json,
    message_row,
    newest_first,
    ranked,
)
from shared.errors import ConfigurationError, TransientError
from shared.lanes import Lane, LaneQueues
from shared.processing.dead_letters.filters import Selection, find, parse_age, summarise
from shared.processing.dead_letters.operations import DeadLetterOperations, ReplayOutcome
from shared.processing.dead_letters.queues import (
    SUBSCRIPTIONS,
    subscription_path,
    topic_subscription,
)
from shared.processing.values import DeadLetteredMessage


@dataclass(frozen=True)
class DeadLetterScope:
    """What the commands may name: the request queues (lanes), the results topic whose
    subscriptions they reach (ResultsTopicName), and the cap of ``--extend-deadline``
    (MaxDeadlineSeconds)."""

    lanes: LaneQueues
    results_topic: str
    max_deadline: timedelta


def _subscription(entity: str, topic: str) -> str:
    """A results-topic subscription's entity path, checked."""
    found = topic_subscription(entity)
    if found is None or found[0] != topic or "/" in found[1]:
        raise ConfigurationError(
            f"{entity!r} is not a subscription of the results topic "
            f"(write {subscription_path(topic, 'NAME')}, or --subscription NAME)"
        )
    return entity


def _queues(args: argparse.Namespace, scope: DeadLetterScope) -> list[str]:
    """The entities ``--queue`` (a request queue, a lane, or a results-topic subscription's
    path) and ``--subscription`` name; all three request queues when neither is given."""
    lanes, topic = scope.lanes, scope.results_topic
    chosen = [subscription_path(topic, name) for name in args.subscription]
    for path in chosen:
        _subscription(path, topic)
    names = args.queue or ([] if chosen else [lane.value for lane in Lane])
    for name in names:
        if SUBSCRIPTIONS in name:
            if (path := _subscription(name, topic)) not in chosen:
                chosen.append(path)
            continue
        queue = lanes.queue(Lane(name)) if name in set(Lane) else name
        try:
            lanes.lane(queue)
        except ValueError as error:
            known = ", ".join(lanes.queue(lane) for lane in Lane)
            raise ConfigurationError(f"{error} (the request queues: {known})") from error
        if queue not in chosen:
            chosen.append(queue)
    return chosen


def sb_list_command(
    args: argparse.Namespace, scope: DeadLetterScope, operations: DeadLetterOperations
) -> int:
    queues, now = _queues(args, scope), operations.clock()
    items = newest_first(operations.messages(queues))
    markers = operations.markers(items)
    summary = summarise(items, now)
    if args.json:
        document: Document = {
            "queues": queues,
            "total": summary.total,
            **{f"by_{key}": dict(ranked(counts)) for key, counts in summary.by.items()},
            "oldest": summary.oldest.isoformat() if summary.oldest else None,
            "newest": summary.newest.isoformat() if summary.newest else None,
            "messages": [
                message_json(i, now, markers.get((i.queue, i.sequence_number))) for i in items
            ],
        }
        print(json.dumps(document, indent=2))
        return 0
    print(f"{summary.total} dead-lettered messages in {', '.join(queues)}")
    for heading, counts in summary.by.items():
        if counts:
            print(f"by {heading}: " + ", ".join(f"{k} {v}" for k, v in ranked(counts)))
    if summary.oldest and summary.newest:
        print(
            f"oldest: {summary.oldest.isoformat()} ({format_age(now - summary.oldest)} ago), "
            f"newest: {summary.newest.isoformat()} ({format_age(now - summary.newest)} ago)"
        )
    for item in items[: args.limit]:
        print(message_row(item, now, markers.get((item.queue, item.sequence_number))))
    if len(items) > args.limit:
        print(f"  ... {len(items) - args.limit} more (use --limit)")
    return 0


def sb_show_command(
    args: argparse.Namespace, scope: DeadLetterScope, operations: DeadLetterOperations
) -> int:
    now = operations.clock()
    found = find(operations.messages(_queues(args, scope)), args.message)
    if not found:
        print(f"no dead-lettered message {args.message}", file=sys.stderr)
        return 1
    shown = [message_details(i, now, operations.marker(i)) for i in found]
    if args.json:
        print(json.dumps(shown, indent=2, default=str))
        return 0
    for details in shown:
        for key, value in details.items():
            if isinstance(value, dict):
                print(f"{key}:")
                print("  " + json.dumps(value, indent=2, default=str).replace("\n", "\n  "))
            elif value is not None:
                print(f"{key + ':':<20} {value}")
        print()
    return 0


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(
        everything=args.all,
        reasons=tuple(args.reason),
        tenants=tuple(args.tenant),
        models=tuple(args.model),
        message_ids=tuple(args.message_id),
        sequence_numbers=tuple(args.sequence_number),
        older_than=args.older_than,
        newer_than=args.newer_than,
    )


def _confirmed(
    args: argparse.Namespace, scope: DeadLetterScope, operations: DeadLetterOperations, verb: str
) -> list[DeadLetteredMessage] | None:
    """The messages the filters choose, after the operator confirmed (None: declined)."""
    queues = _queues(args, scope)
    chosen = _selection(args).choose(operations.messages(queues), operations.clock())
    print(f"{len(chosen)} dead-lettered messages chosen in {', '.join(queues)}")
    if not chosen or args.dry_run or args.yes:
        return chosen
    return chosen if confirmed(f"{verb} {len(chosen)} messages?") else None


def sb_replay_command(
    args: argparse.Namespace, scope: DeadLetterScope, operations: DeadLetterOperations
) -> int:
    if not _selection(args).chooses_anything:
        print(
            "choose what to replay: --all, --reason, --tenant, --model, --message-id, "
            "--sequence-number, --older-than or --newer-than",
            file=sys.stderr,
        )
        return 2
    extension = deadline_extension(args.extend_deadline, scope.max_deadline)
    chosen = _confirmed(args, scope, operations, "Replay")
    if chosen is None:
        return 1
    if any(topic_subscription(item.queue) for item in chosen):
        print(
            "results messages are sent again to their topic: every subscription whose "
            "filter admits a copy receives it (replay_subscription names the one meant)"
        )
    if args.dry_run:
        for position, item in enumerate(chosen, start=1):
            told = describe_outcome(operations.plan(item, extension), dry_run=True)
            print(f"[{position}/{len(chosen)}] {label(item)}: {told}")
        return 0

    def progress(position: int, total: int, outcome: ReplayOutcome) -> None:
        told = describe_outcome(outcome)
        print(f"[{position}/{total}] {label(outcome.item)}: {told}", flush=True)

    try:
        outcomes = operations.replay(chosen, progress, extension)
    except TransientError as error:
        print(f"stopped: {error}. Run the same command again to continue.", file=sys.stderr)
        return 3
    counts = {s: sum(o.status == s for o in outcomes) for s in ("replay", "already-replayed")}
    refused = sum(o.status == "refused" for o in outcomes)
    print(
        f"done: {counts['replay']} replayed, {counts['already-replayed']} already replayed, "
        f"{sum(o.status == 'skipped' for o in outcomes)} skipped, {refused} refused"
    )
    return 1 if refused else 0


def sb_purge_command(
    args: argparse.Namespace, scope: DeadLetterScope, operations: DeadLetterOperations
) -> int:
    if not _selection(args).chooses_anything:
        print("choose what to purge: --all or filters (see --help)", file=sys.stderr)
        return 2
    chosen = _confirmed(args, scope, operations, "Remove")
    if chosen is None:
        return 1
    if args.dry_run:
        now, markers = operations.clock(), operations.markers(chosen)
        for item in chosen:
            print(message_row(item, now, markers.get((item.queue, item.sequence_number))))
        print(f"would remove {len(chosen)}")
        return 0
    removed = operations.purge(chosen)
    print(f"removed {len(removed)} of {len(chosen)} dead-lettered messages")
    if len(removed) < len(chosen):
        print(f"{len(chosen) - len(removed)} were gone already or locked by another receiver")
    return 0


def _filters(action: argparse.ArgumentParser) -> None:
    """The choice of ``replay`` and ``purge``: every filter given must hold."""
    repeat = "; may be repeated, any of them matches"
    action.add_argument(
        "--all",
        action="store_true",
        help="every message of the chosen queues (default: only those the filters choose)",
    )
    action.add_argument(
        "--reason",
        action="append",
        default=[],
        help=f"dead-letter reason, e.g. MaxRetriesExceeded{repeat} (default: any reason)",
    )
    action.add_argument(
        "--tenant",
        action="append",
        default=[],
        help=f"the tenant application property{repeat} (default: any tenant)",
    )
    action.add_argument(
        "--model",
        action="append",
        default=[],
        help=f"the model_name application property{repeat} (default: any model)",
    )
    action.add_argument(
        "--message-id",
        action="append",
        default=[],
        metavar="ID",
        help=f"a message id{repeat} (default: any message)",
    )
    action.add_argument(
        "--sequence-number",
        action="append",
        default=[],
        type=int,
        metavar="N",
        help=f"a sequence number in its dead-letter queue{repeat} (default: any)",
    )
    action.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="first enqueued longer ago than AGE: 90s, 30m, 2h, 7d, 1d12h (default: any age)",
    )
    action.add_argument(
        "--newer-than",
        type=parse_age,
        metavar="AGE",
        help="first enqueued within AGE: 90s, 30m, 2h, 7d, 1d12h (default: any age)",
    )
    action.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be done and change nothing (default: do it)",
    )
    add_yes(action)


AREA_HELP = (
    "Service Bus: the dead-letter queues of the request queues and of the results "
    "topic's subscriptions (Event Grid's dead-lettered events: deadletters)"
)


def add_servicebus_commands(commands: Any) -> None:
    """Add the ``sb-deadletters`` area to the root parser's sub-commands (``commands``);
    its actions run with the scope and the operations ``ops.main`` builds
    (``tools="servicebus"``)."""
    area = command_parser(
        commands,
        "sb-deadletters",
        aliases=["servicebus-deadletters"],
        summary=AREA_HELP,
        description=f"{AREA_HELP}. sb-deadletters is servicebus-deadletters.",
    )
    area.set_defaults(tools="servicebus")
    actions = area.add_subparsers(dest="action", required=True)
    queue_help = (
        "a request queue or lane (standard, priority, ordered), or a results-topic "
        "subscription as <topic>/subscriptions/<name>; may be repeated (default: the "
        "three request queues)"
    )
    subscription_help = (
        "a subscription of the results topic (ResultsTopicName), e.g. audit; may be "
        "repeated (default: none, the request queues)"
    )
    commands_and_help: list[tuple[str, str, Callable[..., int]]] = [
        ("list", "summarise and list dead-lettered messages (peek only)", sb_list_command),
        ("show", "one message: properties and a body preview without secrets", sb_show_command),
        ("replay", "send corrected copies of chosen messages, once each", sb_replay_command),
        ("purge", "remove chosen messages from the dead-letter queues", sb_purge_command),
    ]
    for name, help_text, run in commands_and_help:
        action = command_parser(actions, name, summary=help_text)
        action.add_argument("--queue", action="append", default=[], help=queue_help)
        action.add_argument("--subscription", action="append", default=[], help=subscription_help)
        action.set_defaults(run=run)
        if name == "list":
            action.add_argument(
                "--limit",
                type=int,
                default=50,
                metavar="N",
                help="list at most N messages, newest first; the summary counts them all "
                "(default: %(default)s)",
            )
        if name == "show":
            action.add_argument("message", help="message id or sequence number")
        if name in ("list", "show"):
            action.add_argument(
                "--json", action="store_true", help="print JSON for scripts (default: text)"
            )
        else:
            _filters(action)
        if name == "replay":
            add_extend_deadline(action, "each replayed request")
