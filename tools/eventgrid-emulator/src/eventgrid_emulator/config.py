"""The namespace file (``infra/local/eventgrid-namespace.json``) read into typed settings.

Topics and event subscriptions carry the property names of
``Microsoft.EventGrid/namespaces/topics[/eventSubscriptions]`` in Bicep, so the same values
can be compared with the templates; two things Azure computes or keeps elsewhere come from
keys that exist only locally: ``namespace.accessKey`` (Azure uses Entra ID) and, per
subscription, ``local.deadLetterContainer`` (the Azurite container dead letters go to) and
``local.endpointUrl`` (a push subscription's webhook). Unknown fields are ignored so the
file can carry whatever else the templates hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .filters import FilterError, SubscriptionFilter, parse_filter

DEFAULT_TIME_TO_LIVE = 7 * 86400.0  # the service's default and maximum eventTimeToLive
DEFAULT_LOCK_DURATION = 60
DEFAULT_MAX_DELIVERY_COUNT = 10
_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


class ConfigError(ValueError):
    """The namespace file cannot be used; the message says where and why."""


def parse_duration(text: str) -> float:
    """Seconds in an ISO 8601 duration such as ``PT1M`` or ``P7D`` (no years or months)."""
    upper = text.strip().upper()
    match = _DURATION.match(upper)
    if not match or upper in ("P", "PT") or upper.endswith("T"):
        raise ConfigError(f"not an ISO 8601 duration: {text!r}")
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    return parts["days"] * 86400 + parts["hours"] * 3600 + parts["minutes"] * 60 + parts["seconds"]


@dataclass(frozen=True)
class DeliveryAttribute:
    """A push header: a fixed value (Static) or one read from the event (Dynamic)."""

    name: str
    static_value: str | None = None
    source_field: str | None = None
    secret: bool = False


@dataclass(frozen=True)
class SubscriptionConfig:
    name: str
    mode: str  # "Queue" or "Push"
    filter: SubscriptionFilter
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    time_to_live: float = DEFAULT_TIME_TO_LIVE
    lock_duration: float = float(DEFAULT_LOCK_DURATION)
    dead_letter_container: str | None = None
    endpoint_url: str | None = None
    delivery_attributes: tuple[DeliveryAttribute, ...] = ()


@dataclass(frozen=True)
class TopicConfig:
    name: str
    subscriptions: tuple[SubscriptionConfig, ...]
    retention: float = DEFAULT_TIME_TO_LIVE


@dataclass(frozen=True)
class NamespaceConfig:
    name: str
    access_key: str
    topics: tuple[TopicConfig, ...] = field(default_factory=tuple)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _attributes(destination: dict[str, Any], where: str) -> tuple[DeliveryAttribute, ...]:
    properties = destination.get("properties") or {}
    found = []
    for raw in properties.get("deliveryAttributeMappings") or []:
        kind = str(raw.get("type", "Static"))
        props = raw.get("properties") or {}
        if kind == "Static":
            found.append(
                DeliveryAttribute(
                    name=str(raw["name"]),
                    static_value=str(props.get("value", "")),
                    secret=bool(props.get("isSecret", False)),
                )
            )
        elif kind == "Dynamic":
            found.append(
                DeliveryAttribute(str(raw["name"]), source_field=str(props["sourceField"]))
            )
        else:
            raise ConfigError(f"{where}: unknown delivery attribute type {kind!r}")
    return tuple(found)


def _subscription(raw: dict[str, Any], retention: float, where: str) -> SubscriptionConfig:
    name = str(raw["name"])
    where = f"{where} > {name}"
    props = raw.get("properties") or {}
    local = raw.get("local") or {}
    schema = props.get("eventDeliverySchema", "CloudEventSchemaV1_0")
    if schema != "CloudEventSchemaV1_0":
        raise ConfigError(f"{where}: eventDeliverySchema {schema!r} (only CloudEventSchemaV1_0)")
    filters = props.get("filtersConfiguration") or {}
    try:
        subscription_filter = parse_filter(
            filters.get("includedEventTypes") or [], filters.get("filters") or []
        )
    except FilterError as error:
        raise ConfigError(f"{where}: {error}") from error
    delivery = props.get("deliveryConfiguration") or {}
    mode = str(delivery.get("deliveryMode", "Queue"))
    if mode not in ("Queue", "Push"):
        raise ConfigError(f"{where}: deliveryMode {mode!r} (Queue or Push)")
    settings = delivery.get(mode.lower()) or {}
    ttl = min(parse_duration(str(settings.get("eventTimeToLive", "P7D"))), retention)
    max_count = _positive_int(
        settings.get("maxDeliveryCount", DEFAULT_MAX_DELIVERY_COUNT), f"{where} maxDeliveryCount"
    )
    endpoint_url = None
    attributes: tuple[DeliveryAttribute, ...] = ()
    if mode == "Push":
        destination = settings.get("destination") or {}
        endpoint_url = local.get("endpointUrl") or (destination.get("properties") or {}).get(
            "endpointUrl"
        )
        if not endpoint_url:
            raise ConfigError(f"{where}: a Push subscription needs local.endpointUrl")
        attributes = _attributes(destination, where)
    lock = DEFAULT_LOCK_DURATION
    if mode == "Queue":
        lock = _positive_int(
            settings.get("receiveLockDurationInSeconds", lock),
            f"{where} receiveLockDurationInSeconds",
        )
    return SubscriptionConfig(
        name=name,
        mode=mode,
        filter=subscription_filter,
        max_delivery_count=max_count,
        time_to_live=ttl,
        lock_duration=float(lock),
        dead_letter_container=local.get("deadLetterContainer") or None,
        endpoint_url=str(endpoint_url) if endpoint_url else None,
        delivery_attributes=attributes,
    )


def _topic(raw: dict[str, Any]) -> TopicConfig:
    name = str(raw["name"])
    props = raw.get("properties") or {}
    schema = props.get("inputSchema", "CloudEventSchemaV1_0")
    if schema != "CloudEventSchemaV1_0":
        raise ConfigError(f"topic {name}: inputSchema {schema!r} (only CloudEventSchemaV1_0)")
    retention = float(_positive_int(props.get("eventRetentionInDays", 7), name)) * 86400
    subscriptions = tuple(
        _subscription(s, retention, f"topic {name}") for s in raw.get("eventSubscriptions") or []
    )
    names = [s.name.lower() for s in subscriptions]
    if len(names) != len(set(names)):
        raise ConfigError(f"topic {name}: subscription names must be unique")
    return TopicConfig(name=name, subscriptions=subscriptions, retention=retention)


def load_config(path: Path) -> NamespaceConfig:
    """The namespace of the file; ConfigError says what is wrong with it."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        namespace = document["namespace"]
        config = NamespaceConfig(
            name=str(namespace["name"]),
            access_key=str(namespace["accessKey"]),
            topics=tuple(_topic(t) for t in document.get("topics") or []),
        )
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {error!r}") from error
    names = [t.name.lower() for t in config.topics]
    if len(names) != len(set(names)):
        raise ConfigError(f"{path}: topic names must be unique (case-insensitive)")
    if not config.access_key:
        raise ConfigError(f"{path}: namespace.accessKey is empty")
    return config
