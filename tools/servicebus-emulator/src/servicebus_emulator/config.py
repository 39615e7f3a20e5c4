"""Entity configuration in the schema of Microsoft's Service Bus emulator ``Config.json``.

The same file works with both emulators: ``UserConfig > Namespaces[] > Queues[] /
Topics[] > Subscriptions[] > Rules[]``, each with ``Name`` and ``Properties``. Fields
this emulator does not use are accepted and ignored so Microsoft's samples load as-is.
The SAS key is deliberately NOT part of this file (Microsoft's schema has no place for
it); it comes from ``--sas-key`` or ``SERVICEBUS_EMULATOR_SAS_KEY``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MAX_MESSAGE_SIZE = 256 * 1024
_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says where and why."""


def parse_duration(text: str) -> float:
    """Seconds in an ISO 8601 duration such as ``PT1M``, ``P1D`` or ``PT0.5S``."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT"):
        raise ConfigError(f"not an ISO 8601 duration: {text!r}")
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    return parts["days"] * 86400 + parts["hours"] * 3600 + parts["minutes"] * 60 + parts["seconds"]


@dataclass(frozen=True)
class RuleConfig:
    name: str
    filter_type: str = "Sql"
    sql_expression: str = "1=1"
    correlation: dict[str, Any] = field(default_factory=dict)
    action_sql: str | None = None


@dataclass(frozen=True)
class EntitySettings:
    """Behaviour shared by queues and subscriptions (the receivable entities)."""

    lock_duration: float = 60.0
    max_delivery_count: int = 10
    default_ttl: float | None = None
    dead_letter_on_expiration: bool = False
    requires_session: bool = False
    forward_to: str | None = None
    forward_dead_lettered_to: str | None = None


@dataclass(frozen=True)
class SendSettings:
    """Behaviour of entities that accept sends (queues and topics)."""

    requires_duplicate_detection: bool = False
    duplicate_window: float = 600.0
    default_ttl: float | None = None
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE


@dataclass(frozen=True)
class QueueConfig:
    name: str
    settings: EntitySettings
    send: SendSettings


@dataclass(frozen=True)
class SubscriptionConfig:
    name: str
    settings: EntitySettings
    rules: tuple[RuleConfig, ...]


@dataclass(frozen=True)
class TopicConfig:
    name: str
    send: SendSettings
    subscriptions: tuple[SubscriptionConfig, ...]


@dataclass(frozen=True)
class NamespaceConfig:
    name: str
    queues: tuple[QueueConfig, ...]
    topics: tuple[TopicConfig, ...]


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _ttl(props: dict[str, Any]) -> float | None:
    text = props.get("DefaultMessageTimeToLive")
    return parse_duration(text) if text else None


def _entity_settings(props: dict[str, Any]) -> EntitySettings:
    return EntitySettings(
        lock_duration=parse_duration(props.get("LockDuration", "PT1M")),
        max_delivery_count=int(props.get("MaxDeliveryCount", 10)),
        default_ttl=_ttl(props),
        dead_letter_on_expiration=_bool(props.get("DeadLetteringOnMessageExpiration", False)),
        requires_session=_bool(props.get("RequiresSession", False)),
        forward_to=props.get("ForwardTo") or None,
        forward_dead_lettered_to=props.get("ForwardDeadLetteredMessagesTo") or None,
    )


def _send_settings(props: dict[str, Any]) -> SendSettings:
    size_kb = props.get("MaxMessageSizeInKilobytes")
    return SendSettings(
        requires_duplicate_detection=_bool(props.get("RequiresDuplicateDetection", False)),
        duplicate_window=parse_duration(props.get("DuplicateDetectionHistoryTimeWindow", "PT10M")),
        default_ttl=_ttl(props),
        max_message_size=int(size_kb) * 1024 if size_kb else DEFAULT_MAX_MESSAGE_SIZE,
    )


def _rule(raw: dict[str, Any]) -> RuleConfig:
    props = raw.get("Properties", {})
    filter_type = str(props.get("FilterType", "Sql"))
    action = props.get("Action") or {}
    correlation = props.get("CorrelationFilter") or {}
    return RuleConfig(
        name=raw["Name"],
        filter_type=filter_type,
        sql_expression=str((props.get("SqlFilter") or {}).get("SqlExpression", "1=1")),
        correlation=dict(correlation),
        action_sql=action.get("SqlExpression") or None,
    )


def _subscription(raw: dict[str, Any]) -> SubscriptionConfig:
    rules = tuple(_rule(r) for r in raw.get("Rules", []))
    if not rules:
        rules = (RuleConfig(name="$Default"),)
    return SubscriptionConfig(raw["Name"], _entity_settings(raw.get("Properties", {})), rules)


def _namespace(raw: dict[str, Any]) -> NamespaceConfig:
    queues = tuple(
        QueueConfig(
            q["Name"],
            _entity_settings(q.get("Properties", {})),
            _send_settings(q.get("Properties", {})),
        )
        for q in raw.get("Queues", [])
    )
    topics = tuple(
        TopicConfig(
            t["Name"],
            _send_settings(t.get("Properties", {})),
            tuple(_subscription(s) for s in t.get("Subscriptions", [])),
        )
        for t in raw.get("Topics", [])
    )
    return NamespaceConfig(raw.get("Name", "sbemulatorns"), queues, topics)


def load_config(path: Path) -> NamespaceConfig:
    """The first namespace of the file (Microsoft's emulator also serves one)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        namespaces = document["UserConfig"]["Namespaces"]
        config = _namespace(namespaces[0])
    except (OSError, json.JSONDecodeError, KeyError, IndexError, TypeError) as error:
        raise ConfigError(f"{path}: {error!r}") from error
    names = [q.name.lower() for q in config.queues] + [t.name.lower() for t in config.topics]
    if len(names) != len(set(names)):
        raise ConfigError(f"{path}: entity names must be unique (case-insensitive)")
    return config
