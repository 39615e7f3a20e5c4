"""The job of a request message that arrives before (or without) its job.

Intake sends the request message first and records the job after the broker took it,
so that a job exists only for work that was really queued (and an Idempotency-Key's
marker needs no second write: the job's existence says the message was sent). The
processor can therefore meet a message whose job is not recorded yet: intake is a few
milliseconds behind, it crashed between the two steps, or the message came from a
producer that sends straight to the queue. In every case the message says all the job
needs, and the processor records it (exclusively: whichever of the two writers comes
second reads the first one's job).
"""

from __future__ import annotations

from datetime import datetime

from shared.contracts import Job, RequestMessage
from shared.processing.inbound import InboundMessage

DIRECT_SOURCE = "servicebus"


def job_from_message(request: RequestMessage, message: InboundMessage, now: datetime) -> Job:
    """The job a request message describes, as intake would have recorded it."""
    source = message.application_properties.get("source")
    return Job(
        id=request.request_id,
        tenant_id=request.tenant_id,
        model=request.model,
        priority=request.priority,
        source=source if isinstance(source, str) and source else DIRECT_SOURCE,
        input=request.input,
        parameters=request.parameters,
        metadata=request.metadata,
        after=request.after,
        correlation_id=message.correlation_id or request.request_id,
        created_at=message.enqueued_time or now,
        updated_at=now,
        not_before=request.not_before,
        deadline=request.deadline,
    )
