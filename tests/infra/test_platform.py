"""Scale bounds and alerts: the operational promises of the deployment (retention:
test_retention.py)."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.ops.backlog_report import REPORT_PREFIX, QueueSnapshot, report_line
from tests.infra import (
    INFRA,
    MODULES,
    BicepElement,
    decorator,
    has_default,
    is_reference,
    literal,
    modules,
    params,
    render,
    resource_body,
    resources_of_type,
)

MAIN = INFRA / "main.bicep"
FUNCTION_APP = MODULES / "function-app.bicep"
ALERTS = MODULES / "alerts.bicep"


@pytest.mark.parametrize(
    "name",
    [
        "maximumInstanceCount",
        "httpPerInstanceConcurrency",
        "serviceBusMaxConcurrentCalls",
        "alwaysReady",
        "serviceBusSku",
        "actionGroupId",
    ],
)
def test_main_exposes_operational_parameters(name: str) -> None:
    assert name in params(MAIN)


def test_service_bus_is_standard_unless_premium_is_chosen() -> None:
    sku = params(MAIN)["serviceBusSku"]
    assert sku["default"] == "Standard"
    assert decorator(sku, "allowed") == ["Standard", "Premium"]


def test_always_ready_is_optional() -> None:
    always_ready = params(MAIN)["alwaysReady"]
    assert has_default(always_ready)
    assert always_ready["default"] == []


def test_scale_parameters_reach_function_app_config() -> None:
    (site,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites").values()
    scale = resource_body(site)["properties"]["functionAppConfig"]["scaleAndConcurrency"]
    assert is_reference(scale["maximumInstanceCount"], "maximumInstanceCount")
    assert is_reference(scale["alwaysReady"], "alwaysReady")
    assert is_reference(
        scale["triggers"]["http"]["perInstanceConcurrency"], "httpPerInstanceConcurrency"
    )


def _metric_alerts() -> dict[str, dict[str, Any]]:
    return {module_params["metricName"]: module_params for module_params in _alert_modules()}


def _alert_modules() -> list[dict[str, Any]]:
    return [
        resource_body(alert)["params"]
        for alert in modules(ALERTS).values()
        if alert["detail"]["path"] == "metric-alert.bicep"
    ]


@pytest.mark.parametrize(
    ("namespace", "metric", "aggregation"),
    [
        ("Microsoft.ServiceBus/namespaces", "DeadletteredMessages", "Maximum"),
        ("Microsoft.EventGrid/systemTopics", "DeadLetteredCount", "Total"),
        ("Microsoft.EventGrid/systemTopics", "DeliveryAttemptFailCount", "Total"),
        ("Microsoft.EventGrid/topics", "DeadLetteredCount", "Total"),
        ("Microsoft.EventGrid/topics", "DeliveryAttemptFailCount", "Total"),
        ("microsoft.insights/components", "requests/failed", "Count"),
    ],
)
def test_metric_alert_exists(namespace: str, metric: str, aggregation: str) -> None:
    matching = [
        p
        for p in _alert_modules()
        if p["metricNamespace"] == namespace and p["metricName"] == metric
    ]
    assert len(matching) == 1, f"no single alert on {namespace} {metric}"
    (alert,) = matching
    assert alert["timeAggregation"] == aggregation
    assert alert["operator"] == "GreaterThan"
    assert is_reference(alert["actionGroupId"], "actionGroupId")


def test_dead_letter_alert_fires_above_zero_per_entity() -> None:
    alert = _metric_alerts()["DeadletteredMessages"]
    assert alert["threshold"] == 0
    assert alert["dimensions"][0]["name"] == "EntityName"


def _text(value: Any) -> str:
    """A Bicep string decoded, interpolations shown by their expression text."""
    parts = literal(value)
    if isinstance(parts, str):
        return parts
    return "".join(
        render(part) if isinstance(part, BicepElement) or not isinstance(part, str) else part
        for part in parts
    )


def _criterion() -> dict[str, Any]:
    (rule,) = resources_of_type(ALERTS, "Microsoft.Insights/scheduledQueryRules").values()
    (criterion,) = resource_body(rule)["properties"]["criteria"]["allOf"]
    assert isinstance(criterion, dict)
    return criterion


def test_oldest_message_age_alert() -> None:
    criterion = _criterion()
    assert criterion["operator"] == "GreaterThan"
    assert is_reference(criterion["threshold"], "oldestMessageAgeThresholdSeconds")
    assert "backlogReportPrefix" in _text(criterion["query"])
    assert any(is_reference(part, "backlogReportPrefix") for part in literal(criterion["query"]))
    assert params(ALERTS)["backlogReportPrefix"]["default"] == REPORT_PREFIX


def test_the_alert_query_parses_the_apps_backlog_line() -> None:
    """The regex in the alert's KQL extract() reads the age from a real report line."""
    query_text = _text(_criterion()["query"])
    pattern = re.search(r'extract\("([^"]+)", 1, message\)', query_text)
    assert pattern is not None
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    snapshot = QueueSnapshot(5, 0, 1, 2, now - timedelta(seconds=1234.5))
    line = report_line("inference-requests", snapshot, now)
    assert line.startswith(REPORT_PREFIX + " ")
    match = re.search(pattern.group(1), line)
    assert match is not None
    assert float(match.group(1)) == 1234.5


def test_action_group_reaches_the_alerts() -> None:
    action_group = params(MAIN)["actionGroupId"]
    assert has_default(action_group)
    assert action_group["default"] == ""
    assert is_reference(
        resource_body(modules(MAIN)["alerts"])["params"]["actionGroupId"], "actionGroupId"
    )
