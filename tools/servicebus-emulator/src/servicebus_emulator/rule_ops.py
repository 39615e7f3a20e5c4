"""add-rule, remove-rule and enumerate-rules on a subscription's ``$management`` node.

The Python SDK exposes rules only through the HTTP administration client, so these AMQP
operations serve other clients and tests. Rule descriptions travel as plain maps:
``{"sql-filter": {"expression": ...}}``, ``{"correlation-filter": {"correlation-id": ...,
"properties": {...}}}``, ``{"true-filter": {}}`` or ``{"false-filter": {}}``, optionally
with ``"sql-rule-action": {"expression": ...}``.
"""

from __future__ import annotations

from typing import Any

from proton import Message

from .broker import BrokerError, Namespace
from .replies import status_reply
from .rules import Rule, build_rule
from .sql import SqlError


def _plain_map(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in (value or {}).items()} if isinstance(value, dict) else {}


def add_rule(namespace: Namespace, path: str, body: dict[str, Any]) -> Message:
    receivable = namespace.receivable(path)
    name = str(body.get("rule-name") or "")
    description = _plain_map(body.get("rule-description"))
    if not name:
        raise BrokerError("com.microsoft:argument-error", "rule-name is required.")
    if name in receivable.rules:
        raise BrokerError("com.microsoft:entity-already-exists", f"Rule '{name}' already exists.")
    action = _plain_map(description.get("sql-rule-action")).get("expression")
    try:
        if "correlation-filter" in description:
            spec = _plain_map(description["correlation-filter"])
            rule = build_rule(name, "Correlation", correlation=spec, action_sql=action)
        elif "true-filter" in description:
            rule = build_rule(name, "True", action_sql=action)
        elif "false-filter" in description:
            rule = build_rule(name, "False", action_sql=action)
        else:
            expression = str(_plain_map(description.get("sql-filter")).get("expression", "1=1"))
            rule = build_rule(name, "Sql", sql_expression=expression, action_sql=action)
    except SqlError as error:
        raise BrokerError("com.microsoft:argument-error", f"Invalid rule: {error}") from error
    receivable.rules[name] = rule
    return status_reply(200, "OK")


def remove_rule(namespace: Namespace, path: str, body: dict[str, Any]) -> Message:
    receivable = namespace.receivable(path)
    name = str(body.get("rule-name") or "")
    if receivable.rules.pop(name, None) is None:
        raise BrokerError("amqp:not-found", f"Rule '{name}' does not exist.")
    return status_reply(200, "OK")


def describe(rule: Rule) -> dict[str, Any]:
    description: dict[str, Any] = {"rule-name": rule.name}
    if rule.filter_type == "Correlation":
        description["correlation-filter"] = rule.correlation
    else:
        description["sql-filter"] = {"expression": rule.sql_expression}
    if rule.action_sql:
        description["sql-rule-action"] = {"expression": rule.action_sql}
    return description


def enumerate_rules(namespace: Namespace, path: str, body: dict[str, Any]) -> Message:
    receivable = namespace.receivable(path)
    skip, top = int(body.get("skip") or 0), int(body.get("top") or 100)
    rules = list(receivable.rules.values())[skip : skip + top]
    if not rules:
        return status_reply(204, "No rules")
    return status_reply(
        200, "OK", body={"rules": [{"rule-description": describe(r)} for r in rules]}
    )
