"""``events.pull.EventQueue`` over ``azure-eventgrid``'s ``EventGridConsumerClient``.

The client's public ``receive`` turns every event of a batch into an SDK ``CloudEvent``
and raises when one of them is malformed, which would make a single bad event block the
whole subscription until it dead-letters by delivery count. The adapter therefore reads
the batch through the client's generated ``_receive`` operation (the same request) and
leaves parsing to the door, which rejects a malformed event on its own.

Authentication: managed identity ("EventGrid Data Receiver" on the subscription) in
Azure, an access key against the local namespace emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.eventgrid import EventGridConsumerClient
from azure.eventgrid.models import ReleaseDelay

from shared.adapters.identity import key_or_identity
from shared.errors import ConfigurationError, TransientError
from shared.events.ports import PulledEvent
from shared.settings import Settings


@contextmanager
def _namespace_errors(what: str) -> Iterator[None]:
    try:
        yield
    except HttpResponseError as error:
        status = error.status_code or 0
        if status in (401, 403):
            raise ConfigurationError(
                f"{what}: Event Grid refused the credential ({status})"
            ) from error
        if status == 404:
            raise ConfigurationError(f"{what}: no such namespace topic or subscription") from error
        raise TransientError(f"{what}: Event Grid answered {status}") from error
    except AzureError as error:
        raise TransientError(
            f"{what}: Event Grid is unreachable ({type(error).__name__})"
        ) from error


def _failed(result: Any) -> list[str]:
    return [str(failed.lock_token) for failed in result.failed_lock_tokens]


class NamespaceQueue:
    """Implements ``events.pull.EventQueue`` for one queue event subscription."""

    def __init__(self, client: EventGridConsumerClient, topic: str, subscription: str) -> None:
        self._client = client
        self._topic = topic
        self._subscription = subscription

    def receive(self, max_events: int, max_wait_seconds: int) -> list[PulledEvent]:
        with _namespace_errors("receiving events"):
            result = self._client._receive(  # see the module docstring
                self._topic,
                self._subscription,
                max_events=max_events,
                max_wait_time=max_wait_seconds,
            )
        return [
            PulledEvent(
                lock_token=str(detail.broker_properties.lock_token),
                delivery_count=int(detail.broker_properties.delivery_count),
                cloud_event=dict(detail.event),
            )
            for detail in result.details
        ]

    def acknowledge(self, lock_tokens: list[str]) -> list[str]:
        with _namespace_errors("acknowledging events"):
            return _failed(self._client.acknowledge(lock_tokens=lock_tokens))

    def release(self, lock_tokens: list[str], delay_seconds: int) -> list[str]:
        with _namespace_errors("releasing events"):
            result = self._client.release(
                lock_tokens=lock_tokens, release_delay=ReleaseDelay(str(delay_seconds))
            )
        return _failed(result)

    def reject(self, lock_tokens: list[str]) -> list[str]:
        with _namespace_errors("rejecting events"):
            return _failed(self._client.reject(lock_tokens=lock_tokens))

    def renew_locks(self, lock_tokens: list[str]) -> list[str]:
        with _namespace_errors("renewing event locks"):
            return _failed(self._client.renew_locks(lock_tokens=lock_tokens))


def namespace_queue(settings: Settings) -> NamespaceQueue | None:
    """The pull door's queue, or None when no namespace endpoint is configured."""
    endpoint = settings.eventgrid_pull.endpoint
    if not endpoint:
        return None
    client = EventGridConsumerClient(
        endpoint,
        key_or_identity(settings.eventgrid_pull.key, settings.eventgrid_pull.client_id),
        namespace_topic=settings.eventgrid_pull.topic,
        subscription=settings.eventgrid_pull.subscription,
    )
    return NamespaceQueue(
        client, settings.eventgrid_pull.topic, settings.eventgrid_pull.subscription
    )
