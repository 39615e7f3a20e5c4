"""The Global Batch lane's infrastructure: deployment, role, app settings, retention, alert.

``modules/openai-batch.bicep`` deploys a ``GlobalBatch`` model deployment on an Azure OpenAI
account (the one main.bicep creates through ``modules/openai-account.bicep``, shared with
the queue lane's model, or an existing one) and grants the app identity Cognitive Services
OpenAI User on that account alone: the app is the only submitter (infra/README.md, Global
Batch). It is off by default, so a default deployment needs no enqueued-token quota.
"""

from __future__ import annotations

import re
from typing import Any

from annotated_types import Le

from shared import telemetry
from shared.global_batch.quota import BATCH_QUOTA_EXCEEDED
from shared.settings import GlobalBatchSettings, Settings, setting_fields
from tests.infra import (
    ALERTS,
    CATALOG,
    DATA_STORAGE,
    FUNCTION_APP,
    INFRA,
    MAIN,
    MODULES,
    app_settings,
    bicep_files,
    constants,
    decorator,
    is_reference,
    literal,
    module,
    modules,
    outputs,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources,
    resources_of_type,
    variables,
    without_comments,
)

BATCH = MODULES / "openai-batch.bicep"
ACCOUNT = MODULES / "openai-account.bicep"
BATCH_ALERT_QUERY = MODULES / "queries" / "alert-batch-ended.kql"
COGNITIVE_API_VERSION = "2026-07-01"


def _only(path: Any, resource_type: str) -> dict[str, Any]:
    (resource,) = resources_of_type(path, resource_type).values()
    return resource


# --- the account: Entra ID only --------------------------------------------------------------


def test_created_account_is_openai_s0_without_keys() -> None:
    account = _only(ACCOUNT, "Microsoft.CognitiveServices/accounts")
    assert account["api_version"] == COGNITIVE_API_VERSION
    body = resource_body(account)
    assert body["kind"] == "OpenAI"
    assert body["sku"] == {"name": "S0"}
    properties = body["properties"]
    # No keys: a data role is the only way to submit, and only the app holds one.
    assert properties["disableLocalAuth"] is True
    assert is_reference(properties["customSubDomainName"], "name")
    assert is_reference(properties["publicNetworkAccess"], "publicNetworkAccess")
    network = params(ACCOUNT)["publicNetworkAccess"]
    assert decorator(network, "allowed") == ["Enabled", "Disabled"]


def _main_value(name: str, **overrides: Any) -> Any:
    """A variable of main.bicep evaluated with its defaults (and ``overrides``)."""
    known = {**constants(MAIN), "environmentName": "env", **overrides}
    return resolve(known[name], known)


def test_account_is_created_only_when_no_existing_one_is_named() -> None:
    created = modules(MAIN)["openAIAccount"]
    assert created["detail"]["path"] == "modules/openai-account.bicep"
    assert render(created["config"]["condition"]) == "createOpenAIAccount"
    assert not modules(BATCH), "the batch module creates no account of its own"
    (existing,) = [r for r in resources(BATCH).values() if r["existing"]]
    assert existing["type"] == "Microsoft.CognitiveServices/accounts"
    assert is_reference(resource_body(existing)["name"], "accountName")
    passed = module(MAIN, "openAIBatch")["params"]
    assert is_reference(passed["accountName"], "batchAccountName")
    assert render(variables(MAIN)["batchAccountName"]) == (
        "(empty(globalBatchAccountName) ? names.openAI : globalBatchAccountName)"
    )
    # The batch lane alone (local model) still creates the account; a named one is used as is.
    local = {"modelProvider": "local"}
    assert _main_value("createOpenAIAccount", globalBatchEnabled=True, **local) is True
    assert (
        _main_value(
            "createOpenAIAccount", globalBatchEnabled=True, globalBatchAccountName="mine", **local
        )
        is False
    )
    assert _main_value("createOpenAIAccount", **local) is False


# --- the deployment ----------------------------------------------------------------------------


def test_deployment_is_global_batch_with_a_capacity_parameter() -> None:
    deployment = _only(BATCH, "Microsoft.CognitiveServices/accounts/deployments")
    assert deployment["api_version"] == COGNITIVE_API_VERSION
    body = resource_body(deployment)
    assert is_reference(body["parent"], "account")
    assert body["sku"]["name"] == "GlobalBatch"
    assert not is_reference(body["sku"]["name"])
    assert is_reference(body["sku"]["capacity"], "capacity")
    model = body["properties"]["model"]
    assert model["format"] == "OpenAI"
    assert is_reference(model["name"], "modelName")
    assert is_reference(model["version"], "modelVersion")
    # The version asked for stays until it is retired, then moves on (as the queue lane's).
    assert body["properties"]["versionUpgradeOption"] == "OnceCurrentVersionExpired"
    # One deployment operation at a time on an account: after its creation and the queue
    # lane's deployments.
    assert resource_body(modules(MAIN)["openAIBatch"])["dependsOn"] == [
        "openAIAccount",
        "openAIChat",
    ]


def test_module_outputs_the_endpoint_and_the_deployment_name() -> None:
    found = outputs(BATCH)
    assert render(found["endpoint"]) == "account.properties.endpoint"
    assert render(found["deploymentName"]) == "batchDeployment.name"


def test_the_lane_is_off_by_default() -> None:
    declared = params(MAIN)
    assert declared["globalBatchEnabled"]["default"] is False
    batch = modules(MAIN)["openAIBatch"]
    assert batch["detail"]["path"] == "modules/openai-batch.bicep"
    assert render(batch["config"]["condition"]) == "globalBatchEnabled"
    passed = module(MAIN, "openAIBatch")["params"]
    for name in ("modelName", "modelVersion", "capacity"):
        upper = name[0].upper() + name[1:]
        assert is_reference(passed[name], f"globalBatch{upper}")
    assert decorator(declared["globalBatchCapacity"], "min_value") == 1


# --- the role: OpenAI User, the app identity, the account only ---------------------------------


def test_app_identity_is_openai_user_on_the_account_only() -> None:
    (assignment,) = resources_of_type(BATCH, "Microsoft.Authorization/roleAssignments").values()
    body = resource_body(assignment)
    role = render(body["properties"]["roleDefinitionId"])
    assert role == (
        "subscription_resource_id('Microsoft.Authorization/roleDefinitions', "
        "roleDefinitionIds.cognitiveServicesOpenAIUser)"
    )
    assert is_reference(body["scope"], "account")
    assert resources(BATCH)["account"]["type"] == "Microsoft.CognitiveServices/accounts"
    assert is_reference(body["properties"]["principalId"], "appPrincipalId")
    passed = module(MAIN, "openAIBatch")["params"]
    assert render(passed["appPrincipalId"]) == "identities.outputs.appIdentityPrincipalId"


def test_no_other_principal_or_role_on_the_account() -> None:
    """Another submitter would be an unmetered second door to the model. The queue lane's
    grant is the same assignment (same name, role and principal) when the lanes share the
    account, so the app identity holds one role there."""
    granted = [
        (path.name, symbol)
        for path in bicep_files()
        for symbol, assignment in resources_of_type(
            path, "Microsoft.Authorization/roleAssignments"
        ).items()
        if "cognitiveServices" in render(resource_body(assignment)["properties"])
        or resources(path).get(render(resource_body(assignment).get("scope", "")), {}).get("type")
        == "Microsoft.CognitiveServices/accounts"
    ]
    assert granted == [
        ("openai-batch.bicep", "batchSubmitter"),
        ("openai-chat.bicep", "modelCaller"),
    ]
    names = {
        render(resource_body(resources(MODULES / name)[symbol])["name"]) for name, symbol in granted
    }
    assert names == {
        "guid(account.id, appPrincipalId, roleDefinitionIds.cognitiveServicesOpenAIUser)"
    }


def test_role_constant_is_the_documented_openai_user_id() -> None:
    text = read(MODULES / "role-definitions.json")
    assert '"cognitiveServicesOpenAIUser": "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd"' in text
    assert '"cognitiveServicesOpenAIUser": "Cognitive Services OpenAI User"' in text


# --- app settings --------------------------------------------------------------------------------


def test_batch_settings_come_from_the_deployment_and_the_app_identity() -> None:
    settings = app_settings()
    assert is_reference(settings["GlobalBatch__deployments"], "globalBatchDeployments")
    assert is_reference(settings["GlobalBatch__endpoint"], "globalBatchEndpoint")
    assert is_reference(settings["GlobalBatch__clientId"], "appIdentityClientId")
    assert settings["GlobalBatch__apiVersion"] == "v1"
    assert "GlobalBatch__apiKey" not in settings
    passed = module(MAIN, "functionApp")["params"]
    assert render(passed["globalBatchDeployments"]) == (
        "(globalBatchEnabled ? '${batchModelAlias}=${globalBatchDeploymentName}' : '')"
    )
    assert render(passed["globalBatchCapacity"]) == "(globalBatchEnabled ? globalBatchCapacity : 0)"
    assert render(passed["globalBatchEndpoint"]) == (
        "(globalBatchEnabled ? openAIBatch.outputs.endpoint : '')"
    )


def test_every_batch_setting_of_the_model_is_deployed() -> None:
    names = {
        field.name
        for field in setting_fields()
        if field.name.startswith("GlobalBatch") or field.name == "BatchContainer"
    }
    assert len(names) >= 19
    assert names - {"GlobalBatch__apiKey"} <= set(app_settings())


def _enabled(value: Any, known: dict[str, Any]) -> Any:
    """The value main.bicep passes when globalBatchEnabled is true."""
    operands = value["operator"]["operands"]
    assert is_reference(operands["condition"], "globalBatchEnabled")
    return resolve(operands["true_value"], known)


def test_enabled_defaults_make_a_valid_batch_lane() -> None:
    """With the flag on and every other default, the app accepts the settings it is given."""
    known = constants(MAIN)
    passed = module(MAIN, "functionApp")["params"]
    deployments = _enabled(passed["globalBatchDeployments"], known)
    # The batch alias defaults to the first served alias: the queue lane's model.
    assert deployments == "gpt-5.1=gpt-5.1-batch"
    app_known = {
        **constants(FUNCTION_APP),
        "allowedModels": resolve(passed["allowedModels"], known),
        "globalBatchDeployments": deployments,
        "globalBatchEndpoint": "https://oai-test.openai.azure.com/",
        "globalBatchCapacity": _enabled(passed["globalBatchCapacity"], known),
    }
    values = {}
    for name, raw in app_settings().items():
        if name.startswith(("GlobalBatch", "Batch", "AllowedModels")):
            values[name] = resolve(raw, {**app_known, "appIdentityClientId": "client"})
    settings = Settings.model_validate(values)
    assert settings.batch_deployments == {"gpt-5.1": "gpt-5.1-batch"}
    # The enqueued-token quota of the default capacity (50 thousand tokens).
    assert settings.global_batch.enqueued_tokens == 50_000
    assert settings.batch_endpoint == "https://oai-test.openai.azure.com/"
    assert settings.containers.batches == "batches"
    assert settings.global_batch.schedule == "5 */1 * * * *"


# --- the batches container and its retention ------------------------------------------------------


def test_batches_container_is_an_app_container_of_the_catalogue() -> None:
    catalog = read(CATALOG)
    assert '"batches": "batches"' in catalog
    known = constants(FUNCTION_APP)
    assert resolve(app_settings()["BatchContainer"], known) == Settings().containers.batches
    app_containers = resolve(variables(DATA_STORAGE)["appContainerNames"], constants(DATA_STORAGE))
    assert "batches" in app_containers  # so the app identity is Blob Data Contributor there


def test_batches_expire_after_the_retention_parameter() -> None:
    (policy,) = resources_of_type(
        DATA_STORAGE, "Microsoft.Storage/storageAccounts/managementPolicies"
    ).values()
    rules = {rule["name"]: rule for rule in resource_body(policy)["properties"]["policy"]["rules"]}
    definition = rules["expire-batches"]["definition"]
    (prefix,) = definition["filters"]["prefixMatch"]
    hole, slash = literal(prefix)
    assert (render(hole), slash) == ("dataContainers.batches", "/")
    delete = definition["actions"]["baseBlob"]["delete"]
    assert is_reference(delete["daysAfterModificationGreaterThan"], "batchRetentionDays")
    passed = module(MAIN, "dataStorage")["params"]
    assert is_reference(passed["batchRetentionDays"], "batchRetentionDays")


def test_output_copies_outlive_the_services_own_copy() -> None:
    """The copies are the platform's record: no shorter than the service's longest expiry."""
    field = GlobalBatchSettings.model_fields["output_expiry_days"]
    (longest,) = [item.le for item in field.metadata if isinstance(item, Le)]
    for path in (MAIN, DATA_STORAGE):
        declared = params(path)["batchRetentionDays"]
        assert declared["default"] == 90
        assert decorator(declared, "min_value") >= longest


# --- the alert on expired or failed batches -------------------------------------------------------


def test_alert_fires_on_expired_failed_or_quota_exceeded_batches() -> None:
    alert = modules(ALERTS)["batchEnded"]
    assert alert["detail"]["path"] == "log-alert.bicep"
    assert render(alert["config"]["condition"]) == "batchAlertEnabled"
    body = resource_body(alert)["params"]
    assert render(body["query"]) == "load_text_content('queries/alert-batch-ended.kql')"
    assert body["measureColumn"] == "batches"
    assert body["operator"] == "GreaterThan"
    assert is_reference(body["threshold"], "batchEndedThreshold")
    assert params(ALERTS)["batchEndedThreshold"]["default"] == 0
    assert [d["name"] for d in body["dimensions"]] == ["status"]
    assert is_reference(body["scopeId"], "appInsightsId")
    assert is_reference(body["actionGroupId"], "actionGroupId")
    passed = module(MAIN, "alerts")["params"]
    assert is_reference(passed["batchAlertEnabled"], "globalBatchEnabled")


def test_alert_query_counts_the_ended_metric_by_status() -> None:
    query = without_comments(read(BATCH_ALERT_QUERY))
    assert f'"{telemetry.BATCH_ENDED}"' in query
    assert 'customDimensions["inferbus.batch.status"]' in query
    # The enqueued-token quota's ending (shared/global_batch/quota.py) is one of them.
    assert BATCH_QUOTA_EXCEEDED == "batch_quota_exceeded"
    assert re.search(r'status in \("expired", "failed", "batch_quota_exceeded"\)', query)
    assert "traces" not in query
    last = query.strip().splitlines()[-1]
    for column in ("timestamp", "status", "batches"):
        assert re.search(rf"\b{column}\b", last)


# --- documentation ------------------------------------------------------------------------------


def test_readme_explains_the_global_batch_deployment() -> None:
    readme = read(INFRA / "README.md")
    section = readme.split("### Global Batch", 1)[1].split("\n### ", 1)[0]
    for phrase in (
        "GlobalBatch",
        "enqueued-token",
        "Cognitive Services OpenAI User",
        "only submitter",
        "globalBatchEnabled=true",
    ):
        assert phrase in section, phrase
    assert "alert-batch-ended.kql" in readme
    assert "`expire-batches`" in readme
