"""``deadletters replay`` (Event Grid) over in-memory ports: the confirmation it asks
before replaying ``--all`` or more than one event (``--yes`` skips it), and
``--extend-deadline DURATION``, whose new deadline the replayed request gets through
intake (capped by MaxDeadlineSeconds, never shorter than its own, none for a batch
request that names none)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.contracts import Job, RequestMessage
from shared.entrypoints.cli.ops import main
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TENANT = "acme"
BATCH_SETTINGS = {
    "GlobalBatch__deployments": "local-analyzer=local-analyzer-batch",
    "GlobalBatch__endpoint": "http://127.0.0.1:9",
}


def requested(**data: Any) -> dict[str, Any]:
    """A dead-lettered ``InferenceRequested`` CloudEvent with ``data`` beside its input."""
    event = {
        "specversion": "1.0",
        "type": "com.inferbus.InferenceRequested",
        "source": "/apps/crm",
        "id": f"ce-{uuid.uuid4()}",
        "data": {"tenant_id": TENANT, "input": {"text": "replay me"}, **data},
    }
    return {"event": event, "deadLetterReason": "TimeToLiveExceeded", "deliveryAttempts": 3}


def dead_lettered(wired: Wired, *entries: dict[str, Any]) -> str:
    """One dead-letter blob holding ``entries``, as Event Grid writes it; its prefix."""
    prefix = f"TOPIC-{uuid.uuid4().hex[:8]}"
    body = json.dumps(list(entries)).encode()
    container = wired.settings.containers.eventgrid_dead_letters
    wired.blobs.upload(
        container, f"{prefix}/SUB/2026/11/30/08/b.json", body, "application/json", {}
    )
    return prefix


def run(wired: Wired, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["deadletters", "replay", *argv], lambda: wired.services)
    return code, capsys.readouterr().out


def replayed(wired: Wired) -> list[tuple[RequestMessage, Job]]:
    """The request messages intake sent, each with its job."""
    found = []
    for message in wired.queue.sent:
        request = RequestMessage.model_validate_json(message.body)
        found.append((request, wired.services.jobs.get(request.tenant_id, request.request_id)))
    return found


def deadline_seconds(job: Job) -> float | None:
    return (job.deadline - job.created_at).total_seconds() if job.deadline else None


def never_asked(question: str) -> str:
    raise AssertionError(f"asked {question!r}")


@pytest.fixture
def wired() -> Wired:
    return wire(ManualClock(NOW))


def test_more_than_one_event_is_replayed_only_when_the_operator_says_yes(
    wired: Wired, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = requested(), requested()
    prefix = dead_lettered(wired, first, second)
    ids = [first["event"]["id"], second["event"]["id"]]
    questions: list[str] = []

    def answer(word: str) -> None:
        def asked(question: str) -> str:
            questions.append(question)
            return word

        monkeypatch.setattr("builtins.input", asked)

    answer("n")
    code, out = run(wired, capsys, "--event-id", ids[0], "--event-id", ids[1], "--prefix", prefix)
    assert (code, wired.queue.sent) == (1, [])
    assert "nothing done (answer y, or pass --yes)" in out
    assert questions == ["Replay 2 events into intake? [y/N] "]

    answer("y")
    code, out = run(wired, capsys, "--event-id", ids[0], "--event-id", ids[1], "--prefix", prefix)
    assert code == 0
    assert "done: 2 accepted" in out
    assert len(wired.queue.sent) == 2


def test_all_asks_even_for_one_event_and_yes_or_a_closed_stdin_decide(
    wired: Wired, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = dead_lettered(wired, requested())

    def closed(question: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", closed)
    code, out = run(wired, capsys, "--all", "--prefix", prefix)
    assert (code, wired.queue.sent) == (1, [])
    assert "nothing done" in out

    monkeypatch.setattr("builtins.input", never_asked)
    assert run(wired, capsys, "--all", "--yes", "--prefix", prefix)[0] == 0
    assert len(wired.queue.sent) == 1
    # Nothing left to replay: nothing to ask about.
    code, out = run(wired, capsys, "--all", "--prefix", prefix)
    assert (code, len(wired.queue.sent)) == (0, 1)
    assert "1 events chosen, 1 already replayed" in out


def test_one_event_chosen_by_a_filter_is_replayed_without_a_question(
    wired: Wired, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = requested()
    prefix = dead_lettered(wired, entry, requested())
    monkeypatch.setattr("builtins.input", never_asked)

    code, out = run(wired, capsys, "--event-id", entry["event"]["id"], "--prefix", prefix)

    assert code == 0
    assert "done: 1 accepted" in out


def test_an_extension_gives_the_replayed_request_the_new_deadline_and_keeps_a_later_one(
    wired: Wired, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    short, later, default = (
        requested(deadline_seconds=600),
        requested(deadline_seconds=5 * 3600),
        requested(),
    )
    prefix = dead_lettered(wired, short, later, default)

    code, out = run(wired, capsys, "--all", "--yes", "--prefix", prefix, "--extend-deadline", "2h")

    assert code == 0
    assert out.count("deadline extended from now + 10m0s to now + 2h0m") == 1
    assert out.count("deadline extended from now + 1h0m to now + 2h0m") == 1  # the default
    assert "deadline now + 5h0m kept (later than the extension)" in out
    sent = replayed(wired)
    assert sorted(deadline_seconds(job) or 0 for _, job in sent) == [7200, 7200, 5 * 3600]
    for request, job in sent:  # the message carries the job's deadline
        assert request.deadline == job.deadline
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"replayed event {short['event']['id']}: deadline extended" in " ".join(warnings)


def test_an_extension_beyond_max_deadline_seconds_is_capped_and_told(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = dead_lettered(wired, requested())

    code, out = run(wired, capsys, "--all", "--yes", "--prefix", prefix, "--extend-deadline", "P3D")

    assert code == 0
    assert (
        "--extend-deadline 3d0h is beyond MaxDeadlineSeconds=86400: deadlines become now + 1d0h"
    ) in out
    assert "(capped by MaxDeadlineSeconds=86400)" in out
    assert [deadline_seconds(job) for _, job in replayed(wired)] == [86_400]


def test_without_an_extension_a_replayed_request_gets_its_own_deadline_from_the_replay(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = dead_lettered(wired, requested(deadline_seconds=600))

    code, out = run(wired, capsys, "--all", "--yes", "--prefix", prefix)

    assert code == 0
    assert "deadline" not in out
    assert [deadline_seconds(job) for _, job in replayed(wired)] == [600]


def test_a_batch_request_without_a_deadline_keeps_none(capsys: pytest.CaptureFixture[str]) -> None:
    wired = wire(ManualClock(NOW), settings=BATCH_SETTINGS)
    prefix = dead_lettered(wired, requested(mode="batch"))

    code, out = run(wired, capsys, "--all", "--yes", "--prefix", prefix, "--extend-deadline", "2h")

    assert code == 0
    assert "no deadline, kept (a batch request that names none)" in out
    assert [deadline_seconds(job) for _, job in replayed(wired)] == [None]


def test_a_request_that_existed_already_keeps_its_deadline(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = requested(deadline_seconds=600)
    prefix = dead_lettered(wired, entry)
    # The live delivery was accepted before Event Grid gave up on it (its answer was lost).
    assert run(wired, capsys, "--all", "--yes", "--prefix", prefix)[0] == 0
    markers = wired.settings.containers.ledgers
    for name in wired.blobs.list_names(markers, "eventgrid-replays/"):
        wired.blobs.delete(markers, name)

    code, out = run(wired, capsys, "--all", "--yes", "--prefix", prefix, "--extend-deadline", "2h")

    assert code == 0
    assert "duplicate" in out
    assert "deadline unchanged: the request existed already" in out
    assert [deadline_seconds(job) for _, job in replayed(wired)] == [600]


def test_a_dry_run_tells_the_new_deadline_and_sends_nothing(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = dead_lettered(wired, requested(), requested(deadline_seconds=600))

    code, out = run(
        wired, capsys, "--all", "--dry-run", "--prefix", prefix, "--extend-deadline", "90m"
    )

    assert (code, wired.queue.sent) == (0, [])
    assert "deadline extended from now + 1h0m to now + 1h30m" in out
    assert "deadline extended from now + 10m0s to now + 1h30m" in out


def test_a_duration_that_does_not_read_exits_2(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(wired, capsys, "--all", "--extend-deadline", "2 hours")

    assert exit_.value.code == 2
    assert "argument --extend-deadline: not a duration: '2 hours'" in capsys.readouterr().err


def test_the_dead_letter_area_answers_to_each_of_its_names(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = dead_lettered(wired, requested())
    for name in ("deadletters", "eg-deadletters", "eventgrid-deadletters"):
        assert main([name, "list", "--prefix", prefix], lambda: wired.services) == 0
        assert "1 dead-lettered events in container 'eventgrid-deadletters'" in (
            capsys.readouterr().out
        )
