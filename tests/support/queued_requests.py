"""Request messages queued the way intake queues them, and the failures announced of them,
for integration tests of what happens after the door (outages, dead letters, watchdog)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusClient

from shared.contracts import InlineText, Job, JobStatus, RequestMessage
from shared.entrypoints.bootstrap import Services
from shared.events.announcements import FAILED
from shared.jobs import transition
from shared.messaging import request_envelope
from shared.tracing import continue_or_start
from tests.support.servicebus import drain

# The results topic's subscription that receives every announcement.
AUDIT = ("inference-results", "audit")


def queue_request(
    services: Services,
    tenant: str,
    status: JobStatus = JobStatus.ACCEPTED,
    **envelope: Any,
) -> str:
    """A job recorded in ``status`` and its request message sent with the app's sender
    (``envelope``: fields of the outgoing message to change, e.g. ``time_to_live``)."""
    now = datetime.now(UTC)
    request = RequestMessage(
        request_id=str(uuid.uuid4()),
        tenant_id=tenant,
        model="local-analyzer",
        input=InlineText(text="Invoice 12: 300 EUR due within 30 days."),
        deadline=now + timedelta(hours=1),
    )
    job = Job(
        id=request.request_id,
        tenant_id=tenant,
        model=request.model,
        input=request.input,
        correlation_id=request.request_id,
        created_at=now,
        updated_at=now,
        deadline=request.deadline,
    )
    if status is not JobStatus.ACCEPTED:
        job = transition(job, status)
    assert services.jobs.create(job) is not None
    message = request_envelope(
        request, correlation_id=request.request_id, trace=continue_or_start(None), now=now
    )
    services.ports.requests.send(replace(message, **envelope))
    return request.request_id


def announced_failures(bus: ServiceBusClient) -> dict[str, str]:
    """request id -> error code of the InferenceFailed messages on the results topic."""
    found = {}
    for message in drain(bus, topic=AUDIT[0], subscription=AUDIT[1]):
        if message.subject == FAILED:
            data = json.loads(b"".join(message.body))
            found[data["request_id"]] = data["error_code"]
    return found
