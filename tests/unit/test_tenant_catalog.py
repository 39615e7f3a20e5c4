"""The tenant catalog (``tenants.json``): what it grants each tenant, and every refusal at
start naming the file, the tenant and the field.

The refusals come from the real readers: ``parse_tenant_catalog`` and
``tenant_catalog_for`` over files, the check the app runs when it is indexed
(``verify_tenant_catalog``, as ``function_app.py`` calls it with the model catalog) and
the launcher's (``devtools.stack.served_models``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from devtools.stack import StackError, served_models
from shared.accounting.tenants import (
    EVERYONE_EQUAL,
    Budget,
    TenantPolicy,
    parse_tenant_catalog,
    tenant_catalog_for,
)
from shared.entrypoints.bootstrap import verify_tenant_catalog
from shared.errors import ConfigurationError, TenantCatalogError
from shared.inference.catalog import ModelCatalog, shorthand_catalog
from shared.inference.prices import Prices
from shared.settings import Settings

UNPRICED = shorthand_catalog(("local-analyzer", "gpt-4o-mini"), "local")
# A cost budget counts the aliases' prices: the example's needs some.
MODELS = ModelCatalog(
    UNPRICED.source,
    {
        alias: replace(card, prices=Prices("USD", Decimal("0.15"), Decimal("0.6")))
        for alias, card in UNPRICED.cards.items()
    },
)
EXAMPLE = {
    "default": {"weight": 1},
    "tenants": {
        "support": {"weight": 3, "models": ["gpt-4o-mini"]},
        "trial": {
            "budget": {"tokens_per_day": 3000, "tokens_per_month": 50000, "cost_per_month": 20}
        },
    },
}


def refused(text: str) -> TenantCatalogError:
    with pytest.raises(TenantCatalogError) as refusal:
        parse_tenant_catalog(text, "tenants.json")
    return refusal.value


def written(directory: Path, document: Any, name: str = "tenants.json") -> Path:
    path = directory / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def named(path: Path) -> Settings:
    return Settings.model_validate({"TenantCatalog": str(path)})


# --- what it grants ------------------------------------------------------------------------


def test_each_named_tenant_gets_its_terms_and_the_others_the_default() -> None:
    catalog = parse_tenant_catalog(json.dumps(EXAMPLE), "tenants.json")

    assert catalog.policy("support") == TenantPolicy(weight=3, models=frozenset({"gpt-4o-mini"}))
    assert catalog.policy("trial") == TenantPolicy(budget=Budget(3000, 50000, 20))
    assert catalog.policy("contoso") == EVERYONE_EQUAL
    assert catalog.policy("support").may_use("gpt-4o-mini")
    assert not catalog.policy("support").may_use("local-analyzer")
    assert catalog.policy("trial").may_use("local-analyzer"), "no models: every alias"


def test_a_default_of_the_files_own_applies_to_every_tenant_not_named() -> None:
    text = json.dumps({"default": {"weight": 0.5, "models": ["local-analyzer"]}})

    catalog = parse_tenant_catalog(text, "tenants.json")

    assert catalog.policy("anyone") == TenantPolicy(0.5, None, frozenset({"local-analyzer"}))
    catalog.check_models(MODELS)


def test_without_a_file_or_a_setting_every_tenant_weighs_one_with_no_budget(
    tmp_path: Path,
) -> None:
    catalog = tenant_catalog_for(Settings(), MODELS, root=tmp_path)

    assert catalog.source is None
    assert catalog.policy("contoso") == EVERYONE_EQUAL == TenantPolicy(1.0, None, None)


def test_tenants_json_at_the_app_root_is_read_without_a_setting(tmp_path: Path) -> None:
    written(tmp_path, EXAMPLE)

    catalog = tenant_catalog_for(Settings(), MODELS, root=tmp_path)

    assert catalog.policy("support").weight == 3


def test_the_setting_names_a_file_relative_to_the_app_root(tmp_path: Path) -> None:
    written(tmp_path, {"tenants": {"bench": {"weight": 2}}}, "fair.json")

    settings = Settings.model_validate({"TenantCatalog": "fair.json"})
    catalog = tenant_catalog_for(settings, MODELS, root=tmp_path)

    assert catalog.policy("bench").weight == 2


# --- every refusal names the file, the tenant and the field -----------------------------


@pytest.mark.parametrize(
    ("document", "entry", "field", "message"),
    [
        ({"tenants": {"a": {"weight": 0}}}, "tenant 'a'", "weight", "greater than 0"),
        ({"tenants": {"a": {"weight": -2}}}, "tenant 'a'", "weight", "greater than 0"),
        ({"tenants": {"a": {"weight": "3"}}}, "tenant 'a'", "weight", "a valid number"),
        ({"default": {"weight": 0}}, "default", "weight", "greater than 0"),
        (
            {"tenants": {"a": {"budget": {"tokens_per_day": 0}}}},
            "tenant 'a'",
            "budget.tokens_per_day",
            "greater than 0",
        ),
        (
            {"tenants": {"a": {"budget": {"tokens_per_month": 2.5}}}},
            "tenant 'a'",
            "budget.tokens_per_month",
            "a valid integer",
        ),
        (
            {"tenants": {"a": {"budget": {"cost_per_month": -1}}}},
            "tenant 'a'",
            "budget.cost_per_month",
            "greater than 0",
        ),
    ],
    ids=[
        "zero-weight",
        "negative-weight",
        "text-weight",
        "default-weight",
        "zero-tokens",
        "fractional-tokens",
        "negative-cost",
    ],
)
def test_a_weight_or_budget_that_is_not_positive_is_refused(
    document: dict[str, Any], entry: str, field: str, message: str
) -> None:
    error = refused(json.dumps(document))

    assert (error.file, error.entry, error.field) == ("tenants.json", entry, field)
    assert message in str(error)
    assert str(error).startswith(f"tenants.json: {entry}, field '{field}': ")


def test_an_infinite_weight_is_refused() -> None:
    error = refused('{"tenants": {"a": {"weight": Infinity}}}')

    assert (error.entry, error.field) == ("tenant 'a'", "weight")


@pytest.mark.parametrize(
    ("document", "entry", "field", "fields"),
    [
        ({"tenants": {"a": {"wieght": 2}}}, "tenant 'a'", "wieght", "weight, budget, models"),
        (
            {"tenants": {"a": {"budget": {"tokens": 9}}}},
            "tenant 'a'",
            "budget.tokens",
            "tokens_per_day, tokens_per_month, cost_per_month",
        ),
        ({"tenant": {}}, None, "tenant", "$schema, default, tenants"),
    ],
    ids=["policy", "budget", "document"],
)
def test_an_unknown_field_is_refused_with_the_fields_it_could_be(
    document: dict[str, Any], entry: str | None, field: str, fields: str
) -> None:
    error = refused(json.dumps(document))

    assert (error.entry, error.field) == (entry, field)
    assert str(error).endswith(f"unknown field; the fields here: {fields}")


def test_a_tenant_declared_twice_is_refused_as_the_model_catalog_refuses_an_alias() -> None:
    error = refused('{"tenants": {"trial": {"weight": 1}, "trial": {"weight": 5}}}')

    assert str(error) == (
        "tenants.json: tenant 'trial': declared twice in \"tenants\"; declare each tenant "
        "once (JSON would keep only the last)"
    )


def test_a_key_given_twice_inside_a_tenant_is_refused_where_it_is() -> None:
    error = refused('{"tenants": {"trial": {"weight": 1, "weight": 5}}}')

    assert (error.entry, error.field) == ("tenant 'trial'", "weight")
    assert str(error).endswith("given twice; give each key once (JSON would keep only the last)")


@pytest.mark.parametrize("tenant", ["not a tenant", "-leading-dash", "x" * 129, ""])
def test_a_tenant_id_the_app_would_never_see_is_refused(tenant: str) -> None:
    error = refused(json.dumps({"tenants": {tenant: {"weight": 1}}}))

    assert (error.entry, error.field) == (f"tenant '{tenant}'", None)
    assert "not a valid tenant id" in str(error)


def test_a_file_that_is_not_a_json_object_is_refused() -> None:
    assert "not valid JSON" in str(refused('{"tenants": '))
    assert str(refused("[]")) == (
        'tenants.json: the tenant catalog must be a JSON object with "tenants"'
    )
    not_an_object = refused('{"tenants": {"a": 3}}')
    assert str(not_an_object) == "tenants.json: tenant 'a': must be a JSON object"


def test_an_alias_the_model_catalog_does_not_serve_is_refused_naming_tenant_and_alias(
    tmp_path: Path,
) -> None:
    path = written(tmp_path, {"tenants": {"support": {"models": ["gpt-4o-mini", "gpt-9"]}}})

    with pytest.raises(TenantCatalogError) as refusal:
        tenant_catalog_for(named(path), MODELS)

    assert str(refusal.value) == (
        f"{path}: tenant 'support', field 'models': 'gpt-9' is not an alias of "
        "AllowedModels/ModelProvider; its aliases: local-analyzer, gpt-4o-mini"
    )


def test_a_setting_naming_a_missing_file_is_refused(tmp_path: Path) -> None:
    absent = tmp_path / "absent.json"

    with pytest.raises(TenantCatalogError) as refusal:
        tenant_catalog_for(named(absent), MODELS)

    assert str(refusal.value) == f"{absent}: no such file (the app setting TenantCatalog names it)"
    assert isinstance(refusal.value, ConfigurationError)


# --- at start: the app's indexing and the launcher ----------------------------------------


def test_the_start_check_refuses_an_unknown_alias_and_passes_a_good_file(tmp_path: Path) -> None:
    bad = written(tmp_path, {"default": {"models": ["gpt-9"]}}, "bad.json")
    with pytest.raises(TenantCatalogError, match="default, field 'models': 'gpt-9'"):
        verify_tenant_catalog(MODELS, {"TenantCatalog": str(bad)})

    good = written(tmp_path, EXAMPLE, "good.json")
    checked = verify_tenant_catalog(MODELS, {"TenantCatalog": str(good)})

    assert checked.policy("support").weight == 3


def test_the_launcher_refuses_it_before_starting_anything(tmp_path: Path) -> None:
    path = written(tmp_path, {"tenants": {"trial": {"weight": 0}}})
    settings = Settings.model_validate({"TenantCatalog": str(path), "AllowedModels": "a"})

    with pytest.raises(StackError) as refusal:
        served_models(settings)

    assert str(refusal.value) == (
        f"the tenant catalog cannot be used: {path}: tenant 'trial', field 'weight': "
        "Input should be greater than 0"
    )


def test_a_cost_budget_without_prices_to_count_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path, EXAMPLE)

    with pytest.raises(TenantCatalogError) as refusal:
        verify_tenant_catalog(UNPRICED, {"TenantCatalog": str(path)})

    assert str(refusal.value).startswith(
        f"{path}: tenant 'trial', field 'budget.cost_per_month': a cost budget needs prices: "
        'no alias of AllowedModels/ModelProvider has "prices"'
    )
