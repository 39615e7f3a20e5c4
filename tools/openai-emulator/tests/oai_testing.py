"""Helpers of the emulator's suite: request lines, JSONL, submitting a batch, waiting."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from openai import AzureOpenAI
from openai.types import Batch

from openai_emulator.process import API_VERSION, OpenAIEmulator

MODEL = "gpt-4o-mini-batch"


def azure_client(emulator: OpenAIEmulator, api_key: str | None = None) -> AzureOpenAI:
    """The client the app uses: Azure endpoint, key, api-version, no retries."""
    return AzureOpenAI(
        azure_endpoint=emulator.endpoint,
        api_key=api_key or emulator.api_key,
        api_version=API_VERSION,
        max_retries=0,
    )


def request_line(custom_id: str, text: str, model: str = MODEL, **body: Any) -> dict[str, Any]:
    """One input line: a chat completion with a system and a user message."""
    messages = [
        {"role": "system", "content": "Classify the document."},
        {"role": "user", "content": text},
    ]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/chat/completions",
        "body": {"model": model, "messages": messages, **body},
    }


def to_jsonl(lines: Iterable[dict[str, Any] | str]) -> bytes:
    return b"".join(
        (line if isinstance(line, str) else json.dumps(line)).encode() + b"\n" for line in lines
    )


def read_jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def upload(client: AzureOpenAI, lines: Iterable[dict[str, Any] | str]) -> str:
    return client.files.create(file=("requests.jsonl", to_jsonl(lines)), purpose="batch").id


def submit(client: AzureOpenAI, lines: Iterable[dict[str, Any] | str], **extra: Any) -> Batch:
    """Upload ``lines`` and create a 24 h chat-completions batch of them."""
    return client.batches.create(
        input_file_id=upload(client, lines),
        endpoint="/chat/completions",  # type: ignore[arg-type]  # Azure's form of the route
        completion_window="24h",
        **extra,
    )


def results(client: AzureOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    """The lines of an output or error file (none when the batch did not write it)."""
    return [] if file_id is None else read_jsonl(client.files.content(file_id).content)


def wait_until(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    """The first truthy value of ``condition()``; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)
