"""Every setting the code reads is configured, in Azure (Bicep) and locally (sample file).

The names come from the Settings model (shared/settings.py), not from a copied list, so a
setting added to the model without being provisioned fails here. In Azure, Bicep sets each
of them; locally the model's defaults serve, and local.settings.sample.json holds only
what differs from them, the local-only connections and keys, and what the host itself
needs (its own settings, and each setting a binding names as ``%Name%``).
"""

import json
import math
import re
from fractions import Fraction

import pytest
from pydantic import ValidationError

from shared.settings import (
    Settings,
    setting_fields,
    setting_names,
    setting_names_for,
    setting_value,
)
from tests.infra import (
    DATA_STORAGE,
    FUNCTION_APP,
    MAIN,
    REPO_ROOT,
    Unresolved,
    app_settings,
    constants,
    decorator,
    is_reference,
    module,
    outputs,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources_of_type,
    variables,
)
from tests.unit.test_docs import HOST_SETTINGS

LOCAL_SAMPLE = REPO_ROOT / "local.settings.sample.json"
TRIGGERS = REPO_ROOT / "triggers"
# A binding property naming an app setting: schedule="%JobWatchdogSchedule%".
BINDING_REFERENCE = re.compile(r"[\"']%([A-Za-z_][A-Za-z0-9_]*)%")

# Settings Flex Consumption rejects or ignores: the runtime lives in functionAppConfig and
# packages are deployed to a blob container.
# https://learn.microsoft.com/azure/azure-functions/functions-app-settings#flex-consumption-plan-deprecations
FLEX_DEPRECATED = {
    "FUNCTIONS_EXTENSION_VERSION",
    "FUNCTIONS_WORKER_RUNTIME",
    "FUNCTIONS_WORKER_RUNTIME_VERSION",
    "FUNCTIONS_MAX_HTTP_CONCURRENCY",
    "FUNCTIONS_WORKER_PROCESS_COUNT",
    "FUNCTIONS_WORKER_DYNAMIC_CONCURRENCY_ENABLED",
    "SCM_DO_BUILD_DURING_DEPLOYMENT",
    "ENABLE_ORYX_BUILD",
    "WEBSITE_RUN_FROM_PACKAGE",
    "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
    "WEBSITE_CONTENTSHARE",
    "WEBSITE_CONTENTOVERVNET",
    "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT",
    "WEBSITE_NODE_DEFAULT_VERSION",
    "WEBSITE_SKIP_CONTENTSHARE_VALIDATION",
    "WEBSITES_ENABLE_APP_SERVICE_STORAGE",
}


def test_function_app_deploys_the_app_settings_object() -> None:
    (config,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites/config").values()
    body = resource_body(config)
    assert body["name"] == "appsettings"
    assert not is_reference(body["name"])
    # appSettings first: overrides may add or replace, but the catalogue is always applied.
    assert render(body["properties"]) == (
        "union(appSettings, concurrencySettings, appSettingOverrides)"
    )
    assert render(variables(FUNCTION_APP)["concurrencySettings"]) == (
        "((serviceBusMaxConcurrentCalls > 0) ? "
        "{AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls: "
        "string(serviceBusMaxConcurrentCalls)} : {})"
    )


@pytest.mark.parametrize("name", setting_names_for("azure"))
def test_every_azure_setting_is_in_bicep(name: str) -> None:
    assert name in app_settings(), f"{name} is read by the app but not set in Bicep"


def sample_values() -> dict[str, str]:
    assert LOCAL_SAMPLE.is_file(), "local.settings.sample.json is missing"
    values: dict[str, str] = json.loads(LOCAL_SAMPLE.read_text(encoding="utf-8"))["Values"]
    return values


def binding_settings() -> set[str]:
    """The app settings the triggers' bindings name (``%Name%``): the host resolves them
    from the app settings themselves, so they must be set even where they hold the
    model's default."""
    return {
        name
        for path in sorted(TRIGGERS.glob("*.py"))
        for name in BINDING_REFERENCE.findall(path.read_text(encoding="utf-8"))
    }


def test_bindings_name_settings_of_the_model() -> None:
    names = binding_settings()
    assert {"RequestsQueueName", "JobWatchdogSchedule", "IncomingContainer"} <= names
    assert names <= set(setting_names())


def test_local_sample_names_only_known_settings() -> None:
    unknown = sorted(set(sample_values()) - set(setting_names()) - HOST_SETTINGS)
    assert not unknown, f"local.settings.sample.json sets what nothing reads: {unknown}"


def test_local_sample_has_every_local_only_setting_and_every_binding_setting() -> None:
    local_only = {field.name for field in setting_fields() if field.where == "local"}
    missing = sorted((local_only | binding_settings()) - set(sample_values()))
    assert not missing, f"local.settings.sample.json lacks {missing}"


def test_local_sample_holds_only_what_differs_from_the_defaults() -> None:
    """Beside the host's own settings and those a binding names, a sample value is there
    because the local stack needs another value than the model's default."""
    values = sample_values()
    sample, defaults = Settings.model_validate(values), Settings()
    model_settings = set(values) & set(setting_names())
    assert model_settings, "the sample sets none of the model's settings"
    repeated = sorted(
        name
        for name in model_settings - binding_settings()
        if setting_value(sample, name) == setting_value(defaults, name)
    )
    assert not repeated, f"local.settings.sample.json repeats the defaults of {repeated}"


def test_literal_bicep_values_mean_the_model_defaults() -> None:
    """A value written in Bicep must parse, through the model, to the model's default."""
    known = constants(FUNCTION_APP)
    fields = {field.name: field for field in setting_fields()}
    checked = []
    for setting, raw in app_settings().items():
        if setting not in fields:
            continue
        try:
            value = resolve(raw, known)
        except Unresolved:
            continue  # computed at deployment time (endpoints, client ids)
        default = fields[setting].info.default
        if default is None and value == "":
            checked.append(setting)  # an empty app setting is "not configured"
            continue
        try:
            parsed = setting_value(Settings.model_validate({setting: value}), setting)
        except ValidationError as error:
            pytest.fail(f"{setting}={value!r} is not a valid value: {error}")
        assert parsed == default, f"{setting}={value!r} differs from the model default {default!r}"
        checked.append(setting)
    assert {
        "RequestsQueueName",
        "ResultsTopicName",
        "LedgerContainer",
        "IncomingContainer",
        "ModelConcurrency",
        "AllowTenantHeader",
    } <= set(checked)


def test_tenant_header_is_off_in_azure() -> None:
    value = app_settings()["AllowTenantHeader"]
    assert value == "false"
    assert not is_reference(value)


@pytest.mark.parametrize(
    "connection",
    ["AzureWebJobsStorage", "Storage", "ServiceBusConnection", "EventGridTopic", "AzureOpenAI"],
)
def test_connections_use_the_user_assigned_identity(connection: str) -> None:
    settings = app_settings()
    assert settings[f"{connection}__credential"] == "managedidentity"
    assert not is_reference(settings[f"{connection}__credential"])
    assert is_reference(settings[f"{connection}__clientId"], "appIdentityClientId")
    assert connection not in settings, f"{connection} must not be a connection string in Azure"


def test_no_key_alternatives_in_azure() -> None:
    """Settings the model marks as alternatives holding keys are never provisioned."""
    key_settings = [
        field.name
        for field in setting_fields()
        if field.where == "alternative" and "key" in field.name.lower()
    ]
    assert key_settings, "the model is expected to name its key-based alternatives"
    present = set(key_settings) & set(app_settings())
    assert not present, f"key-based settings in Bicep: {sorted(present)}"


def test_identity_endpoints_come_from_the_deployment() -> None:
    settings = app_settings()
    assert is_reference(settings["AzureWebJobsStorage__accountName"], "hostStorageAccountName")
    assert is_reference(settings["Storage__blobServiceUri"], "dataBlobEndpoint")
    assert is_reference(
        settings["ServiceBusConnection__fullyQualifiedNamespace"],
        "serviceBusFullyQualifiedNamespace",
    )
    assert is_reference(settings["EventGridTopic__topicEndpoint"], "eventGridTopicEndpoint")


def test_application_insights_is_wired() -> None:
    settings = app_settings()
    assert (
        render(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"])
        == "appInsights.properties.ConnectionString"
    )
    auth = resolve(
        settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"], {"appIdentityClientId": "X"}
    )
    assert auth == "ClientId=X;Authorization=AAD"


def test_blob_trigger_connection_names_the_blob_and_queue_services() -> None:
    """Identity-based ``Storage`` for a blob trigger needs both service URIs, one account.

    The blobs extension writes poison blobs to a queue of the connection's account, so
    with ``__blobServiceUri`` it requires ``__queueServiceUri`` as well (a host-only
    setting: the app's own blob client reads the blob endpoint alone).
    https://learn.microsoft.com/azure/azure-functions/functions-bindings-storage-blob-trigger#identity-based-connections
    """
    settings = app_settings()
    assert is_reference(settings["Storage__blobServiceUri"], "dataBlobEndpoint")
    assert is_reference(settings["Storage__queueServiceUri"], "dataQueueEndpoint")
    passed = module(MAIN, "functionApp")["params"]
    assert render(passed["dataBlobEndpoint"]) == "dataStorage.outputs.blobEndpoint"
    assert render(passed["dataQueueEndpoint"]) == "dataStorage.outputs.queueEndpoint"
    data_outputs = outputs(DATA_STORAGE)
    assert render(data_outputs["blobEndpoint"]) == "account.properties.primaryEndpoints.blob"
    assert render(data_outputs["queueEndpoint"]) == "account.properties.primaryEndpoints.queue"


def test_local_storage_connection_string_reaches_blobs_and_queues_of_one_account() -> None:
    """Locally ``Storage`` is Azurite's connection string; the blob trigger's poison queue
    needs its queue endpoint too (without it the SDK derives *.queue.core.windows.net)."""
    values = sample_values()
    parts = dict(item.split("=", 1) for item in values["Storage"].split(";") if "=" in item)
    account = parts["AccountName"]
    assert parts["BlobEndpoint"].startswith("http://127.0.0.1:")
    assert parts["QueueEndpoint"].startswith("http://127.0.0.1:")
    assert parts["BlobEndpoint"].endswith(f"/{account}")
    assert parts["QueueEndpoint"].endswith(f"/{account}")


def test_no_dependency_isolation_setting_on_313() -> None:
    """Python 3.13 isolates the app's dependencies by default; the 3.11 switch is gone."""
    assert "PYTHON_ISOLATE_WORKER_DEPENDENCIES" not in app_settings()


def test_no_flex_deprecated_settings() -> None:
    present = FLEX_DEPRECATED & set(app_settings())
    assert not present, f"not valid on Flex Consumption: {sorted(present)}"


def test_runtime_is_python_313_in_function_app_config() -> None:
    """Flex Consumption serves Python 3.13 (functionAppConfig.runtime, not app settings).

    https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#supported-language-stack-versions
    """
    (site,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites").values()
    config = resource_body(site)["properties"]["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "3.13"}
    storage = config["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert storage["authentication"]["type"] == "UserAssignedIdentity"


def test_readme_documents_every_bicep_setting() -> None:
    readme = read(REPO_ROOT / "infra" / "README.md")
    undocumented = [name for name in app_settings() if f"| `{name}` |" not in readme]
    assert not undocumented, f"infra/README.md settings table lacks {undocumented}"


def derived_concurrency(capacity: int, tokens_per_call: int, call_seconds: int) -> int:
    """infra/README.md's rule (Model capacity), in exact fractions: twice the calls in
    flight when one instance has the whole quota, between 2 and 64; 16 without a capacity."""
    if capacity == 0:
        return 16
    calls_per_minute = min(Fraction(capacity * 1000, tokens_per_call), Fraction(capacity * 6))
    return min(64, max(2, math.ceil(2 * calls_per_minute * call_seconds / 60)))


def concurrency_settings(
    capacity: int, tokens_per_call: int, call_seconds: int, chosen: int = 0
) -> tuple[str, str]:
    """ModelConcurrency and PriorityModelConcurrency as the module computes them."""
    known = constants(FUNCTION_APP) | {
        "modelCapacity": capacity,
        "modelTokensPerCall": tokens_per_call,
        "modelCallSeconds": call_seconds,
        "modelConcurrency": chosen,
    }
    settings = app_settings()
    return (
        resolve(settings["ModelConcurrency"], known),
        resolve(settings["PriorityModelConcurrency"], known),
    )


@pytest.mark.parametrize(
    ("capacity", "tokens_per_call", "call_seconds", "concurrency", "priority"),
    [
        (0, 1000, 5, 16, 4),  # no known quota: the model's defaults
        (30, 1000, 5, 5, 2),  # 30 calls a minute, 2.5 in flight: twice over
        (300, 1000, 5, 50, 12),
        (300, 3000, 5, 17, 4),
        # 66.7 calls a minute, 11.1 in flight: 22.2 rounds up to 23 (rounding the calls a
        # minute down first would give 22)
        (100, 1500, 10, 23, 5),
        # 100-token calls: the requests a minute (180) bind, not the tokens (300 calls)
        (30, 100, 5, 30, 7),
        (1000, 1000, 5, 64, 16),  # never more than 64
        (1, 1000, 5, 2, 2),  # never fewer than 2
    ],
)
def test_model_concurrency_follows_the_deployments_capacity(
    capacity: int, tokens_per_call: int, call_seconds: int, concurrency: int, priority: int
) -> None:
    assert derived_concurrency(capacity, tokens_per_call, call_seconds) == concurrency
    assert concurrency_settings(capacity, tokens_per_call, call_seconds) == (
        str(concurrency),
        str(priority),
    )
    assert concurrency_settings(capacity, tokens_per_call, call_seconds, chosen=12) == (
        "12",
        "3",
    ), "a set value overrides, and the high-priority lane gets a quarter of it"


def test_the_integer_derivation_is_the_documented_rule_everywhere() -> None:
    """Bicep's integer arithmetic (one rounding up, at the end) equals the exact rule."""
    for capacity in (1, 7, 30, 59, 100, 187, 193, 450):
        for tokens_per_call in (50, 166, 167, 1000, 1499, 4000):
            for call_seconds in (1, 5, 13, 60):
                concurrency = derived_concurrency(capacity, tokens_per_call, call_seconds)
                assert concurrency_settings(capacity, tokens_per_call, call_seconds) == (
                    str(concurrency),
                    str(max(2, concurrency // 4)),
                ), (capacity, tokens_per_call, call_seconds)


def test_model_concurrency_parameters_derive_by_default() -> None:
    """modelConcurrency 0 means derived in both templates; main.bicep passes the three on."""
    for path in (MAIN, FUNCTION_APP):
        declared = params(path)
        for name, default, minimum in (
            ("modelConcurrency", 0, 0),
            ("modelTokensPerCall", 1000, 1),
            ("modelCallSeconds", 5, 1),
        ):
            assert declared[name]["default"] == default, (path.name, name)
            assert decorator(declared[name], "min_value") == minimum, (path.name, name)
            assert "ModelConcurrency" in decorator(declared[name], "description")
        assert decorator(declared["modelConcurrency"], "max_value") == 256
    passed = module(MAIN, "functionApp")["params"]
    for name in ("modelConcurrency", "modelTokensPerCall", "modelCallSeconds"):
        assert is_reference(passed[name], name)


def test_capacity_settings_hold_the_apps_defaults() -> None:
    """A call waits at most a minute for capacity, and heartbeats carry demand every 5 s."""
    settings = app_settings()
    assert settings["ModelCapacity__waitSeconds"] == "60"
    assert settings["ModelCapacity__heartbeatSeconds"] == "5"
    assert not is_reference(settings["ModelCapacity__waitSeconds"])
    assert not is_reference(settings["ModelCapacity__heartbeatSeconds"])
    model = Settings.model_validate(
        {
            "ModelCapacity__waitSeconds": settings["ModelCapacity__waitSeconds"],
            "ModelCapacity__heartbeatSeconds": settings["ModelCapacity__heartbeatSeconds"],
        }
    )
    assert model.model_capacity.wait_seconds == 60
    assert model.model_capacity.heartbeat_seconds == 5
    assert model.model_capacity.wait_seconds < model.processing.max_lock_renewal_seconds


def test_readme_gives_the_default_deployments_concurrency() -> None:
    """infra/README.md's arithmetic for the default capacity is what the template derives."""
    capacity = params(MAIN)["queueModelCapacity"]["default"]
    concurrency, priority = concurrency_settings(capacity, 1000, 5)
    readme = read(REPO_ROOT / "infra" / "README.md")
    assert f"| `ModelConcurrency` per instance | **{concurrency}** |" in readme
    assert f"| `PriorityModelConcurrency` per instance | **{priority}** |" in readme
    assert f"{concurrency} at the default capacity {capacity}" in readme
