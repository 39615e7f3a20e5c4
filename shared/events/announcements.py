"""What Inferbus tells the world when a request ends: a CloudEvent and a topic message.

Both carry the same facts and deterministic ids (derived from the request id and the
event type), so a consumer that receives a redelivery, or a republication after a retry,
can drop the duplicate. Routing values travel as Service Bus application properties so
that subscriptions filter without parsing JSON, and the CloudEvent subject is a path that
Event Grid subject-prefix filters can use.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from shared import telemetry
from shared.contracts import Cost, Job, RequestMessage, ResultDocument
from shared.events.ports import CloudEventSpec, EventPublisher
from shared.messaging import MessageSender, OutgoingMessage

EVENT_SOURCE = "/inferbus/processor"
COMPLETED = "com.inferbus.InferenceCompleted"
FAILED = "com.inferbus.InferenceFailed"
CLASSIFIED_FOR_REVIEW = "com.inferbus.ContentClassified"
# Outcomes announced as InferenceFailed: the request ended without a result.
ENDED_WITHOUT_RESULT = frozenset({"failed", "expired", "cancelled", "rejected"})
_ID_NAMESPACE = uuid.UUID("6f0c6d8e-3b7a-4c1e-9a53-1f1f4b0e2a77")


@dataclass(frozen=True)
class Announcement:
    """The facts of one finished request (no document content: consumers fetch it from
    ``result_url``, the request API's result endpoint)."""

    request_id: str
    tenant_id: str
    model: str
    outcome: str  # completed | refused | failed | expired | cancelled | rejected
    priority: str
    task: str | None = None  # the task of the result (None: no result)
    document_type: str | None = None
    review_required: bool = False
    result_url: str | None = None
    error_code: str | None = None
    cost: Cost | None = None  # what the result's tokens cost (None: not known, or no result)
    traceparent: str | None = None
    tracestate: str | None = None
    correlation_id: str | None = None

    @property
    def subject(self) -> str:
        return f"/tenants/{self.tenant_id}/models/{self.model}/requests/{self.request_id}"

    @property
    def event_types(self) -> list[str]:
        if self.outcome in ENDED_WITHOUT_RESULT:
            return [FAILED]
        types = [COMPLETED]
        if self.review_required:
            types.append(CLASSIFIED_FOR_REVIEW)
        return types


def event_id(request_id: str, event_type: str) -> str:
    """The same request and type always give the same id."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{request_id}/{event_type}"))


def event_data(announcement: Announcement) -> dict[str, Any]:
    return {
        "request_id": announcement.request_id,
        "tenant_id": announcement.tenant_id,
        "model": announcement.model,
        "status": "failed" if announcement.outcome in ENDED_WITHOUT_RESULT else "completed",
        "outcome": announcement.outcome,
        "task": announcement.task,
        "document_type": announcement.document_type,
        "review_required": announcement.review_required,
        "priority": announcement.priority,
        "result_url": announcement.result_url,
        "error_code": announcement.error_code,
        "cost": announcement.cost.model_dump(mode="json") if announcement.cost else None,
    }


def cloud_events(announcement: Announcement) -> list[CloudEventSpec]:
    extensions = {}
    if announcement.traceparent:
        extensions["traceparent"] = announcement.traceparent
        if announcement.tracestate:
            extensions["tracestate"] = announcement.tracestate
    return [
        CloudEventSpec(
            id=event_id(announcement.request_id, event_type),
            type=event_type,
            source=EVENT_SOURCE,
            subject=announcement.subject,
            data=event_data(announcement),
            extensions=extensions,
        )
        for event_type in announcement.event_types
    ]


def topic_message(announcement: Announcement) -> OutgoingMessage:
    """The results-topic message; its properties are what subscription filters match."""
    event_type = announcement.event_types[0]
    properties: dict[str, str | int | float | bool] = {
        "tenant": announcement.tenant_id,
        "model_name": announcement.model,
        "priority": announcement.priority,
        "review_required": announcement.review_required,
        "outcome": announcement.outcome,
        "event_type": event_type,
    }
    if announcement.task:
        properties["task"] = announcement.task
    if announcement.document_type:
        properties["document_type"] = announcement.document_type
    if announcement.traceparent:
        properties["traceparent"] = announcement.traceparent
    return OutgoingMessage(
        body=json.dumps(event_data(announcement)).encode("utf-8"),
        message_id=event_id(announcement.request_id, event_type),
        correlation_id=announcement.correlation_id or announcement.request_id,
        subject=event_type,
        application_properties=properties,
    )


def result_announcement(
    request: RequestMessage,
    job: Job,
    properties: Mapping[str, object],
    api_base_url: str | None,
) -> Announcement:
    """The announcement of a completed job's stored result (either lane), with the URL it
    is served at under the API's public base URL, when one is configured."""
    assert job.result is not None
    result_url = f"{api_base_url}/api/v1/requests/{job.id}/result" if api_base_url else None
    return announcement_for(
        request,
        job.result.outcome,
        properties=properties,
        correlation_id=job.correlation_id,
        result=job.result,
        result_url=result_url,
    )


def announcement_for(
    request: RequestMessage,
    outcome: str,
    *,
    properties: Mapping[str, object] | None = None,
    correlation_id: str | None = None,
    result: ResultDocument | None = None,
    result_url: str | None = None,
    error_code: str | None = None,
) -> Announcement:
    """The announcement of a finished request; ``properties`` are the request message's
    application properties, whose trace context the events continue."""
    properties = properties or {}
    traceparent = properties.get("traceparent")
    tracestate = properties.get("tracestate")
    return Announcement(
        request_id=request.request_id,
        tenant_id=request.tenant_id,
        model=request.model,
        outcome=outcome,
        priority=request.priority.value,
        task=result.task if result is not None else None,
        document_type=analysis.document_type
        if result is not None and (analysis := result.analysis)
        else None,
        review_required=_review_required(result),
        result_url=result_url,
        error_code=error_code,
        cost=result.cost if result is not None else None,
        traceparent=traceparent if isinstance(traceparent, str) else None,
        tracestate=tracestate if isinstance(tracestate, str) else None,
        correlation_id=correlation_id,
    )


def _review_required(result: ResultDocument | None) -> bool:
    """Whether a person should look at the result: the built-in analysis's flag, or a
    boolean ``review_required`` at the top of another task's answer (a task's schema may
    declare one to route its results to review)."""
    if result is None:
        return False
    if (analysis := result.analysis) is not None:
        return analysis.review_required
    return isinstance(result.result, dict) and result.result.get("review_required") is True


class Announcer:
    """Publishes an announcement on both channels; any failure is transient for the caller."""

    def __init__(self, events: EventPublisher | None, topic: MessageSender | None) -> None:
        self._events = events
        self._topic = topic

    def announce(self, announcement: Announcement) -> None:
        """One ``publish`` span per announcement; the CloudEvents and the topic message
        carry its trace context, so a consumer's work continues the request's trace."""
        name = f"{telemetry.SPAN_PUBLISH} {announcement.event_types[0]}"
        attributes = {
            "inferbus.request_id": announcement.request_id,
            "inferbus.outcome": announcement.outcome,
            "messaging.operation.type": "publish",
        }
        with telemetry.span(name, kind=telemetry.PRODUCER, attributes=attributes):
            traceparent = telemetry.current_traceparent()
            if traceparent:
                announcement = replace(announcement, traceparent=traceparent)
            if self._events is not None:
                self._events.publish(cloud_events(announcement))
            if self._topic is not None:
                self._topic.send(topic_message(announcement))
