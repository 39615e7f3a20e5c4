"""Root fixtures: the local stack (Azurite, the Service Bus emulator) as pytest plugins, and
the app over in-memory ports for unit tests."""

import pytest

from tests.support.wiring import Wired, wire

pytest_plugins = ["tests.fixtures.azurite", "tests.fixtures.servicebus_emulator"]


@pytest.fixture
def wired() -> Wired:
    """The app's use cases over the in-memory ports (see tests/support/wiring.py)."""
    return wire()
