"""How the ``sb-deadletters`` commands print a dead-lettered message and a replay outcome.

One row per message for ``list`` and ``purge --dry-run``, one JSON document per message
for ``list --json`` and ``show``, one line per replay outcome. Kept apart from the
commands (``servicebus_dead_letters``) so that the command flow reads without the formatting, and
every command prints a message the same way. Descriptions, properties and bodies pass
through ``shared.redaction`` first: nothing printed here carries a credential.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from shared.documents import Document
from shared.processing.dead_letters.operations import ReplayOutcome
from shared.processing.values import DeadLetteredMessage
from shared.redaction import body_preview, mask_credentials, redact


def format_age(age: timedelta | None) -> str:
    if age is None:
        return "?"
    seconds = int(age.total_seconds())
    days, hours, minutes = seconds // 86400, seconds % 86400 // 3600, seconds % 3600 // 60
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{seconds % 60}s" if minutes else f"{seconds}s"


def ranked(counts: Counter[str]) -> list[tuple[str, int]]:
    """Most frequent first, ties by name (stable output for people and scripts)."""
    return sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))


def newest_first(items: list[DeadLetteredMessage]) -> list[DeadLetteredMessage]:
    never = datetime.min.replace(tzinfo=UTC)
    return sorted(items, key=lambda i: i.enqueued_time or never, reverse=True)


def replay_state(marker: Document | None) -> str:
    if marker is None:
        return "pending"
    return "replayed" if marker.get("status") == "sent" else "replay-interrupted"


def location(item: DeadLetteredMessage) -> str:
    """``queue#sequence``: where the message is (a message id alone can repeat)."""
    return f"{item.queue}#{item.sequence_number}"


def label(item: DeadLetteredMessage) -> str:
    return f"{location(item)} {item.message_id or '?'}"


def message_row(item: DeadLetteredMessage, now: datetime, marker: Document | None) -> str:
    return (
        f"  {location(item):<26} {item.message_id or '?':<40} "
        f"{item.reason:<26} tenant={item.tenant or '?'} model={item.model or '?'} "
        f"age={format_age(item.age(now))} deliveries={item.delivery_count}  "
        f"[{replay_state(marker)}]"
    )


def message_json(item: DeadLetteredMessage, now: datetime, marker: Document | None) -> Document:
    age = item.age(now)
    return {
        "queue": item.queue,
        "sequence_number": item.sequence_number,
        "message_id": item.message_id,
        "enqueued_time": item.enqueued_time.isoformat() if item.enqueued_time else None,
        "age_seconds": round(age.total_seconds()) if age is not None else None,
        "delivery_count": item.delivery_count,
        "reason": item.reason,
        "description": mask_credentials(item.description, 1024),
        "tenant": item.tenant,
        "model": item.model,
        "session_id": item.session_id,
        "replay": replay_state(marker),
        "replay_message_id": marker.get("replay_message_id") if marker else None,
    }


def message_details(item: DeadLetteredMessage, now: datetime, marker: Document | None) -> Document:
    """What ``show`` prints: ``message_json`` plus properties and a body preview."""
    return {
        **message_json(item, now, marker),
        "dead_letter_source": item.source or item.queue,
        "correlation_id": item.correlation_id,
        "subject": item.subject,
        "content_type": item.content_type,
        "application_properties": redact(item.application_properties),
        "body": body_preview(item.body),
    }


def describe_outcome(outcome: ReplayOutcome, dry_run: bool = False) -> str:
    if outcome.status == "already-replayed":
        return f"already replayed {outcome.detail}, skipped"
    verb = {"replay": "replayed", "skipped": "skipped", "refused": "refused"}[outcome.status]
    if dry_run:
        verb = {"replay": "would replay", "skipped": "would skip", "refused": "would refuse"}[
            outcome.status
        ]
    return f"{verb}{':' if outcome.status != 'replay' else ''} {outcome.detail}"
