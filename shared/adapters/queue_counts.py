"""The request queues' and the results topic's subscriptions' counts, from Service Bus
runtime properties.

In Azure: the management (ATOM) API through ``ServiceBusAdministrationClient``
(``get_queue_runtime_properties``, ``get_subscription_runtime_properties``); the app's
identity needs Manage rights on each entity it reads (see infra/). Locally: the project's
emulator publishes the same counts as JSON on its admin port
(``ServiceBusRuntimeCountsUrl``), because the SDK's administration client only speaks
HTTPS and the emulator, like Microsoft's, serves AMQP without TLS. With an emulator
connection string and no counts URL nothing can read the counts, so no lane is gated.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from azure.servicebus import ServiceBusClient, ServiceBusMessageState
from azure.servicebus.management import ServiceBusAdministrationClient

from shared.adapters.identity import azure_credential
from shared.adapters.servicebus import malformed_servicebus_connection
from shared.errors import ConfigurationError
from shared.intake.backpressure import lane_backlog_limits
from shared.intake.ports import BacklogProbe, QueueDepth
from shared.lanes import Lane, LaneQueues
from shared.processing.backlog import SubscriptionObservers
from shared.processing.ports import QueueObserver
from shared.processing.values import QueueSnapshot
from shared.settings import Settings

SUBSCRIPTIONS = "/Subscriptions/"  # the middle of a subscription's entity path


class EmulatorBacklogProbe:
    """Implements ``intake.ports.BacklogProbe`` over the local emulator's runtime counts."""

    def __init__(self, counts_url: str, queue_name: str, timeout_seconds: float = 2.0) -> None:
        if not counts_url.startswith(("http://127.", "http://localhost")):
            raise ConfigurationError("ServiceBusRuntimeCountsUrl must be a loopback http:// URL")
        self._url = f"{counts_url.rstrip('/')}/{quote(queue_name)}"
        self._timeout = timeout_seconds

    def counts(self) -> dict[str, Any]:
        """The emulator's runtime properties of the queue (QueueRuntimeProperties names)."""
        return _read_json(self._url, self._timeout)

    def queue_depth(self) -> QueueDepth:
        counts = self.counts()
        return QueueDepth(
            int(counts["active_message_count"]), int(counts.get("scheduled_message_count", 0))
        )


class QueueBacklogProbe:
    """Implements ``intake.ports.BacklogProbe`` for one queue."""

    def __init__(self, admin: ServiceBusAdministrationClient, queue_name: str) -> None:
        self._admin = admin
        self._queue_name = queue_name

    def queue_depth(self) -> QueueDepth:
        properties = self._admin.get_queue_runtime_properties(self._queue_name)
        return QueueDepth(
            int(properties.active_message_count or 0),
            int(properties.scheduled_message_count or 0),
        )


def administration_client(settings: Settings) -> ServiceBusAdministrationClient:
    if settings.servicebus.connection_string:
        try:
            return ServiceBusAdministrationClient.from_connection_string(
                settings.servicebus.connection_string
            )
        except ValueError as error:  # the SDK's parse of the string
            raise malformed_servicebus_connection() from error
    if settings.servicebus.namespace:
        credential = azure_credential(settings.servicebus.client_id)
        return ServiceBusAdministrationClient(settings.servicebus.namespace, credential)
    raise ConfigurationError("no Service Bus connection is configured")


def _read_json(url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback)
        document: dict[str, Any] = json.loads(response.read())
    return document


def _counts_readable(settings: Settings) -> bool:
    """False for an emulator connection without a counts URL (nothing can read them)."""
    if settings.servicebus.runtime_counts_url:
        return True
    connection = (settings.servicebus.connection_string or "").lower()
    return "usedevelopmentemulator=true" not in connection


def lane_backlog_probe(settings: Settings, lane: Lane) -> BacklogProbe | None:
    """The probe of ``lane``'s queue, or None when that lane is not gated."""
    if lane_backlog_limits(settings)[lane] <= 0 or not _counts_readable(settings):
        return None
    queue = LaneQueues.from_settings(settings).queue(lane)
    if settings.servicebus.runtime_counts_url:
        return EmulatorBacklogProbe(settings.servicebus.runtime_counts_url, queue)
    return QueueBacklogProbe(administration_client(settings), queue)


def lane_backlog_probes(settings: Settings) -> dict[Lane, BacklogProbe]:
    """The probe of each lane that is gated."""
    probes = {lane: lane_backlog_probe(settings, lane) for lane in Lane}
    return {lane: probe for lane, probe in probes.items() if probe is not None}


class EmulatorQueueObserver:
    """Implements ``processing.ports.QueueObserver`` over the local emulator's counts."""

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
    """Implements ``processing.ports.QueueObserver`` in Azure: counts from the management API,
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


def queue_observers(
    settings: Settings, client: Callable[[], ServiceBusClient]
) -> Callable[[str], QueueObserver]:
    """The observer of each queue by name, made on first use and kept."""
    observers: dict[str, QueueObserver] = {}
    lock = threading.Lock()

    def observer(queue: str) -> QueueObserver:
        with lock:
            if queue not in observers:
                observers[queue] = queue_observer_for(settings, client(), queue)
            return observers[queue]

    return observer


def queue_observer_for(
    settings: Settings, client: ServiceBusClient, queue: str | None = None
) -> QueueObserver:
    """The observer of ``queue`` (default: the request queue); ``client`` is the
    process's Service Bus client."""
    name = queue or settings.queues.requests
    if settings.servicebus.runtime_counts_url:
        return EmulatorQueueObserver(settings.servicebus.runtime_counts_url, name)
    return ServiceBusQueueObserver(administration_client(settings), client, name)


class EmulatorSubscriptionObservers:
    """The subscriptions of a topic on the local emulator, listed from its counts."""

    def __init__(self, counts_url: str, topic: str, timeout_seconds: float = 2.0) -> None:
        EmulatorBacklogProbe(counts_url, topic)  # the same loopback rule
        self._counts_url = counts_url
        self._topic = topic
        self._timeout = timeout_seconds

    def __call__(self) -> dict[str, QueueObserver]:
        everything = _read_json(self._counts_url.rstrip("/"), self._timeout)
        prefix = f"{self._topic}{SUBSCRIPTIONS}".lower()
        return {
            f"{self._topic}/{path[len(prefix) :]}": EmulatorQueueObserver(self._counts_url, path)
            for path in everything
            if path.lower().startswith(prefix)
        }


class ServiceBusSubscriptionObserver:
    """Implements ``processing.ports.QueueObserver`` for one subscription in Azure: its
    counts from the management API. A subscription's scheduled messages wait on its
    topic, and reading its oldest message would need Listen rights, so both are left
    unknown."""

    def __init__(self, admin: ServiceBusAdministrationClient, topic: str, name: str) -> None:
        self._admin = admin
        self._topic = topic
        self._name = name

    def snapshot(self) -> QueueSnapshot:
        properties = self._admin.get_subscription_runtime_properties(self._topic, self._name)
        return QueueSnapshot(
            active=int(properties.active_message_count or 0),
            dead_lettered=int(properties.dead_letter_message_count or 0),
            scheduled=None,
            deferred=None,
            oldest_active_enqueued_at=None,
            oldest_known=False,
        )


class ServiceBusSubscriptionObservers:
    """The subscriptions of a topic in Azure, listed with the management API."""

    def __init__(self, admin: ServiceBusAdministrationClient, topic: str) -> None:
        self._admin = admin
        self._topic = topic

    def __call__(self) -> dict[str, QueueObserver]:
        return {
            f"{self._topic}/{subscription.name}": ServiceBusSubscriptionObserver(
                self._admin, self._topic, subscription.name
            )
            for subscription in self._admin.list_subscriptions(self._topic)
        }


def subscription_observers_for(settings: Settings) -> SubscriptionObservers | None:
    """The observers of the results topic's subscriptions (None where nothing can read
    them: an emulator connection without a counts URL)."""
    topic = settings.queues.results_topic
    if settings.servicebus.runtime_counts_url:
        return EmulatorSubscriptionObservers(settings.servicebus.runtime_counts_url, topic)
    if not _counts_readable(settings):
        return None
    return ServiceBusSubscriptionObservers(administration_client(settings), topic)
