"""The launcher (``python -m devtools.stack``): its reading of local settings, and the
model catalog it checks before starting anything; the local host's own refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.stack import REPO_ROOT, runtime_counts_port, servicebus_endpoint, storage_ports
from functions_host.process import HostProcess
from local_processes import StartError
from tests.e2e.conftest import write_stack_settings


def test_stack_reads_ports_from_connection_strings() -> None:
    values = {
        "AzureWebJobsStorage": (
            "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=k;"
            "BlobEndpoint=http://127.0.0.1:20000/a;QueueEndpoint=http://127.0.0.1:20001/a;"
        ),
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:5999;SharedAccessKeyName=n;"
        "SharedAccessKey=secret;UseDevelopmentEmulator=true",
    }
    assert storage_ports(values) == {"Blob": 20000, "Queue": 20001, "Table": 10002}
    assert storage_ports({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})["Blob"] == 10000
    assert servicebus_endpoint(values) == (5999, "secret")


def test_the_emulator_admin_port_comes_from_the_runtime_counts_url() -> None:
    assert (
        runtime_counts_port({"ServiceBusRuntimeCountsUrl": "http://127.0.0.1:5300/runtime"}) == 5300
    )
    assert runtime_counts_port({}) == 0


BROKEN_CATALOG = (
    '{"tasks": {"sentiment": {"instructions": "Rate it.", "output_schema": {"type": "object"}}},'
    ' "models": {"rater": {"provider": "python", "task": "sentiment",'
    ' "handler": "nowhere.models:Rater"}}}'
)
REFUSAL = "model 'rater', field 'handler': 'nowhere.models:Rater' does not import"


def broken_settings(tmp_path: Path) -> Path:
    """The sample's settings, on free ports, naming a catalog whose handler cannot import."""
    catalog = tmp_path / "models.json"
    catalog.write_text(BROKEN_CATALOG)
    values = {"ModelCatalog": str(catalog), "GlobalBatch__deployments": ""}
    path, _ = write_stack_settings(REPO_ROOT, tmp_path, values)
    return path


def test_make_run_refuses_a_catalog_it_cannot_serve_before_starting_anything(
    tmp_path: Path,
) -> None:
    launch = subprocess.run(
        [sys.executable, "-m", "devtools.stack", "--settings", str(broken_settings(tmp_path))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert launch.returncode == 1, launch.stdout + launch.stderr
    assert "error: the model catalog cannot be served: " in launch.stderr
    assert f"{tmp_path / 'models.json'}: {REFUSAL}" in launch.stderr
    assert "Started" not in launch.stdout, "nothing was started for an app that cannot run"


def test_the_local_host_refuses_to_index_the_app_with_that_catalog(tmp_path: Path) -> None:
    host = HostProcess(REPO_ROOT, broken_settings(tmp_path), tmp_path / "host.log")
    try:
        with pytest.raises(StartError) as refused:
            host.wait_started(timeout=60)
    finally:
        host.stop()

    assert REFUSAL in str(refused.value) or REFUSAL in host.log()
