"""A tenant's budget use as telemetry: ``record_budget_use`` records the fraction of one
budget in ``inferbus.budget.utilization``, read back through the SDK's in-memory reader
(the ``recorded`` fixture of conftest.py)."""

from __future__ import annotations

from dataclasses import fields

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint

from shared import telemetry
from shared.accounting.tenants import Budget
from tests.support.telemetry import Telemetry


def test_the_fraction_of_a_budget_is_recorded_by_tenant_budget_and_period(
    recorded: Telemetry,
) -> None:
    telemetry.record_budget_use(
        tenant="trial", budget="tokens_per_day", period="2026-12-05", used=2400, limit=3000
    )

    (point,) = recorded.collect()[telemetry.BUDGET_UTILIZATION]
    assert isinstance(point, HistogramDataPoint), "a histogram: the alert reads valueMax"
    assert point.count == 1
    assert point.max == pytest.approx(0.8)
    assert point.sum == pytest.approx(0.8)
    assert dict(point.attributes or {}) == {
        "inferbus.tenant": "trial",
        "inferbus.budget": "tokens_per_day",
        "inferbus.period": "2026-12-05",
    }


def test_each_budget_and_period_is_a_series_of_its_own_with_its_highest_fraction(
    recorded: Telemetry,
) -> None:
    for used in (5.0, 17.5, 12.0):  # checks within one export interval
        telemetry.record_budget_use(
            tenant="trial", budget="cost_per_month", period="2026-12", used=used, limit=20
        )
    telemetry.record_budget_use(
        tenant="trial", budget="tokens_per_month", period="2026-12", used=60000, limit=50000
    )

    points = recorded.collect()[telemetry.BUDGET_UTILIZATION]
    by_budget = {point.attributes["inferbus.budget"]: point for point in points}
    assert set(by_budget) == {"cost_per_month", "tokens_per_month"}
    assert by_budget["cost_per_month"].count == 3
    assert by_budget["cost_per_month"].max == pytest.approx(0.875)
    assert by_budget["tokens_per_month"].max == pytest.approx(1.2), "overspent: past 1"


def test_the_metric_is_a_dimensionless_fraction(recorded: Telemetry) -> None:
    telemetry.record_budget_use(
        tenant="trial", budget="tokens_per_day", period="2026-12-05", used=1, limit=4
    )

    data = recorded.reader.get_metrics_data()
    assert data is not None
    units = {
        metric.name: metric.unit
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert units[telemetry.BUDGET_UTILIZATION] == "1"


def test_a_limit_that_is_not_positive_records_nothing(recorded: Telemetry) -> None:
    telemetry.record_budget_use(
        tenant="trial", budget="tokens_per_day", period="2026-12-05", used=10, limit=0
    )

    assert telemetry.BUDGET_UTILIZATION not in recorded.collect()


def test_the_budget_dimension_names_the_tenant_catalogs_budgets() -> None:
    """``inferbus.budget`` takes the names of the catalog's budget fields, which the alert
    and the workbook split by."""
    assert set(telemetry.BUDGETS) == {field.name for field in fields(Budget)}
