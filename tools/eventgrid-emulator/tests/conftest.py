"""Fixtures of the conformance suite: the test namespace, SDK clients, dead letters.

Every scenario has a topic of its own in namespace.json, so no test sees another test's
events and none has to drain a subscription first. The emulator runs with the suite's
time scale and writes dead letters to the session's Azurite (the ``azurite`` fixture of
local_processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.core.credentials import AzureKeyCredential
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient

from eg_testing import TIME_SCALE, DeadLetters
from eventgrid_emulator.process import EventGridEmulator
from eventgrid_emulator.pytest_plugin import EventGridEmulatorFactory
from local_processes import Azurite

CONFIG_PATH = Path(__file__).with_name("namespace.json")


@pytest.fixture(scope="session")
def test_emulator(
    eventgrid_emulator_factory: EventGridEmulatorFactory, azurite: Azurite
) -> EventGridEmulator:
    return eventgrid_emulator_factory(
        CONFIG_PATH, storage=azurite.connection_string, time_scale=TIME_SCALE
    )


@pytest.fixture
def publisher(
    test_emulator: EventGridEmulator,
) -> Iterator[Callable[..., EventGridPublisherClient]]:
    """``publisher(topic)``: an EventGridPublisherClient in namespace mode."""
    clients: list[EventGridPublisherClient] = []

    def make(topic: str, key: str | None = None) -> EventGridPublisherClient:
        credential = AzureKeyCredential(key or test_emulator.access_key)
        client = EventGridPublisherClient(test_emulator.endpoint, credential, namespace_topic=topic)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def consumer(
    test_emulator: EventGridEmulator,
) -> Iterator[Callable[..., EventGridConsumerClient]]:
    """``consumer(topic, subscription)``: an EventGridConsumerClient."""
    clients: list[EventGridConsumerClient] = []

    def make(
        topic: str, subscription: str = "q", key: str | None = None
    ) -> EventGridConsumerClient:
        client = EventGridConsumerClient(
            test_emulator.endpoint,
            AzureKeyCredential(key or test_emulator.access_key),
            namespace_topic=topic,
            subscription=subscription,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def dead_letters(azurite: Azurite) -> DeadLetters:
    return DeadLetters(azurite.connection_string)
