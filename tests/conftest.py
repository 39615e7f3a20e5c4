"""Root fixtures: the local stack (Azurite, the Service Bus emulator) as pytest plugins."""

pytest_plugins = ["tests.fixtures.azurite", "tests.fixtures.servicebus_emulator"]
