"""No secrets in the templates; identity everywhere; transport and publishing hardened."""

import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra import (
    CATALOG,
    INFRA,
    MODULES,
    ROLE_DEFINITIONS,
    bicep_files,
    decorator,
    has_default,
    module,
    outputs,
    params,
    read,
    render,
    resource_body,
    resources_of_type,
    without_comments,
)

SECOND_STAGE = INFRA / "eventgrid-subscriptions.bicep"
SUBSCRIPTIONS_MODULE = MODULES / "eventgrid-subscriptions.bicep"

# Functions that return keys or connection strings.
_SECRET_FUNCTIONS = re.compile(
    r"\b(listKeys|listConnectionStrings|listSecrets|listAccountSas|listServiceSas|listCredentials)\s*\(",
    re.IGNORECASE,
)
# Fragments of connection strings and keys that must never be written in a template.
_SECRET_TEXT = re.compile(
    r"AccountKey=|SharedAccessKey|SharedAccessSignature|DefaultEndpointsProtocol=|"
    r"Endpoint=sb://|InstrumentationKey=|UseDevelopmentEmulator",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", [*bicep_files(), CATALOG, ROLE_DEFINITIONS], ids=lambda p: p.name)
def test_no_connection_string_or_key_text(path: Path) -> None:
    assert not _SECRET_TEXT.search(without_comments(read(path)))


@pytest.mark.parametrize(
    "path", [p for p in bicep_files() if p != SECOND_STAGE], ids=lambda p: p.name
)
def test_keys_are_read_only_in_the_second_stage(path: Path) -> None:
    assert not _SECRET_FUNCTIONS.search(without_comments(read(path)))


def test_second_stage_hands_keys_to_secure_parameters_only() -> None:
    passed = module(SECOND_STAGE, "subscriptions")["params"]
    keyed = sorted(name for name, value in passed.items() if "listKeys(" in render(value))
    assert keyed == ["blobsExtensionKey", "functionKey"], "the second stage must read the keys"
    module_params = params(SUBSCRIPTIONS_MODULE)
    for name in keyed:
        assert decorator(module_params[name], "secure"), (
            f"{name} receives a key but is not @secure()"
        )
    # Nothing else of the second stage reads a key, and it outputs nothing.
    code = without_comments(read(SECOND_STAGE))
    assert len(_SECRET_FUNCTIONS.findall(code)) == len(keyed)
    assert not outputs(SECOND_STAGE)


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_no_output_exposes_a_secret(path: Path) -> None:
    for name, value in outputs(path).items():
        text = f"{name} = {render(value)}"
        assert not re.search(r"ConnectionString|[Kk]ey\b|[Ss]ecret|[Pp]assword|listKeys", text), (
            text
        )


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_secure_params_have_no_default(path: Path) -> None:
    for name, param in params(path).items():
        if decorator(param, "secure"):
            assert not has_default(param), f"{name} is secure and must not have a default"


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_every_param_is_described(path: Path) -> None:
    for name, param in params(path).items():
        assert decorator(param, "description"), name


def _properties(path: Path, resource_type: str) -> dict[str, Any]:
    (resource,) = resources_of_type(path, resource_type).values()
    properties: dict[str, Any] = resource_body(resource)["properties"]
    return properties


@pytest.mark.parametrize("path", [MODULES / "storage-host.bicep", MODULES / "storage-data.bicep"])
def test_storage_accounts_accept_no_shared_keys(path: Path) -> None:
    properties = _properties(path, "Microsoft.Storage/storageAccounts")
    assert properties["allowSharedKeyAccess"] is False
    assert properties["allowBlobPublicAccess"] is False
    assert properties["minimumTlsVersion"] == "TLS1_2"
    assert properties["supportsHttpsTrafficOnly"] is True
    assert properties["defaultToOAuthAuthentication"] is True


def test_function_app_is_https_only_without_ftp_or_basic_publishing() -> None:
    path = MODULES / "function-app.bicep"
    (site,) = resources_of_type(path, "Microsoft.Web/sites").values()
    body = resource_body(site)
    assert body["properties"]["httpsOnly"] is True
    assert body["properties"]["siteConfig"]["minTlsVersion"] == "1.2"
    # Flex Consumption rejects siteConfig.ftpsState: FTP is off through the policies below.
    assert "ftpsState" not in body["properties"]["siteConfig"]
    assert body["identity"]["type"] == "UserAssigned"
    policies = resources_of_type(path, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")
    allowed = {
        resource_body(p)["name"]: resource_body(p)["properties"]["allow"] for p in policies.values()
    }
    assert allowed == {"ftp": False, "scm": False}


def test_event_grid_topic_accepts_only_entra_id() -> None:
    properties = _properties(MODULES / "eventgrid-topics.bicep", "Microsoft.EventGrid/topics")
    assert properties["disableLocalAuth"] is True
    assert properties["minimumTlsVersionAllowed"] == "1.2"


def test_app_insights_connection_string_is_read_where_it_is_used() -> None:
    """It is wired from the resource into the app settings, never passed around or output."""
    for path in bicep_files():
        text = without_comments(read(path))
        uses = re.findall(r"\.ConnectionString\b", text)
        if path.name == "function-app.bicep":
            assert len(uses) == 1
        else:
            assert not uses, path.name
