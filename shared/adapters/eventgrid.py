"""CloudEvents to Event Grid through ``EventGridPublisherClient``.

Works with a custom topic in CloudEvents schema (Event Grid Basic) or a namespace topic
(set ``EventGridTopic__namespaceTopic``), authenticated with managed identity (role
"EventGrid Data Sender" at topic scope) or, for local tests, a key. Events are sent in
batches that stay under the service's 1 MB request limit; a batch is accepted or refused
as a whole, and "accepted" means accepted for routing, not delivered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.core.messaging import CloudEvent
from azure.eventgrid import EventGridPublisherClient

from shared.adapters.identity import key_or_identity
from shared.errors import ConfigurationError, PermanentError, TransientError
from shared.events.ports import CloudEventSpec
from shared.settings import Settings

MAX_BATCH_BYTES = 900_000  # below the 1 MB request limit, leaving room for the envelope
MAX_BATCH_EVENTS = 500


def to_cloud_event(spec: CloudEventSpec) -> CloudEvent[dict[str, Any]]:
    return CloudEvent(
        source=spec.source,
        type=spec.type,
        id=spec.id,
        subject=spec.subject,
        data=spec.data,
        datacontenttype="application/json",
        extensions=dict(spec.extensions) or None,
    )


def batches(specs: list[CloudEventSpec]) -> Iterator[list[CloudEventSpec]]:
    """Split events into requests that respect the size and count limits."""
    batch: list[CloudEventSpec] = []
    size = 0
    for spec in specs:
        event_size = len(json.dumps(spec.data)) + 512
        if batch and (size + event_size > MAX_BATCH_BYTES or len(batch) >= MAX_BATCH_EVENTS):
            yield batch
            batch, size = [], 0
        batch.append(spec)
        size += event_size
    if batch:
        yield batch


class EventGridPublisher:
    """Implements ``events.ports.EventPublisher``."""

    def __init__(self, client: EventGridPublisherClient) -> None:
        self._client = client

    def publish(self, events: list[CloudEventSpec]) -> None:
        for batch in batches(events):
            try:
                self._client.send([to_cloud_event(spec) for spec in batch])
            except HttpResponseError as error:
                if error.status_code in (408, 429) or (error.status_code or 0) >= 500:
                    raise TransientError(f"Event Grid answered {error.status_code}") from error
                if error.status_code in (401, 403):
                    raise ConfigurationError(
                        f"Event Grid refused the credential ({error.status_code})"
                    ) from error
                raise PermanentError(f"Event Grid refused the events: {error.message}") from error
            except AzureError as error:
                raise TransientError(
                    f"Event Grid is unreachable: {type(error).__name__}"
                ) from error


def event_grid_publisher(settings: Settings) -> EventGridPublisher | None:
    """The publisher, or None when no topic is configured (events are then not published)."""
    if not settings.eventgrid_topic.endpoint:
        return None
    client = EventGridPublisherClient(
        settings.eventgrid_topic.endpoint,
        key_or_identity(settings.eventgrid_topic.key, settings.eventgrid_topic.client_id),
        namespace_topic=settings.eventgrid_topic.namespace_topic or None,
    )
    return EventGridPublisher(client)
