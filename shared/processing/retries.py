"""Scheduled retry copies: how a transient failure comes back later.

Service Bus cannot abandon a message with a delay, so a retry is a copy of the message
scheduled at now + backoff, carrying ``retry_count + 1``; the original is completed only
once the copy is accepted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shared.messaging import OutgoingMessage
from shared.processing.inbound import OUTAGE_RETRY_COUNT, OUTAGE_SINCE, InboundMessage


def retry_copy(
    message: InboundMessage,
    retry_count: int,
    enqueue_at: datetime,
    deadline: datetime | None,
    now: datetime,
    *,
    outage_retry_count: int | None = None,
    outage_since: datetime | None = None,
) -> OutgoingMessage:
    """A copy of ``message`` for a scheduled retry.

    It keeps the request id (in the body), correlation id, session id, subject and every
    application property, but needs its own message id, or the queue's duplicate
    detection would drop it as a copy of the original.
    """
    base_id = (message.message_id or "message").split(":retry:")[0]
    # An outage retry keeps retry_count, so it is told apart by its own count (the queue's
    # duplicate detection would drop a second copy with the same id).
    suffix = f":outage:{outage_retry_count}" if outage_retry_count is not None else ""
    properties = {k: v for k, v in message.application_properties.items() if v is not None}
    properties["retry_count"] = retry_count
    if outage_retry_count is not None:
        properties[OUTAGE_RETRY_COUNT] = outage_retry_count
    if outage_since is not None:
        properties[OUTAGE_SINCE] = outage_since.isoformat()
    ttl = max(deadline - now, timedelta(seconds=1)) if deadline else None
    return OutgoingMessage(
        body=message.body,
        message_id=f"{base_id}:retry:{retry_count}{suffix}",
        correlation_id=message.correlation_id or base_id,
        content_type=message.content_type or "application/json",
        subject=message.subject,
        session_id=message.session_id,
        time_to_live=ttl,
        scheduled_enqueue_time=enqueue_at,
        application_properties=properties,
    )
