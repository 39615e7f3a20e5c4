"""``sb-deadletters replay --extend-deadline``: reading durations, the new deadline (capped,
never shorter), the copy's body and time to live, the job's deadline, the log, resuming,
and the CLI's answers."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from shared.contracts import JobStatus, RequestMessage
from shared.entrypoints.bootstrap import Services
from shared.entrypoints.cli.ops import main
from shared.errors import TransientError
from shared.processing.dead_letters.deadlines import DeadlineExtension, parse_duration
from shared.processing.dead_letters.operations import DeadLetterOperations
from shared.processing.values import DeadLetteredMessage
from tests.support.wiring import wire
from tests.unit.test_servicebus_deadletters import NOW, QUEUE, Harness, harness, item, request

__all__ = ["harness"]  # the fixture, shared with the replay tests

DAY = timedelta(days=1)
LATE = NOW - timedelta(minutes=5)


@pytest.mark.parametrize(
    ("text", "duration"),
    [
        ("90m", timedelta(minutes=90)),
        ("2h", timedelta(hours=2)),
        ("1d", DAY),
        ("1d12h", timedelta(hours=36)),
        ("PT2H", timedelta(hours=2)),
        ("pt90m", timedelta(minutes=90)),
        ("P1D", DAY),
        ("P1DT2H30M", timedelta(days=1, hours=2, minutes=30)),
        ("PT45S", timedelta(seconds=45)),
    ],
)
def test_durations_read_in_both_forms(text: str, duration: timedelta) -> None:
    assert parse_duration(text) == duration


@pytest.mark.parametrize(
    "text", ["", "2", "2 hours", "-1h", "0m", "PT", "P", "P1Y", "P1M", "PT2H3", "P1DT", "PT0S"]
)
def test_other_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_the_new_deadline_is_capped_and_never_earlier() -> None:
    extension = DeadlineExtension(timedelta(days=3), cap=DAY)
    capped = extension.apply(LATE, NOW)
    assert (capped.new, capped.capped, capped.kept) == (NOW + DAY, True, False)
    assert "(capped by MaxDeadlineSeconds=86400)" in extension.describe(capped)
    later = NOW + timedelta(days=2)
    kept = DeadlineExtension(timedelta(hours=1), cap=DAY).apply(later, NOW)
    assert (kept.new, kept.kept) == (later, True)


def late_item(sequence: int = 1, request_id: str = "r1") -> DeadLetteredMessage:
    return item(sequence, body=request(request_id, deadline=LATE))


def test_a_late_request_is_refused_without_the_flag_and_replayed_with_it(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.job("r1", JobStatus.EXPIRED)
    dead = late_item()
    harness.put(dead)
    [refused] = harness.operations.replay([dead])
    assert refused.status == "refused"
    assert harness.sent() == []

    extension = DeadlineExtension(timedelta(hours=2), cap=DAY)
    with caplog.at_level(logging.WARNING, "shared.processing.dead_letters.operations"):
        [outcome] = harness.operations.replay([dead], extension=extension)
    new = NOW + timedelta(hours=2)
    assert outcome.status == "replay"
    assert outcome.detail.endswith(
        f"(job expired, reopened); deadline extended from {LATE.isoformat()} to {new.isoformat()}"
    )
    [copy] = harness.senders[QUEUE].sent
    assert RequestMessage.model_validate_json(copy.body).deadline == new
    unchanged = {k: v for k, v in json.loads(dead.body).items() if k != "deadline"}
    assert {k: v for k, v in json.loads(copy.body).items() if k != "deadline"} == unchanged
    assert copy.time_to_live == timedelta(hours=2)
    job = harness.jobs.get("contoso", "r1")
    assert (job.status, job.deadline) == (JobStatus.ACCEPTED, new)
    marker = harness.operations.marker(dead)
    assert marker is not None
    assert marker["deadline_extended_to"] == new.isoformat()
    [logged] = [r.getMessage() for r in caplog.records if "deadline extended" in r.getMessage()]
    assert logged == (
        f"replaying r1 (request r1): deadline extended from {LATE.isoformat()} to {new.isoformat()}"
    )


def test_an_extension_moves_the_deadline_of_a_job_still_waiting(harness: Harness) -> None:
    """The broker dead-lettered it (MaxDeliveryCountExceeded) before the reconciler ended
    its job: the job is not reopened, but it gets the copy's deadline."""
    harness.job("r1", JobStatus.ACCEPTED)
    dead = late_item()
    extension = DeadlineExtension(timedelta(minutes=90), cap=DAY)
    [outcome] = harness.operations.replay([dead], extension=extension)
    assert outcome.status == "replay"
    assert "(job accepted); deadline extended" in outcome.detail
    assert harness.jobs.get("contoso", "r1").deadline == NOW + timedelta(minutes=90)


def test_an_interrupted_extended_replay_resumes_with_the_same_deadline(harness: Harness) -> None:
    harness.job("r1", JobStatus.FAILED)
    dead = late_item()
    harness.senders[QUEUE].fail_with = TransientError("sending to inference-requests")
    extension = DeadlineExtension(timedelta(hours=3), cap=DAY)
    with pytest.raises(TransientError):
        harness.operations.replay([dead], extension=extension)
    harness.senders[QUEUE].fail_with = None
    [outcome] = harness.operations.replay([dead])  # resumed without the flag
    assert outcome.status == "replay"
    [copy] = harness.senders[QUEUE].sent
    assert RequestMessage.model_validate_json(copy.body).deadline == NOW + timedelta(hours=3)


def test_an_extension_leaves_a_request_with_time_left_as_it_was(harness: Harness) -> None:
    later = NOW + timedelta(hours=5)
    dead = item(1, body=request("r1", deadline=later))
    extension = DeadlineExtension(timedelta(hours=1), cap=DAY)
    [outcome] = harness.operations.replay([dead], extension=extension)
    assert "deadline" not in outcome.detail
    [copy] = harness.senders[QUEUE].sent
    assert copy.body == dead.body


@contextmanager
def _operations(harness: Harness) -> Iterator[DeadLetterOperations]:
    yield harness.operations


def run(harness: Harness, *argv: str, services: Services | None = None) -> int:
    built = services or wire().services
    return main(["sb-deadletters", *argv], lambda: built, lambda _: _operations(harness))


def test_the_cli_extends_says_when_capped_and_refuses_bad_durations(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.job("r1", JobStatus.EXPIRED)
    dead = late_item()
    harness.put(dead)
    assert run(harness, "replay", "--all", "--yes", "--queue", "standard") == 1
    assert "(or replay it with --extend-deadline DURATION)" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exited:
        run(harness, "replay", "--all", "--extend-deadline", "2 hours")
    assert exited.value.code == 2
    assert "argument --extend-deadline: not a duration: '2 hours'" in capsys.readouterr().err

    argv = ("replay", "--all", "--yes", "--queue", "standard", "--extend-deadline", "P3D")
    assert run(harness, *argv) == 0
    out = capsys.readouterr().out
    assert (
        "--extend-deadline 3d0h is beyond MaxDeadlineSeconds=86400: deadlines become now + 1d0h"
        in out
    )
    assert "(capped by MaxDeadlineSeconds=86400)" in out
    assert "done: 1 replayed" in out
