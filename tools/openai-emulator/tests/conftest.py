"""Fixtures of the emulator's suite: a session emulator and the real ``AzureOpenAI`` client.

Every test uploads its own files and creates its own batches, so tests share the
emulator without seeing one another's work; the quota tests run an emulator of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import AzureOpenAI

from oai_testing import azure_client
from openai_emulator.process import OpenAIEmulator
from openai_emulator.pytest_plugin import OpenAIEmulatorFactory


@pytest.fixture(scope="session")
def emulator(openai_emulator_factory: OpenAIEmulatorFactory) -> OpenAIEmulator:
    return openai_emulator_factory()


@pytest.fixture
def client(emulator: OpenAIEmulator) -> Iterator[AzureOpenAI]:
    with azure_client(emulator) as made:
        yield made
