"""The ``deadletters`` (alias ``eventgrid-deadletters``) commands of ``python -m shared.ops``.

    python -m shared.ops deadletters list [--prefix P] [--limit N]
    python -m shared.ops deadletters replay (--all | --event-id ID ... | --reason R | --type T)
                                            [--prefix P] [--dry-run]

They read Event Grid's dead-letter blobs and replay chosen events into intake through the
``DeadLetterReplay`` that ``ops`` hands them (``events.dead_letters``). Only the argument
parsing and the printing live here, so ``ops`` stays the assembly of the command areas.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shared.errors import TransientError
from shared.events.dead_letters import (
    DeadLetteredEvent,
    DeadLetterReplay,
    ReplayResult,
    newest_first,
    summarise,
)


def _line(item: DeadLetteredEvent, replayed: bool) -> str:
    mark = "replayed" if replayed else "pending"
    return (
        f"  {item.event.id:<38} {item.event.type:<36} {item.reason:<28} "
        f"attempts={item.attempts:<3} last={item.last_outcome}"
        f"{'/' + str(item.last_http_status) if item.last_http_status else ''} "
        f"published={item.publish_time or '?'}  [{mark}]"
    )


def list_command(args: argparse.Namespace, replay: DeadLetterReplay) -> int:
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


def _progress(position: int, total: int, result: ReplayResult) -> None:
    item = result.item
    if result.outcome is None:
        told = "already replayed, skipped"
    else:
        told = result.outcome.status
        if result.outcome.request_id:
            told += f" -> request {result.outcome.request_id}"
        if result.outcome.reason and result.outcome.status == "rejected":
            told += f": {result.outcome.reason}"
    print(f"[{position}/{total}] {item.event.id} ({item.event.type}) {told}", flush=True)


def replay_command(args: argparse.Namespace, replay: DeadLetterReplay) -> int:
    if not (args.all or args.event_id or args.reason or args.type):
        print("choose what to replay: --all, --event-id, --reason or --type", file=sys.stderr)
        return 2
    chosen = _chosen(list(replay.events(args.prefix)), args)
    pending = [i for i in chosen if not replay.replayed(i)]
    print(f"{len(chosen)} events chosen, {len(chosen) - len(pending)} already replayed")
    if args.dry_run:
        for item in pending:
            print(_line(item, False))
        return 0
    try:
        results = replay.replay(chosen, _progress)
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


def add_eventgrid_commands(commands: Any) -> None:
    """Add the ``deadletters`` area to the root parser's sub-commands (``commands``); its
    actions run with the app's ``DeadLetterReplay`` (``tools="eventgrid"``)."""
    dead = commands.add_parser(
        "deadletters", aliases=["eventgrid-deadletters"], help="Event Grid dead-lettered events"
    )
    dead.set_defaults(tools="eventgrid")
    actions = dead.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="summarise and list dead-lettered events")
    listing.add_argument(
        "--prefix", default="", help="blob name prefix, e.g. TOPIC/SUBSCRIPTION/2026/11"
    )
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(run=list_command)
    replaying = actions.add_parser("replay", help="replay chosen events into intake, once each")
    replaying.add_argument("--prefix", default="")
    replaying.add_argument("--all", action="store_true")
    replaying.add_argument("--event-id", action="append", default=[])
    replaying.add_argument("--reason", help="e.g. MaxDeliveryAttemptsExceeded")
    replaying.add_argument("--type", help="e.g. com.inferbus.InferenceRequested")
    replaying.add_argument("--dry-run", action="store_true", help="show what would be replayed")
    replaying.set_defaults(run=replay_command)
