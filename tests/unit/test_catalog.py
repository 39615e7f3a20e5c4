"""The model catalog: every refusal names the file, the entry and the field; what it serves.

``parse_catalog`` and ``resolve_catalog`` are the kernel's (the file, tasks, schemas,
references); ``check_catalog`` and ``serve_catalog`` the providers' (fields, handlers).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.models import check_catalog, providers, serve_catalog
from shared.errors import CatalogError, ConfigurationError
from shared.inference.catalog import (
    APP_ROOT,
    SHORTHAND_SOURCE,
    Capacity,
    ModelCatalog,
    catalog_for,
    parse_catalog,
)
from shared.inference.parameters import GENERATION_PARAMETERS, SAMPLING_PARAMETERS_ONLY
from shared.inference.prices import Prices
from shared.settings import Settings
from tests.support.catalogs import catalog

SENTIMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment"],
    "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
}
TASKS = {"sentiment": {"instructions": "Rate the sentiment.", "output_schema": SENTIMENT}}
HANDLERS = "tests.support.model_handlers"


def parsed(document: Any) -> None:
    parse_catalog(json.dumps(document) if not isinstance(document, str) else document, "m.json")


def refusal(document: Any) -> CatalogError:
    with pytest.raises(CatalogError) as refused:
        parsed(document)
    return refused.value


def models(**entries: Any) -> dict[str, Any]:
    return {"tasks": TASKS, "models": entries}


def checked(document: dict[str, Any], settings: dict[str, str] | None = None) -> ModelCatalog:
    """The document resolved and checked by its providers (settings complete)."""
    resolved = catalog(document, settings)
    check_catalog(resolved)
    return resolved


def provider_refusal(document: dict[str, Any], settings: dict[str, str] | None = None) -> str:
    with pytest.raises(CatalogError) as refused:
        checked(document, settings)
    return str(refused.value)


# --- the file ---------------------------------------------------------------------------------


def test_a_file_that_is_not_json_is_refused_with_its_line_and_column() -> None:
    error = refusal('{"models": {\n  "a": {"provider": "local",}\n}}')
    assert str(error).startswith("m.json: not valid JSON: ")
    assert "(line 2, column 28)" in str(error)
    assert (error.file, error.entry, error.field) == ("m.json", None, None)


@pytest.mark.parametrize(
    ("document", "entry", "field", "message"),
    [
        ([], None, None, 'a JSON object with "tasks" and "models", not an array'),
        ({}, None, "models", "Field required"),
        ({"models": {}}, None, "models", "at least 1 item"),
        ({"models": {"a": {}}}, "model 'a'", "provider", "Field required"),
        ({"models": {"a": {"provider": "local", "prvider": 1}}}, "model 'a'", "prvider", "Extra"),
        ({"models": {"has space": {"provider": "local"}}}, "model 'has space'", None, "pattern"),
        ({"models": {"a": {"provider": "local", "task": "a b"}}}, "model 'a'", "task", "pattern"),
        ({"tasks": {"t": {"instruction": "x"}}, "models": {"a": {"provider": "local"}}},
         "task 't'", "instruction", "Extra"),
        ({"models": {"a": {"provider": "local", "capacity": {"tokens_per_minute": -1}}}},
         "model 'a'", "capacity.tokens_per_minute", "a whole number of 0 or more"),
        ({"models": {"a": {"provider": "local", "capacity": {"tokens_per_minute": "lots"}}}},
         "model 'a'", "capacity.tokens_per_minute", "or a %Setting% reference"),
        ({"models": {"a": {"provider": "local", "capacity": {"limiter": "hourly"}}}},
         "model 'a'", "capacity.limiter", "'window' or 'minute'"),
        ({"unknown": 1, "models": {"a": {"provider": "local"}}}, None, "unknown", "Extra"),
    ],
    ids=["array", "no-models", "empty-models", "no-provider", "misspelt-field", "bad-alias",
         "bad-task-name", "misspelt-task-field", "negative-capacity", "capacity-text",
         "capacity-limiter", "unknown-top-level"],
)  # fmt: skip
def test_a_file_of_the_wrong_shape_names_the_entry_and_field(
    document: Any, entry: str | None, field: str | None, message: str
) -> None:
    error = refusal(document)
    assert (error.entry, error.field) == (entry, field)
    assert message in str(error)


@pytest.mark.parametrize(
    ("document", "entry", "field", "message"),
    [
        ('"models"', None, None, 'must be a JSON object with "tasks" and "models", not a string'),
        ({"models": []}, None, "models", "must be a JSON object, not an array"),
        ({"models": {"a": 3}}, "model 'a'", None, "must be a JSON object, not a number"),
        ({"tasks": {"t": "x"}, "models": {"a": {"provider": "local"}}}, "task 't'", None,
         "must be a JSON object, not a string"),
        ({"models": {"a": {"provider": "local", "capacity": [1]}}}, "model 'a'", "capacity",
         "must be a JSON object, not an array"),
    ],
    ids=["string", "models-array", "entry-number", "task-string", "capacity-array"],
)  # fmt: skip
def test_a_value_that_is_not_an_object_is_refused_in_json_words(
    document: Any, entry: str | None, field: str | None, message: str
) -> None:
    """Never an internal class name ("instance of CatalogDocument")."""
    error = refusal(document)
    assert (error.entry, error.field) == (entry, field)
    assert message in str(error)
    assert "instance of" not in str(error)
    assert "Entry" not in str(error)


def test_an_alias_must_name_a_task_of_the_catalog() -> None:
    error = refusal(models(a={"provider": "local", "task": "sentimnet"}))
    assert (error.entry, error.field) == ("model 'a'", "task")
    assert "unknown task 'sentimnet'; the catalog's tasks: document-analysis, sentiment" in str(
        error
    )


@pytest.mark.parametrize(
    ("tasks", "field", "message"),
    [
        ({"t": {"builtin": True}}, "builtin", "no built-in task of this name"),
        ({"document-analysis": {"builtin": True, "instructions": "x"}}, "instructions",
         "a built-in task takes no instructions"),
        ({"document-analysis": {"instructions": "x", "output_schema": SENTIMENT}}, "builtin",
         "the built-in task's name"),
        ({"t": {"output_schema": SENTIMENT}}, "instructions", "a task needs instructions"),
        ({"t": {"instructions": "x"}}, "output_schema", "a task needs an output_schema"),
        ({"t": {"instructions": "x", "output_schema": {"type": "objet"}}}, "output_schema",
         "not a valid JSON Schema"),
        ({"t": {"instructions": "x", "output_schema": {"type": "object", "required": "a"}}},
         "output_schema", "not a valid JSON Schema"),
        ({"t": {"instructions": "x", "output_schema": {"type": "array"}}}, "output_schema",
         "describe a JSON object"),
    ],
    ids=["unknown-builtin", "builtin-with-instructions", "builtin-redeclared", "no-instructions",
         "no-schema", "bad-type", "bad-required", "not-an-object"],
)  # fmt: skip
def test_a_task_that_breaks_a_rule_is_named(
    tasks: dict[str, Any], field: str, message: str
) -> None:
    name = next(iter(tasks))
    error = refusal({"tasks": tasks, "models": {"a": {"provider": "local"}}})
    assert (error.entry, error.field) == (f"task '{name}'", field)
    assert message in str(error)
    assert str(error).startswith(f"m.json: task '{name}', field '{field}': ")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "object", "properties": {"n": {"type": "integr"}}}, "not a valid JSON Schema"),
        ({"type": "string"}, "describe a JSON object"),
        ({"type": "object", "properties": {"n": {"type": "integer"}}}, "additionalProperties"),
    ],
    ids=["invalid", "not-an-object", "open"],
)
def test_a_parameters_schema_must_be_a_closed_object_schema(
    parameters: dict[str, Any], message: str
) -> None:
    error = refusal(models(a={"provider": "local", "parameters": parameters}))
    assert (error.entry, error.field) == ("model 'a'", "parameters")
    assert message in str(error)


# --- references to app settings ---------------------------------------------------------------


def test_references_resolve_from_the_app_settings_whole_or_inside_a_value() -> None:
    resolved = catalog(
        models(
            a={
                "provider": "openai_compatible",
                "task": "sentiment",
                "deployment": "%Deployment%",
                "endpoint": "http://%Host%:8000/v1",
                "capacity": {"tokens_per_minute": "%Tpm%", "requests_per_minute": 60},
            }
        ),
        {"Deployment": "llama3.1", "Host": "127.0.0.1", "Tpm": "30000"},
    )
    card = resolved.cards["a"]
    assert (card.deployment, card.options["endpoint"]) == ("llama3.1", "http://127.0.0.1:8000/v1")
    assert card.capacity == Capacity(tokens_per_minute=30_000, requests_per_minute=60)
    assert card.parameters is SAMPLING_PARAMETERS_ONLY, "a catalog task's default parameters"


def test_a_reference_to_an_unset_setting_leaves_the_field_unset_and_says_which() -> None:
    document = models(a={"provider": "local", "batch_deployment": "%BatchDeployment%"})
    card = catalog(document, {"BatchDeployment": "  "}).cards["a"]
    assert card.batch_deployment is None
    assert card.unresolved == {"batch_deployment": "BatchDeployment"}
    assert card.parameters is GENERATION_PARAMETERS


def test_an_unset_setting_inside_a_value_is_refused() -> None:
    with pytest.raises(CatalogError) as refused:
        catalog(models(a={"provider": "openai_compatible", "endpoint": "http://%Host%/v1"}))
    assert (refused.value.entry, refused.value.field) == ("model 'a'", "endpoint")
    assert "names app setting 'Host', which is not set" in str(refused.value)


def test_an_unset_setting_inside_batch_deployment_names_the_alias_field() -> None:
    """batch_deployment is every alias's own field, not one of its provider's options."""
    with pytest.raises(CatalogError) as refused:
        catalog(models(a={"provider": "local", "batch_deployment": "gpt-%Suffix%"}))
    assert (refused.value.entry, refused.value.field) == ("model 'a'", "batch_deployment")


def test_a_capacity_reference_must_be_a_whole_number() -> None:
    with pytest.raises(CatalogError, match=r"capacity\.tokens_per_minute") as refused:
        catalog(
            models(a={"provider": "local", "capacity": {"tokens_per_minute": "%Tpm%"}}),
            {"Tpm": "lots"},
        )
    assert "%Tpm% is 'lots', not a whole number" in str(refused.value)


# --- what each provider needs ----------------------------------------------------------------


def test_the_providers_are_the_modules_of_the_adapter_package() -> None:
    assert sorted(providers()) == ["azure_openai", "local", "openai_compatible", "python"]


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ({"provider": "vllm"}, "provider",
         "unknown provider 'vllm'; providers: azure_openai, local, openai_compatible, python"),
        ({"provider": "local", "task": "sentiment"}, "task",
         "provider 'local' runs only document-analysis, not 'sentiment'"),
        ({"provider": "azure_openai"}, "deployment", "provider 'azure_openai' needs deployment"),
        ({"provider": "openai_compatible", "deployment": "d"}, "endpoint",
         "provider 'openai_compatible' needs endpoint"),
        ({"provider": "openai_compatible", "deployment": "d", "endpoint": "127.0.0.1:8000"},
         "endpoint", "not an http(s) URL"),
        ({"provider": "python"}, "handler", "provider 'python' needs handler"),
        ({"provider": "python", "handler": "no_colon"}, "handler", "is not package.module:name"),
        ({"provider": "python", "handler": "tests.support.nowhere:f"}, "handler",
         "does not import: ModuleNotFoundError"),
        ({"provider": "python", "handler": "tests.support.unimportable_handlers:f"}, "handler",
         "does not import: RuntimeError: weights not found: models/classifier.bin"),
        ({"provider": "python", "handler": f"{HANDLERS}:missing"}, "handler", "has no missing"),
        ({"provider": "python", "handler": f"{HANDLERS}:NOT_CALLABLE"}, "handler",
         "is not callable"),
        ({"provider": "python", "handler": f"{HANDLERS}:Broken"}, "handler",
         "Broken() failed: FileNotFoundError: model.joblib"),
    ],
    ids=["unknown-provider", "unsupported-task", "no-deployment", "no-endpoint", "not-a-url",
         "no-handler", "malformed-handler", "no-module", "import-fails", "no-attribute",
         "not-callable", "constructor-fails"],
)  # fmt: skip
def test_an_entry_its_provider_cannot_serve_is_named(
    entry: dict[str, Any], field: str, message: str
) -> None:
    text = provider_refusal(models(a={"task": "sentiment", **entry} if "task" not in entry
                                      and entry["provider"] == "python" else entry))  # fmt: skip
    assert text.startswith(f"models.json: model 'a', field '{field}': "), text
    assert message in text


def test_a_required_field_left_unset_by_its_setting_names_the_setting() -> None:
    document = models(a={"provider": "azure_openai", "deployment": "%ChatDeployment%"})
    text = provider_refusal(document)
    assert "field 'deployment': %ChatDeployment% names an app setting that is not set" in text
    check_catalog(catalog(document), settings_complete=False)  # while indexing: later


def test_a_key_setting_that_holds_nothing_is_refused_when_served() -> None:
    document = models(
        a={
            "provider": "openai_compatible",
            "task": "sentiment",
            "deployment": "d",
            "endpoint": "http://127.0.0.1:9/v1",
            "api_key_setting": "VllmKey",
        }
    )
    with pytest.raises(CatalogError) as refused:
        serve_catalog(catalog(document), Settings.model_validate({}))
    assert (
        "model 'a', field 'api_key_setting': VllmKey names an app setting that is not set"
        in str(refused.value)
    )


def test_azure_openai_needs_an_endpoint_of_its_own_or_the_apps() -> None:
    document = models(a={"provider": "azure_openai", "deployment": "gpt-4o-mini"})
    with pytest.raises(CatalogError, match=r"field .endpoint..*AzureOpenAI__endpoint"):
        serve_catalog(catalog(document), Settings.model_validate({}))
    served = serve_catalog(
        catalog(document),
        Settings.model_validate(
            {"AzureOpenAI__endpoint": "https://x.openai.azure.com", "AzureOpenAI__apiKey": "k"}
        ),
    )
    assert served["a"].client.system == "az.ai.openai"


def test_a_mixed_catalog_serves_every_alias_with_its_own_provider() -> None:
    document = {
        "tasks": TASKS,
        "models": {
            "local-analyzer": {"provider": "local"},
            "rater": {"provider": "python", "task": "sentiment",
                      "handler": f"{HANDLERS}:sentiment"},
            "llama": {"provider": "openai_compatible", "task": "sentiment", "deployment": "l3",
                      "endpoint": "http://127.0.0.1:9/v1"},
        },
    }  # fmt: skip
    served = serve_catalog(catalog(document), Settings.model_validate({}))
    assert served.aliases == ("local-analyzer", "rater", "llama")
    assert {alias: served[alias].client.system for alias in served} == {
        "local-analyzer": "inferbus.local",
        "rater": "inferbus.python",
        "llama": "openai",
    }


# --- each provider's options ------------------------------------------------------------------

LLAMA = {"deployment": "llama3.1", "endpoint": "http://%Host%/v1", "timeout_seconds": 30}


def test_an_options_object_means_what_the_flat_fields_mean() -> None:
    flat = {"provider": "openai_compatible", "task": "sentiment", **LLAMA}
    nested = {"provider": "openai_compatible", "task": "sentiment", "options": LLAMA}
    resolved = checked(models(flat=flat, nested=nested), {"Host": "127.0.0.1:8000"})
    assert (
        resolved.cards["flat"].options
        == resolved.cards["nested"].options
        == {
            "deployment": "llama3.1",
            "endpoint": "http://127.0.0.1:8000/v1",
            "timeout_seconds": 30,
        }
    )
    assert resolved.cards["nested"].deployment == "llama3.1"


def test_an_option_given_both_ways_is_refused() -> None:
    error = refusal(
        models(a={"provider": "local", "deployment": "d", "options": {"deployment": "e"}})
    )
    assert error.entry == "model 'a'"
    assert "deployment is given twice" in str(error)


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"greeting": "hi"}, "options.greeting",
         "provider 'local' has no option 'greeting' (its options: deployment)"),
        ({"deployment": ""}, "deployment", "at least 1 character"),
    ],
    ids=["unknown-option", "bad-value"],
)  # fmt: skip
def test_an_option_its_provider_refuses_is_named(
    options: dict[str, Any], field: str, message: str
) -> None:
    text = provider_refusal(models(a={"provider": "local", "options": options}))
    assert text.startswith(f"models.json: model 'a', field '{field}': "), text
    assert message in text


def test_a_chat_option_of_the_wrong_kind_is_refused_by_its_provider() -> None:
    entry = {"provider": "azure_openai", "task": "sentiment", "deployment": "d",
             "response_format": "xml"}  # fmt: skip
    text = provider_refusal(models(a=entry))
    assert text.startswith("models.json: model 'a', field 'response_format': "), text
    assert "'json_schema' or 'json_object'" in text


# --- which catalog a deployment serves ----------------------------------------------------------


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(document))
    return path


def test_model_catalog_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, models(rater={"provider": "python", "task": "sentiment",
                                         "handler": f"{HANDLERS}:sentiment"}))  # fmt: skip
    resolved = catalog_for(Settings.model_validate({"ModelCatalog": str(path)}))
    assert resolved.aliases == ("rater",)
    assert resolved.source == str(path)


def test_a_missing_catalog_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"absent\.json: cannot be read"):
        catalog_for(Settings.model_validate({"ModelCatalog": str(tmp_path / "absent.json")}))


def test_without_settings_the_apps_models_json_is_served() -> None:
    resolved = catalog_for(Settings.model_validate({}))
    assert resolved.source == "models.json"
    assert resolved.cards == catalog(json.loads((APP_ROOT / "models.json").read_text())).cards


def test_the_shorthand_settings_still_build_a_catalog_of_one_provider() -> None:
    resolved = catalog_for(
        Settings.model_validate(
            {"AllowedModels": "gpt-4o,gpt-4o-mini", "ModelProvider": "azure_openai"}
        )
    )
    assert resolved.source == SHORTHAND_SOURCE
    assert resolved.aliases == ("gpt-4o", "gpt-4o-mini")
    assert {card.provider for card in resolved.cards.values()} == {"azure_openai"}
    assert [card.deployment for card in resolved.cards.values()] == ["gpt-4o", "gpt-4o-mini"]


def test_an_unknown_shorthand_provider_names_the_setting() -> None:
    resolved = catalog_for(Settings.model_validate({"ModelProvider": "my_vllm"}))
    with pytest.raises(CatalogError) as refused:
        check_catalog(resolved)
    assert str(refused.value).startswith(
        "AllowedModels/ModelProvider: model 'local-analyzer', field 'ModelProvider': "
        "unknown provider 'my_vllm'"
    )


def test_the_catalog_and_the_shorthand_are_not_set_together() -> None:
    with pytest.raises(ValueError, match="set ModelCatalog or AllowedModels/ModelProvider"):
        Settings.model_validate({"ModelCatalog": "models.json", "AllowedModels": "a"})


def test_batch_deployments_are_added_to_the_catalogs_aliases(tmp_path: Path) -> None:
    path = write(tmp_path, models(a={"provider": "local", "batch_deployment": "a-batch"},
                                  b={"provider": "local"}))  # fmt: skip
    settings = {"ModelCatalog": str(path), "GlobalBatch__endpoint": "http://127.0.0.1:9"}
    both = catalog_for(
        Settings.model_validate({**settings, "GlobalBatch__deployments": "b=b-batch"})
    )
    assert both.batch_deployments == {"a": "a-batch", "b": "b-batch"}
    with pytest.raises(ConfigurationError, match="model 'a' has batch_deployment 'a-batch'"):
        catalog_for(Settings.model_validate({**settings, "GlobalBatch__deployments": "a=other"}))


# --- prices ------------------------------------------------------------------------------------

PRICES = {"input_per_million": 0.15, "output_per_million": 0.6, "batch_discount": 0.5}


def priced(prices: Any = PRICES, currency: Any = "USD") -> dict[str, Any]:
    """A catalog of one local alias with ``prices``, in ``currency`` (None: not given)."""
    document: dict[str, Any] = {"models": {"a": {"provider": "local", "prices": prices}}}
    if currency is not None:
        document["currency"] = currency
    return document


def test_prices_are_read_as_the_decimals_written_in_the_catalogs_currency() -> None:
    card = catalog(priced()).cards["a"]
    assert card.prices == Prices(
        currency="USD",
        input_per_million=Decimal("0.15"),
        output_per_million=Decimal("0.6"),
        batch_discount=Decimal("0.5"),
    )


def test_prices_are_optional_and_the_batch_discount_defaults_to_0() -> None:
    document = priced({"input_per_million": 1, "output_per_million": 4})
    document["models"]["b"] = {"provider": "local"}
    cards = catalog(document).cards
    assert cards["a"].prices is not None
    assert cards["a"].prices.batch_discount == 0
    assert cards["b"].prices is None
    assert catalog({"models": {"b": {"provider": "local"}}}).cards["b"].prices is None


def test_a_currency_without_prices_is_allowed() -> None:
    cards = catalog({"currency": "EUR", "models": {"b": {"provider": "local"}}}).cards
    assert cards["b"].prices is None


def test_prices_without_a_currency_are_refused_naming_the_alias() -> None:
    error = refusal(priced(currency=None))
    assert str(error) == (
        "m.json: model 'a', field 'prices': prices need the catalog's \"currency\" (an ISO "
        '4217 code such as "USD", at the top of the file)'
    )


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [
        (priced(currency="usd"), "currency",
         "a currency is an ISO 4217 code: three capital letters, such as USD"),
        (priced(currency="US"), "currency", "three capital letters"),
        (priced(currency=840), "currency", "Input should be a valid string"),
        (priced({"output_per_million": 0.6}), "prices.input_per_million", "Field required"),
        (priced({**PRICES, "input_per_million": -0.1}), "prices.input_per_million",
         "greater than or equal to 0"),
        (priced({**PRICES, "output_per_million": "0.6"}), "prices.output_per_million",
         "Input should be a valid number"),
        (priced({**PRICES, "output_per_million": True}), "prices.output_per_million",
         "Input should be a valid number"),
        (priced({**PRICES, "batch_discount": 1}), "prices.batch_discount",
         "Input should be less than 1"),
        (priced({**PRICES, "batch_discount": -0.5}), "prices.batch_discount",
         "greater than or equal to 0"),
        (priced({**PRICES, "batch_input_per_million": 0.075}), "prices.batch_input_per_million",
         "Extra inputs are not permitted"),
        (priced([0.15, 0.6]), "prices", "must be a JSON object, not an array"),
    ],
    ids=["lower-case-currency", "short-currency", "numeric-currency", "no-input-price",
         "negative-price", "price-as-text", "price-as-boolean", "whole-discount",
         "negative-discount", "unknown-price-field", "prices-array"],
)  # fmt: skip
def test_prices_of_the_wrong_shape_name_the_alias_and_field(
    document: dict[str, Any], field: str, message: str
) -> None:
    error = refusal(document)
    assert (error.file, error.field) == ("m.json", field)
    assert error.entry == (None if field == "currency" else "model 'a'")
    assert message in str(error)


def test_an_infinite_price_is_refused() -> None:
    """Python's JSON reads Infinity; a price never is."""
    text = json.dumps(priced()).replace("0.6", "Infinity")
    error = refusal(text)
    assert (error.entry, error.field) == ("model 'a'", "prices.output_per_million")
    assert "finite number" in str(error)


def test_prices_survive_the_batch_deployments_of_the_settings(tmp_path: Path) -> None:
    path = write(tmp_path, priced())
    settings = {
        "ModelCatalog": str(path),
        "GlobalBatch__endpoint": "http://127.0.0.1:9",
        "GlobalBatch__deployments": "a=a-batch",
    }
    card = catalog_for(Settings.model_validate(settings)).cards["a"]
    assert card.batch_deployment == "a-batch"
    assert card.prices is not None
    assert card.prices.currency == "USD"
