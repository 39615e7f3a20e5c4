"""The Service Bus entities in Bicep agree with the local emulator config, and with the spec.

infra/local/servicebus-emulator.json uses Microsoft's emulator Config.json schema
(PascalCase); the Bicep catalogue uses ARM property names (camelCase). Both directions are
checked: an entity, property, rule or filter present on one side only is a failure.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra import (
    CATALOG,
    INFRA,
    MODULES,
    constants,
    is_reference,
    render,
    resolve,
    resource_body,
    resources_of_type,
)
from tests.infra import (
    is_loop as _is_loop,
)

SERVICEBUS = MODULES / "servicebus.bicep"
EMULATOR_CONFIG = INFRA / "local" / "servicebus-emulator.json"

# Emulator properties that mean "not set" when empty.
_EMPTY_MEANS_ABSENT = {"ForwardTo", "ForwardDeadLetteredMessagesTo"}
_FILTER_TYPES = {"Sql": "SqlFilter", "Correlation": "CorrelationFilter"}


def _camel(name: str) -> str:
    return name[0].lower() + name[1:]


def _arm_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """Emulator entity properties in ARM spelling, without the empty forwarding ones."""
    return {
        _camel(key): value
        for key, value in properties.items()
        if not (key in _EMPTY_MEANS_ABSENT and value in ("", None))
    }


def _arm_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """An emulator rule as the ARM rule resource describes it."""
    source = rule["Properties"]
    filter_type = _FILTER_TYPES[source["FilterType"]]
    properties: dict[str, Any] = {"filterType": filter_type}
    if filter_type == "SqlFilter":
        properties["sqlFilter"] = {"sqlExpression": source["SqlFilter"]["SqlExpression"]}
    else:
        correlation = {
            _camel(key): value
            for key, value in source["CorrelationFilter"].items()
            if value not in ("", None, {})
        }
        properties["correlationFilter"] = correlation
    if source.get("Action"):
        properties["action"] = {"sqlExpression": source["Action"]["SqlExpression"]}
    return {"name": rule["Name"], "properties": properties}


def emulator_entities(path: Path) -> dict[str, Any]:
    """The emulator config reduced to ARM-shaped queues and topics."""
    assert path.is_file(), f"{path} is missing"
    (namespace,) = json.loads(path.read_text(encoding="utf-8"))["UserConfig"]["Namespaces"]
    queues = {q["Name"]: _arm_properties(q["Properties"]) for q in namespace.get("Queues", [])}
    topics = {}
    for topic in namespace.get("Topics", []):
        subscriptions = {}
        for subscription in topic.get("Subscriptions", []):
            subscriptions[subscription["Name"]] = {
                "properties": _arm_properties(subscription["Properties"]),
                "rules": [_arm_rule(rule) for rule in subscription.get("Rules", [])],
            }
        topics[topic["Name"]] = {
            "properties": _arm_properties(topic["Properties"]),
            "subscriptions": subscriptions,
        }
    return {"queues": queues, "topics": topics}


def _catalog() -> dict[str, Any]:
    """The catalogue as the Service Bus module loads it (loadJsonContent of catalog.json)."""
    known = constants(SERVICEBUS)
    return {
        name: resolve(known[name], known)
        for name in ("queueNames", "resultsTopic", "serviceBusQueues")
    }


def bicep_entities() -> dict[str, Any]:
    """The Bicep catalogue reduced to the same shape."""
    catalog = _catalog()
    queues = {q["name"]: q["properties"] for q in catalog["serviceBusQueues"]}
    topic = catalog["resultsTopic"]
    subscriptions = {
        s["name"]: {"properties": s["properties"], "rules": [s["rule"]]}
        for s in topic["subscriptions"]
    }
    return {
        "queues": queues,
        "topics": {
            topic["name"]: {"properties": topic["properties"], "subscriptions": subscriptions}
        },
    }


# --- Bicep and the emulator config agree ------------------------------------------------


def test_same_queues_with_same_properties() -> None:
    assert bicep_entities()["queues"] == emulator_entities(EMULATOR_CONFIG)["queues"]


def test_same_topics_with_same_properties() -> None:
    bicep, local = bicep_entities()["topics"], emulator_entities(EMULATOR_CONFIG)["topics"]
    assert set(bicep) == set(local)
    for name in bicep:
        assert bicep[name]["properties"] == local[name]["properties"], name


def test_same_subscriptions_rules_and_filters() -> None:
    bicep, local = bicep_entities()["topics"], emulator_entities(EMULATOR_CONFIG)["topics"]
    for topic in bicep:
        assert bicep[topic]["subscriptions"] == local[topic]["subscriptions"], topic


def test_comparison_notices_a_changed_filter(tmp_path: Path) -> None:
    """The comparison itself is not vacuous: a one-character change is a difference."""
    document = json.loads(EMULATOR_CONFIG.read_text(encoding="utf-8"))
    topic = document["UserConfig"]["Namespaces"][0]["Topics"][0]
    topic["Subscriptions"][0]["Rules"][0]["Properties"]["SqlFilter"]["SqlExpression"] += " "
    changed = tmp_path / "config.json"
    changed.write_text(json.dumps(document), encoding="utf-8")
    assert bicep_entities()["topics"] != emulator_entities(changed)["topics"]


# --- Bicep matches the specification ----------------------------------------------------

QUEUE_SPEC = {
    "lockDuration": "PT1M",
    "maxDeliveryCount": 10,
    "defaultMessageTimeToLive": "P1D",
    "deadLetteringOnMessageExpiration": True,
    "requiresDuplicateDetection": True,
    "duplicateDetectionHistoryTimeWindow": "PT10M",
}


@pytest.mark.parametrize(
    ("queue", "sessions"),
    [("inference-requests", False), ("inference-priority", False), ("inference-ordered", True)],
)
def test_queue_spec(queue: str, sessions: bool) -> None:
    properties = bicep_entities()["queues"][queue]
    assert properties == {**QUEUE_SPEC, "requiresSession": sessions}


def test_topic_and_subscription_spec() -> None:
    topic = bicep_entities()["topics"]["inference-results"]
    assert topic["properties"] == {
        "defaultMessageTimeToLive": "P7D",
        "requiresDuplicateDetection": True,
        "duplicateDetectionHistoryTimeWindow": "PT10M",
    }
    rules = {name: s["rules"] for name, s in topic["subscriptions"].items()}
    assert rules == {
        "high-priority": [_sql("high-priority", "priority = 'high'")],
        "human-review": [_sql("review-required", "review_required = TRUE")],
        "audit": [_sql("$Default", "1=1")],
        "model-local-analyzer": [
            {
                "name": "model-local-analyzer",
                "properties": {
                    "filterType": "CorrelationFilter",
                    "correlationFilter": {"properties": {"model_name": "local-analyzer"}},
                },
            }
        ],
    }
    for subscription in topic["subscriptions"].values():
        assert subscription["properties"]["lockDuration"] == "PT1M"
        assert subscription["properties"]["maxDeliveryCount"] == 10
        assert subscription["properties"]["deadLetteringOnMessageExpiration"] is True


def _sql(name: str, expression: str) -> dict[str, Any]:
    return {
        "name": name,
        "properties": {"filterType": "SqlFilter", "sqlFilter": {"sqlExpression": expression}},
    }


def test_requests_queue_comes_first() -> None:
    """servicebus.bicep grants the backlog reader on serviceBusQueues[0]."""
    assert _catalog()["serviceBusQueues"][0]["name"] == "inference-requests"


def test_catalog_names_agree_with_the_entities() -> None:
    """catalog.json repeats entity names (JSON has no references): they must agree."""
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    assert catalog["queueNames"] == {
        "requests": catalog["serviceBusQueues"][0]["name"],
        "priority": catalog["serviceBusQueues"][1]["name"],
        "ordered": catalog["serviceBusQueues"][2]["name"],
    }
    assert len(catalog["serviceBusQueues"]) == 3
    assert catalog["resultsTopicName"] == catalog["resultsTopic"]["name"]
    containers = catalog["dataContainers"]
    assert catalog["appContainerNames"] == [
        containers[role] for role in containers if role != "eventGridDeadLetters"
    ]


# --- the module deploys the catalogue as it is ------------------------------------------


def _one(resource_type: str) -> dict[str, Any]:
    (resource,) = resources_of_type(SERVICEBUS, resource_type).values()
    return resource


def test_module_deploys_catalogue_entities_unchanged() -> None:
    queue = _one("Microsoft.ServiceBus/namespaces/queues")
    topic = resource_body(_one("Microsoft.ServiceBus/namespaces/topics"))
    subscription = _one("Microsoft.ServiceBus/namespaces/topics/subscriptions")
    rule = _one("Microsoft.ServiceBus/namespaces/topics/subscriptions/rules")
    assert _is_loop(queue)
    assert is_reference(queue["config"]["loop_type"]["detail"]["array_name"], "serviceBusQueues")
    assert render(resource_body(queue)["properties"]) == "queue.properties"
    assert render(topic["name"]) == "resultsTopic.name"
    assert render(topic["properties"]) == "resultsTopic.properties"
    loop = subscription["config"]["loop_type"]["detail"]["array_name"]
    assert render(loop) == "resultsTopic.subscriptions"
    assert render(resource_body(subscription)["properties"]) == "subscription.properties"
    rule_body = resource_body(rule)
    assert render(rule_body["name"]) == "subscription.rule.name"
    assert render(rule_body["properties"]) == "subscription.rule.properties"
    assert render(rule_body["parent"]) == "subscriptions[i]"


def test_namespace_accepts_only_entra_id() -> None:
    properties = resource_body(_one("Microsoft.ServiceBus/namespaces"))["properties"]
    assert properties["disableLocalAuth"] is True
    assert properties["minimumTlsVersion"] == "1.2"
    assert not is_reference(properties["minimumTlsVersion"])
