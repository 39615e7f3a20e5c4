"""Failure modes: the answer markers, invalid input files, file limits, the token quota."""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import AzureOpenAI

from oai_testing import MODEL, azure_client, request_line, results, submit
from openai_emulator.process import OpenAIEmulator, OpenAIEmulatorProcess
from openai_emulator.pytest_plugin import OpenAIEmulatorFactory

QUOTA_MESSAGE = (
    "The number of enqueued tokens has surpassed the configured limit of {limit} for the "
    "deployment '{model}'. Please either increase the limit or try again once the current "
    "jobs have finished."
)


def errors_of(batch: dict[str, object]) -> list[dict[str, object]]:
    errors = batch["errors"]
    assert isinstance(errors, dict)
    assert errors["object"] == "list"
    data: list[dict[str, object]] = errors["data"]
    return data


def test_markers_choose_the_failure(client: AzureOpenAI, emulator: OpenAIEmulator) -> None:
    batch = submit(
        client,
        [
            request_line("fine", "A plain letter."),
            request_line("prompt", "Bad words [[refuse-prompt]] here."),
            request_line("answer", "Please [[refuse-answer]] this."),
            request_line("broken", "Crash [[fail-line]] now."),
        ],
    )
    done = client.batches.retrieve(emulator.advance(batch.id, to="completed")["id"])
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 2)
    output = {line["custom_id"]: line for line in results(client, done.output_file_id)}
    errors = {line["custom_id"]: line for line in results(client, done.error_file_id)}
    assert set(output) == {"fine", "answer"}
    assert set(errors) == {"prompt", "broken"}
    refused = output["answer"]["response"]["body"]["choices"][0]
    assert refused["finish_reason"] == "content_filter"
    assert refused["message"]["content"] is None
    filtered = errors["prompt"]["response"]
    assert filtered["status_code"] == 400
    assert filtered["body"]["error"]["code"] == "content_filter"
    assert filtered["body"]["error"]["innererror"] == {
        "code": "ResponsibleAIPolicyViolation",
        "content_filter_result": {"hate": {"filtered": True, "severity": "high"}},
    }
    assert errors["broken"]["response"]["status_code"] == 500
    assert errors["broken"]["response"]["body"]["error"]["code"] == "server_error"


def test_invalid_file_fails_validation_with_line_errors(
    client: AzureOpenAI, emulator: OpenAIEmulator
) -> None:
    batch = submit(
        client,
        [
            request_line("a", "One."),
            request_line("a", "Same id."),
            request_line("b", "Other model.", model="gpt-4.1-batch"),
            "{not json",
            {**request_line("c", "Wrong url."), "url": "/embeddings"},
        ],
    )
    failed = emulator.advance(batch.id)
    assert failed["status"] == "failed"
    assert failed["failed_at"] is not None
    found = {(e["code"], e["line"]) for e in errors_of(failed)}
    assert found == {
        ("duplicate_custom_id", 2),
        ("model_mismatch", 3),
        ("invalid_json_line", 4),
        ("url_mismatch", 5),
    }
    sdk_view = client.batches.retrieve(batch.id)
    assert sdk_view.errors is not None
    assert sdk_view.errors.data is not None
    assert {e.param for e in sdk_view.errors.data} >= {"custom_id", "body.model", "url"}


def test_line_and_size_limits(openai_emulator_factory: OpenAIEmulatorFactory) -> None:
    small = openai_emulator_factory(max_lines=2, max_bytes=1000)
    with azure_client(small) as client:
        many = submit(client, [request_line(str(n), "Short.") for n in range(3)])
        assert errors_of(small.advance(many.id))[0]["code"] == "too_many_tasks"
        big = submit(client, [request_line("big", "x" * 1200)])
        assert errors_of(small.advance(big.id))[0]["code"] == "file_too_large"
        fits = submit(client, [request_line(str(n), "Short.") for n in range(2)])
        assert small.advance(fits.id)["status"] == "in_progress"


@pytest.fixture
def quota_emulator(tmp_path: Path) -> Iterator[OpenAIEmulator]:
    """An emulator of its own: the quota counts every batch of the resource."""
    process = OpenAIEmulatorProcess(tmp_path / "emulator.log", enqueued_token_limit=100)
    try:
        yield process.wait_ready()
    finally:
        assert process.stop() == 0


def test_enqueued_token_quota(quota_emulator: OpenAIEmulator) -> None:
    text = "x" * 138  # with the system message: 160 characters, 40 tokens
    with azure_client(quota_emulator) as client:
        first = submit(client, [request_line("1", text)])
        assert quota_emulator.stats()["batches"][first.id]["tokens"] == 40
        assert quota_emulator.advance(first.id)["status"] == "in_progress"
        second = submit(client, [request_line("2", text, max_tokens=30)])  # 70 tokens
        refused = quota_emulator.advance(second.id)
        assert refused["status"] == "failed"
        assert errors_of(refused) == [
            {
                "code": "token_limit_exceeded",
                "message": QUOTA_MESSAGE.format(limit="0.1K", model=MODEL),
                "line": None,
                "param": None,
            }
        ]
        quota_emulator.advance(first.id, to="completed")  # its tokens leave the queue
        third = submit(client, [request_line("3", text, max_tokens=30)])
        assert quota_emulator.advance(third.id)["status"] == "in_progress"
        quota_emulator.set_quota(50)
        fourth = submit(client, [request_line("4", "Short.")])
        assert quota_emulator.advance(fourth.id)["status"] == "failed"
        quota_emulator.set_quota(None)
        fifth = submit(client, [request_line("5", text, max_tokens=10_000)])
        assert quota_emulator.advance(fifth.id)["status"] == "in_progress"
        quota_emulator.reset()
        assert quota_emulator.stats() == {
            "files_uploaded": 0,
            "batches_created": 0,
            "enqueued_token_limit": 100,
            "enqueued_token_limits": {},
            "batches": {},
            "deployments": {},
        }
        assert client.files.list().data == []


# --- the quota per deployment, as Azure's is ------------------------------------------------

OTHER = "gpt-4o-batch"


@pytest.fixture
def deployment_quota_emulator(tmp_path: Path) -> Iterator[OpenAIEmulator]:
    """One deployment limited to 30,000 enqueued tokens, the others unlimited."""
    process = OpenAIEmulatorProcess(
        tmp_path / "emulator.log", deployment_token_limits={MODEL: 30_000}
    )
    try:
        yield process.wait_ready()
    finally:
        assert process.stop() == 0
    assert f"enqueued-token-limit=unlimited,{MODEL}=30000" in process.child.output()


def test_each_deployment_has_its_own_enqueued_token_quota(
    deployment_quota_emulator: OpenAIEmulator,
) -> None:
    emulator = deployment_quota_emulator
    with azure_client(emulator) as client:
        half = [request_line("1", "Short.", max_tokens=20_000)]
        first = submit(client, half)
        assert emulator.advance(first.id)["status"] == "in_progress"
        other = submit(client, [request_line("o", "Short.", model=OTHER, max_tokens=90_000)])
        assert emulator.advance(other.id)["status"] == "in_progress", "another deployment's"
        second = submit(client, [request_line("2", "Short.", max_tokens=20_000)])
        refused = emulator.advance(second.id)
        assert refused["status"] == "failed"
        assert errors_of(refused) == [
            {
                "code": "token_limit_exceeded",
                "message": QUOTA_MESSAGE.format(limit="30K", model=MODEL),
                "line": None,
                "param": None,
            }
        ]
        emulator.set_quota(10_000, deployment=OTHER)
        too_big = submit(client, [request_line("b", "Short.", model=OTHER, max_tokens=10_001)])
        alone = emulator.advance(too_big.id)
        assert alone["status"] == "failed", "a file larger than the limit never passes"
        assert errors_of(alone)[0]["message"] == QUOTA_MESSAGE.format(limit="10K", model=OTHER)
        assert emulator.stats()["enqueued_token_limits"] == {MODEL: 30_000, OTHER: 10_000}
        emulator.reset()
        assert emulator.stats()["enqueued_token_limits"] == {MODEL: 30_000}


def test_a_bad_quota_is_a_clear_400(client: AzureOpenAI, emulator: OpenAIEmulator) -> None:
    for body, reason in (
        ({"enqueued_token_limit": -1}, "non-negative integer"),
        ({"enqueued_token_limit": 5, "deployment": ""}, "deployment name"),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            emulator._call("PUT", "/_emulator/quota", body)
        assert refused.value.code == 400
        assert reason in refused.value.read().decode()
