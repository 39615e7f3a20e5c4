"""Settings from the environment over local.settings.json, and their validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.errors import ConfigurationError
from shared.settings import (
    Settings,
    WebhookSettings,
    load_settings,
    setting_fields,
    setting_names,
    setting_names_for,
    setting_value,
)


def test_defaults_need_no_settings_at_all(tmp_path: Path) -> None:
    settings = load_settings({}, tmp_path / "absent.json")
    assert settings.queues.requests == "inference-requests"
    assert settings.models.allowed == ("local-analyzer",)
    assert settings.tenancy.allow_tenant_header is False


def test_environment_wins_over_local_settings_values(tmp_path: Path) -> None:
    path = tmp_path / "local.settings.json"
    path.write_text(
        json.dumps(
            {"IsEncrypted": False, "Values": {"AllowedModels": "a,b", "MaxUploadBytes": "5"}}
        )
    )
    settings = load_settings({"MaxUploadBytes": "7", "AllowTenantHeader": "true"}, path)
    assert settings.models.allowed == ("a", "b")
    assert settings.limits.max_upload_bytes == 7
    assert settings.tenancy.allow_tenant_header is True


def test_identity_connection_forms_are_read(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "Storage__serviceUri": "https://acct.blob.core.windows.net",
            "ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net",
            "ServiceBusConnection__clientId": "00000000-0000-0000-0000-000000000001",
        },
        tmp_path / "absent.json",
    )
    assert settings.storage.blob_endpoint == "https://acct.blob.core.windows.net"
    assert settings.servicebus.namespace == "ns.servicebus.windows.net"
    assert settings.servicebus.client_id == "00000000-0000-0000-0000-000000000001"


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


def test_grouped_settings_are_read_from_their_flat_app_setting_names(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "GlobalBatch__deployments": "a=a-batch",
            "GlobalBatch__endpoint": "https://batch.example",
            "EventGridPull__maxEvents": "7",
            "RetryBaseSeconds": "2",
            "JobResend__afterSeconds": "",  # empty: the default
        },
        tmp_path / "absent.json",
    )
    assert settings.global_batch.deployments == ("a=a-batch",)
    assert settings.batch_deployments == {"a": "a-batch"}
    assert settings.eventgrid_pull.max_events == 7
    assert settings.retries.base_seconds == 2.0
    assert settings.job_resend.after_seconds == 1200.0
    assert Settings(**{"LocalModelFaults": "true"}).local_model.faults is True


def test_a_group_may_be_given_whole_and_flat_names_win() -> None:
    given = Settings.model_validate(
        {"webhook": WebhookSettings(WebhookTenants="t"), "WebhookSharedSecret": "s"}
    )
    assert (given.webhook.tenants, given.webhook.shared_secret) == ("t", "s")
    merged = Settings.model_validate(
        {"retries": {"MaxRetries": "3", "RetryMaxSeconds": "9"}, "MaxRetries": "4"}
    )
    assert (merged.retries.max_retries, merged.retries.max_seconds) == (4, 9.0)


def test_groups_are_frozen_and_check_their_own_settings(tmp_path: Path) -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.global_batch.poll_seconds = 1  # type: ignore[misc]
    for environ, named in [
        ({"RetryBaseSeconds": "10", "RetryMaxSeconds": "5"}, "RetryBaseSeconds"),
        ({"GlobalBatch__quotaRetrySeconds": "7200"}, "GlobalBatch__quotaRetrySeconds"),
        ({"WebhookTokenAudience": "api://x"}, "WebhookTokenIssuer"),
        ({"ModelCapacity__waitSeconds": "600"}, "ModelCapacity__waitSeconds"),
        ({"EventGridPull__maxEvents": "101"}, "EventGridPull__maxEvents"),
    ]:
        with pytest.raises(ConfigurationError, match=named):
            load_settings(environ, tmp_path / "absent.json")


def test_every_setting_has_one_field_and_a_value() -> None:
    names = [field.name for field in setting_fields()]
    assert len(names) == len(set(names)) == len(setting_names())
    defaults = Settings()
    assert setting_value(defaults, "GlobalBatch__maxLinesPerFile") == 100_000
    assert setting_value(defaults, "RequestsQueueName") == "inference-requests"


def test_every_setting_belongs_to_a_group() -> None:
    """Settings itself holds only groups: a reader finds each setting under its group,
    as docs/settings.md lists it."""
    flat = [field.name for field in setting_fields() if field.group is None]
    assert flat == []
    assert {"queues", "containers", "limits", "models", "processing"} <= set(Settings.model_fields)


def test_the_new_groups_read_their_flat_names_and_check_their_own_settings(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        {
            "RequestsQueueName": "q",
            "BatchContainer": "b",
            "AllowedInputContainers": "extra",
            "ModelConcurrency": "3",
            "DeadLetterReconcilePageSize": "9",
            "ProducerTenants": "contoso",
            "ModelProvider": "local",
            "PublicBaseUrl": "https://api.example/",
            "WEBSITE_HOSTNAME": "app.azurewebsites.net",
        },
        tmp_path / "absent.json",
    )
    assert settings.queues.requests == "q"
    assert settings.containers.batches == "b"
    assert settings.processing.model_concurrency == 3
    assert settings.maintenance.dead_letter_reconcile_page_size == 9
    assert settings.tenancy.producer_tenants == ("contoso",)
    assert settings.models.uses_shorthand is True
    assert Settings().models.uses_shorthand is False
    assert settings.site.api_base_url == "https://api.example"
    assert Settings(WEBSITE_HOSTNAME="h.example").site.api_base_url == "https://h.example"
    assert settings.containers.names() == sorted(
        {"incoming", "inputs", "jobs", "idempotency", "ledgers", "usage", "eventgrid-deadletters"}
        | {"b", "extra"}
    )
    for environ, named in [
        ({"MaxLockRenewalSeconds": "50"}, "MaxLockRenewalSeconds"),
        ({"ModelCatalog": "models.json", "AllowedModels": "a"}, "ModelCatalog"),
    ]:
        with pytest.raises(ConfigurationError, match=named):
            load_settings(environ, tmp_path / "absent.json")
