"""Long inference keeps its lock: batch mode gets no automatic renewal, so the processor
renews each in-flight message itself. Checked against a queue with a 2-second lock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient

from shared.composition import Services, build_services, use_services
from shared.contracts import JobStatus
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator
from tests.integration.conftest import Call, indexed_functions, json_body, make_settings
from tests.support.servicebus import ReceiverMessageActions

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


def slow_services(azurite: Azurite, emulator: ServiceBusEmulator, renewal_seconds: str) -> Services:
    settings = make_settings(
        azurite,
        ServiceBusConnection=emulator.connection_string,
        LocalModelLatencyMs=str(INFERENCE_MS),
        LockRenewalSeconds=renewal_seconds,
    )
    return build_services(settings, events=None)


@pytest.fixture
def bus(short_lock_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(short_lock_emulator.connection_string) as client:
        yield client


def process_once(
    call: Call, services: Services, bus: ServiceBusClient, tenant: str
) -> tuple[str, list[tuple[str, object]]]:
    use_services(services)
    try:
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
    finally:
        use_services(None)


def test_renewed_locks_survive_inference_longer_than_the_lock(
    call: Call,
    azurite: Azurite,
    storage: object,
    short_lock_emulator: ServiceBusEmulator,
    bus: ServiceBusClient,
    tenant: str,
) -> None:
    services = slow_services(azurite, short_lock_emulator, renewal_seconds="0.7")
    request_id, calls = process_once(call, services, bus, tenant)

    assert calls.count(("renew", request_id)) >= 3
    assert calls[-1] == ("complete", request_id)
    assert services.jobs.get(tenant, request_id).status is JobStatus.COMPLETED
    time.sleep(LOCK_SECONDS + 0.5)
    with bus.get_queue_receiver(QUEUE) as receiver:
        assert receiver.receive_messages(max_wait_time=1) == [], "completed once, never redelivered"


def test_without_renewal_the_lock_lapses_and_the_message_comes_back(
    call: Call,
    azurite: Azurite,
    storage: object,
    short_lock_emulator: ServiceBusEmulator,
    bus: ServiceBusClient,
    tenant: str,
) -> None:
    services = slow_services(azurite, short_lock_emulator, renewal_seconds="60")
    request_id, calls = process_once(call, services, bus, tenant)

    assert ("renew", request_id) not in calls
    assert services.jobs.get(tenant, request_id).status is not JobStatus.FAILED
    with bus.get_queue_receiver(QUEUE) as receiver:
        again = receiver.receive_messages(max_wait_time=5)
        assert [str(m.message_id) for m in again] == [request_id]
        assert again[0].delivery_count == 1
        receiver.complete_message(again[0])
