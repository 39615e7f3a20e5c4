"""A received Service Bus message as the processor sees it, free of SDK types.

Adapters build it from ``azure.servicebus.ServiceBusReceivedMessage`` (which the Functions
extension and the SDK receiver both produce) and keep the original in ``handle`` for the
settler that must name it when settling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.messaging import PACED

PropertyValue = str | int | float | bool | None


def normalise_properties(raw: Mapping[Any, Any] | None) -> dict[str, PropertyValue]:
    """Application properties with ``str`` keys and values (the SDK may give ``bytes``)."""
    result: dict[str, PropertyValue] = {}
    for key, value in (raw or {}).items():
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        result[name] = (
            value if isinstance(value, str | int | float | bool) or value is None else str(value)
        )
    return result


# Application properties of a retry for an outage of the platform's own dependencies:
# how many such retries, and when the first one met the outage (ISO 8601).
OUTAGE_RETRY_COUNT = "outage_retry_count"
OUTAGE_SINCE = "outage_since"
# How many times a message went back to the queue for its tenant's turn (fair_turns).
FAIR_SHARE_WAITS = "fair_share_waits"


def read_retry_count(properties: Mapping[str, PropertyValue], name: str = "retry_count") -> int:
    """A retry counter (``retry_count``) from application properties; absent or malformed
    counts as 0."""
    value = properties.get(name)
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class InboundMessage:
    """``delivery_count`` counts deliveries including this one (1 on the first), as the
    Functions Service Bus extension reports it (``adapters.servicebus_inbound.from_sdk``)."""

    body: bytes
    message_id: str | None
    sequence_number: int | None
    delivery_count: int
    enqueued_time: datetime | None
    correlation_id: str | None = None
    session_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    application_properties: dict[str, PropertyValue] = field(default_factory=dict)
    handle: Any = field(default=None, compare=False, repr=False)

    @property
    def retry_count(self) -> int:
        return read_retry_count(self.application_properties)

    @property
    def outage_retry_count(self) -> int:
        """Retries caused by the platform's own storage or broker being down, which do not
        use the request's ``retry_count`` budget (see ``OutcomeTable.wait_out_outage``)."""
        return read_retry_count(self.application_properties, OUTAGE_RETRY_COUNT)

    @property
    def fair_share_waits(self) -> int:
        """How many times this request went back for its tenant's turn: no attempt, and
        nothing was read for it (``processing.fair_turns``)."""
        return read_retry_count(self.application_properties, FAIR_SHARE_WAITS)

    @property
    def paced(self) -> bool:
        """Whether intake released this request at its tenant's part of the deployment
        (``messaging.PACED``)."""
        return self.application_properties.get(PACED) is True

    @property
    def attempted_before(self) -> bool:
        """Whether this request was tried before: a redelivery, or a copy scheduled by a
        retry of either kind (a crash may have come between storing and announcing)."""
        return self.delivery_count > 1 or self.retry_count > 0 or self.outage_retry_count > 0

    @property
    def outage_since(self) -> datetime | None:
        """When this request first met the outage it is waiting out (None: it has not)."""
        value = self.application_properties.get(OUTAGE_SINCE)
        try:
            since = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            return None
        return since if since is not None and since.tzinfo is not None else None
