"""The live app on the local Functions host, checked against its own OpenAPI document.

Schemathesis reads ``GET /api/openapi.json`` from the running app and sends generated
requests (valid and invalid ones, a bounded number per operation with a fixed seed, so a
CI run is short and repeatable) to every operation, checking that nothing a caller sends
gets a 5xx and that every answer (status, content type, body) is one the document
declares. The same host shows that a function key sent as ``?code=`` never reaches a log
line, neither the host's nor the app's.

The app runs on its own Azurite and Service Bus emulator (a copy of the entity file is a
separate emulator), so the host's listeners and blob watcher never touch what other test
modules of the same worker use.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from functions_host.process import HostProcess
from local_processes import run_azurite
from servicebus_emulator.process import ServiceBusEmulator
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.settings import load_settings
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST_STARTUP_TIMEOUT_S = 90.0
BANNER = "Default function key: "
EXAMPLES_PER_OPERATION = 30  # per generation mode; the seed is fixed (derandomize)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass(frozen=True)
class LiveApp:
    base_url: str
    key: str
    host: HostProcess


def _values(storage: str, servicebus: str) -> dict[str, str]:
    sample = json.loads((REPO_ROOT / "local.settings.sample.json").read_text())
    values: dict[str, str] = sample["Values"]
    values.update(
        {
            "AzureWebJobsStorage": storage,
            "Storage": storage,
            "ServiceBusConnection": servicebus,
            "ServiceBusRuntimeCountsUrl": "",
            "MaxQueueBacklog": "0",
            "EventGridPull__namespaceEndpoint": "",
            "PublicBaseUrl": "",
            "WebhookTenants": "",
        }
    )
    return values


@pytest.fixture(scope="module")
def live_app(
    tmp_path_factory: pytest.TempPathFactory,
    servicebus_emulator_factory: Callable[[Path | str], ServiceBusEmulator],
) -> Iterator[LiveApp]:
    """The repository's app on the local host, over its own Azurite and emulator."""
    workdir = tmp_path_factory.mktemp("live-app")
    entities = workdir / "servicebus-emulator.json"
    shutil.copyfile(DEFAULT_CONFIG, entities)
    emulator = servicebus_emulator_factory(entities)
    with run_azurite(root=REPO_ROOT) as azurite:
        values = _values(azurite.connection_string, emulator.connection_string)
        settings_path = workdir / "local.settings.json"
        settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        app_settings = load_settings({}, settings_path)
        store = AzureBlobStore(blob_service_client(app_settings))
        store.ensure_containers(app_settings.containers.names())
        host = HostProcess(
            REPO_ROOT, settings_path, workdir / "host.log", keys_path=workdir / "host-keys.json"
        )
        try:
            base_url = host.wait_started(HOST_STARTUP_TIMEOUT_S)
            yield LiveApp(base_url, str(host.keys["functionKeys"]["default"]), host)
        finally:
            host.stop()


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def test_the_document_is_served_anonymously(live_app: LiveApp) -> None:
    status, body = http("GET", f"{live_app.base_url}/api/openapi.json")
    assert status == 200
    document = json.loads(body)
    assert document["openapi"].startswith("3.1")
    assert "/v1/requests" in document["paths"]


def test_the_live_app_answers_as_its_openapi_document_says(live_app: LiveApp) -> None:
    schema = schemathesis.openapi.from_url(f"{live_app.base_url}/api/openapi.json", timeout=30)
    # The key is ours to send (below): generated keys would only test the host's key check.
    schema.config.generation.update(with_security_parameters=False)
    base_url = f"{live_app.base_url}/api"
    headers = {"x-functions-key": live_app.key}
    failures: list[str] = []
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the document has an operation it cannot read: {result}"
        operations.append(result.ok())
    labels = {operation.label for operation in operations}
    assert labels >= {
        "POST /v1/requests",
        "GET /v1/requests/{id}",
        "DELETE /v1/requests/{id}",
        "GET /v1/requests/{id}/result",
        "POST /v1/events",
        "OPTIONS /v1/events",
    }
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failure = _run(operation, mode, base_url, headers)
            if failure:
                failures.append(f"{operation.label} ({mode.value}): {failure}")
    errors = [line for line in live_app.host.log().splitlines() if "ERROR" in line]
    assert failures == [], "\n\n".join([*failures, "host errors:", *errors[-20:]])


def _run(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str]) -> str:
    """The first failure of a bounded, seeded run against one operation ("" when none)."""

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case: Any) -> None:
        case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

    try:
        exercise()
    except (Exception, BaseExceptionGroup) as error:  # checks' failures, hypothesis errors
        return str(error)[:3000]
    return ""


def test_a_function_key_in_the_url_never_reaches_a_log_line(live_app: LiveApp) -> None:
    key, base = live_app.key, live_app.base_url
    tenant = {"X-Tenant-Id": "redaction-check"}
    calls = [
        http(
            "POST",
            f"{base}/api/v1/requests?code={key}",
            b"{not json",
            {**tenant, "Content-Type": "application/json"},
        ),
        http("GET", f"{base}/api/v1/requests/no-such-request?code={key}", headers=tenant),
        http(
            "DELETE",
            f"{base}/api/v1/requests/no-such-request?code={key}&sig={key}",
            headers=tenant,
        ),
        http(
            "POST",
            f"{base}/api/v1/events?code={key}",
            b"[",
            {"x-functions-key": key, "Content-Type": "application/json"},
        ),
    ]
    assert [status for status, _ in calls] == [400, 404, 404, 400]
    log = live_app.host.log()
    assert "code=***" in log, "the app logs refused requests with their (redacted) URL"
    # The startup banner hands the developer the local key on purpose; no log line may.
    leaking = [line for line in log.splitlines() if key in line and not line.startswith(BANNER)]
    assert leaking == []
