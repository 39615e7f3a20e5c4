"""The launcher (``python -m devtools.stack``): its reading of local settings, the
model catalog it checks before starting anything, the local host's own refusal, and the
Service Bus emulator it restarts when it dies (the stack keeps serving)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient

from devtools.appinsights import IngestionRecorder
from devtools.emulator_restarts import EmulatorGaveUp, RestartPolicy, SupervisedEmulator
from devtools.stack import (
    EMULATOR_CONFIG,
    REPO_ROOT,
    parse_args,
    runtime_counts_port,
    servicebus_data_dir,
    servicebus_endpoint,
    storage_ports,
)
from functions_host.process import HostProcess
from local_processes import Child, StartError, describe_port, free_port
from servicebus_emulator.process import SAS_KEY_VALUE
from tests.e2e.conftest import (
    STARTUP_TIMEOUT_S,
    Stack,
    stack_from_banner,
    write_stack_settings,
)


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


def test_the_restart_policy_backs_off_and_gives_up_on_fast_failures_only() -> None:
    policy = RestartPolicy(max_failures=3, window_s=60, base_delay_s=0.5, max_delay_s=2)

    assert [policy.record_failure(t) for t in (0.0, 10.0)] == [1, 2]
    assert [policy.delay(k) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 2.0]
    assert policy.record_failure(20.0) is None, "3 failures within a minute: give up"
    slow = RestartPolicy(max_failures=3, window_s=60)
    assert [slow.record_failure(t) for t in (0.0, 61.0, 122.0, 183.0)] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"max_failures": 0}, "max_failures"), ({"base_delay_s": 3, "max_delay_s": 1}, "delay")],
)
def test_a_restart_policy_that_could_never_restart_is_refused(
    fields: dict[str, float], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        RestartPolicy(**fields)  # type: ignore[arg-type]


def test_the_servicebus_data_folder_defaults_to_local_and_in_memory_keeps_none(
    tmp_path: Path,
) -> None:
    assert servicebus_data_dir(None, in_memory=False) == REPO_ROOT / ".local" / "servicebus"
    assert servicebus_data_dir(None, in_memory=True) is None
    assert servicebus_data_dir(tmp_path, in_memory=True) == tmp_path.resolve()
    assert parse_args(["--servicebus-data", str(tmp_path)]).servicebus_data == tmp_path


def supervised(tmp_path: Path, policy: RestartPolicy, said: list[str]) -> SupervisedEmulator:
    return SupervisedEmulator(
        EMULATOR_CONFIG,
        tmp_path / "emulator.log",
        port=free_port(),
        admin_port=0,
        sas_key=SAS_KEY_VALUE,
        data_dir=None,
        policy=policy,
        say=said.append,
    )


def test_a_killed_emulator_comes_back_on_the_same_ports(tmp_path: Path) -> None:
    said: list[str] = []
    emulator = supervised(tmp_path, RestartPolicy(base_delay_s=0, max_delay_s=0), said)
    admin_url = emulator.start()
    first = emulator.child
    started = [first]
    try:
        first.process.kill()
        first.process.wait(timeout=10)

        assert emulator.revive(threading.Event(), started)

        assert started == [emulator.child]
        assert emulator.child is not first
        assert emulator.child.running()
        assert emulator.admin_url == admin_url
        assert describe_port(emulator.port) == "amqp"
        assert said[0] == (
            "Service Bus emulator stopped unexpectedly (exit code -9); restarting it (attempt 1)"
        )
    finally:
        emulator.child.stop()


def test_an_emulator_that_keeps_dying_is_given_up(tmp_path: Path) -> None:
    said: list[str] = []
    emulator = supervised(tmp_path, RestartPolicy(max_failures=2, base_delay_s=0), said)
    emulator.start()
    try:
        emulator.child.process.kill()
        emulator.child.process.wait(timeout=10)
        assert emulator.revive(threading.Event(), [emulator.child])
        emulator.child.process.kill()
        emulator.child.process.wait(timeout=10)

        with pytest.raises(EmulatorGaveUp, match="2 times within 60s; giving up"):
            emulator.revive(threading.Event(), [emulator.child])
        assert emulator.restarts == 1
    finally:
        emulator.child.stop()


_RUNNING = re.compile(r"Inferbus is running")
_EMULATOR_PID = re.compile(r"Started the Service Bus emulator on port \d+ \(pid (\d+)")
_RESTARTED = re.compile(r"Restarted the Service Bus emulator on port \d+ \(pid (\d+)\)")


@contextmanager
def stack_keeping_servicebus_data(workdir: Path, data_dir: Path) -> Iterator[Stack]:
    """``python -m devtools.stack --in-memory --servicebus-data DIR``: Azurite keeps
    nothing, the emulator keeps its messages in ``data_dir`` (the flag wins)."""
    settings_path, values = write_stack_settings(REPO_ROOT, workdir)
    log_path = workdir / "stack.log"
    command = [sys.executable, "-m", "devtools.stack", "--settings", str(settings_path),
               "--in-memory", "--servicebus-data", str(data_dir)]  # fmt: skip
    recorder = IngestionRecorder().start()
    launcher = Child("stack", command, log_path, cwd=REPO_ROOT)
    try:
        launcher.wait_for(_RUNNING, STARTUP_TIMEOUT_S)
        yield stack_from_banner(launcher.output(), values, log_path, recorder)
    finally:
        launcher.stop(signal.SIGINT, timeout=60)
        recorder.stop()


def test_make_run_restarts_a_killed_emulator_which_keeps_its_messages(tmp_path: Path) -> None:
    data_dir = tmp_path / "servicebus"
    with stack_keeping_servicebus_data(tmp_path, data_dir) as stack:
        log = stack.log_path.read_text()
        assert f"messages in {data_dir}" in log
        first_pid = int(_pid(_EMULATOR_PID, log))
        before = _submitted_request_completes(stack)
        os.kill(first_pid, signal.SIGKILL)

        restarted = _wait_for_log(stack.log_path, _RESTARTED, timeout=60)

        log = stack.log_path.read_text()
        assert "Service Bus emulator stopped unexpectedly (exit code -9); restarting it " \
            "(attempt 1)" in log  # fmt: skip
        assert int(restarted.group(1)) != first_pid
        assert "error:" not in log, log[-3000:]
        after = _submitted_request_completes(stack)
        kept = _audited_results(stack.servicebus_connection_string)
        assert kept.get(before) == ["completed"], f"lost across the restart: {kept}"
        assert kept.get(after) == ["completed"], kept


def _audited_results(connection_string: str) -> dict[str, list[str]]:
    """The status of each result message per request id on the results topic's ``audit``
    subscription (nothing in the app consumes it)."""
    found: dict[str, list[str]] = {}
    with (
        ServiceBusClient.from_connection_string(connection_string) as bus,
        bus.get_subscription_receiver("inference-results", "audit") as receiver,
    ):
        while batch := receiver.receive_messages(max_message_count=50, max_wait_time=3):
            for message in batch:
                body = json.loads(b"".join(message.body))
                found.setdefault(str(body["request_id"]), []).append(str(body["status"]))
                receiver.complete_message(message)
    return found


def _pid(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    assert match, f"the launcher printed no emulator pid:\n{text[-3000:]}"
    return match.group(1)


def _wait_for_log(path: Path, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if match := pattern.search(path.read_text(errors="replace")):
            return match
        time.sleep(0.2)
    raise AssertionError(f"no {pattern.pattern!r} within {timeout}s:\n{path.read_text()[-3000:]}")


def _submitted_request_completes(stack: Stack, timeout: float = 90) -> str:
    """Submit one request (retried while intake answers 503: the host's sender is
    reconnecting) and return its id once completed."""
    tenant = f"launcher-{uuid.uuid4().hex[:8]}"
    body = {"model": "local-analyzer", "input": {"text": "Invoice 5. Total amount due: 9 EUR."}}
    deadline = time.monotonic() + timeout
    status, raw = 0, b""
    while time.monotonic() < deadline:
        status, _, raw = stack.request("POST", "/api/v1/requests", body, {"X-Tenant-Id": tenant})
        if status == 202:
            break
        assert status == 503, raw
        time.sleep(0.5)
    assert status == 202, raw
    request_id = json.loads(raw)["id"]
    while time.monotonic() < deadline:
        status, _, raw = stack.request(
            "GET", f"/api/v1/requests/{request_id}", headers={"X-Tenant-Id": tenant}
        )
        current = str(json.loads(raw)["status"])
        if current in ("failed", "expired", "cancelled"):
            raise AssertionError(f"request {request_id} ended {current}: {raw!r}")
        if current == "completed":
            return str(request_id)
        time.sleep(0.3)
    raise AssertionError(f"request {request_id} did not end within {timeout}s")
