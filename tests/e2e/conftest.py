"""The whole local stack as a user starts it (``python -m devtools.stack``), on free ports.

End-to-end tests use only what a user has: HTTP against the local host, blob uploads to
Azurite, the Service Bus SDK against its emulator and the Event Grid SDK against the
namespace emulator.

Telemetry is on, the way a developer turns it on in the settings: the Values enable it
(``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY``) and name, as
``APPLICATIONINSIGHTS_CONNECTION_STRING``, an ingestion endpoint that runs here, in the test
process (``Stack.telemetry``), so tests read what the worker exported. Its items are also
written one per line to ``telemetry.log`` beside the stack's log.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from devtools.appinsights import IngestionRecorder, LinePrinter
from devtools.stack import local_telemetry_settings
from local_processes import ACCOUNT_KEY, ACCOUNT_NAME, Child, free_port
from shared.telemetry import QUEUE_GAUGES

STARTUP_TIMEOUT_S = 90.0
E2E_CATALOG = Path(__file__).with_name("models.json")
# The tenant the end-to-end direct producers name: listed in ProducerTenants, as a
# deployment lists its producers' tenants (an unlisted one is dead-lettered).
PRODUCER_TENANT = "e2e-producer"
_STARTED = re.compile(r"Host started: (http://\S+)")
_KEY = re.compile(r"Default function key: (\S+)")
_RUNNING = re.compile(r"Inferbus is running")


@dataclass(frozen=True)
class Stack:
    base_url: str
    key: str
    storage_connection_string: str
    servicebus_connection_string: str
    eventgrid_endpoint: str
    eventgrid_key: str
    log_path: Path
    telemetry: IngestionRecorder
    telemetry_log_path: Path
    openai_endpoint: str  # the Azure OpenAI batch emulator the Global Batch lane uses

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | list[Any] | None = None,
        headers: dict[str, str] | None = None,
        *,
        key: str | None = "default",
    ) -> tuple[int, dict[str, str], bytes]:
        """One HTTP call to the local host; returns status, headers and body."""
        all_headers = dict(headers or {})
        data = None
        if isinstance(body, dict | list):
            data = json.dumps(body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        elif body is not None:
            data = body
        if key == "default":
            all_headers["x-functions-key"] = self.key
        url = self.base_url + path
        assert url.startswith("http://127.0.0.1:"), "end-to-end traffic stays on loopback"
        request = urllib.request.Request(  # noqa: S310 (checked just above)
            url, data=data, method=method, headers=all_headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def produce(self, queue: str, body: dict[str, Any], **properties: str) -> None:
        """Send a request message straight to ``queue``, as a direct producer does (the
        message id is the request id; ``properties``: its application properties)."""
        application_properties: dict[str | bytes, Any] = {k: v for k, v in properties.items()}
        with (
            ServiceBusClient.from_connection_string(self.servicebus_connection_string) as bus,
            bus.get_queue_sender(queue) as sender,
        ):
            sender.send_messages(
                ServiceBusMessage(
                    json.dumps(body),
                    message_id=str(body["request_id"]),
                    content_type="application/json",
                    application_properties=application_properties or None,
                )
            )


def write_stack_settings(
    root: Path, workdir: Path, extra_values: dict[str, str] | None = None
) -> tuple[Path, dict[str, str]]:
    """The sample settings on free ports with the end-to-end tunings, plus ``extra_values``,
    written as ``workdir/local.settings.json``; returns the file and its Values."""
    sample = json.loads((root / "local.settings.sample.json").read_text())
    blob, queue, table, bus, http, counts, eventgrid, openai = (free_port() for _ in range(8))
    storage = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{blob}/{ACCOUNT_NAME};"
    )
    servicebus = (
        f"Endpoint=sb://127.0.0.1:{bus};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    )
    sample["Values"].update(
        {
            "AzureWebJobsStorage": storage
            + f"QueueEndpoint=http://127.0.0.1:{queue}/{ACCOUNT_NAME};"
            + f"TableEndpoint=http://127.0.0.1:{table}/{ACCOUNT_NAME};",
            "Storage": storage,
            "ServiceBusConnection": servicebus,
            "ServiceBusRuntimeCountsUrl": f"http://127.0.0.1:{counts}/runtime",
            "EventGridPull__namespaceEndpoint": f"http://127.0.0.1:{eventgrid}",
            "EventGridPullSchedule": "*/2 * * * * *",
            "GlobalBatch__endpoint": f"http://127.0.0.1:{openai}",
            "GlobalBatchSchedule": "*/2 * * * * *",
            "RetryBaseSeconds": "0.5",
            "RetryMaxSeconds": "1",
            "MaxRetries": "2",
            "DeferredSweepSchedule": "*/2 * * * * *",
            "LocalModelRefusalTerms": "forbidden",
            # Every kind of provider beside the local analyzer (tests/e2e/models.json).
            "ModelCatalog": str(E2E_CATALOG),
            "CompatibleModelKey": "local-openai-key",
            "ProducerTenants": PRODUCER_TENANT,
            **(extra_values or {}),
        }
    )
    sample["Host"]["LocalHttpPort"] = http
    path = workdir / "local.settings.json"
    path.write_text(json.dumps(sample))
    return path, sample["Values"]


def stack_from_banner(
    text: str, values: dict[str, str], log_path: Path, recorder: IngestionRecorder
) -> Stack:
    """The running stack as its banner (or the host's log) and its settings describe it."""
    started, key = _STARTED.search(text), _KEY.search(text)
    assert started, f"the stack printed no URL:\n{text}"
    assert key, f"the stack printed no function key:\n{text}"
    return Stack(
        started.group(1),
        key.group(1),
        values["Storage"],
        values["ServiceBusConnection"],
        values["EventGridPull__namespaceEndpoint"],
        values["EventGridPull__key"],
        log_path,
        recorder,
        log_path.with_name("telemetry.log"),
        values["GlobalBatch__endpoint"],
    )


@contextmanager
def launched_stack(
    root: Path, workdir: Path, recorder: IngestionRecorder, extra_values: dict[str, str]
) -> Iterator[Stack]:
    """``python -m devtools.stack --in-memory`` on the settings above until the block ends
    (stopped with Ctrl-C, so the host drains)."""
    settings_path, values = write_stack_settings(root, workdir, extra_values)
    log_path = workdir / "stack.log"
    command = [
        sys.executable,
        "-m",
        "devtools.stack",
        "--settings",
        str(settings_path),
        "--in-memory",
    ]
    stack_process = Child("stack", command, log_path, cwd=root)
    try:
        stack_process.wait_for(_RUNNING, STARTUP_TIMEOUT_S)
        yield stack_from_banner(stack_process.output(), values, log_path, recorder)
    finally:
        stack_process.stop(signal.SIGINT, timeout=60)


@pytest.fixture(scope="session")
def stack(pytestconfig: pytest.Config) -> Iterator[Stack]:
    """``python -m devtools.stack`` with its own ports; stopped with Ctrl-C at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="inferbus-e2e-"))
    telemetry_log_path = workdir / "telemetry.log"
    telemetry_log = telemetry_log_path.open("w", encoding="utf-8")
    printer = LinePrinter(telemetry_log, unless_changed=QUEUE_GAUGES)
    recorder = IngestionRecorder(on_items=printer).start()
    try:
        telemetry = local_telemetry_settings(recorder.connection_string)
        with launched_stack(pytestconfig.rootpath, workdir, recorder, telemetry) as running:
            yield running
    finally:
        recorder.stop()  # after the stack: the worker flushes its telemetry as it stops
        telemetry_log.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing end-to-end test shows the tail of the stack's log."""
    report = yield
    stack_fixture = item.funcargs.get("stack") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(stack_fixture, Stack):
        tail = stack_fixture.log_path.read_text(errors="replace")[-6000:]
        report.sections.append(("stack log (tail)", tail))
        if "telemetry" in item.nodeid:
            telemetry = stack_fixture.telemetry_log_path.read_text(errors="replace")[-6000:]
            report.sections.append(("telemetry (tail)", telemetry))
    return report
