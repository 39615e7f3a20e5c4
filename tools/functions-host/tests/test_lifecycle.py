"""Timers on startup, graceful shutdown, and no blob re-delivery across a restart."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient

from hostproc import SampleHost, http, wait_for

pytestmark = pytest.mark.integration
# These hosts need no Service Bus listeners (which would compete with the session host's).
NO_SERVICE_BUS = tuple(
    arg for name in ("settle_batch", "handle_single", "ordered") for arg in ("--disable", name)
)


def test_timer_runs_on_startup(sample_host: SampleHost) -> None:
    rows = wait_for(lambda: sample_host.records("yearly"), what="run_on_startup")
    assert rows[0]["past_due"] is False


def test_graceful_shutdown_lets_running_invocations_finish(
    host_values_factory: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    host = SampleHost(tmp_path, host_values_factory(), *NO_SERVICE_BUS)
    results: list[int] = []
    request = threading.Thread(
        target=lambda: results.append(http("GET", f"{host.base_url}/api/slow/1500")[0])
    )
    request.start()
    wait_for(lambda: host.records("slow-started"), what="the slow request running")
    returncode = host.stop()
    request.join(timeout=30)
    assert results == [200]
    assert host.records("slow") == [{"function": "slow", "ms": "1500"}]
    assert returncode == 0
    log = host.log()
    assert log.index("Stopping host") < log.index("Executed 'Functions.slow' (Succeeded")
    assert "Host stopped" in log
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{host.base_url}/api/hello/x", timeout=5)  # noqa: S310


def test_blob_is_not_delivered_again_after_a_restart(
    host_values_factory: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    values = host_values_factory()
    client = BlobServiceClient.from_connection_string(values["Storage"])
    container = values["WatchedContainer"]
    client.create_container(container)
    first = SampleHost(tmp_path, values, *NO_SERVICE_BUS)
    name = f"once-{uuid.uuid4().hex[:8]}.txt"
    try:
        client.get_blob_client(container, name).upload_blob(b"once")
        wait_for(lambda: first.records("on_blob"), what="first delivery")
    finally:
        first.stop()
    second = SampleHost(tmp_path, values, *NO_SERVICE_BUS)
    try:
        client.get_blob_client(container, "after-restart.txt").upload_blob(b"new")
        wait_for(
            lambda: any(r["name"].endswith("after-restart.txt") for r in second.records("on_blob")),
            what="delivery after restart",
        )
    finally:
        second.stop()
    names = [r["name"] for r in second.records("on_blob")]
    assert names.count(f"{container}/{name}") == 1


def test_an_app_the_runtime_rejects_does_not_start(tmp_path: Path) -> None:
    """One function the runtime cannot index fails the whole app, as it does in Azure."""
    (tmp_path / "host.json").write_text('{"version": "2.0"}')
    (tmp_path / "function_app.py").write_text(
        "import azure.functions as func\n"
        "import azurefunctions.extensions.bindings.servicebus as servicebus\n\n"
        "app = func.FunctionApp()\n\n\n"
        '@app.route(route="ok", auth_level=func.AuthLevel.ANONYMOUS)\n'
        "def ok(req: func.HttpRequest) -> func.HttpResponse:\n"
        '    return func.HttpResponse("ok")\n\n\n'
        '@app.service_bus_queue_trigger(arg_name="messages", queue_name="q", connection="C",'
        ' cardinality="many")\n'
        "def batch(messages: list[servicebus.ServiceBusReceivedMessage]) -> None:\n"
        "    pass\n"
    )
    settings = tmp_path / "local.settings.json"
    settings.write_text('{"Values": {"FUNCTIONS_WORKER_RUNTIME": "python"}}')

    finished = subprocess.run(
        [
            sys.executable, "-m", "functions_host", "--script-root", str(tmp_path),
            "--settings", str(settings), "--keys-file", str(tmp_path / "keys.json"),
            "--port", "0",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    output = finished.stdout + finished.stderr
    assert finished.returncode == 2, output
    assert "Worker failed to index functions" in output
    assert "binding messages has invalid non-type annotation" in output
    assert "Host started" not in output
