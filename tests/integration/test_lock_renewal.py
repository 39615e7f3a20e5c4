"""Long inference keeps its lock: batch mode gets no automatic renewal, so the processor
renews each in-flight message itself. Checked against a queue with a 2-second lock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient

from shared.contracts import JobStatus
from shared.entrypoints.bootstrap import Services
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body
from tests.support.functions import indexed_functions
from tests.support.servicebus import ReceiverMessageActions, connect

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
LOCK_SECONDS = 2
INFERENCE_MS = 4500


@pytest.fixture(scope="module")
def short_lock_emulator(
    tmp_path_factory: pytest.TempPathFactory,
    servicebus_emulator_factory: Callable[[Path | str], ServiceBusEmulator],
) -> ServiceBusEmulator:
    config = json.loads(DEFAULT_CONFIG.read_text())
    for queue in config["UserConfig"]["Namespaces"][0]["Queues"]:
        queue["Properties"]["LockDuration"] = f"PT{LOCK_SECONDS}S"
    path = tmp_path_factory.mktemp("short-lock") / "servicebus-emulator.json"
    path.write_text(json.dumps(config))
    return servicebus_emulator_factory(path)


def slow_services(
    install_services: InstallServices, emulator: ServiceBusEmulator, renewal_seconds: str
) -> Services:
    return install_services(
        emulator=emulator,
        LocalModelLatencyMs=str(INFERENCE_MS),
        LockRenewalSeconds=renewal_seconds,
    )


@pytest.fixture
def bus(short_lock_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    with connect(short_lock_emulator) as client:
        yield client


def process_once(call: Call, bus: ServiceBusClient) -> tuple[str, list[tuple[str, object]]]:
    """Submit one request and run it through the trigger with the installed services."""
    response = call(
        "submit_request",
        "POST",
        "/v1/requests",
        body={"model": "local-analyzer", "input": {"text": "slow"}},
    )
    request_id = str(json_body(response)["id"])
    trigger = indexed_functions()["process_requests"].get_user_function()
    with bus.get_queue_receiver(QUEUE) as receiver:
        messages = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m.message_id) for m in messages] == [request_id]
        actions = ReceiverMessageActions(receiver)
        trigger(messages=messages, message_actions=actions)
    return request_id, actions.calls


def test_renewed_locks_survive_inference_longer_than_the_lock(
    call: Call,
    install_services: InstallServices,
    short_lock_emulator: ServiceBusEmulator,
    bus: ServiceBusClient,
    tenant: str,
) -> None:
    services = slow_services(install_services, short_lock_emulator, renewal_seconds="0.7")
    request_id, calls = process_once(call, bus)

    assert calls.count(("renew", request_id)) >= 3
    assert calls[-1] == ("complete", request_id)
    assert services.jobs.get(tenant, request_id).status is JobStatus.COMPLETED
    # Settled, not merely locked: the broker holds no copy that a lapsing lock could return.
    counts = short_lock_emulator.runtime_properties(QUEUE)
    assert counts["total_message_count"] == 0, "completed once, never redelivered"


def test_without_renewal_the_lock_lapses_and_the_message_comes_back(
    call: Call,
    install_services: InstallServices,
    short_lock_emulator: ServiceBusEmulator,
    bus: ServiceBusClient,
    tenant: str,
) -> None:
    services = slow_services(install_services, short_lock_emulator, renewal_seconds="60")
    request_id, calls = process_once(call, bus)

    assert ("renew", request_id) not in calls
    assert services.jobs.get(tenant, request_id).status is not JobStatus.FAILED
    with bus.get_queue_receiver(QUEUE) as receiver:
        again = receiver.receive_messages(max_wait_time=5)
        assert [str(m.message_id) for m in again] == [request_id]
        assert again[0].delivery_count == 1
        receiver.complete_message(again[0])
