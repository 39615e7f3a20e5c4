"""The Event Grid dead-letter replay CLI against dead-letter blobs in Azurite."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.blob_storage import AzureBlobStore
from shared.entrypoints.bootstrap import Services
from shared.entrypoints.cli.ops import main
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.support.events import blob_created_event
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"


@pytest.fixture
def replay_services(
    services: Services, servicebus_emulator: ServiceBusEmulator
) -> Iterator[tuple[Services, ServiceBusClient]]:
    with connect(servicebus_emulator) as bus:
        yield services, bus


def dead_letter_blob(storage: AzureBlobStore, tenant: str) -> tuple[str, list[str]]:
    """Write a dead-letter blob as Event Grid does: one array per batch."""
    requested = {
        "specversion": "1.0",
        "type": "com.inferbus.InferenceRequested",
        "source": "/apps/crm",
        "id": f"ce-{uuid.uuid4()}",
        "time": "2026-11-29T08:00:00Z",
        "data": {"tenant_id": tenant, "input": {"text": "replay me"}},
    }
    storage.upload("incoming", f"{tenant}/scan.txt", b"a scanned letter", "text/plain", {})
    blob_created = {
        **blob_created_event(storage, "incoming", f"{tenant}/scan.txt"),
        "deadLetterReason": "MaxDeliveryAttemptsExceeded",
        "deliveryAttempts": 30,
        "lastDeliveryOutcome": "Busy",
        "lastHttpStatusCode": 503,
        "publishTime": "2026-11-29T08:00:01.0000000Z",
        "lastDeliveryAttemptTime": "2026-11-30T08:00:01.0000000Z",
    }
    entries = [
        {
            "event": requested,
            "deadLetterReason": "TimeToLiveExceeded",
            "deliveryAttempts": 12,
            "lastDeliveryOutcome": "TimedOut",
            "publishTime": "2026-11-29T08:00:00.0000000Z",
            "lastDeliveryAttemptTime": "2026-11-30T08:00:00.0000000Z",
        },
        blob_created,
    ]
    name = f"APPS-{tenant}/INFERBUS-WEBHOOK/2026/11/30/08/{uuid.uuid4()}.json"
    storage.upload(
        "eventgrid-deadletters", name, json.dumps(entries).encode(), "application/json", {}
    )
    return name.split("/")[0], [requested["id"], blob_created["id"]]


def test_list_then_replay_once(
    replay_services: tuple[Services, ServiceBusClient],
    storage: AzureBlobStore,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services, bus = replay_services
    prefix, event_ids = dead_letter_blob(storage, tenant)

    assert main(["deadletters", "list", "--prefix", prefix]) == 0
    listing = capsys.readouterr().out
    assert "2 dead-lettered events" in listing
    assert "by reason: " in listing
    assert "MaxDeliveryAttemptsExceeded 1" in listing
    assert "TimeToLiveExceeded 1" in listing
    assert all(event_id in listing for event_id in event_ids)
    assert listing.count("[pending]") == 2

    assert main(["deadletters", "replay", "--all", "--yes", "--prefix", prefix]) == 0
    first = capsys.readouterr().out
    assert "[1/2]" in first
    assert "[2/2]" in first
    assert "done: 2 accepted, 0 duplicates" in first
    messages = [str(m.message_id) for m in drain(bus, QUEUE)]
    assert len(messages) == 2
    assert {services.jobs.get(tenant, m).source for m in messages} == {"replay"}

    assert main(["deadletters", "replay", "--all", "--yes", "--prefix", prefix]) == 0
    second = capsys.readouterr().out
    assert "2 events chosen, 2 already replayed" in second
    assert second.count("already replayed, skipped") == 2
    assert drain(bus, QUEUE) == []

    assert main(["deadletters", "list", "--prefix", prefix]) == 0
    assert capsys.readouterr().out.count("[replayed]") == 2


def test_replay_needs_a_choice(
    replay_services: tuple[Services, ServiceBusClient], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deadletters", "replay"]) == 2
    assert "choose what to replay" in capsys.readouterr().err


def test_replay_by_reason_and_dry_run(
    replay_services: tuple[Services, ServiceBusClient],
    storage: AzureBlobStore,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, bus = replay_services
    prefix, _ = dead_letter_blob(storage, tenant)
    assert (
        main(
            [
                "deadletters",
                "replay",
                "--reason",
                "TimeToLiveExceeded",
                "--prefix",
                prefix,
                "--dry-run",
            ]
        )
        == 0
    )
    assert "1 events chosen, 0 already replayed" in capsys.readouterr().out
    assert drain(bus, QUEUE) == []
    assert (
        main(["deadletters", "replay", "--reason", "TimeToLiveExceeded", "--prefix", prefix]) == 0
    )
    assert "done: 1 accepted" in capsys.readouterr().out
    assert len(drain(bus, QUEUE)) == 1


def test_replay_of_more_than_one_event_asks_first_and_yes_skips_the_question(
    replay_services: tuple[Services, ServiceBusClient],
    storage: AzureBlobStore,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, bus = replay_services
    prefix, event_ids = dead_letter_blob(storage, tenant)
    questions: list[str] = []

    def declined(question: str) -> str:
        questions.append(question)
        return "n"

    monkeypatch.setattr("builtins.input", declined)

    chosen = ["--event-id", event_ids[0], "--event-id", event_ids[1], "--prefix", prefix]
    assert main(["eg-deadletters", "replay", *chosen]) == 1
    assert "nothing done (answer y, or pass --yes)" in capsys.readouterr().out
    assert questions == ["Replay 2 events into intake? [y/N] "]
    assert drain(bus, QUEUE) == []

    def never(question: str) -> str:
        raise AssertionError(f"asked {question!r} despite --yes")

    monkeypatch.setattr("builtins.input", never)
    assert main(["eg-deadletters", "replay", "--all", "--yes", "--prefix", prefix]) == 0
    assert "done: 2 accepted" in capsys.readouterr().out
    assert len(drain(bus, QUEUE)) == 2


def test_extend_deadline_gives_the_replayed_request_its_new_deadline(
    replay_services: tuple[Services, ServiceBusClient],
    storage: AzureBlobStore,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services, bus = replay_services
    prefix, _ = dead_letter_blob(storage, tenant)

    argv = ["deadletters", "replay", "--all", "--yes", "--prefix", prefix]
    assert main([*argv, "--extend-deadline", "2h"]) == 0

    out = capsys.readouterr().out
    assert "accepted -> request" in out
    assert "deadline extended from now + 1h0m to now + 2h0m" in out  # DefaultDeadlineSeconds
    assert "deadline not extended: a BlobCreated event's request takes" in out
    deadlines = {}
    for message in drain(bus, QUEUE):
        job = services.jobs.get(tenant, str(message.message_id))
        assert job.deadline is not None
        body = json.loads(b"".join(message.body))
        assert datetime.fromisoformat(body["deadline"]) == job.deadline  # what the processor reads
        kind = "blob" if "blob_name" in job.metadata else "requested"
        deadlines[kind] = (job.deadline - job.created_at).total_seconds()
    assert deadlines == {"requested": 7200, "blob": 3600}


def test_extend_deadline_beyond_max_deadline_seconds_is_capped_and_a_bad_one_exits_2(
    replay_services: tuple[Services, ServiceBusClient],
    storage: AzureBlobStore,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services, bus = replay_services
    prefix, event_ids = dead_letter_blob(storage, tenant)
    argv = ["deadletters", "replay", "--event-id", event_ids[0], "--prefix", prefix]

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--extend-deadline", "tomorrow"])
    assert exit_.value.code == 2
    assert "argument --extend-deadline: not a duration: 'tomorrow'" in capsys.readouterr().err

    assert main([*argv, "--extend-deadline", "3d"]) == 0
    out = capsys.readouterr().out
    assert "--extend-deadline 3d0h is beyond MaxDeadlineSeconds=86400" in out
    assert "(capped by MaxDeadlineSeconds=86400)" in out
    (message,) = drain(bus, QUEUE)
    job = services.jobs.get(tenant, str(message.message_id))
    assert job.deadline is not None
    assert (job.deadline - job.created_at).total_seconds() == 86_400
