"""The request queue's depth from Service Bus runtime properties.

In Azure: the management (ATOM) API through ``ServiceBusAdministrationClient``; the app's
identity needs the "Azure Service Bus Data Owner" role on the queue (see infra/). Locally:
the project's emulator publishes the same counts as JSON on its admin port
(``ServiceBusRuntimeCountsUrl``), because the SDK's administration client only speaks
HTTPS and the emulator, like Microsoft's, serves AMQP without TLS.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime
from typing import Any
from urllib.parse import quote

from azure.servicebus import ServiceBusClient, ServiceBusMessageState
from azure.servicebus.management import ServiceBusAdministrationClient

from shared.adapters.identity import azure_credential
from shared.errors import ConfigurationError
from shared.intake.backpressure import BacklogProbe
from shared.ops.backlog_report import QueueObserver, QueueSnapshot
from shared.settings import Settings


class EmulatorBacklogProbe:
    """Implements ``backlog.BacklogProbe`` over the local emulator's runtime counts."""

    def __init__(self, counts_url: str, queue_name: str, timeout_seconds: float = 2.0) -> None:
        if not counts_url.startswith(("http://127.", "http://localhost")):
            raise ConfigurationError("ServiceBusRuntimeCountsUrl must be a loopback http:// URL")
        self._url = f"{counts_url.rstrip('/')}/{quote(queue_name)}"
        self._timeout = timeout_seconds

    def counts(self) -> dict[str, Any]:
        """The emulator's runtime properties of the queue (QueueRuntimeProperties names)."""
        with urllib.request.urlopen(self._url, timeout=self._timeout) as response:  # noqa: S310
            counts: dict[str, Any] = json.loads(response.read())
        return counts

    def active_messages(self) -> int:
        return int(self.counts()["active_message_count"])


class QueueBacklogProbe:
    """Implements ``backlog.BacklogProbe`` for one queue."""

    def __init__(self, admin: ServiceBusAdministrationClient, queue_name: str) -> None:
        self._admin = admin
        self._queue_name = queue_name

    def active_messages(self) -> int:
        properties = self._admin.get_queue_runtime_properties(self._queue_name)
        return int(properties.active_message_count or 0)


def administration_client(settings: Settings) -> ServiceBusAdministrationClient:
    if settings.servicebus_connection_string:
        return ServiceBusAdministrationClient.from_connection_string(
            settings.servicebus_connection_string
        )
    if settings.servicebus_namespace:
        credential = azure_credential(settings.servicebus_client_id)
        return ServiceBusAdministrationClient(settings.servicebus_namespace, credential)
    raise ConfigurationError("no Service Bus connection is configured")


def backlog_probe_for(settings: Settings) -> BacklogProbe | None:
    """The probe for the requests queue, or None when backpressure is disabled."""
    if settings.max_queue_backlog <= 0:
        return None
    if settings.servicebus_runtime_counts_url:
        return EmulatorBacklogProbe(
            settings.servicebus_runtime_counts_url, settings.requests_queue_name
        )
    return QueueBacklogProbe(administration_client(settings), settings.requests_queue_name)


class EmulatorQueueObserver:
    """Implements ``backlog_report.QueueObserver`` over the local emulator's counts."""

    def __init__(self, counts_url: str, queue_name: str) -> None:
        self._probe = EmulatorBacklogProbe(counts_url, queue_name)

    def snapshot(self) -> QueueSnapshot:
        counts = self._probe.counts()
        oldest = counts.get("oldest_active_message_enqueued_time_utc")
        return QueueSnapshot(
            active=int(counts["active_message_count"]),
            dead_lettered=int(counts.get("dead_letter_message_count", 0)),
            scheduled=int(counts.get("scheduled_message_count", 0)),
            deferred=int(counts["deferred_message_count"])
            if "deferred_message_count" in counts
            else None,
            oldest_active_enqueued_at=datetime.fromisoformat(oldest) if oldest else None,
        )


class ServiceBusQueueObserver:
    """Implements ``backlog_report.QueueObserver`` in Azure: counts from the management API,
    the oldest active message by peeking the head of the queue (deferred and scheduled
    messages are skipped; the queue orders by sequence number, so the first active one is
    the oldest)."""

    PEEK = 32

    def __init__(
        self, admin: ServiceBusAdministrationClient, client: ServiceBusClient, queue_name: str
    ) -> None:
        self._admin = admin
        self._client = client
        self._queue_name = queue_name

    def snapshot(self) -> QueueSnapshot:
        properties = self._admin.get_queue_runtime_properties(self._queue_name)
        oldest = None
        with self._client.get_queue_receiver(self._queue_name) as receiver:
            for message in receiver.peek_messages(max_message_count=self.PEEK):
                if message.state == ServiceBusMessageState.ACTIVE:
                    oldest = message.enqueued_time_utc
                    break
        return QueueSnapshot(
            active=int(properties.active_message_count or 0),
            dead_lettered=int(properties.dead_letter_message_count or 0),
            scheduled=int(properties.scheduled_message_count or 0),
            deferred=None,
            oldest_active_enqueued_at=oldest,
        )


def queue_observer_for(
    settings: Settings, client: ServiceBusClient, queue: str | None = None
) -> QueueObserver:
    """The observer of ``queue`` (default: the request queue); ``client`` is the
    process's Service Bus client."""
    name = queue or settings.requests_queue_name
    if settings.servicebus_runtime_counts_url:
        return EmulatorQueueObserver(settings.servicebus_runtime_counts_url, name)
    return ServiceBusQueueObserver(administration_client(settings), client, name)
