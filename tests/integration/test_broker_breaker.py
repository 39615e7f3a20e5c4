"""Fail fast while the broker is down: the app's real services on Azurite and a Service Bus
emulator of the test's own, stopped mid-test and started again on the same port.

The first submission after the stop makes one try (intake's client has no SDK retries)
and is refused at once; the next ones are refused by the open breaker itself, without a
send, 503 with Retry-After, with nothing accepted and the Idempotency-Key free again;
once the emulator is back, the first submission after the breaker's window probes the
broker and is accepted.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servicebus_emulator.process import EmulatorProcess
from shared.adapters.blob_storage import AzureBlobStore
from shared.entrypoints.bootstrap import Services
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body

pytestmark = pytest.mark.integration

TEXT = {"model": "local-analyzer", "input": {"text": "while the broker is down"}}
OPEN_SECONDS = 3


class RestartableEmulator:
    """An emulator process that can be stopped and started again on the same port."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._starts = 0
        self._process: EmulatorProcess | None = None
        self.emulator = self.start()

    def start(self, port: int = 0) -> ServiceBusEmulator:
        self._starts += 1
        log = self._log_dir / f"emulator-{self._starts}.log"
        self._process = EmulatorProcess(DEFAULT_CONFIG, log, port=port)
        return self._process.wait_ready()

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


class ConnectionCounter:
    """Listens on the stopped broker's port and counts who knocks (and closes at once)."""

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", port))
        self._server.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self.connections = 0

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def __enter__(self) -> ConnectionCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


@pytest.fixture
def own_emulator(tmp_path: Path) -> Iterator[RestartableEmulator]:
    restartable = RestartableEmulator(tmp_path)
    yield restartable
    restartable.stop()


def timed(call: Call, **kwargs: object) -> tuple[float, int, dict[str, str], dict[str, object]]:
    started = time.monotonic()
    response = call("submit_request", "POST", "/v1/requests", body=TEXT, **kwargs)
    return (
        time.monotonic() - started,
        response.status_code,
        dict(response.headers),
        json_body(response),
    )


def job_names(services: Services, tenant: str) -> list[str]:
    assert isinstance(services.ports.blobs, AzureBlobStore)
    return services.ports.blobs.list_names(services.settings.containers.jobs, f"{tenant}/")


def test_while_the_broker_is_down_intake_answers_503_at_once_and_recovers(
    call: Call, install_services: InstallServices, own_emulator: RestartableEmulator, tenant: str
) -> None:
    services = install_services(
        emulator=own_emulator.emulator, ServiceBusBreaker__openSeconds=str(OPEN_SECONDS)
    )
    assert timed(call)[1] == 202, "the broker takes work before the outage"
    accepted_before = job_names(services, tenant)

    own_emulator.stop()
    first = timed(call)  # one try, refused at once: it opens the breaker
    with ConnectionCounter(own_emulator.emulator.port) as broker_port:
        during = [timed(call, headers={"idempotency-key": f"k{n}"}) for n in range(3)]
    # The open breaker refused them itself: not one connection to the broker was tried,
    # so none paid the SDK's connect retries.
    assert broker_port.connections == 0

    assert first[1] == 503
    # The SDK's connect retries took 11-12 s; one try against a closed port takes well
    # under a second (the bound leaves room for a loaded machine).
    assert first[0] < 5, f"the first refusal took {first[0]:.1f} s"
    for _, status, headers, problem in during:
        assert status == 503, problem
        assert 1 <= int(headers["Retry-After"]) <= OPEN_SECONDS
        assert "nothing was accepted" in str(problem["detail"])
    assert job_names(services, tenant) == accepted_before, "nothing refused left a job"

    own_emulator.start(port=own_emulator.emulator.port)
    back = time.monotonic()
    statuses = []
    while time.monotonic() - back < OPEN_SECONDS + 20:
        # The key of a refused submission is free again: reusing it is a new request.
        _, status, _, problem = timed(call, headers={"idempotency-key": "k0"})
        statuses.append(status)
        if status == 202:
            break
        time.sleep(0.2)
    assert statuses[-1] == 202, statuses
    assert time.monotonic() - back < OPEN_SECONDS + 15
    assert problem.get("replayed") is not True
    assert len(job_names(services, tenant)) == len(accepted_before) + 1


def test_a_broker_that_is_back_takes_work_within_the_window(
    call: Call, install_services: InstallServices, own_emulator: RestartableEmulator, tenant: str
) -> None:
    """With the default window (0.5 s), the first submission after the broker's return
    that comes after the window is the probe, and it is accepted: no longer cool-down."""
    services = install_services(emulator=own_emulator.emulator)
    window = services.settings.servicebus.breaker_open_seconds
    assert window == 0.5
    assert timed(call)[1] == 202
    own_emulator.stop()
    assert timed(call)[1] == 503
    own_emulator.start(port=own_emulator.emulator.port)
    back = time.monotonic()
    statuses = []
    while time.monotonic() - back < 20:
        _, status, _, _ = timed(call)
        statuses.append(status)
        if status == 202:
            break
        time.sleep(0.1)
    took = time.monotonic() - back
    print(f"broker back -> 202 in {took:.2f} s ({len(statuses)} submissions)")
    assert statuses[-1] == 202, statuses
    # Refused only inside the window: a probe after it gets through (generous bound for a
    # loaded machine; the figure is printed above).
    assert took < window + 4, f"took {took:.1f} s: {statuses}"
