"""The ``deadletters`` commands of ``python -m shared.ops``: Event Grid's dead letters.

    python -m shared.ops deadletters list [--prefix P] [--limit N]
    python -m shared.ops deadletters replay (--all | --event-id ID ... | --reason R | --type T)
                                            [--prefix P] [--dry-run] [--yes]
                                            [--extend-deadline DURATION]

``deadletters``, ``eg-deadletters`` and ``eventgrid-deadletters`` are one command (its
Service Bus counterpart is ``sb-deadletters``). They read Event Grid's dead-letter blobs
and replay chosen events into intake through the ``DeadLetterReplay`` that ``ops`` hands
them (``events.dead_letters``), within an ``EventReplayScope`` (the deadline cap and the
deadline intake gives a request). Only the argument parsing, the choice, the printing and
the replay's options live here, so ``ops`` stays the assembly of the command areas.

A replay of more than one event, or of ``--all``, asks first (``--yes`` does not), as
``sb-deadletters replay`` does (``replay_options``). ``--extend-deadline DURATION`` gives
each replayed ``InferenceRequested`` event's request the deadline now + DURATION (capped
by ``MaxDeadlineSeconds``, never shorter than the one it would get): a replayed event's
``deadline_seconds`` counts from the replay, so the extension is the event's
``deadline_seconds`` as intake reads it. A ``BlobCreated`` event names no deadline: its
request takes ``DefaultDeadlineSeconds``, extension or not.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from shared.entrypoints.cli.ops_help import command_parser
from shared.entrypoints.cli.replay_options import (
    add_extend_deadline,
    add_yes,
    confirmed,
    deadline_extension,
)
from shared.entrypoints.cli.servicebus_output import format_age
from shared.errors import TransientError
from shared.events.dead_letters import (
    DeadLetteredEvent,
    DeadLetterReplay,
    ReplayResult,
    newest_first,
    summarise,
)
from shared.events.incoming import BLOB_CREATED, INFERENCE_REQUESTED
from shared.events.intake import InferenceRequestedData
from shared.processing.dead_letters.deadlines import DeadlineExtension

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventReplayScope:
    """What the replay needs beyond the events: the cap of ``--extend-deadline``
    (MaxDeadlineSeconds), and the deadline intake gives an ``InferenceRequested`` event's
    request, in seconds from its replay (None: none, a batch request that names none)."""

    max_deadline: timedelta
    deadline_of: Callable[[InferenceRequestedData], int | None]


@dataclass(frozen=True)
class Planned:
    """A pending event as it will be replayed, and what ``--extend-deadline`` made of its
    deadline (None: nothing to tell)."""

    item: DeadLetteredEvent
    deadline: str | None = None
    extended: bool = False


def _line(item: DeadLetteredEvent, replayed: bool) -> str:
    mark = "replayed" if replayed else "pending"
    return (
        f"  {item.event.id:<38} {item.event.type:<36} {item.reason:<28} "
        f"attempts={item.attempts:<3} last={item.last_outcome}"
        f"{'/' + str(item.last_http_status) if item.last_http_status else ''} "
        f"published={item.publish_time or '?'}  [{mark}]"
    )


def list_command(args: argparse.Namespace, replay: DeadLetterReplay, _: EventReplayScope) -> int:
    items = newest_first(list(replay.events(args.prefix)))
    print(f"{len(items)} dead-lettered events in container '{replay.container}'")
    for heading, counts in summarise(items).items():
        print(f"by {heading}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    for item in items[: args.limit]:
        print(_line(item, replay.replayed(item)))
    if len(items) > args.limit:
        print(f"  ... {len(items) - args.limit} more (use --limit)")
    return 0


def _chosen(items: list[DeadLetteredEvent], args: argparse.Namespace) -> list[DeadLetteredEvent]:
    if args.all:
        return items
    chosen = items
    if args.event_id:
        wanted = set(args.event_id)
        chosen = [i for i in chosen if i.event.id in wanted]
    if args.reason:
        chosen = [i for i in chosen if i.reason == args.reason]
    if args.type:
        chosen = [i for i in chosen if i.event.type == args.type]
    return chosen


def _extended(
    item: DeadLetteredEvent, extension: DeadlineExtension, scope: EventReplayScope
) -> Planned:
    """``item`` with the extension's deadline in its event's ``deadline_seconds``, when
    it takes one."""
    event = item.event
    if event.type == BLOB_CREATED:
        return Planned(
            item,
            "deadline not extended: a BlobCreated event's request takes DefaultDeadlineSeconds",
        )
    if event.type != INFERENCE_REQUESTED or not isinstance(event.data, dict):
        return Planned(item)
    try:
        data = InferenceRequestedData.model_validate(event.data)
    except ValidationError:
        return Planned(item)  # intake rejects it, with the reason
    own = scope.deadline_of(data)
    if own is None:
        return Planned(item, "no deadline, kept (a batch request that names none)")
    # Only a reference: the request's deadline counts from when intake accepts it.
    now = datetime.now(UTC)
    applied = extension.apply(now + timedelta(seconds=own), now)
    if applied.kept:
        return Planned(
            item,
            f"deadline now + {format_age(timedelta(seconds=own))} kept (later than the extension)",
        )
    seconds = math.ceil((applied.new - now).total_seconds())
    told = (
        f"deadline extended from now + {format_age(timedelta(seconds=own))} "
        f"to now + {format_age(timedelta(seconds=seconds))}"
    )
    if applied.capped:
        told += f" (capped by MaxDeadlineSeconds={int(extension.cap.total_seconds())})"
    data_with_deadline = {**event.data, "deadline_seconds": seconds}
    return Planned(replace(item, event=replace(event, data=data_with_deadline)), told, True)


def _planned(
    pending: list[DeadLetteredEvent],
    extension: DeadlineExtension | None,
    scope: EventReplayScope,
) -> list[Planned]:
    if extension is None:
        return [Planned(item) for item in pending]
    return [_extended(item, extension, scope) for item in pending]


def _status(result: ReplayResult) -> str | None:
    return result.outcome.status if result.outcome else None


def _told(result: ReplayResult, plan: Planned | None) -> str:
    """What became of one event, and of its deadline."""
    if result.outcome is None:
        return "already replayed, skipped"
    outcome = result.outcome
    told: str = outcome.status
    if outcome.request_id:
        told += f" -> request {outcome.request_id}"
    if outcome.reason and outcome.status == "rejected":
        told += f": {outcome.reason}"
    if plan is None or plan.deadline is None:
        return told
    if outcome.status == "duplicate":
        return told + "; deadline unchanged: the request existed already"
    return f"{told}; {plan.deadline}" if outcome.status == "accepted" else told


def replay_command(
    args: argparse.Namespace, replay: DeadLetterReplay, scope: EventReplayScope
) -> int:
    if not (args.all or args.event_id or args.reason or args.type):
        print("choose what to replay: --all, --event-id, --reason or --type", file=sys.stderr)
        return 2
    extension = deadline_extension(args.extend_deadline, scope.max_deadline)
    chosen = _chosen(list(replay.events(args.prefix)), args)
    pending = [i for i in chosen if not replay.replayed(i)]
    print(f"{len(chosen)} events chosen, {len(chosen) - len(pending)} already replayed")
    plans = _planned(pending, extension, scope)
    if args.dry_run:
        for plan in plans:
            print(_line(plan.item, False) + (f"  {plan.deadline}" if plan.deadline else ""))
        return 0
    asks = bool(pending) and (args.all or len(chosen) > 1) and not args.yes
    if asks and not confirmed(f"Replay {len(pending)} events into intake?"):
        return 1
    by_key = {plan.item.key: plan for plan in plans}

    def progress(position: int, total: int, result: ReplayResult) -> None:
        item, plan = result.item, by_key.get(result.item.key)
        if plan is not None and plan.extended and _status(result) == "accepted":
            log.warning("replayed event %s: %s", item.event.id, plan.deadline)
        told = _told(result, plan)
        print(f"[{position}/{total}] {item.event.id} ({item.event.type}) {told}", flush=True)

    try:
        items = [by_key[i.key].item if i.key in by_key else i for i in chosen]
        results = replay.replay(items, progress)
    except TransientError as error:
        print(f"stopped: {error}. Run the same command again to continue.", file=sys.stderr)
        return 3
    statuses = [r.outcome.status for r in results if r.outcome]
    skipped = sum(1 for r in results if r.outcome is None)
    print(
        f"done: {statuses.count('accepted')} accepted, {statuses.count('duplicate')} duplicates, "
        f"{statuses.count('ignored')} ignored, {statuses.count('rejected')} rejected, "
        f"{skipped} skipped"
    )
    return 1 if "rejected" in statuses else 0


AREA_HELP = (
    "Event Grid: the dead-lettered events in EventGridDeadLetterContainer, replayed "
    "through intake (the Service Bus dead-letter queues: sb-deadletters)"
)


def add_eventgrid_commands(commands: Any) -> None:
    """Add the ``deadletters`` area to the root parser's sub-commands (``commands``); its
    actions run with the app's ``DeadLetterReplay`` and an ``EventReplayScope``
    (``tools="eventgrid"``)."""
    dead = command_parser(
        commands,
        "deadletters",
        aliases=["eg-deadletters", "eventgrid-deadletters"],
        summary=AREA_HELP,
        description=f"{AREA_HELP}. deadletters is eg-deadletters and eventgrid-deadletters.",
    )
    dead.set_defaults(tools="eventgrid")
    actions = dead.add_subparsers(dest="action", required=True)
    prefix_help = (
        "only the blobs whose names start with this, e.g. TOPIC/SUBSCRIPTION/2026/11 "
        "(default: the whole container)"
    )
    listing = command_parser(actions, "list", summary="summarise and list dead-lettered events")
    listing.add_argument("--prefix", default="", help=prefix_help)
    listing.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="list at most N events, newest first; the summary counts them all "
        "(default: %(default)s)",
    )
    listing.set_defaults(run=list_command)
    replaying = command_parser(
        actions, "replay", summary="replay chosen events into intake, once each"
    )
    replaying.add_argument("--prefix", default="", help=prefix_help)
    replaying.add_argument(
        "--all",
        action="store_true",
        help="every event under --prefix, whatever the filters (default: only those the "
        "filters choose)",
    )
    replaying.add_argument(
        "--event-id",
        action="append",
        default=[],
        metavar="ID",
        help="an event id; may be repeated, any of them matches (default: any event)",
    )
    replaying.add_argument(
        "--reason",
        help="the dead-letter reason, e.g. MaxDeliveryAttemptsExceeded (default: any reason)",
    )
    replaying.add_argument(
        "--type",
        help="the event type, e.g. com.inferbus.InferenceRequested (default: any type)",
    )
    replaying.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be replayed and replay nothing (default: replay)",
    )
    add_yes(replaying)
    add_extend_deadline(replaying, "each replayed InferenceRequested event's request")
    replaying.set_defaults(run=replay_command)
