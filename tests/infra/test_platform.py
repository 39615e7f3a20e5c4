"""Scale bounds and platform metric alerts: the operational promises of the deployment
(retention: test_retention.py; alerts on the app's telemetry and the workbook:
test_monitoring.py)."""

from typing import Any

import pytest

from tests.infra import (
    ALERTS,
    FUNCTION_APP,
    MAIN,
    decorator,
    has_default,
    is_reference,
    modules,
    params,
    resource_body,
    resources_of_type,
)


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


def test_no_metric_alert_on_failed_requests() -> None:
    """The component's requests/failed counts the app's ``process <queue>`` spans, which fail
    on purpose (dead-lettered, abandoned): failed invocations are a log alert that leaves
    them out (test_monitoring.py)."""
    assert "requests/failed" not in _metric_alerts()


def test_action_group_reaches_the_alerts() -> None:
    action_group = params(MAIN)["actionGroupId"]
    assert has_default(action_group)
    assert action_group["default"] == ""
    assert is_reference(
        resource_body(modules(MAIN)["alerts"])["params"]["actionGroupId"], "actionGroupId"
    )
