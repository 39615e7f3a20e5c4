"""Outgoing Service Bus messages, described without the SDK.

The request message contract (architecture.md): ``message_id = request_id`` so the
queue's duplicate detection drops a re-sent copy, a correlation id for tracing across
hops, ``application/json`` content, a time to live that ends at the job's deadline, and
the routing values as application properties so filters and operators never parse JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from shared.contracts import REQUEST_MESSAGE_SCHEMA, Job, ProcessingMode, RequestMessage
from shared.tracing import TraceContext

PropertyValue = str | int | float | bool

REQUEST_SUBJECT = "inferbus.request"
# A request message intake released at its tenant's part of the deployment (scheduled for
# later): wherever it is processed, its tenant is known to be paced
# (``inference.tenant_shares``).
PACED = "paced"


@dataclass(frozen=True)
class OutgoingMessage:
    body: bytes
    message_id: str
    correlation_id: str
    content_type: str = "application/json"
    subject: str | None = None
    session_id: str | None = None
    time_to_live: timedelta | None = None
    scheduled_enqueue_time: datetime | None = None
    application_properties: dict[str, PropertyValue] = field(default_factory=dict)


class MessageSender(Protocol):
    """Sends to one queue or topic (adapter: azure-servicebus)."""

    def send(self, message: OutgoingMessage) -> None:
        """Send durably; TransientError when the broker cannot take it now."""
        ...


@dataclass(frozen=True)
class Scheduled:
    """A message the broker holds until its scheduled enqueue time: the entity it waits
    in and its sequence number there, by which it can be cancelled until then."""

    entity: str
    sequence_number: int


class SchedulingSender(MessageSender, Protocol):
    """A sender whose scheduled messages can be called back (adapter: azure-servicebus's
    ``schedule_messages`` and ``cancel_scheduled_messages``)."""

    def schedule(self, message: OutgoingMessage) -> Scheduled:
        """Send ``message`` durably for its ``scheduled_enqueue_time`` (required);
        TransientError when the broker cannot take it now."""
        ...

    def cancel(self, scheduled: Sequence[Scheduled]) -> None:
        """Cancel scheduled messages this sender sent (others are not its own: left);
        TransientError when the broker cannot be told now. One already enqueued is
        beyond recall: the broker may refuse the whole call."""
        ...


def request_body(request: RequestMessage) -> bytes:
    """The message body: ``mode`` only when it is not the queue lane's default, so a
    queue-lane message reads the same as before the batch lane existed."""
    queue_lane = request.mode is ProcessingMode.QUEUE
    exclude = {"mode"} if queue_lane else None
    return request.model_dump_json(by_alias=True, exclude=exclude).encode("utf-8")


def request_message_of(job: Job) -> RequestMessage:
    """The request message of a job whose input is stored (a claim check): what intake
    sends for it, and what the job watchdog sends again when that message is lost."""
    if job.input is None:
        raise ValueError(f"job {job.id} has no stored input to send")
    return RequestMessage(
        request_id=job.id,
        tenant_id=job.tenant_id,
        model=job.model,
        input=job.input,
        parameters=job.parameters,
        priority=job.priority,
        not_before=job.not_before,
        deadline=job.deadline,
        metadata=job.metadata,
        after=job.after,
        document_id=job.document_id,
        mode=job.mode,
    )


def request_envelope(
    request: RequestMessage,
    *,
    correlation_id: str,
    trace: TraceContext,
    now: datetime,
    retry_count: int = 0,
    source: str | None = None,
) -> OutgoingMessage:
    """The Service Bus message for a request, per the contract above; ``source`` names
    the door it came through (the job's ``source`` when the processor records it)."""
    properties: dict[str, PropertyValue] = {
        "priority": request.priority.value,
        "model_name": request.model,
        "tenant": request.tenant_id,
        "retry_count": retry_count,
        "traceparent": trace.traceparent,
        # The Functions Service Bus extension and the SDKs correlate on Diagnostic-Id (the
        # SDK rewrites both with its own message span's context when it traces).
        "Diagnostic-Id": trace.traceparent,
        "schema_version": REQUEST_MESSAGE_SCHEMA,
    }
    if trace.tracestate:
        properties["tracestate"] = trace.tracestate
    if source:
        properties["source"] = source
    document_type = request.metadata.get("document_type")
    if document_type:
        properties["document_type"] = document_type
    ttl = None
    if request.deadline is not None:
        ttl = max(request.deadline - now, timedelta(seconds=1))
    return OutgoingMessage(
        body=request_body(request),
        message_id=request.request_id,
        correlation_id=correlation_id,
        subject=REQUEST_SUBJECT,
        session_id=request.document_id,
        time_to_live=ttl,
        application_properties=properties,
    )
