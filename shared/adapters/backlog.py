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
from urllib.parse import quote

from azure.servicebus.management import ServiceBusAdministrationClient

from shared.adapters.identity import azure_credential
from shared.backlog import BacklogProbe
from shared.errors import ConfigurationError
from shared.settings import Settings


class EmulatorBacklogProbe:
    """Implements ``backlog.BacklogProbe`` over the local emulator's runtime counts."""

    def __init__(self, counts_url: str, queue_name: str, timeout_seconds: float = 2.0) -> None:
        if not counts_url.startswith(("http://127.", "http://localhost")):
            raise ConfigurationError("ServiceBusRuntimeCountsUrl must be a loopback http:// URL")
        self._url = f"{counts_url.rstrip('/')}/{quote(queue_name)}"
        self._timeout = timeout_seconds

    def active_messages(self) -> int:
        with urllib.request.urlopen(self._url, timeout=self._timeout) as response:  # noqa: S310
            counts = json.loads(response.read())
        return int(counts["active_message_count"])


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
