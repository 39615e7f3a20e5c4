"""Settings from the environment over local.settings.json, and their validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import ConfigurationError
from shared.settings import load_settings, setting_names, setting_names_for


def test_defaults_need_no_settings_at_all(tmp_path: Path) -> None:
    settings = load_settings({}, tmp_path / "absent.json")
    assert settings.requests_queue_name == "inference-requests"
    assert settings.allowed_models == ("local-analyzer",)
    assert settings.allow_tenant_header is False


def test_environment_wins_over_local_settings_values(tmp_path: Path) -> None:
    path = tmp_path / "local.settings.json"
    path.write_text(
        json.dumps(
            {"IsEncrypted": False, "Values": {"AllowedModels": "a,b", "MaxUploadBytes": "5"}}
        )
    )
    settings = load_settings({"MaxUploadBytes": "7", "AllowTenantHeader": "true"}, path)
    assert settings.allowed_models == ("a", "b")
    assert settings.max_upload_bytes == 7
    assert settings.allow_tenant_header is True


def test_identity_connection_forms_are_read(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "Storage__serviceUri": "https://acct.blob.core.windows.net",
            "ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
            "ServiceBusConnection__clientId": "00000000-0000-0000-0000-000000000001",
        },
        tmp_path / "absent.json",
    )
    assert settings.blob_service_uri == "https://acct.blob.core.windows.net"
    assert settings.servicebus_namespace == "ns.servicebus.windows.net"
    assert settings.servicebus_client_id == "00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize(
    "environ",
    [
        {"MaxUploadBytes": "lots"},
        {"MaxUploadBytes": "0"},
        {"AllowedModels": " , "},
        {"DefaultDeadlineSeconds": "100", "MaxDeadlineSeconds": "10"},
    ],
)
def test_invalid_values_name_the_setting(environ: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ, tmp_path / "absent.json")
    assert "invalid app settings" in str(error.value)


def test_broken_local_settings_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "local.settings.json"
    path.write_text("{ not json")
    with pytest.raises(ConfigurationError, match=r"local\.settings\.json"):
        load_settings({}, path)


def test_places_partition_the_connection_forms() -> None:
    local, azure = set(setting_names_for("local")), set(setting_names_for("azure"))
    assert {"Storage", "ServiceBusConnection"} <= local - azure
    assert {
        "Storage__blobServiceUri",
        "ServiceBusConnection__fullyQualifiedNamespace",
    } <= azure - local
    assert "Storage__serviceUri" in set(setting_names()) - local - azure
