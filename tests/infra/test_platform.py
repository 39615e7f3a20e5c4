"""Scale bounds, retention and alerts: the operational promises of the deployment."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.ops.backlog_report import REPORT_PREFIX, QueueSnapshot, report_line
from tests.infra import INFRA, MODULES, Expression, params, parse_value, read, resources_of_type

MAIN = INFRA / "main.bicep"
FUNCTION_APP = MODULES / "function-app.bicep"
ALERTS = MODULES / "alerts.bicep"
DATA_STORAGE = MODULES / "storage-data.bicep"


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
    assert name in params(read(MAIN))


def test_service_bus_is_standard_unless_premium_is_chosen() -> None:
    sku = params(read(MAIN))["serviceBusSku"]
    assert sku.default == "Standard"
    assert "'Premium'" in "\n".join(sku.decorators)


def test_always_ready_is_optional() -> None:
    assert params(read(MAIN))["alwaysReady"].default == []


def test_scale_parameters_reach_function_app_config() -> None:
    (site,) = resources_of_type(read(FUNCTION_APP), "Microsoft.Web/sites")
    scale = site.body["properties"]["functionAppConfig"]["scaleAndConcurrency"]
    assert scale["maximumInstanceCount"] == Expression("maximumInstanceCount")
    assert scale["alwaysReady"] == Expression("alwaysReady")
    assert scale["triggers"]["http"]["perInstanceConcurrency"] == Expression(
        "httpPerInstanceConcurrency"
    )


def _lifecycle_rules() -> dict[str, Any]:
    (policy,) = resources_of_type(
        read(DATA_STORAGE), "Microsoft.Storage/storageAccounts/managementPolicies"
    )
    return {
        rule["name"]: rule["definition"] for rule in policy.body["properties"]["policy"]["rules"]
    }


@pytest.mark.parametrize(
    ("rule", "prefix", "days"),
    [
        ("expire-inputs", "inputs/", "inputsRetentionDays"),
        ("expire-results", "results/", "resultsRetentionDays"),
    ],
)
def test_retention_rules(rule: str, prefix: str, days: str) -> None:
    definition = _lifecycle_rules()[rule]
    (prefix_match,) = definition["filters"]["prefixMatch"]
    assert prefix_match.parts[-1] == "/"
    assert prefix_match.parts[0] == Expression(f"dataContainers.{prefix[:-1]}")
    delete = definition["actions"]["baseBlob"]["delete"]
    assert delete == {"daysAfterModificationGreaterThan": Expression(days)}


def _metric_alerts() -> dict[str, dict[str, Any]]:
    return {module_params["metricName"]: module_params for module_params in _alert_modules()}


def _alert_modules() -> list[dict[str, Any]]:
    text = read(ALERTS)
    found = []
    for match in re.finditer(r"^module\s+\w+\s+'metric-alert\.bicep'\s*=\s*", text, re.MULTILINE):
        body, _ = parse_value(text, match.end())
        found.append(body["params"])
    return found


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
    assert alert["actionGroupId"] == Expression("actionGroupId")


def test_dead_letter_alert_fires_above_zero_per_entity() -> None:
    alert = _metric_alerts()["DeadletteredMessages"]
    assert alert["threshold"] == 0
    assert alert["dimensions"][0]["name"] == "EntityName"


def _text(value: Any) -> str:
    """A Bicep string as written, interpolations shown by their expression text."""
    return "".join(part if isinstance(part, str) else part.text for part in value.parts)


def test_oldest_message_age_alert() -> None:
    (rule,) = resources_of_type(read(ALERTS), "Microsoft.Insights/scheduledQueryRules")
    (criterion,) = rule.body["properties"]["criteria"]["allOf"]
    assert criterion["operator"] == "GreaterThan"
    assert criterion["threshold"] == Expression("oldestMessageAgeThresholdSeconds")
    query_text = "".join(
        part if isinstance(part, str) else part.text for part in criterion["query"].parts
    )
    assert "backlogReportPrefix" in query_text
    assert params(read(ALERTS))["backlogReportPrefix"].default == REPORT_PREFIX


def test_the_alert_query_parses_the_apps_backlog_line() -> None:
    """The regex in the alert's KQL extract() reads the age from a real report line."""
    (rule,) = resources_of_type(read(ALERTS), "Microsoft.Insights/scheduledQueryRules")
    (criterion,) = rule.body["properties"]["criteria"]["allOf"]
    query_text = "".join(
        part if isinstance(part, str) else part.text for part in criterion["query"].parts
    )
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
    assert params(read(MAIN))["actionGroupId"].default == ""
    assert "actionGroupId: actionGroupId" in read(MAIN).split("module alerts", 1)[1]
