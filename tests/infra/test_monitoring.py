"""Monitoring: OpenTelemetry export, alerts on the app's telemetry, and the workbook.

The app emits OpenTelemetry through the Functions Python worker's own Azure Monitor setup
(``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY``), the host emits OpenTelemetry too
(host.json ``telemetryMode``), and both ingest with the app identity. The alerts and the
workbook read what the app emits (shared/telemetry.py): metric names and span names come
from that module here, not from a copied list, so a renamed metric fails these tests.

Every query is a file in ``infra/modules/queries/`` that the Bicep loads with
``loadTextContent``: the alert, the chart and docs/monitoring.md quote the same text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared import telemetry
from tests.infra import (
    ALERTS,
    FUNCTION_APP,
    INFRA,
    MAIN,
    MODULES,
    REPO_ROOT,
    app_settings,
    constants,
    is_reference,
    literal,
    modules,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources_of_type,
    variables,
    without_comments,
)

LOG_ALERT = MODULES / "log-alert.bicep"
WORKBOOK = MODULES / "workbook.bicep"
MONITORING = MODULES / "monitoring.bicep"
QUERIES = MODULES / "queries"
HOST_JSON = REPO_ROOT / "host.json"
SHARED = REPO_ROOT / "shared"

OLDEST_AGE = "inferbus.queue.oldest_message_age"
DEAD_LETTERED = "inferbus.queue.dead_lettered_messages"
PROCESS_SPANS = f'name startswith "{telemetry.SPAN_PROCESS} "'

# --- export: host.json, app settings, identity ----------------------------------------------


def test_host_exports_opentelemetry() -> None:
    """``"telemetryMode": "OpenTelemetry"`` in the root of host.json; the host then ignores
    ``logging.applicationInsights``, so none is left to mislead.
    https://learn.microsoft.com/azure/azure-functions/opentelemetry-howto#enable-opentelemetry-in-the-functions-host
    """
    host = json.loads(read(HOST_JSON))
    assert host["telemetryMode"] == "OpenTelemetry"
    assert "applicationInsights" not in host.get("logging", {})


def test_the_worker_exports_the_apps_telemetry_with_the_app_identity() -> None:
    """The worker configures the Azure Monitor distro itself when the switch is true; its
    exporter reads the connection string and, for Entra ID, the authentication string."""
    settings = app_settings()
    switch = settings["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"]
    assert switch == "true"
    assert not is_reference(switch)
    assert (
        render(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"])
        == "appInsights.properties.ConnectionString"
    )
    auth = resolve(
        settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"], {"appIdentityClientId": "X"}
    )
    pairs = dict(item.split("=", 1) for item in auth.split(";"))
    assert pairs == {"ClientId": "X", "Authorization": "AAD"}
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in settings, "one exporter: Azure Monitor"


def test_the_app_identity_may_publish_telemetry_to_the_component() -> None:
    """Monitoring Metrics Publisher on the component, for the identity of the
    authentication string (needed once local authentication is disabled)."""
    assignments = [
        resource_body(assignment)
        for assignment in resources_of_type(
            FUNCTION_APP, "Microsoft.Authorization/roleAssignments"
        ).values()
    ]
    publishers = [
        body
        for body in assignments
        if render(body["properties"]["roleDefinitionId"]).endswith(
            "roleDefinitionIds.monitoringMetricsPublisher)"
        )
    ]
    assert len(publishers) == 1
    (publisher,) = publishers
    assert is_reference(publisher["scope"], "appInsights")
    assert is_reference(publisher["properties"]["principalId"], "appIdentityPrincipalId")
    assert publisher["properties"]["principalType"] == "ServicePrincipal"


def test_local_authentication_of_the_component_is_a_parameter() -> None:
    (component,) = resources_of_type(MONITORING, "Microsoft.Insights/components").values()
    assert is_reference(
        resource_body(component)["properties"]["DisableLocalAuth"], "disableLocalAuth"
    )
    passed = resource_body(modules(MAIN)["monitoring"])["params"]
    assert is_reference(passed["disableLocalAuth"], "appInsightsDisableLocalAuth")


# --- queries ----------------------------------------------------------------------------------


def _loaded_file(value: Any) -> Path:
    """The file of a ``loadTextContent('queries/...')`` value."""
    match = re.fullmatch(r"load_text_content\('([^']+)'\)", render(value))
    assert match, f"expected loadTextContent('queries/...'), got {render(value)}"
    path = MODULES / match.group(1)
    assert path.parent == QUERIES, path
    return path


def _query(value: Any) -> str:
    return read(_loaded_file(value))


def test_every_query_file_is_used_by_an_alert_or_the_workbook() -> None:
    used = {path.name for path in _alert_query_files().values()} | {
        path.name for path in _chart_query_files().values()
    }
    on_disk = {path.name for path in QUERIES.glob("*.kql")}
    assert used == on_disk


def _dimension_keys(text: str) -> set[str]:
    return set(re.findall(r'customDimensions\["([^"]+)"\]', without_comments(text)))


def _app_source() -> str:
    return "\n".join(read(path) for path in sorted(SHARED.rglob("*.py")))


@pytest.mark.parametrize("path", sorted(QUERIES.glob("*.kql")), ids=lambda path: path.name)
def test_queries_read_dimensions_the_app_records(path: Path) -> None:
    """Every ``customDimensions["<key>"]`` is an attribute name the app writes somewhere
    in shared/ (a span attribute, a metric attribute), quoted as such."""
    source = _app_source()
    unknown = {key for key in _dimension_keys(read(path)) if f'"{key}"' not in source}
    assert not unknown, f"{path.name} reads dimensions the app never records: {unknown}"


def test_queries_name_the_apps_outcomes() -> None:
    """The outcome literals the queries filter on are outcomes the processor returns
    (``processing``: its outcomes, the happy path and the outcome table)."""
    source = "".join(read(path) for path in sorted((SHARED / "processing").glob("*.py")))
    contracts = read(SHARED / "contracts.py")
    used = set()
    for path in QUERIES.glob("*.kql"):
        code = without_comments(read(path))
        used |= set(re.findall(r'"(completed|refused|dead-lettered|expired)"', code))
    assert used == {"completed", "refused", "dead-lettered", "expired"}
    for outcome in used:
        assert f'"{outcome}"' in source or f'"{outcome}"' in contracts, outcome


# --- alerts on the app's telemetry ------------------------------------------------------------

# symbol: (query file, measure column, aggregation, dimensions, threshold parameter, names)
LOG_ALERTS: dict[str, tuple[str, str, str, tuple[str, ...], str, tuple[str, ...]]] = {
    "oldestMessageAge": (
        "alert-oldest-message-age.kql",
        "ageSeconds",
        "Maximum",
        ("queue",),
        "oldestMessageAgeThresholdSeconds",
        (OLDEST_AGE,),
    ),
    "queueUnreadable": (
        "alert-queue-unreadable.kql",
        "failedReads",
        "Total",
        ("queue",),
        "queueUnreadableThreshold",
        (telemetry.QUEUE_UNREADABLE,),
    ),
    "deadLetterGrowth": (
        "alert-deadletter-growth.kql",
        "growth",
        "Maximum",
        ("queue",),
        "deadLetterGrowthThreshold",
        (DEAD_LETTERED,),
    ),
    "refusalRate": (
        "alert-refusal-rate.kql",
        "refusalRatePercent",
        "Maximum",
        ("door",),
        "refusalRateThresholdPercent",
        (telemetry.REQUESTS_ACCEPTED, telemetry.REQUESTS_REFUSED),
    ),
    "failureRate": (
        "alert-failure-rate.kql",
        "failureRatePercent",
        "Maximum",
        ("lane",),
        "failureRateThresholdPercent",
        (telemetry.MESSAGES_SETTLED,),
    ),
    "batchEnded": (
        "alert-batch-ended.kql",
        "batches",
        "Total",
        ("status",),
        "batchEndedThreshold",
        (telemetry.BATCH_ENDED,),
    ),
    "functionFailures": (
        "alert-function-failures.kql",
        "failures",
        "Total",
        ("operation",),
        "functionFailureThreshold",
        (),
    ),
    "budgetUtilization": (
        "alert-budget-utilization.kql",
        "utilizationPercent",
        "Maximum",
        ("tenant", "budget"),
        "budgetUtilizationThresholdPercent",
        (telemetry.BUDGET_UTILIZATION,),
    ),
}


# Alerts that fire when the measure reaches the threshold, not only when it passes it.
AT_OR_ABOVE = {"budgetUtilization"}


def test_the_queue_gauges_the_alerts_read_exist() -> None:
    assert {OLDEST_AGE, DEAD_LETTERED} <= set(telemetry.QUEUE_GAUGES)


def _log_alerts() -> dict[str, dict[str, Any]]:
    return {
        symbol: resource_body(module)["params"]
        for symbol, module in modules(ALERTS).items()
        if module["detail"]["path"] == "log-alert.bicep"
    }


def _alert_query_files() -> dict[str, Path]:
    return {symbol: _loaded_file(alert["query"]) for symbol, alert in _log_alerts().items()}


def test_the_log_alerts_are_these() -> None:
    assert set(_log_alerts()) == set(LOG_ALERTS)


@pytest.mark.parametrize("symbol", sorted(LOG_ALERTS))
def test_log_alert(symbol: str) -> None:
    file, measure, aggregation, dimensions, threshold, names = LOG_ALERTS[symbol]
    alert = _log_alerts()[symbol]
    assert _loaded_file(alert["query"]).name == file
    query = without_comments(_query(alert["query"]))
    assert alert["measureColumn"] == measure
    assert alert["timeAggregation"] == aggregation
    operator = "GreaterThanOrEqual" if symbol in AT_OR_ABOVE else "GreaterThan"
    assert alert["operator"] == operator
    assert is_reference(alert["threshold"], threshold)
    assert is_reference(alert["scopeId"], "appInsightsId")
    assert is_reference(alert["actionGroupId"], "actionGroupId")
    assert tuple(d["name"] for d in alert["dimensions"]) == dimensions
    assert all(d["values"] == ["*"] for d in alert["dimensions"])
    # The query's result: a timestamp, the dimensions and the measure, in its last line.
    last = query.strip().splitlines()[-1]
    for column in ("timestamp", *dimensions, measure):
        assert re.search(rf"\b{column}\b", last), f"{file}: {column} not in {last!r}"
    for name in names:
        assert f'"{name}"' in query, f"{file} does not read {name}"


@pytest.mark.parametrize("symbol", sorted(LOG_ALERTS))
def test_alerts_read_telemetry_not_log_lines(symbol: str) -> None:
    """Alerts on metrics and spans, never on parsed log text."""
    query = without_comments(_query(_log_alerts()[symbol]["query"]))
    assert "traces" not in query
    assert "extract(" not in query
    assert "parse " not in query


def test_unreadable_counts_alert_after_ten_minutes_of_failed_reads() -> None:
    """One entity whose counts cannot be read fires on its own (dimension queue = the
    entity, the attribute the app's counter carries), over a 10-minute window."""
    alert = _log_alerts()["queueUnreadable"]
    assert alert["windowSize"] == "PT10M"
    assert alert["evaluationFrequency"] == "PT5M"
    assert params(ALERTS)["queueUnreadableThreshold"]["default"] == 0
    query = without_comments(_query(alert["query"]))
    assert 'customDimensions["messaging.destination.name"]' in query
    assert "sum(value)" in query
    # The counter's attribute is the gauges' own, so the alert names the entity they miss.
    assert '"messaging.destination.name": entity' in read(SHARED / "telemetry.py")


def test_a_tenant_reaching_the_share_of_a_budget_alerts_per_tenant_and_budget() -> None:
    """The histogram's ``valueMax`` (the highest fraction of each export interval) in
    percent, a whole-number threshold of 80 by default, reached or passed, over the
    readings of each tenant's latest period."""
    alert = _log_alerts()["budgetUtilization"]
    assert params(ALERTS)["budgetUtilizationThresholdPercent"]["default"] == 80
    assert alert["windowSize"] == "PT1H"
    assert alert["evaluationFrequency"] == "PT5M"
    assert alert["severity"] == 2
    query = without_comments(_query(alert["query"]))
    assert "100.0 * valueMax" in query
    for key in ("inferbus.tenant", "inferbus.budget", "inferbus.period"):
        assert f'customDimensions["{key}"]' in query
    assert "where period == latestPeriod" in query


def test_the_backlog_log_line_alert_is_gone() -> None:
    text = read(ALERTS)
    assert "oldest_age_seconds" not in text
    assert "backlogReportPrefix" not in params(ALERTS)


def test_the_function_failure_alert_leaves_the_apps_process_spans_out() -> None:
    query = without_comments(_query(_log_alerts()["functionFailures"]["query"]))
    assert f"not({PROCESS_SPANS})" in query
    assert "success == false" in query


def test_the_log_alert_module_aggregates_the_measure_per_dimension() -> None:
    (rule,) = resources_of_type(LOG_ALERT, "Microsoft.Insights/scheduledQueryRules").values()
    body = resource_body(rule)
    properties = body["properties"]
    assert is_reference(properties["scopes"][0], "scopeId")
    assert properties["autoMitigate"] is True
    (criterion,) = properties["criteria"]["allOf"]
    assert is_reference(criterion["query"], "query")
    assert is_reference(criterion["metricMeasureColumn"], "measureColumn")
    assert is_reference(criterion["dimensions"], "dimensions")
    assert is_reference(criterion["threshold"], "threshold")


@pytest.mark.parametrize(
    "name",
    [
        "oldestMessageAgeThresholdSeconds",
        "deadLetterGrowthThreshold",
        "refusalRateThresholdPercent",
        "failureRateThresholdPercent",
        "budgetUtilizationThresholdPercent",
    ],
)
def test_main_passes_the_alert_thresholds(name: str) -> None:
    assert params(MAIN)[name]["default"] == params(ALERTS)[name]["default"]
    passed = resource_body(modules(MAIN)["alerts"])["params"]
    assert is_reference(passed[name], name)


# --- the workbook -----------------------------------------------------------------------------

# chart name: (visualization, names of the telemetry it reads)
CHARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "throughput": ("areachart", (telemetry.MESSAGES_SETTLED, "inferbus.outcome")),
    "intake": ("timechart", (telemetry.REQUESTS_ACCEPTED, telemetry.REQUESTS_REFUSED)),
    "latency": ("timechart", (telemetry.SPAN_INTAKE, "inferbus.outcome")),
    "backlog": (
        "timechart",
        tuple(name for name in telemetry.QUEUE_GAUGES if name != OLDEST_AGE),
    ),
    "oldest-age": ("timechart", (OLDEST_AGE,)),
    "deadletters": ("barchart", ("dead-lettered",)),
    "tokens": ("barchart", (telemetry.TOKEN_USAGE, "inferbus.tenant")),
    "model-duration": ("timechart", (telemetry.MODEL_DURATION,)),
    "tenants": (
        "table",
        (
            telemetry.TOKEN_USAGE,
            telemetry.COST,
            telemetry.BUDGET_UTILIZATION,
            "inferbus.tenant",
            *telemetry.BUDGETS,
        ),
    ),
}


def _workbook() -> dict[str, Any]:
    (workbook,) = resources_of_type(WORKBOOK, "Microsoft.Insights/workbooks").values()
    return resource_body(workbook)


def _workbook_data() -> dict[str, Any]:
    known = {**constants(WORKBOOK), "appInsightsId": "COMPONENT", "displayName": "Inferbus"}
    serialized = _workbook()["properties"]["serializedData"]
    assert render(serialized) == "string(content)"
    data: dict[str, Any] = json.loads(resolve(serialized, known))
    return data


def _charts() -> dict[str, dict[str, Any]]:
    return {
        item["name"]: item["content"] for item in _workbook_data()["items"] if item["type"] == 3
    }


def _chart_query_files() -> dict[str, Path]:
    """Chart name -> the query file its item loads (read from the Bicep, not the JSON)."""
    found = {}
    for item in variables(WORKBOOK)["content"]["items"]:
        if item["type"] != 3:
            continue
        content = item["content"]["function"]["parameters"]["arg_2"]
        found[item["name"]] = _loaded_file(content["query"])
    return found


def test_main_deploys_the_workbook_on_the_component() -> None:
    workbook = resource_body(modules(MAIN)["workbook"])
    assert modules(MAIN)["workbook"]["detail"]["path"] == "modules/workbook.bicep"
    assert render(workbook["params"]["appInsightsId"]) == "monitoring.outputs.appInsightsId"


def test_the_workbook_is_a_shared_workbook_of_the_component() -> None:
    body = _workbook()
    assert body["kind"] == "shared"
    assert render(body["name"]) == "guid(appInsightsId, displayName)"
    properties = body["properties"]
    assert properties["category"] == "workbook"
    assert is_reference(properties["sourceId"], "appInsightsId")
    assert is_reference(properties["displayName"], "displayName")


def test_the_workbook_is_a_notebook_over_the_component() -> None:
    data = _workbook_data()
    assert data["version"] == "Notebook/1.0"
    assert data["fallbackResourceIds"] == ["COMPONENT"]
    (parameters,) = [item for item in data["items"] if item["type"] == 9]
    (time_range,) = parameters["content"]["parameters"]
    assert time_range["name"] == "TimeRange"
    assert time_range["type"] == 4


def test_the_workbook_has_these_charts() -> None:
    assert set(_charts()) == set(CHARTS)
    assert set(_chart_query_files()) == set(CHARTS)


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_workbook_chart(chart: str) -> None:
    visualization, names = CHARTS[chart]
    content = _charts()[chart]
    query_file = _chart_query_files()[chart]
    assert query_file.name == f"workbook-{chart}.kql"
    assert content["query"] == read(query_file), "the chart runs the file as it is"
    assert content["version"] == "KqlItem/1.0"
    assert content["visualization"] == visualization
    assert content["timeContextFromParameter"] == "TimeRange"
    assert content["resourceType"] == "microsoft.insights/components"
    assert content["title"]
    query = without_comments(content["query"])
    for name in names:
        assert f'"{name}"' in query, f"{chart} does not read {name}"


def test_latency_runs_from_intake_to_the_final_process_span_per_trace() -> None:
    query = without_comments(read(_chart_query_files()["latency"]))
    assert "dependencies" in query
    assert f'name == "{telemetry.SPAN_INTAKE}"' in query
    assert "requests" in query
    assert PROCESS_SPANS in query
    assert "operation_Id" in query
    assert "percentile(seconds, 50)" in query
    assert "percentile(seconds, 99)" in query


def test_dead_letters_by_reason_come_from_the_process_spans() -> None:
    query = without_comments(read(_chart_query_files()["deadletters"]))
    assert "requests" in query
    assert PROCESS_SPANS in query
    assert 'customDimensions["inferbus.outcome"]) == "dead-lettered"' in query
    assert "inferbus.dead_letter_reason" in query
    assert "sum(itemCount)" in query, "spans are sampled: count what they stand for"


def test_the_tenants_chart_shows_each_budgets_latest_reading_in_its_period() -> None:
    """One row per tenant: tokens and cost summed over the range, and per budget the
    latest ``valueMax`` of the budget's current period (the period of its latest reading
    of any tenant), so a past day or month never shows as today's."""
    query = without_comments(read(_chart_query_files()["tenants"]))
    assert 'customDimensions["inferbus.period"]' in query
    assert "arg_max(timestamp, period) by budget" in query
    assert "where period == currentPeriod" in query
    assert "arg_max(timestamp, utilization) by tenant, budget" in query
    assert "utilization = valueMax" in query
    columns = next(line for line in query.splitlines() if line.startswith("| project tenant"))
    for column in ("inputTokens", "outputTokens", "cost", "currency"):
        assert re.search(rf"\b{column}\b", columns), column


def test_charts_and_alerts_on_spans_count_sampled_items() -> None:
    for path in QUERIES.glob("*.kql"):
        query = without_comments(read(path))
        if re.search(r"^\s*requests\b", query, re.MULTILINE) and "summarize" in query:
            assert "count()" not in query, f"{path.name}: count() ignores sampling"


# --- documentation ----------------------------------------------------------------------------


def test_infra_readme_lists_every_query_and_the_workbook() -> None:
    readme = read(INFRA / "README.md")
    missing = [path.name for path in QUERIES.glob("*.kql") if path.name not in readme]
    assert not missing, f"infra/README.md does not list {missing}"
    assert "modules/workbook.bicep" in readme
    assert "modules/log-alert.bicep" in readme


def test_alert_descriptions_are_literal_enough_to_read() -> None:
    for symbol, alert in _log_alerts().items():
        description = literal(alert["alertDescription"])
        text = (
            description
            if isinstance(description, str)
            else "".join(part for part in description if isinstance(part, str))
        )
        assert len(text) >= 60, symbol
