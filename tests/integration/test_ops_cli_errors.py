"""``python -m shared.ops`` and ``python -m shared.producer`` run as an operator runs them,
in a process of their own with only the settings named here (nothing inherited from the
test's environment).

- A ``Storage`` connection string whose AccountKey is not base64 (the storage SDK only
  fails when it signs the first request) is a configuration error naming the setting:
  exit 2, no traceback, the key not echoed, whichever command reads storage.
- So is a ``ServiceBusConnection`` string the Service Bus SDK cannot parse.
- ``usage`` (from the ledger or the jobs) and ``jobs reindex`` read only storage: they
  run with no Service Bus connection configured at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from shared.adapters.blob_storage import AzureBlobStore
from tests.fixtures.azurite import Azurite

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MALFORMED_KEY = "not-base64!"
# Nothing listens there: any request would fail (slowly, with retries), not be refused.
UNREACHABLE_STORAGE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    f"AccountKey={MALFORMED_KEY};BlobEndpoint=http://127.0.0.1:1/devstoreaccount1"
)
UNREACHABLE_SERVICE_BUS = (
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=x;SharedAccessKey=x;UseDevelopmentEmulator=true"
)


def ops(
    *argv: str, settings: dict[str, str], local_settings: Path, module: str = "shared.ops"
) -> subprocess.CompletedProcess[str]:
    """``python -m shared.ops ARGV`` (or another ``module``) from the repository, its app
    settings the Values of ``local_settings`` (written here when ``settings`` is given) and
    nothing else."""
    if settings:
        document = {"IsEncrypted": False, "Values": settings}
        local_settings.write_text(json.dumps(document), encoding="utf-8")
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(local_settings.parent)),
        "INFERBUS_LOCAL_SETTINGS": str(local_settings),
    }
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("usage",),
        ("usage", "--json"),
        ("usage", "--from-jobs"),
        ("jobs", "reindex", "--dry-run"),
        ("deadletters", "list"),
        ("eg-deadletters", "replay", "--all", "--yes"),
        ("sb-deadletters", "list"),
    ],
    ids=" ".join,
)
def test_a_malformed_account_key_is_a_configuration_error_naming_the_setting(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    settings = {"Storage": UNREACHABLE_STORAGE, "ServiceBusConnection": UNREACHABLE_SERVICE_BUS}

    ran = ops(*argv, settings=settings, local_settings=tmp_path / "local.settings.json")

    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stderr.startswith("configuration error: the Storage setting")
    assert "AccountKey that is not base64" in ran.stderr
    assert MALFORMED_KEY not in ran.stderr
    assert ran.stdout == ""


def test_the_producer_refuses_a_malformed_account_key_the_same_way(tmp_path: Path) -> None:
    """Even for a request that needs no storage: the setting is wrong, not the request."""
    settings = {
        "Storage": UNREACHABLE_STORAGE.replace(MALFORMED_KEY, "notbase64!"),
        "ServiceBusConnection": UNREACHABLE_SERVICE_BUS,
    }
    argv = ("--tenant", "contoso", "--model", "local-analyzer", "--text", "Invoice 12")

    ran = ops(
        *argv,
        settings=settings,
        local_settings=tmp_path / "local.settings.json",
        module="shared.producer",
    )

    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines() == [
        "configuration error: the Storage setting (a connection string) has an AccountKey "
        "that is not base64: copy the storage account's key again"
    ]
    assert ran.stdout == ""


MALFORMED_SERVICE_BUS = "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=x"


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("shared.ops", ("sb-deadletters", "list")),
        ("shared.ops", ("deadletters", "list")),
        ("shared.producer", ("--tenant", "contoso", "--model", "m", "--text", "t")),
        ("shared.producer", ("--model", "m", "--file", "-", "--connection", "not a string")),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value),
)
def test_a_malformed_service_bus_connection_string_is_a_configuration_error(
    module: str, argv: tuple[str, ...], tmp_path: Path
) -> None:
    settings = {
        "Storage": "UseDevelopmentStorage=true",
        "ServiceBusConnection": MALFORMED_SERVICE_BUS,
    }

    ran = ops(*argv, settings=settings, local_settings=tmp_path / "l.json", module=module)

    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stderr.startswith(
        "configuration error: the ServiceBusConnection setting (a connection string) is malformed"
    )
    assert "127.0.0.1:1" not in ran.stderr


def test_a_connection_string_that_is_not_name_value_pairs_is_named_too(tmp_path: Path) -> None:
    ran = ops(
        "usage",
        settings={"Storage": "UseDevelopmentStorage"},
        local_settings=tmp_path / "local.settings.json",
    )

    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert "the Storage setting (a connection string) is malformed" in ran.stderr


@pytest.fixture
def jobs_container(storage: AzureBlobStore) -> str:
    """An empty jobs container of the test's own in Azurite."""
    name = f"jobs-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([name])
    return name


@pytest.mark.parametrize("source", ["ledger", "jobs"])
def test_usage_needs_no_service_bus_connection(
    azurite: Azurite, jobs_container: str, tmp_path: Path, source: str
) -> None:
    settings = {
        "Storage": azurite.connection_string,
        "JobsContainer": jobs_container,
        "UsageContainer": jobs_container,  # empty too: the ledger's documents are its own
    }
    chosen = ["--from-jobs"] if source == "jobs" else []

    ran = ops("usage", *chosen, "--json", settings=settings, local_settings=tmp_path / "l.json")

    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert (report["source"], report["rows"], report["totals"]["requests"]) == (source, [], 0)
    assert "Service Bus" not in ran.stderr


def test_jobs_reindex_needs_no_service_bus_connection(
    azurite: Azurite, jobs_container: str, tmp_path: Path
) -> None:
    settings = {"Storage": azurite.connection_string, "JobsContainer": jobs_container}

    ran = ops(
        "jobs", "reindex", "--dry-run", "--json", settings=settings, local_settings=tmp_path / "l"
    )

    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["listed"] == 0
