"""``azd up`` serves a real model on the queue lane, and says so when it does not.

``modules/openai-chat.bicep`` deploys the queue lane's chat model on the Azure OpenAI account
(``modules/openai-account.bicep``), one deployment per alias the app serves, and grants the
app identity Cognitive Services OpenAI User on that account alone. The app reads it through
the one-provider shorthand (``AllowedModels`` + ``ModelProvider=azure_openai``), which calls
each alias through the deployment of the same name. The checks below evaluate main.bicep's
defaults (and chosen overrides) down to the app settings and hand them to the app's own
Settings model and catalog.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.inference.catalog import catalog_for
from shared.settings import Settings
from tests.infra import (
    FUNCTION_APP,
    MAIN,
    MODULES,
    Unresolved,
    app_settings,
    constants,
    decorator,
    is_reference,
    module,
    modules,
    outputs,
    params,
    render,
    resolve,
    resource_body,
    resources,
    resources_of_type,
)

CHAT = MODULES / "openai-chat.bicep"
CHAT_API_VERSION = "2026-07-01"
# Settings the evaluation below produces from the deployment (endpoints, client ids).
_DEPLOYED = {
    "appIdentityClientId": "client",
    "openAIChat.outputs.endpoint": "https://oai-env.openai.azure.com/",
}


def main_passes(**overrides: Any) -> dict[str, Any]:
    """The function-app module's parameters as main.bicep computes them from its defaults
    and ``overrides``; a value that needs another module's outputs is left out, except the
    queue model's endpoint (``_DEPLOYED``)."""
    known = {**constants(MAIN), "environmentName": "env", **overrides}
    values: dict[str, Any] = {}
    for name, value in module(MAIN, "functionApp")["params"].items():
        try:
            values[name] = _with_deployed(value, known)
        except Unresolved:
            continue
    return values


def _with_deployed(value: Any, known: dict[str, Any]) -> Any:
    """``resolve``, with the deployed outputs of ``_DEPLOYED`` known (one conditional deep)."""
    if render(value) in _DEPLOYED:
        return _DEPLOYED[render(value)]
    node = value.get("operator", {}) if isinstance(value, dict) else {}
    if node.get("type") == "conditional":
        operands = node["operands"]
        chosen = "true_value" if resolve(operands["condition"], known) else "false_value"
        return _with_deployed(operands[chosen], known)
    return resolve(value, known)


def deployed_settings(**overrides: Any) -> dict[str, str]:
    """The model and capacity app settings the Function App gets for those parameters."""
    passed = main_passes(**overrides)
    known = {**constants(FUNCTION_APP), **_DEPLOYED, **passed}
    wanted = ("AllowedModels", "ModelProvider", "ModelCatalog", "ModelCapacity__", "AzureOpenAI__")
    return {
        name: resolve(raw, known) for name, raw in app_settings().items() if name.startswith(wanted)
    }


# --- the default deployment serves a deployed model -------------------------------------


def test_the_default_provider_is_the_deployed_model() -> None:
    declared = params(MAIN)["modelProvider"]
    assert declared["default"] == "azure_openai"
    assert decorator(declared, "allowed") == ["azure_openai", "local"]
    assert render(constants(MAIN)["queueModelDeployed"]) == (
        "((modelProvider == 'azure_openai') && (empty(azureOpenAIEndpoint) && empty(modelCatalog)))"
    )


def test_default_settings_serve_the_deployment_through_the_shorthand() -> None:
    settings = deployed_settings()
    assert settings["ModelProvider"] == "azure_openai"
    assert settings["AllowedModels"] == "gpt-5.1"
    assert settings["ModelCatalog"] == ""
    assert settings["AzureOpenAI__endpoint"] == "https://oai-env.openai.azure.com/"
    assert settings["AzureOpenAI__clientId"] == "client"
    model = Settings.model_validate(settings)
    catalog = catalog_for(model)
    (card,) = catalog.cards.values()
    assert (card.alias, card.provider, card.deployment) == (
        "gpt-5.1",
        "azure_openai",
        "gpt-5.1",
    )
    # The deployment the module creates is the one the card calls.
    assert resolve(constants(MAIN)["servedAliases"], constants(MAIN)) == [card.deployment]


def test_the_budget_follows_the_deployed_capacity() -> None:
    for capacity in (30, 150):
        settings = deployed_settings(queueModelCapacity=capacity, modelCapacity=7)
        assert settings["ModelCapacity__tokensPerMinute"] == str(capacity * 1000)
        assert settings["ModelCapacity__requestsPerMinute"] == str(capacity * 6)
    assert params(MAIN)["queueModelCapacity"]["default"] == 30
    assert decorator(params(MAIN)["queueModelCapacity"], "min_value") == 1


MINE = "https://mine.openai.azure.com/"  # an existing endpoint


def concurrency(**overrides: Any) -> tuple[str, str]:
    """ModelConcurrency and PriorityModelConcurrency for main.bicep's parameters."""
    known = {**constants(FUNCTION_APP), **_DEPLOYED, **main_passes(**overrides)}
    settings = app_settings()
    return (
        resolve(settings["ModelConcurrency"], known),
        resolve(settings["PriorityModelConcurrency"], known),
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # 30K TPM: 30 calls a minute of 1,000 tokens, 2.5 in flight at 5 s, twice over
        ({}, ("5", "2")),
        ({"queueModelCapacity": 300}, ("50", "12")),
        ({"queueModelCapacity": 300, "modelTokensPerCall": 3000}, ("17", "4")),
        ({"queueModelCapacity": 30, "modelCallSeconds": 20}, ("20", "5")),
        # modelCapacity describes an existing endpoint only: the deployed capacity wins
        ({"modelCapacity": 300}, ("5", "2")),
        ({"azureOpenAIEndpoint": MINE, "modelCapacity": 60}, ("10", "2")),
        # no known capacity: the model's defaults
        ({"azureOpenAIEndpoint": MINE}, ("16", "4")),
        ({"modelProvider": "local"}, ("16", "4")),
        ({"modelCatalog": "catalogs/models.json"}, ("16", "4")),
        # a set value overrides, whatever the capacity
        ({"modelConcurrency": 24}, ("24", "6")),
        ({"modelProvider": "local", "modelConcurrency": 3}, ("3", "2")),
    ],
)
def test_model_concurrency_follows_the_capacity_main_passes(
    overrides: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert concurrency(**overrides) == expected


def test_an_existing_endpoint_keeps_its_own_capacity_and_deploys_nothing() -> None:
    endpoint = "https://mine.openai.azure.com/"
    overrides = {"azureOpenAIEndpoint": endpoint, "modelCapacity": 12}
    settings = deployed_settings(**overrides)
    assert settings["AzureOpenAI__endpoint"] == endpoint
    assert settings["ModelCapacity__tokensPerMinute"] == "12000"
    known = {**constants(MAIN), "environmentName": "env", **overrides}
    assert resolve(known["queueModelDeployed"], known) is False


def test_a_catalog_leaves_the_shorthand_empty() -> None:
    """The app refuses ModelCatalog with AllowedModels/ModelProvider: a catalog empties them."""
    settings = deployed_settings(modelCatalog="catalogs/models.json")
    assert settings["ModelCatalog"] == "catalogs/models.json"
    assert settings["AllowedModels"] == ""
    assert settings["ModelProvider"] == ""
    known = {**constants(MAIN), "environmentName": "env", "modelCatalog": "x.json"}
    assert resolve(known["queueModelDeployed"], known) is False


def test_several_aliases_get_a_deployment_each() -> None:
    known = {**constants(MAIN), "allowedModels": "summary, extraction"}
    assert resolve(known["servedAliases"], known) == ["summary", "extraction"]
    passed = module(MAIN, "openAIChat")["params"]
    assert is_reference(passed["deploymentNames"], "servedAliases")


# --- local only when asked, with a warning ----------------------------------------------


def test_local_is_explicit_and_warns() -> None:
    settings = deployed_settings(modelProvider="local")
    assert settings["ModelProvider"] == "local"
    assert settings["AllowedModels"] == "local-analyzer"
    assert settings["ModelCapacity__tokensPerMinute"] == ""
    warning = outputs(MAIN)["MODEL_WARNING"]
    known = constants(MAIN)
    assert resolve(warning, known) == ""
    assert "deterministic local stand-in" in resolve(warning, {**known, "modelProvider": "local"})
    local = {**known, "modelProvider": "local"}
    assert resolve(local["queueModelDeployed"], local) is False


def test_bicepparam_selects_local_only_for_the_exact_value() -> None:
    from tests.infra.test_azd import bicepparam_assignments

    assignment = bicepparam_assignments()["modelProvider"]
    assert assignment == (
        "readEnvironmentVariable('INFERBUS_MODEL_PROVIDER', 'azure_openai') == 'local' "
        "? 'local' : 'azure_openai'"
    )


# --- the module ---------------------------------------------------------------------------


def test_deployments_are_chat_models_named_after_the_aliases() -> None:
    (deployments,) = resources_of_type(
        CHAT, "Microsoft.CognitiveServices/accounts/deployments"
    ).values()
    assert deployments["api_version"] == CHAT_API_VERSION
    assert deployments["config"]["loop_type"]["detail"]["array_name"] == "deploymentNames"
    assert [d["type"] for d in deployments["decorators"]] == ["batchSize"]
    assert deployments["decorators"][0]["argument"] == 1
    body = resource_body(deployments)
    assert is_reference(body["parent"], "account")
    assert is_reference(body["name"], "name")
    assert is_reference(body["sku"]["name"], "skuName")
    assert is_reference(body["sku"]["capacity"], "capacity")
    model = body["properties"]["model"]
    assert model["format"] == "OpenAI"
    assert is_reference(model["name"], "modelName")
    assert is_reference(model["version"], "modelVersion")
    declared = params(CHAT)
    assert decorator(declared["skuName"], "allowed") == [
        "GlobalStandard",
        "DataZoneStandard",
        "Standard",
    ]
    for name, default in (
        ("modelName", "gpt-5.1"),
        ("modelVersion", "2025-11-13"),
        ("skuName", "GlobalStandard"),
    ):
        assert declared[name]["default"] == default


def test_main_passes_the_model_parameters_and_waits_for_the_account() -> None:
    chat = modules(MAIN)["openAIChat"]
    assert chat["detail"]["path"] == "modules/openai-chat.bicep"
    assert render(chat["config"]["condition"]) == "queueModelDeployed"
    body = resource_body(chat)
    assert body["dependsOn"] == ["openAIAccount"]
    passed = body["params"]
    assert render(passed["accountName"]) == "names.openAI"
    for name, parameter in (
        ("modelName", "queueModelName"),
        ("modelVersion", "queueModelVersion"),
        ("skuName", "queueModelSku"),
        ("capacity", "queueModelCapacity"),
    ):
        assert is_reference(passed[name], parameter), name
    declared = params(MAIN)
    assert declared["queueModelName"]["default"] == "gpt-5.1"
    assert declared["queueModelVersion"]["default"] == "2025-11-13"
    assert declared["queueModelSku"]["default"] == "GlobalStandard"


def test_both_lanes_default_to_one_current_model_the_app_reaches_on_the_v1_api() -> None:
    """gpt-5.1 2025-11-13 (docs/deploy.md, Models): GA in Global Standard and Global
    Batch; a reasoning model, which the GA dated API version does not serve."""
    declared = params(MAIN)
    queue = (declared["queueModelName"]["default"], declared["queueModelVersion"]["default"])
    batch = (
        declared["globalBatchModelName"]["default"],
        declared["globalBatchModelVersion"]["default"],
    )
    assert queue == batch == ("gpt-5.1", "2025-11-13")
    for path in (CHAT, MODULES / "openai-batch.bicep"):
        module_defaults = params(path)
        assert (
            module_defaults["modelName"]["default"],
            module_defaults["modelVersion"]["default"],
        ) == queue, path.name
    assert app_settings()["AzureOpenAI__apiVersion"] == "v1"
    assert Settings.model_validate({}).azure_openai.api_version == "v1", "the app's own default"


def test_app_identity_is_openai_user_on_the_account_only() -> None:
    (assignment,) = resources_of_type(CHAT, "Microsoft.Authorization/roleAssignments").values()
    body = resource_body(assignment)
    assert render(body["properties"]["roleDefinitionId"]) == (
        "subscription_resource_id('Microsoft.Authorization/roleDefinitions', "
        "roleDefinitionIds.cognitiveServicesOpenAIUser)"
    )
    assert is_reference(body["scope"], "account")
    account = resources(CHAT)["account"]
    assert account["existing"]
    assert account["type"] == "Microsoft.CognitiveServices/accounts"
    assert is_reference(body["properties"]["principalId"], "appPrincipalId")
    passed = module(MAIN, "openAIChat")["params"]
    assert render(passed["appPrincipalId"]) == "identities.outputs.appIdentityPrincipalId"


@pytest.mark.parametrize(
    ("overrides", "created"),
    [
        ({}, True),
        ({"modelProvider": "local"}, False),
        ({"azureOpenAIEndpoint": "https://mine.openai.azure.com/"}, False),
    ],
    ids=["default", "local", "existing-endpoint"],
)
def test_the_account_exists_when_the_model_is_deployed(
    overrides: dict[str, Any], created: bool
) -> None:
    known = {**constants(MAIN), "environmentName": "env", **overrides}
    assert resolve(known["createOpenAIAccount"], known) is created
