"""Batches through the real SDK: create, retrieve, list, the status progression, results."""

from __future__ import annotations

import json
import urllib.error

import openai
import pytest
from openai import AzureOpenAI

from oai_testing import MODEL, azure_client, request_line, results, submit, upload, wait_until
from openai_emulator.process import OpenAIEmulator
from openai_emulator.pytest_plugin import OpenAIEmulatorFactory

TEXTS = {
    f"doc-{n}": f"Letter number {n} about the lease. It has a second sentence." for n in range(8)
}


def lines() -> list[dict[str, object]]:
    return [request_line(custom_id, text) for custom_id, text in TEXTS.items()]


def test_create_answers_every_field_of_the_sdk_batch(client: AzureOpenAI) -> None:
    batch = submit(
        client,
        lines(),
        metadata={"tenant": "t-1"},
        extra_body={"output_expires_after": {"seconds": 1_209_600, "anchor": "created_at"}},
    )
    assert batch.id.startswith("batch_")
    assert (batch.object, batch.status, batch.endpoint) == (
        "batch",
        "validating",
        "/chat/completions",
    )
    assert (batch.completion_window, batch.metadata) == ("24h", {"tenant": "t-1"})
    assert batch.expires_at == batch.created_at + 24 * 3600
    assert batch.output_file_id is None
    assert batch.error_file_id is None
    assert batch.errors is None
    assert batch.in_progress_at is None
    assert batch.completed_at is None
    assert batch.request_counts is not None
    assert batch.request_counts.total == 0
    assert client.batches.retrieve(batch.id) == batch


def test_list_pages_newest_first(client: AzureOpenAI) -> None:
    created = [submit(client, lines()).id for _ in range(3)]
    listed = [b.id for b in client.batches.list(limit=1)]  # follows every page
    assert listed[:3] == created[::-1]
    page = client.batches.list(limit=2)
    assert page.has_more is True
    assert len(page.data) == 2


def test_progression_driven_by_advance_and_results_joined_by_custom_id(
    client: AzureOpenAI, emulator: OpenAIEmulator
) -> None:
    batch = submit(
        client,
        lines(),
        extra_body={"output_expires_after": {"seconds": 1_209_600, "anchor": "created_at"}},
    )
    assert emulator.advance(batch.id)["status"] == "in_progress"
    running = client.batches.retrieve(batch.id)
    assert running.in_progress_at is not None
    assert running.request_counts is not None
    assert running.request_counts.total == len(TEXTS)
    assert emulator.advance(batch.id)["status"] == "finalizing"
    assert emulator.advance(batch.id)["status"] == "completed"
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed"
    assert done.completed_at is not None
    assert done.finalizing_at is not None
    assert done.model == MODEL
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (len(TEXTS), 0)
    assert done.error_file_id is None
    assert done.output_file_id is not None
    output = client.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output"
    assert output.expires_at == output.created_at + 1_209_600
    answered = results(client, done.output_file_id)
    assert [line["custom_id"] for line in answered] != list(TEXTS)  # not the input order
    by_id = {line["custom_id"]: line for line in answered}
    assert set(by_id) == set(TEXTS)
    for custom_id, line in by_id.items():
        assert line["id"].startswith("batch_req_")
        assert line["error"] is None
        assert line["response"]["status_code"] == 200
        body = line["response"]["body"]
        assert (body["object"], body["model"]) == ("chat.completion", MODEL)
        choice = body["choices"][0]
        assert (choice["index"], choice["finish_reason"]) == (0, "stop")
        assert choice["message"]["role"] == "assistant"
        content = json.loads(choice["message"]["content"])
        assert content["summary"] == TEXTS[custom_id].split(" It has")[0]
        assert content["document_type"] == "other"
        assert content["confidence"] == 0.5
        usage = body["usage"]
        prompt = len("Classify the document.") + len(TEXTS[custom_id])
        assert usage["prompt_tokens"] == -(-prompt // 4)
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    client.files.delete(done.output_file_id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(done.output_file_id)
    stats = emulator.stats()
    assert stats["batches"][batch.id] == {
        "status": "completed",
        "input_file_id": batch.input_file_id,
        "lines": len(TEXTS),
        "tokens": stats["batches"][batch.id]["tokens"],
        "deployment": MODEL,
    }


def test_advance_to_completed_runs_every_step_and_stats_count(
    client: AzureOpenAI, emulator: OpenAIEmulator
) -> None:
    before = emulator.stats()
    batch = submit(client, lines())
    done = emulator.advance(batch.id, to="completed")
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 8, "completed": 8, "failed": 0}
    after = emulator.stats()
    assert after["files_uploaded"] == before["files_uploaded"] + 1
    assert after["batches_created"] == before["batches_created"] + 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        emulator.advance(batch.id)
    assert refused.value.code == 409


def test_cancel_before_and_during_processing(client: AzureOpenAI, emulator: OpenAIEmulator) -> None:
    waiting = submit(client, lines())
    cancelling = client.batches.cancel(waiting.id)
    assert cancelling.status == "cancelling"
    assert cancelling.cancelling_at is not None
    assert emulator.advance(waiting.id)["status"] == "cancelled"
    running = submit(client, lines())
    emulator.advance(running.id, to="in_progress")
    assert client.batches.cancel(running.id).status == "cancelling"
    assert client.batches.cancel(running.id).status == "cancelling"  # again: unchanged
    cancelled = client.batches.retrieve(emulator.advance(running.id)["id"])
    assert cancelled.status == "cancelled"
    assert cancelled.cancelled_at is not None
    assert cancelled.output_file_id is None
    assert cancelled.error_file_id is None
    assert cancelled.request_counts is not None
    assert (cancelled.request_counts.total, cancelled.request_counts.completed) == (8, 0)
    completed_id = submit_completed(client, emulator)
    with pytest.raises(openai.ConflictError, match="status 'completed'"):
        client.batches.cancel(completed_id)


def submit_completed(client: AzureOpenAI, emulator: OpenAIEmulator) -> str:
    batch = submit(client, lines()[:1])
    emulator.advance(batch.id, to="completed")
    return batch.id


def test_expire_keeps_the_first_lines(client: AzureOpenAI, emulator: OpenAIEmulator) -> None:
    batch = submit(client, lines())
    emulator.advance(batch.id, to="in_progress")
    expired = client.batches.retrieve(emulator.expire(batch.id, 3)["id"])
    assert expired.status == "expired"
    assert expired.expired_at is not None
    assert expired.request_counts is not None
    counts = expired.request_counts
    assert (counts.total, counts.completed, counts.failed) == (8, 3, 0)
    answered = {line["custom_id"] for line in results(client, expired.output_file_id)}
    assert answered == set(list(TEXTS)[:3])
    not_run = results(client, expired.error_file_id)
    assert {line["custom_id"] for line in not_run} == set(list(TEXTS)[3:])
    assert {line["error"]["code"] for line in not_run} == {"batch_expired"}
    assert all(line["response"] is None for line in not_run)


def test_bad_create_arguments_are_400_and_unknown_ids_404(client: AzureOpenAI) -> None:
    file_id = upload(client, lines())
    other = client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune").id
    good = {"input_file_id": file_id, "endpoint": "/chat/completions", "completion_window": "24h"}
    for change, word in (
        ({"completion_window": "48h"}, "completion_window"),
        ({"endpoint": "/embeddings"}, "endpoint"),
        ({"input_file_id": "file-missing"}, "does not exist"),
        ({"input_file_id": other}, "purpose"),
        ({"metadata": {"k": 1}}, "metadata"),
    ):
        with pytest.raises(openai.BadRequestError, match=word):
            client.batches.create(**{**good, **change})  # type: ignore[arg-type]
    for seconds in (3600, 2_592_001):
        with pytest.raises(openai.BadRequestError, match="seconds"):
            client.batches.create(
                **good,  # type: ignore[arg-type]
                extra_body={"output_expires_after": {"seconds": seconds, "anchor": "created_at"}},
            )
    for call in (client.batches.retrieve, client.batches.cancel):
        with pytest.raises(openai.NotFoundError):
            call("batch_unknown")


def test_auto_advance_reaches_completed(openai_emulator_factory: OpenAIEmulatorFactory) -> None:
    emulator = openai_emulator_factory(auto_advance=0.1)
    with azure_client(emulator) as client:
        batch = submit(client, lines())
        seen = set()

        def completed() -> bool:
            status = client.batches.retrieve(batch.id).status
            seen.add(status)
            return status == "completed"

        wait_until(completed, timeout=10)
        assert seen <= {"validating", "in_progress", "finalizing", "completed"}
        assert len(results(client, client.batches.retrieve(batch.id).output_file_id)) == 8
