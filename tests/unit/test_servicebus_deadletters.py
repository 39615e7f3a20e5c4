"""Service Bus dead-letter operations over in-memory ports: choosing, summaries, redaction,
replay (reopened jobs, markers, refusals, resuming) and purge, and the CLI's answers."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryDocuments, RecordingSender
from shared.contracts import InlineText, Job, JobStatus, RequestMessage
from shared.entrypoints.bootstrap import Services
from shared.entrypoints.cli.ops import main
from shared.errors import Conflict, TransientError
from shared.jobs import DocumentJobStore, JobRepository, fail, reopen, transition
from shared.messaging import MessageSender
from shared.processing.dead_letters.filters import Selection, age_bucket, find, parse_age, summarise
from shared.processing.dead_letters.operations import (
    DeadLetterOperations,
    replay_copy,
    replay_message_id,
)
from shared.processing.values import DeadLetteredMessage
from shared.redaction import body_preview, is_sensitive_key, mask_credentials, redact
from tests.support.wiring import wire

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUEUE = "inference-requests"
ORDERED = "inference-ordered"


def request(request_id: str = "r1", **changes: Any) -> RequestMessage:
    values: dict[str, Any] = {
        "request_id": request_id,
        "tenant_id": "contoso",
        "model": "local-analyzer",
        "input": InlineText(text="Invoice 12: 300 EUR due."),
        **changes,
    }
    return RequestMessage(**values)


def item(
    sequence_number: int = 1,
    *,
    body: RequestMessage | bytes | None = None,
    queue: str = QUEUE,
    reason: str = "MaxRetriesExceeded",
    tenant: str = "contoso",
    model: str = "local-analyzer",
    age: timedelta = timedelta(minutes=5),
    message_id: str | None = None,
    session_id: str | None = None,
) -> DeadLetteredMessage:
    given = body if body is not None else request(f"r{sequence_number}")
    raw = given if isinstance(given, bytes) else given.model_dump_json(by_alias=True).encode()
    return DeadLetteredMessage(
        queue=queue,
        sequence_number=sequence_number,
        message_id=message_id or (given.request_id if isinstance(given, RequestMessage) else None),
        enqueued_time=NOW - age,
        delivery_count=1,
        reason=reason,
        description="gave up after 3 retries",
        source=queue,
        body=raw,
        correlation_id="corr",
        session_id=session_id,
        subject="inferbus.request",
        content_type="application/json",
        application_properties={
            "tenant": tenant,
            "model_name": model,
            "retry_count": 3,
            "priority": "normal",
        },
    )


# --- choosing and summaries ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800), ("1w", 604800), ("1d12h", 129600)],
)
def test_ages_read_as_durations(text: str, seconds: int) -> None:
    assert parse_age(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "12", "2 hours", "h", "1x", "-1h"])
def test_other_ages_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an age"):
        parse_age(text)


def test_an_empty_selection_chooses_nothing_and_all_chooses_everything() -> None:
    items = [item(1), item(2)]
    assert Selection().choose(items, NOW) == []
    assert Selection(everything=True).choose(items, NOW) == items


def test_filters_all_hold() -> None:
    old = item(1, age=timedelta(days=3), reason="PermanentFailure", tenant="fabrikam")
    recent = item(2, age=timedelta(minutes=1))
    other_model = item(3, model="other-model", message_id="m-3")
    items = [old, recent, other_model]
    assert Selection(reasons=("permanentfailure",)).choose(items, NOW) == [old]
    assert Selection(tenants=("contoso",)).choose(items, NOW) == [recent, other_model]
    assert Selection(models=("other-model",)).choose(items, NOW) == [other_model]
    assert Selection(message_ids=("m-3",)).choose(items, NOW) == [other_model]
    assert Selection(sequence_numbers=(2,)).choose(items, NOW) == [recent]
    assert Selection(older_than=timedelta(days=1)).choose(items, NOW) == [old]
    assert Selection(newer_than=timedelta(minutes=2)).choose(items, NOW) == [recent]
    both = Selection(tenants=("contoso",), newer_than=timedelta(hours=1))
    assert both.choose(items, NOW) == [recent, other_model]


def test_show_finds_by_message_id_or_sequence_number() -> None:
    items = [item(7, message_id="abc"), item(8, message_id="12")]
    assert find(items, "abc") == [items[0]]
    assert find(items, "7") == [items[0]]
    assert find(items, "12") == [items[1]]
    assert find(items, "nope") == []


def test_summary_counts_by_reason_age_tenant_and_model() -> None:
    items = [
        item(1, age=timedelta(minutes=5)),
        item(2, age=timedelta(hours=5), reason="InvalidPayload", tenant="fabrikam"),
        item(3, age=timedelta(days=3), queue=ORDERED),
        item(4, age=timedelta(days=30), model="other-model"),
    ]
    summary = summarise(items, NOW)
    assert summary.total == 4
    assert summary.by["reason"] == {"MaxRetriesExceeded": 3, "InvalidPayload": 1}
    assert summary.by["queue"] == {QUEUE: 3, ORDERED: 1}
    assert summary.by["age"] == {"< 1h": 1, "1h-1d": 1, "1d-7d": 1, "> 7d": 1}
    assert summary.by["tenant"] == {"contoso": 3, "fabrikam": 1}
    assert summary.by["model"] == {"local-analyzer": 3, "other-model": 1}
    assert summary.oldest == NOW - timedelta(days=30)
    assert summary.newest == NOW - timedelta(minutes=5)
    assert age_bucket(None) == "unknown"


# --- redaction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("api_key", True),
        ("accountKey", True),
        ("X-Auth-Token", True),
        ("password", True),
        ("connection_string", True),
        ("sig", True),
        ("max_tokens", False),
        ("sha256", False),
        ("monkey", False),
        ("document_type", False),
    ],
)
def test_credential_names(key: str, sensitive: bool) -> None:
    assert is_sensitive_key(key) is sensitive


def test_text_loses_query_strings_and_credentials_and_is_truncated() -> None:
    text = (
        "blob https://acct.blob.core.windows.net/inputs/t/r1?sv=2024&sig=SECRETSIG failed; "
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=SECRETKEY==;"
        " Authorization: Bearer SECRETTOKEN eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc"
    )
    cleaned = mask_credentials(text, 1000)
    assert "SECRET" not in cleaned
    assert "eyJ" not in cleaned
    assert "https://acct.blob.core.windows.net/inputs/t/r1 failed" in cleaned
    assert len(mask_credentials("x" * 500)) == 200


def test_nested_values_are_masked_by_name() -> None:
    value = {"headers": {"api-key": "k", "accept": "json"}, "items": list(range(20))}
    cleaned = redact(value)
    assert cleaned["headers"] == {"api-key": "***", "accept": "json"}
    assert cleaned["items"][-1] == "…"


def test_body_preview_shows_text_length_and_blob_without_query() -> None:
    text_body = request(parameters={"api_key": "SECRET", "max_tokens": 5})
    preview = body_preview(text_body.model_dump_json(by_alias=True).encode())
    assert preview["input"] == {"text": "<24 characters>"}
    assert preview["parameters"] == {"api_key": "***", "max_tokens": 5}
    assert preview["request_id"] == "r1"
    blob = {
        "schema": "inferbus.request/v1",
        "input": {
            "blob_uri": "https://acct.blob.core.windows.net/inputs/t/r1?sv=1&sig=SECRET",
            "sha256": "0" * 64,
            "size": 12,
            "media_type": "application/pdf",
        },
    }
    preview = body_preview(json.dumps(blob).encode())
    assert preview["input"]["blob_uri"] == "https://acct.blob.core.windows.net/inputs/t/r1"
    assert preview["input"]["size"] == 12
    assert "SECRET" not in json.dumps(preview)
    raw = body_preview(b"password=hunter2 not json")
    assert raw.startswith("<25 bytes, not JSON>")
    assert "hunter2" not in raw


# --- the replay copy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "copy"),
    [
        ("r1", "r1:replay:1"),
        ("r1:retry:3", "r1:replay:1"),
        ("r1:replay:1", "r1:replay:2"),
        ("r1:replay:2:retry:1", "r1:replay:3"),
    ],
)
def test_replay_ids(original: str, copy: str) -> None:
    assert replay_message_id(original) == copy


def test_the_copy_resets_retries_and_names_the_original() -> None:
    dead = item(4, message_id="r4:retry:3", session_id="doc-1")
    properties = {
        **dead.application_properties,
        "DeadLetterReason": "MaxRetriesExceeded",
        "outage_retry_count": 2,
        "fair_share_waits": 5,
    }
    dead = DeadLetteredMessage(**{**dead.__dict__, "application_properties": properties})
    deadline = NOW + timedelta(hours=1)
    copy = replay_copy(dead, request("r4", deadline=deadline), NOW)
    assert copy.message_id == "r4:replay:1"
    assert copy.body == dead.body
    assert copy.session_id == "doc-1"
    assert copy.correlation_id == "corr"
    assert copy.time_to_live == timedelta(hours=1)
    assert copy.application_properties["retry_count"] == 0
    assert copy.application_properties["replay_of"] == "r4:retry:3"
    assert copy.application_properties["tenant"] == "contoso"
    assert "DeadLetterReason" not in copy.application_properties
    assert "outage_retry_count" not in copy.application_properties  # a replay starts afresh
    assert "fair_share_waits" not in copy.application_properties


# --- replay and purge over in-memory ports ------------------------------------------------------


@dataclass
class FakeDeadLetters:
    """Implements ``DeadLetterQueues`` in memory."""

    held: dict[str, list[DeadLetteredMessage]] = field(default_factory=dict)
    locked: set[int] = field(default_factory=set)  # held by another receiver: not removable

    def peek(self, queue: str) -> list[DeadLetteredMessage]:
        return list(self.held.get(queue, []))

    def remove(self, queue: str, sequence_numbers: Collection[int]) -> list[int]:
        gone = [
            i.sequence_number
            for i in self.held.get(queue, [])
            if i.sequence_number in sequence_numbers and i.sequence_number not in self.locked
        ]
        self.held[queue] = [i for i in self.held.get(queue, []) if i.sequence_number not in gone]
        return gone


@dataclass
class Harness:
    operations: DeadLetterOperations
    dead_letters: FakeDeadLetters
    senders: dict[str, RecordingSender]
    jobs: JobRepository
    documents: InMemoryDocuments

    def put(self, *items: DeadLetteredMessage) -> None:
        for dead in items:
            self.dead_letters.held.setdefault(dead.queue, []).append(dead)

    def job(self, request_id: str, status: JobStatus) -> None:
        given = request(request_id)
        job = Job(
            id=given.request_id,
            tenant_id=given.tenant_id,
            model=given.model,
            correlation_id="corr",
            created_at=NOW,
            updated_at=NOW,
        )
        if status is JobStatus.FAILED:
            job = fail(job, "max_retries_exceeded", "gave up", settlement="dead-lettered")
        elif status is not JobStatus.ACCEPTED:
            job = transition(job, status)
        assert self.jobs.create(job) is not None

    def status(self, request_id: str) -> JobStatus:
        return self.jobs.get("contoso", request_id).status

    def sent(self, queue: str = QUEUE) -> list[str]:
        return [m.message_id for m in self.senders[queue].sent]


@pytest.fixture
def harness() -> Harness:
    documents = InMemoryDocuments()
    jobs = JobRepository(DocumentJobStore(documents, "jobs"), lambda: NOW)
    senders = {QUEUE: RecordingSender(), ORDERED: RecordingSender()}
    dead_letters = FakeDeadLetters()

    def sender_for(queue: str) -> MessageSender:
        return senders[queue]

    operations = DeadLetterOperations(
        dead_letters, sender_for, jobs, documents, "ledgers", ("local-analyzer",), lambda: NOW
    )
    return Harness(operations, dead_letters, senders, jobs, documents)


def test_a_failed_job_is_reopened_and_its_request_replayed_once(harness: Harness) -> None:
    harness.job("r1", JobStatus.FAILED)
    harness.put(item(1))
    outcomes = harness.operations.replay([item(1)])
    assert [(o.status, o.replay_message_id) for o in outcomes] == [("replay", "r1:replay:1")]
    assert "job failed, reopened" in outcomes[0].detail
    assert harness.status("r1") is JobStatus.ACCEPTED
    assert harness.jobs.get("contoso", "r1").last_error is not None
    assert harness.sent() == ["r1:replay:1"]
    marker = harness.operations.marker(item(1))
    assert marker is not None
    assert marker["status"] == "sent"

    again = harness.operations.replay([item(1)])
    assert [o.status for o in again] == ["already-replayed"]
    assert harness.sent() == ["r1:replay:1"]


def test_completed_and_cancelled_jobs_are_skipped(harness: Harness) -> None:
    harness.job("r1", JobStatus.COMPLETED)
    harness.job("r2", JobStatus.CANCELLED)
    outcomes = harness.operations.replay([item(1), item(2)])
    assert [(o.status, o.detail) for o in outcomes] == [
        ("skipped", "job completed"),
        ("skipped", "job cancelled"),
    ]
    assert harness.sent() == []
    assert harness.operations.marker(item(1)) is None


def test_a_request_past_its_deadline_or_unreadable_is_refused(harness: Harness) -> None:
    late = item(1, body=request("r1", deadline=NOW - timedelta(minutes=1)))
    garbage = item(2, body=b'{"schema": "inferbus.request/v1", "request_id": 5}')
    unknown_model = item(3, body=request("r3", model="retired-model"))
    outcomes = harness.operations.replay([late, garbage, unknown_model])
    assert [o.status for o in outcomes] == ["refused"] * 3
    assert outcomes[0].detail == (
        "deadline passed at 2026-11-30T11:59:00+00:00; submit a new request "
        "(or replay it with --extend-deadline DURATION)"
    )
    assert "not a request the processor accepts" in outcomes[1].detail
    assert "unknown model 'retired-model'" in outcomes[2].detail
    assert harness.sent() == []


def test_a_request_refused_for_breaking_a_rule_is_not_replayed(harness: Harness) -> None:
    """Its job exists (failed): a copy would run it without the rules' check."""
    given = request("r1")
    refused = fail(
        Job(
            id="r1",
            tenant_id=given.tenant_id,
            model=given.model,
            correlation_id="corr",
            created_at=NOW,
            updated_at=NOW,
        ),
        "invalid_request",
        "parameters.simulate (model fault injection) is not enabled on this service",
    )
    assert harness.jobs.create(refused) is not None
    (outcome,) = harness.operations.replay([item(1)])
    assert outcome.status == "refused"
    assert "breaks a rule (parameters.simulate" in outcome.detail
    assert harness.status("r1") is JobStatus.FAILED
    assert harness.sent() == []


def test_a_request_without_a_job_is_replayed_as_it_is(harness: Harness) -> None:
    ordered = item(5, queue=ORDERED, session_id="doc-9", body=request("r5", document_id="doc-9"))
    [outcome] = harness.operations.replay([ordered])
    assert outcome.status == "replay"
    assert "no job yet" in outcome.detail
    assert harness.sent(ORDERED) == ["r5:replay:1"]
    assert harness.senders[ORDERED].sent[0].session_id == "doc-9"
    assert harness.jobs.find("contoso", "r5") is None


def test_a_dry_run_plan_changes_nothing(harness: Harness) -> None:
    harness.job("r1", JobStatus.EXPIRED)
    plan = harness.operations.plan(item(1))
    assert (plan.status, plan.replay_message_id) == ("replay", "r1:replay:1")
    assert harness.status("r1") is JobStatus.EXPIRED
    assert harness.operations.marker(item(1)) is None
    assert harness.sent() == []


def test_an_interrupted_replay_resumes_where_it_stopped(harness: Harness) -> None:
    harness.job("r1", JobStatus.FAILED)
    harness.senders[QUEUE].fail_with = TransientError("sending to inference-requests")
    with pytest.raises(TransientError):
        harness.operations.replay([item(1)])
    marker = harness.operations.marker(item(1))
    assert marker is not None
    assert marker["status"] == "sending"
    assert harness.status("r1") is JobStatus.ACCEPTED

    harness.senders[QUEUE].fail_with = None
    [outcome] = harness.operations.replay([item(1)])
    assert outcome.status == "replay"
    assert harness.sent() == ["r1:replay:1"]
    resumed = harness.operations.marker(item(1))
    assert resumed is not None
    assert resumed["status"] == "sent"


def test_a_job_that_ends_while_it_is_replayed_is_left_alone(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.job("r1", JobStatus.FAILED)
    stale = harness.jobs.load("contoso", "r1")
    assert stale is not None
    finished = stale.job.model_copy(update={"status": JobStatus.COMPLETED})
    DocumentJobStore(harness.documents, "jobs").replace(finished, stale.etag)
    monkeypatch.setattr(harness.jobs, "load", lambda *_: stale)  # read before it finished
    [outcome] = harness.operations.replay([item(1)])
    assert (outcome.status, outcome.detail) == ("skipped", "job completed meanwhile")
    assert harness.sent() == []
    assert harness.operations.marker(item(1)) is None


def test_a_marker_of_an_earlier_message_with_the_same_number_is_not_this_ones(
    harness: Harness,
) -> None:
    harness.operations.replay([item(1)])
    recreated = item(1, body=request("r9"), age=timedelta(seconds=1))  # same queue and number
    assert harness.operations.marker(recreated) is None
    assert harness.operations.markers([recreated]) == {}
    [outcome] = harness.operations.replay([recreated])
    assert outcome.status == "replay"
    assert harness.sent() == ["r1:replay:1", "r9:replay:1"]
    assert harness.operations.marker(recreated) is not None
    assert harness.operations.marker(item(1)) is None


def test_purge_removes_the_chosen_and_their_markers(harness: Harness) -> None:
    harness.put(item(1), item(2), item(3, queue=ORDERED))
    harness.operations.replay([item(1)])
    harness.dead_letters.locked.add(2)
    removed = harness.operations.purge([item(1), item(2), item(3, queue=ORDERED)])
    assert [(i.queue, i.sequence_number) for i in removed] == [(ORDERED, 3), (QUEUE, 1)]
    assert [i.sequence_number for i in harness.dead_letters.peek(QUEUE)] == [2]
    assert harness.operations.marker(item(1)) is None


def test_only_failed_or_expired_jobs_reopen() -> None:
    job = Job(
        id="r1",
        tenant_id="t",
        model="m",
        correlation_id="c",
        created_at=NOW,
        updated_at=NOW,
    )
    for status in (JobStatus.FAILED, JobStatus.EXPIRED):
        reopened = reopen(transition(job, status), "replayed", lambda: NOW)
        assert (reopened.status, reopened.completed_at, reopened.error) == (
            JobStatus.ACCEPTED,
            None,
            None,
        )
    for status in (JobStatus.ACCEPTED, JobStatus.COMPLETED, JobStatus.CANCELLED):
        with pytest.raises(Conflict):
            reopen(transition(job, status) if status.is_terminal else job, "replayed")


# --- the CLI over in-memory ports ---------------------------------------------------------------


Cli = Callable[..., int]


@pytest.fixture
def cli(harness: Harness) -> Cli:
    """``python -m shared.ops sb-deadletters ...`` over the harness's operations."""
    services = wire().services

    @contextmanager
    def operations(_: Services) -> Iterator[DeadLetterOperations]:
        yield harness.operations

    def run(*argv: str) -> int:
        return main(["sb-deadletters", *argv], lambda: services, operations)

    return run


def test_the_cli_asks_before_changing_anything(
    cli: Cli,
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    harness.put(item(1), item(2))
    monkeypatch.setattr("builtins.input", lambda _: "n")
    assert cli("purge", "--all") == 1
    assert "nothing done" in capsys.readouterr().out
    assert len(harness.dead_letters.peek(QUEUE)) == 2
    monkeypatch.setattr("builtins.input", lambda _: "y")
    assert cli("purge", "--sequence-number", "2") == 0
    assert "removed 1 of 1" in capsys.readouterr().out
    assert [i.sequence_number for i in harness.dead_letters.peek(QUEUE)] == [1]


def test_the_cli_refuses_without_a_choice_or_with_an_unknown_queue(
    cli: Cli, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("replay") == 2
    assert "choose what to replay" in capsys.readouterr().err
    assert cli("purge", "--yes") == 2
    assert cli("list", "--queue", "orders") == 2
    assert "'orders' is not a request queue" in capsys.readouterr().err
    assert cli("show", "404") == 1


def test_the_cli_lists_in_json_and_replays_by_lane(
    cli: Cli, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.job("r1", JobStatus.FAILED)
    harness.put(item(1), item(3, queue=ORDERED, reason="InvalidPayload"))
    assert cli("list", "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["total"] == 2
    assert listing["by_reason"] == {"MaxRetriesExceeded": 1, "InvalidPayload": 1}
    assert [m["replay"] for m in listing["messages"]] == ["pending", "pending"]
    assert cli("replay", "--queue", "standard", "--all", "--yes") == 0
    out = capsys.readouterr().out
    assert "[1/1] inference-requests#1 r1: replayed as r1:replay:1" in out
    assert "done: 1 replayed, 0 already replayed, 0 skipped, 0 refused" in out
    assert cli("list") == 0
    assert "[replayed]" in capsys.readouterr().out
