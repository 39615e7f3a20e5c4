"""Backpressure from the real queue depth, read from the emulator's runtime counts."""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusMessage

from shared.adapters.queue_counts import (
    EmulatorBacklogProbe,
    EmulatorQueueObserver,
    backlog_probe_for,
)
from shared.errors import ConfigurationError
from shared.ops.backlog_report import report_backlog
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body, make_settings
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
TEXT = {"model": "local-analyzer", "input": {"text": "one more"}}


def test_intake_answers_503_once_the_queue_holds_the_limit(
    call: Call, install_services: InstallServices, servicebus_emulator: ServiceBusEmulator
) -> None:
    install_services(
        ServiceBusRuntimeCountsUrl=f"{servicebus_emulator.admin_url}/runtime",
        MaxQueueBacklog="3",
        BacklogCacheSeconds="0",
    )
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        statuses = [
            call("submit_request", "POST", "/v1/requests", body=TEXT).status_code for _ in range(5)
        ]
        problem = json_body(call("submit_request", "POST", "/v1/requests", body=TEXT))
        assert len(drain(bus, QUEUE)) == 3
    assert statuses == [202, 202, 202, 503, 503]
    assert "backlog is 3 messages (limit 3)" in problem["detail"]


def test_the_probe_reads_the_emulator_and_refuses_non_loopback_urls(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        with bus.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(b"x", message_id=f"m{n}") for n in range(2)])
        probe = EmulatorBacklogProbe(f"{servicebus_emulator.admin_url}/runtime", QUEUE)
        assert probe.active_messages() == 2
        drain(bus, QUEUE)
    with pytest.raises(ConfigurationError):
        EmulatorBacklogProbe("http://10.0.0.5:5300/runtime", QUEUE)


def test_without_a_counts_url_azure_uses_the_management_api(azurite: Azurite) -> None:
    settings = make_settings(
        azurite,
        ServiceBusConnection="",
        **{"ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net"},
        MaxQueueBacklog="100",
    )
    probe = backlog_probe_for(settings)
    assert type(probe).__name__ == "QueueBacklogProbe"


def test_the_minute_report_reads_the_queue_on_the_emulator(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        with bus.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(b"x", message_id=f"r{n}") for n in range(3)])
        observer = EmulatorQueueObserver(f"{servicebus_emulator.admin_url}/runtime", QUEUE)
        deadline = time.monotonic() + 10
        while True:  # until the oldest message has aged a second (no fixed sleep)
            line = report_backlog(QUEUE, observer)
            age = float(line.rsplit("oldest_age_seconds=", 1)[1])
            if age >= 1.0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        drain(bus, QUEUE)
    assert f"queue={QUEUE} active=3 " in line
    assert 1.0 <= age < 30
