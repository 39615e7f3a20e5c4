"""Subscription rules: SQL, correlation, true and false filters plus optional SQL actions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .codec import StoredMessage
from .config import RuleConfig
from .sql import MISSING, Lookup, compile_action, compile_filter

# sys.<name> (case-insensitive) -> key in StoredMessage.properties
_SYSTEM_PROPERTIES = {
    "messageid": "message_id",
    "correlationid": "correlation_id",
    "to": "to",
    "replyto": "reply_to",
    "label": "subject",
    "subject": "subject",
    "sessionid": "session_id",
    "replytosessionid": "reply_to_session_id",
    "contenttype": "content_type",
}
# Correlation filter field (config / AMQP rule description) -> StoredMessage.properties key
_CORRELATION_FIELDS = {
    "correlationid": "correlation_id",
    "correlation-id": "correlation_id",
    "messageid": "message_id",
    "message-id": "message_id",
    "to": "to",
    "replyto": "reply_to",
    "reply-to": "reply_to",
    "label": "subject",
    "subject": "subject",
    "sessionid": "session_id",
    "session-id": "session_id",
    "replytosessionid": "reply_to_session_id",
    "reply-to-session-id": "reply_to_session_id",
    "contenttype": "content_type",
    "content-type": "content_type",
}


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def message_lookup(message: StoredMessage, extra: Mapping[str, Any] | None = None) -> Lookup:
    """Resolve ``sys.`` and user property names of one message for filters and actions."""
    user = {_text(k): v for k, v in message.application_properties.items()}
    lowered = {str(k).lower(): v for k, v in user.items()}

    def get(scope: str, name: str) -> Any:
        if scope == "sys":
            key = _SYSTEM_PROPERTIES.get(name.lower())
            if key is not None:
                value = message.properties.get(key)
                return MISSING if value is None else _text(value)
            if extra and name.lower() in extra:
                return extra[name.lower()]
            return MISSING
        if name in user:
            return _text(user[name])
        return _text(lowered.get(name.lower(), MISSING))

    return get


@dataclass
class Rule:
    """One named rule of a subscription; ``description`` is what enumerate-rules reports."""

    name: str
    matches: Callable[[StoredMessage], bool]
    action: Callable[[StoredMessage], None] | None = None
    filter_type: str = "Sql"
    sql_expression: str = "1=1"
    correlation: dict[str, Any] = field(default_factory=dict)
    action_sql: str | None = None


def correlation_matcher(spec: Mapping[str, Any]) -> Callable[[StoredMessage], bool]:
    """All given system fields and user properties must be equal to the message's."""
    system: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for key, value in spec.items():
        if str(key).lower() == "properties":
            user.update(value or {})
        elif str(key).lower() in _CORRELATION_FIELDS and value is not None:
            system[_CORRELATION_FIELDS[str(key).lower()]] = value

    def matches(message: StoredMessage) -> bool:
        for key, expected in system.items():
            if _text(message.properties.get(key)) != expected:
                return False
        if not user:
            return True
        props = {_text(k): _text(v) for k, v in message.application_properties.items()}
        return all(k in props and props[k] == v for k, v in user.items())

    return matches


def build_rule(
    name: str,
    filter_type: str,
    sql_expression: str = "1=1",
    correlation: Mapping[str, Any] | None = None,
    action_sql: str | None = None,
) -> Rule:
    """Compile a rule; raises ValueError (SqlError) on invalid syntax."""
    kind = filter_type.lower()
    matcher: Callable[[StoredMessage], bool]
    if kind == "correlation":
        matcher = correlation_matcher(correlation or {})
    elif kind in ("true", "truefilter"):
        matcher, sql_expression = (lambda message: True), "1=1"
    elif kind in ("false", "falsefilter"):
        matcher, sql_expression = (lambda message: False), "1=0"
    else:
        predicate = compile_filter(sql_expression)
        matcher = lambda message: predicate(message_lookup(message))  # noqa: E731
    action = None
    if action_sql:
        rewrite = compile_action(action_sql)

        def action(message: StoredMessage) -> None:
            updated = rewrite(message_lookup(message), message.application_properties)
            message.set_application_properties(updated)

    return Rule(
        name=name,
        matches=matcher,
        action=action,
        filter_type="Correlation" if kind == "correlation" else "Sql",
        sql_expression=sql_expression,
        correlation=dict(correlation or {}),
        action_sql=action_sql,
    )


def rule_from_config(config: RuleConfig) -> Rule:
    return build_rule(
        config.name,
        config.filter_type,
        config.sql_expression,
        config.correlation,
        config.action_sql,
    )
