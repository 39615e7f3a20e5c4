"""The v1 API with Microsoft Entra ID, as the app reaches Azure OpenAI in Azure: the plain
``OpenAI`` client on ``<endpoint>/openai/v1/`` whose key is a token provider, asked for a
fresh token on every call, for chat completions and for the Global Batch files and
batches APIs (against the local OpenAI emulator, which takes any bearer token)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from openai import AzureOpenAI, OpenAI

from openai_emulator.process import OpenAIEmulator
from shared.adapters.models import azure_openai
from shared.adapters.models.azure_openai import azure_openai_client
from shared.adapters.openai_batch import openai_batch_service
from shared.settings import Settings
from tests.support.http_recorder import Recorder, Reply, recording_server

pytestmark = pytest.mark.integration


@pytest.fixture
def service() -> Iterator[Recorder]:
    with recording_server() as recorder:
        yield recorder


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Entra tokens from a stand-in for the managed identity: ``token-1``, ``token-2``...;
    records the client id each provider was made for."""
    made_for: list[str | None] = []
    counter = itertools.count(1)

    def provider(client_id: str | None) -> Callable[[], str]:
        made_for.append(client_id)
        return lambda: f"token-{next(counter)}"

    monkeypatch.setattr(azure_openai, "_token_provider", provider)
    return made_for


def test_the_v1_api_is_the_plain_openai_client_on_openai_v1(tokens: list[str | None]) -> None:
    client = azure_openai_client("https://r.openai.azure.com/", "v1", 5, None, "cid")
    assert type(client) is OpenAI, "not AzureOpenAI: the v1 API takes no api-version"
    assert str(client.base_url) == "https://r.openai.azure.com/openai/v1/"
    assert tokens == ["cid"], "the user-assigned identity's token provider"

    dated = azure_openai_client("https://r.openai.azure.com", "2025-04-01-preview", 5, None, "c")
    assert isinstance(dated, AzureOpenAI)


def test_every_chat_call_on_v1_carries_a_fresh_entra_token(
    service: Recorder, tokens: list[str | None]
) -> None:
    answer = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "d",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{}"}}
        ],
    }
    service.reply(Reply(200, answer))
    service.reply(Reply(200, answer))
    client = azure_openai_client(service.base_url, "v1", 5, None, "cid")
    for _ in range(2):
        client.chat.completions.create(model="d", messages=[{"role": "user", "content": "x"}])

    assert [r.path for r in service.requests] == ["/openai/v1/chat/completions"] * 2
    assert [r.headers["authorization"] for r in service.requests] == [
        "Bearer token-1",
        "Bearer token-2",
    ]
    assert all("api-key" not in r.headers for r in service.requests)


def test_the_global_batch_service_works_on_v1_with_entra(
    openai_emulator: OpenAIEmulator, tokens: list[str | None]
) -> None:
    settings = Settings.model_validate(
        {
            "GlobalBatch__deployments": "local-analyzer=batch-d",
            "GlobalBatch__endpoint": openai_emulator.endpoint,
            "GlobalBatch__clientId": "batch-identity",
        }
    )
    assert settings.global_batch.api_version == "v1", "the default"
    batches = openai_batch_service(settings)
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/chat/completions",
        "body": {"model": "batch-d", "messages": [{"role": "user", "content": "x"}]},
    }
    since = datetime.now(UTC) - timedelta(minutes=1)

    file_id = batches.upload("v1.jsonl", json.dumps(line).encode() + b"\n", 1_209_600)
    assert batches.find_file("v1.jsonl", since) == file_id
    created = batches.create_batch(file_id, 1_209_600, {"tenant": "t"})
    assert batches.get_batch(created.id).input_file_id == file_id
    assert batches.find_batch(file_id, frozenset(), since) == batches.get_batch(created.id)
    assert batches.cancel_batch(created.id).status in {"cancelling", "cancelled"}
    assert tokens == ["batch-identity"]
