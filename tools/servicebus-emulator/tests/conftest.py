"""Fixtures of the conformance suite: a test emulator with short locks and TTLs.

config.json holds every test entity twice, ``<name>-sync`` and ``<name>-async``, and
most scenarios have entities of their own, so no test sees another test's messages and
none has to drain a queue first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from emulator_sdk import Sdk, make_client
from servicebus_emulator.process import ServiceBusEmulator

CONFIG_PATH = Path(__file__).with_name("config.json")
MODES = ("sync", "async")


@pytest.fixture(scope="session")
def test_emulator(
    servicebus_emulator_factory: Callable[[Path], ServiceBusEmulator],
) -> ServiceBusEmulator:
    return servicebus_emulator_factory(CONFIG_PATH)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def client(test_emulator: ServiceBusEmulator, mode: str) -> AsyncIterator[Sdk]:
    sdk = make_client(mode, test_emulator.connection_string)
    async with sdk:
        yield sdk


@pytest.fixture
def entity(mode: str) -> Callable[[str], str]:
    """The per-mode name of a test entity."""
    return lambda name: f"{name}-{mode}"
