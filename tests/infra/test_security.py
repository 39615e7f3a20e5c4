"""No secrets in the templates; identity everywhere; transport and publishing hardened."""

import re
from pathlib import Path

import pytest

from tests.infra import (
    INFRA,
    MODULES,
    bicep_files,
    params,
    read,
    resources_of_type,
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


def _code(text: str) -> str:
    """Template text without comments (comments may name what they forbid)."""
    return re.sub(r"//[^\n]*", "", text)


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_no_connection_string_or_key_text(path: Path) -> None:
    assert not _SECRET_TEXT.search(_code(read(path)))


@pytest.mark.parametrize(
    "path", [p for p in bicep_files() if p != SECOND_STAGE], ids=lambda p: p.name
)
def test_keys_are_read_only_in_the_second_stage(path: Path) -> None:
    assert not _SECRET_FUNCTIONS.search(_code(read(path)))


def test_second_stage_hands_keys_to_secure_parameters_only() -> None:
    text = _code(read(SECOND_STAGE))
    key_lines = [line.strip() for line in text.splitlines() if _SECRET_FUNCTIONS.search(line)]
    assert key_lines, "the second stage must read the webhook keys"
    secure = {
        name
        for name, p in params(read(SUBSCRIPTIONS_MODULE)).items()
        if "@secure()" in p.decorators
    }
    for line in key_lines:
        name = line.split(":", 1)[0].strip()
        assert name in secure, f"{name} receives a key but is not @secure() in the module"
    assert "output" not in text.split("module subscriptions", 1)[1]


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_no_output_exposes_a_secret(path: Path) -> None:
    for line in _code(read(path)).splitlines():
        if line.startswith("output "):
            assert not re.search(r"ConnectionString|[Kk]ey\b|[Ss]ecret|[Pp]assword", line), line


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_secure_params_have_no_default(path: Path) -> None:
    for param in params(read(path)).values():
        if "@secure()" in param.decorators:
            assert not param.has_default, f"{param.name} is secure and must not have a default"


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_every_param_is_described(path: Path) -> None:
    for param in params(read(path)).values():
        assert any(d.startswith("@description(") for d in param.decorators), param.name


@pytest.mark.parametrize("path", [MODULES / "storage-host.bicep", MODULES / "storage-data.bicep"])
def test_storage_accounts_accept_no_shared_keys(path: Path) -> None:
    (account,) = resources_of_type(read(path), "Microsoft.Storage/storageAccounts")
    properties = account.body["properties"]
    assert properties["allowSharedKeyAccess"] is False
    assert properties["allowBlobPublicAccess"] is False
    assert properties["minimumTlsVersion"] == "TLS1_2"
    assert properties["supportsHttpsTrafficOnly"] is True
    assert properties["defaultToOAuthAuthentication"] is True


def test_function_app_is_https_only_without_ftp_or_basic_publishing() -> None:
    text = read(MODULES / "function-app.bicep")
    (site,) = resources_of_type(text, "Microsoft.Web/sites")
    assert site.body["properties"]["httpsOnly"] is True
    assert site.body["properties"]["siteConfig"]["minTlsVersion"] == "1.2"
    assert site.body["properties"]["siteConfig"]["ftpsState"] == "Disabled"
    assert site.body["identity"]["type"] == "UserAssigned"
    policies = resources_of_type(text, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")
    assert {p.body["name"]: p.body["properties"]["allow"] for p in policies} == {
        "ftp": False,
        "scm": False,
    }


def test_event_grid_topic_accepts_only_entra_id() -> None:
    (topic,) = resources_of_type(
        read(MODULES / "eventgrid-topics.bicep"), "Microsoft.EventGrid/topics"
    )
    assert topic.body["properties"]["disableLocalAuth"] is True
    assert topic.body["properties"]["minimumTlsVersionAllowed"] == "1.2"


def test_app_insights_connection_string_is_read_where_it_is_used() -> None:
    """It is wired from the resource into the app settings, never passed around or output."""
    for path in bicep_files():
        text = _code(read(path))
        uses = re.findall(r"\.ConnectionString\b", text)
        if path.name == "function-app.bicep":
            assert len(uses) == 1
        else:
            assert not uses, path.name
