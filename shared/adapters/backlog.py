"""The request queue's depth from Service Bus runtime properties (ATOM management API).

Reading runtime properties needs the Manage right in Azure only with SAS; with Entra ID
the app's identity needs the "Azure Service Bus Data Owner" role or a reader role on the
namespace (see infra/). The local emulator serves the same endpoint.
"""

from __future__ import annotations

from azure.servicebus.management import ServiceBusAdministrationClient

from shared.adapters.identity import azure_credential
from shared.backlog import BacklogProbe
from shared.errors import ConfigurationError
from shared.settings import Settings


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
    return QueueBacklogProbe(administration_client(settings), settings.requests_queue_name)
