"""The app's emulator entities (infra/local/servicebus-emulator.json) route as documented.

The entity file is the app's (the same entities and filters as the Bicep); the emulator
that serves it is the tool's. It gets an emulator of its own: the session's
``servicebus_emulator`` is shared with the integration tests, whose messages would be
counted here.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient

from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator

pytestmark = pytest.mark.emulator
RESULTS = "inference-results"


@pytest.fixture(scope="module")
def fresh_emulator(
    servicebus_emulator_factory: Callable[[Path], ServiceBusEmulator],
    tmp_path_factory: pytest.TempPathFactory,
) -> ServiceBusEmulator:
    """An emulator with the app's entity file and no other test's messages."""
    config = tmp_path_factory.mktemp("app-entities") / DEFAULT_CONFIG.name
    shutil.copyfile(DEFAULT_CONFIG, config)
    return servicebus_emulator_factory(config)


async def test_infra_config_entities_route_as_documented(
    fresh_emulator: ServiceBusEmulator,
) -> None:
    servicebus_emulator = fresh_emulator
    client = ServiceBusClient.from_connection_string(servicebus_emulator.connection_string)
    async with client:
        async with client.get_queue_sender("inference-requests") as sender:
            await sender.send_messages(ServiceBusMessage("{}", message_id=str(uuid.uuid4())))
        async with client.get_queue_sender("inference-ordered") as sender:
            await sender.send_messages(ServiceBusMessage("{}", session_id="doc-1"))
        async with client.get_topic_sender(RESULTS) as sender:
            await sender.send_messages(
                [
                    ServiceBusMessage(
                        "r1", application_properties={"priority": "high", "model_name": "x"}
                    ),
                    ServiceBusMessage("r2", application_properties={"review_required": True}),
                    ServiceBusMessage(
                        "r3", application_properties={"model_name": "local-analyzer"}
                    ),
                ]
            )
        counts = {
            name: servicebus_emulator.runtime_properties(f"{RESULTS}/Subscriptions/{name}")[
                "active_message_count"
            ]
            for name in ("high-priority", "human-review", "audit", "model-local-analyzer")
        }
        assert counts == {
            "high-priority": 1,
            "human-review": 1,
            "audit": 3,
            "model-local-analyzer": 1,
        }
        assert (
            servicebus_emulator.runtime_properties("inference-requests")["active_message_count"]
            == 1
        )
        assert (
            servicebus_emulator.runtime_properties("inference-ordered")["active_message_count"] == 1
        )
        delete = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        async with client.get_queue_receiver("inference-requests", receive_mode=delete) as receiver:
            assert len(await receiver.receive_messages(max_wait_time=5)) == 1
        async with client.get_queue_receiver(
            "inference-ordered", session_id="doc-1", receive_mode=delete
        ) as r:
            assert len(await r.receive_messages(max_wait_time=5)) == 1
        for name, count in counts.items():
            async with client.get_subscription_receiver(
                RESULTS, name, receive_mode=delete
            ) as receiver:
                got = await receiver.receive_messages(max_message_count=count, max_wait_time=5)
                while len(got) < count:
                    more = await receiver.receive_messages(
                        max_message_count=count - len(got), max_wait_time=5
                    )
                    assert more, f"{name} received {len(got)} of {count} copies"
                    got += more
                assert len(got) == count
