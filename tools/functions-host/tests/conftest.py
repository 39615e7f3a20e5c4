"""Fixtures: the sample app on the local host, against Azurite and a test emulator; and
the emulator the listener tests (test_*_listener.py) connect their listeners to."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostproc import SampleHost
from listener_testing import CONNECTION, Senders
from local_processes import Azurite
from servicebus_emulator.process import ServiceBusEmulator

EMULATOR_CONFIG = Path(__file__).with_name("servicebus-emulator.json")
LISTENER_EMULATOR_CONFIG = Path(__file__).with_name("listener-emulator.json")


@pytest.fixture(scope="session")
def host_emulator(
    servicebus_emulator_factory: Callable[[Path], ServiceBusEmulator],
) -> ServiceBusEmulator:
    """An emulator with the sample app's entities (short locks, few deliveries)."""
    return servicebus_emulator_factory(EMULATOR_CONFIG)


@pytest.fixture(scope="session")
def listener_emulator(
    servicebus_emulator_factory: Callable[[Path], ServiceBusEmulator],
) -> ServiceBusEmulator:
    """An emulator with a queue per listener test (listener-emulator.json)."""
    return servicebus_emulator_factory(LISTENER_EMULATOR_CONFIG)


@pytest.fixture
def connected(
    listener_emulator: ServiceBusEmulator, monkeypatch: pytest.MonkeyPatch
) -> ServiceBusEmulator:
    """The listener emulator, with the listener tests' connection setting pointing at it."""
    monkeypatch.setenv(CONNECTION, listener_emulator.connection_string)
    return listener_emulator


@pytest.fixture(scope="module")
def senders(listener_emulator: ServiceBusEmulator) -> Iterator[Senders]:
    opened = Senders(listener_emulator.connection_string)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def host_values_factory(
    azurite: Azurite, host_emulator: ServiceBusEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., dict[str, str]]:
    def values(**overrides: str) -> dict[str, str]:
        record = tmp_path_factory.mktemp("records") / "record.jsonl"
        result = {
            "FUNCTIONS_WORKER_RUNTIME": "python",
            "AzureWebJobsStorage": azurite.connection_string,
            "Storage": azurite.connection_string,
            "ServiceBusConnection": host_emulator.connection_string,
            "WatchedContainer": f"watched-{uuid.uuid4().hex[:8]}",
            "BatchQueue": "host-batch",
            "EventsTopic": "host-events",
            "EventsSubscription": "all",
            "SessionQueue": "host-sessions",
            "TickSchedule": "0 0 0 1 1 *",  # the singleton test makes it every second
            "SAMPLE_RECORD_FILE": str(record),
        }
        result.update(overrides)
        return result

    return values


@pytest.fixture(scope="session")
def sample_host(
    host_values_factory: Callable[..., dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SampleHost]:
    """The sample app on one host for the whole session (tests use distinct data)."""
    host = SampleHost(tmp_path_factory.mktemp("host"), host_values_factory())
    yield host
    host.stop()


@pytest.fixture
def function_key(sample_host: SampleHost) -> str:
    return str(sample_host.keys["functionKeys"]["default"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """When a test using the shared host fails, show the end of the host's log with it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    host = getattr(item, "funcargs", {}).get("sample_host")
    if report.when == "call" and report.failed and isinstance(host, SampleHost):
        tail = "\n".join(host.log().splitlines()[-80:])
        report.sections.append(("host log (last 80 lines)", tail))
