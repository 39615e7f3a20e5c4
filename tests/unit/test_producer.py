"""The producer's planning and batching, over fakes of its own ports (no network)."""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import ACCOUNT_URL, InMemoryBlobs
from shared.contracts import ClaimCheck, InlineText, RequestMessage
from shared.entrypoints.cli.producer import main
from shared.errors import ConfigurationError
from shared.messaging import OutgoingMessage
from shared.producer import LineRefusal, ParsedLine, Producer, RequestLine, parse_lines
from shared.producer.batching import QueueBatcher
from shared.producer.lines import PRODUCER_NAMESPACE, parse_document
from shared.producer.planning import Planner
from shared.producer.ports import OutgoingBatch
from shared.producer.progress import ProgressDisplay
from shared.producer.report import SendReport
from shared.settings import Settings
from tests.fakes import ManualClock, broker_down

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TEXT_LINE = {"tenant_id": "contoso", "model": "local-analyzer", "input": {"text": "hello"}}


def settings(**values: str) -> Settings:
    """A producer's settings; the lines' tenant is one direct producers may name."""
    defaults = {"AllowedModels": "local-analyzer", "ProducerTenants": "contoso"}
    return Settings.model_validate({**defaults, **values})


def jsonl(*documents: Any) -> list[str]:
    return [d if isinstance(d, str) else json.dumps(d) for d in documents]


def parsed(document: dict[str, Any]) -> ParsedLine:
    item = parse_document(document, 1)
    assert isinstance(item, ParsedLine), item
    return item


# --- fakes of the batching ports -----------------------------------------------------------


@dataclass
class FakeBatch:
    """A batch whose size is the sum of its messages' body sizes (plus 10 bytes each)."""

    max_bytes: int
    messages: list[OutgoingMessage] = field(default_factory=list)

    def try_add(self, message: OutgoingMessage) -> bool:
        size = sum(len(m.body) + 10 for m in self.messages) + len(message.body) + 10
        if size > self.max_bytes:
            return False
        self.messages.append(message)
        return True

    def __len__(self) -> int:
        return len(self.messages)


@dataclass
class FakeSender:
    max_bytes: int
    sent: list[list[OutgoingMessage]] = field(default_factory=list)
    fail_on_send: int | None = None  # the n-th send (1-based) raises
    failure: Exception = field(default_factory=broker_down)

    def create_batch(self) -> OutgoingBatch:
        return FakeBatch(self.max_bytes)

    def send_batch(self, batch: OutgoingBatch) -> None:
        assert isinstance(batch, FakeBatch)
        if self.fail_on_send == len(self.sent) + 1:
            raise self.failure
        self.sent.append(list(batch.messages))


class FakeSenders:
    def __init__(self, max_bytes: int = 4096, **failing: int) -> None:
        self.max_bytes = max_bytes
        self.failing = failing
        self.queues: dict[str, FakeSender] = {}

    def sender(self, queue: str) -> FakeSender:
        if queue not in self.queues:
            self.queues[queue] = FakeSender(self.max_bytes, fail_on_send=self.failing.get(queue))
        return self.queues[queue]

    def sent(self, queue: str) -> list[OutgoingMessage]:
        sender = self.queues.get(queue)
        return [m for batch in sender.sent for m in batch] if sender else []

    def bodies(self, queue: str) -> list[RequestMessage]:
        return [RequestMessage.model_validate_json(m.body) for m in self.sent(queue)]


def producer(senders: FakeSenders, blobs: InMemoryBlobs | None = None, **values: str) -> Producer:
    return Producer.from_settings(settings(**values), senders, blobs, clock=ManualClock(NOW))


# --- lines: validation with line numbers ---------------------------------------------------


def test_invalid_lines_are_refused_with_their_number_and_the_failing_fields() -> None:
    items = list(
        parse_lines(
            jsonl(
                TEXT_LINE,
                "",
                "{not json",
                [1, 2],
                {**TEXT_LINE, "input": {"text": ""}, "priority": "urgent"},
                {**TEXT_LINE, "schema": "inferbus.request/v2"},
                {"model": "local-analyzer", "input": {"blob_uri": "u", "size": 1}},
                {**TEXT_LINE, "colour": "blue"},
                {**TEXT_LINE, "deadline": "2026-05-01T13:00:00Z", "deadline_seconds": 60},
            )
        )
    )
    assert isinstance(items[0], ParsedLine)
    assert items[0].line == 1
    refusals = {item.line: item for item in items if isinstance(item, LineRefusal)}
    assert sorted(refusals) == [3, 4, 5, 6, 7, 8, 9]  # the blank line 2 is skipped, counted
    assert refusals[3].reason.startswith("not JSON")
    assert refusals[4].reason == "not a JSON object"
    assert {f.field for f in refusals[5].fields} == {"input.text", "priority"}
    assert "unknown schema 'inferbus.request/v2'" in refusals[6].reason
    assert {f.field for f in refusals[7].fields} == {
        "tenant_id",
        "input.sha256",
        "input.media_type",
    }
    assert [f.field for f in refusals[8].fields] == ["colour"]
    assert "not both" in refusals[9].describe()


def test_a_line_that_is_not_utf8_is_refused_not_fatal() -> None:
    items = list(parse_lines([b'{"a": "\xff"}', json.dumps(TEXT_LINE).encode()]))
    assert isinstance(items[0], LineRefusal)
    assert items[0].reason.startswith("not UTF-8")
    assert isinstance(items[1], ParsedLine)


def test_defaults_fill_lines_that_leave_tenant_and_model_out() -> None:
    [item] = parse_lines(
        [json.dumps({"input": {"text": "x"}})], {"tenant_id": "fabrikam", "model": "m1"}
    )
    assert isinstance(item, ParsedLine)
    assert (item.request.tenant_id, item.request.model) == ("fabrikam", "m1")


# --- deterministic request ids ---------------------------------------------------------------


def test_a_line_without_an_id_gets_a_name_based_one_from_its_content() -> None:
    first = parsed(TEXT_LINE)
    same = parse_lines(
        ['{ "input": {"text":"hello"}, "model":"local-analyzer", "tenant_id":"contoso",'
         ' "priority": "normal", "parameters": {}, "schema": "inferbus.request/v1"}']
    )  # fmt: skip
    other_tenant = parsed({**TEXT_LINE, "tenant_id": "fabrikam"})
    other_text = parsed({**TEXT_LINE, "input": {"text": "hello!"}})

    assert uuid.UUID(first.request_id).version == 5
    assert first.request_id == str(uuid.uuid5(PRODUCER_NAMESPACE, first.fingerprint))
    assert [i.request_id for i in same if isinstance(i, ParsedLine)] == [first.request_id]
    assert len({first.request_id, other_tenant.request_id, other_text.request_id}) == 3


def test_a_given_request_id_is_kept_and_must_be_url_safe() -> None:
    assert parsed({**TEXT_LINE, "request_id": "order-4711"}).request_id == "order-4711"
    [bad] = parse_lines([json.dumps({**TEXT_LINE, "request_id": "a/b"})])
    assert isinstance(bad, LineRefusal)
    assert [f.field for f in bad.fields] == ["request_id"]


# --- routing and the message -----------------------------------------------------------------


def test_each_request_is_routed_to_its_lanes_queue() -> None:
    planner = Planner.from_settings(settings(PriorityQueueName="urgent-work"))
    plans = {
        name: planner.plan(parsed(document), NOW)
        for name, document in {
            "normal": TEXT_LINE,
            "low": {**TEXT_LINE, "priority": "low"},
            "high": {**TEXT_LINE, "priority": "high"},
            "document": {**TEXT_LINE, "priority": "high", "document_id": "contract-7"},
        }.items()
    }
    assert {name: plan.queue for name, plan in plans.items()} == {
        "normal": "inference-requests",
        "low": "inference-requests",
        "high": "urgent-work",
        "document": "inference-ordered",
    }
    assert plans["document"].envelope.session_id == "contract-7"
    assert plans["high"].envelope.session_id is None


def test_the_message_is_the_request_envelope_with_source_producer() -> None:
    item = parsed(
        {
            **TEXT_LINE,
            "deadline_seconds": 600,
            "metadata": {"document_type": "memo"},
            "parameters": {"temperature": 0},
            "not_before": "2026-05-01T12:05:00Z",
            "after": "r-0",
        }
    )
    plan = Planner.from_settings(settings()).plan(item, NOW)
    envelope = plan.envelope

    assert envelope.message_id == item.request_id
    assert envelope.time_to_live == timedelta(seconds=600)
    assert envelope.application_properties["source"] == "producer"
    assert envelope.application_properties["document_type"] == "memo"
    assert envelope.application_properties["tenant"] == "contoso"
    body = RequestMessage.model_validate_json(envelope.body)
    assert body.input == InlineText(text="hello")
    assert body.deadline == NOW + timedelta(seconds=600)
    assert (body.request_id, body.tenant_id, body.model) == (
        item.request_id,
        "contoso",
        "local-analyzer",
    )
    assert (body.parameters, body.metadata) == ({"temperature": 0}, {"document_type": "memo"})
    assert (body.not_before, body.after) == (NOW + timedelta(minutes=5), "r-0")


def test_lines_are_refused_for_what_the_processor_would_dead_letter() -> None:
    senders = FakeSenders()
    report = producer(senders, ProducerTenants="contoso").send(
        parse_lines(
            jsonl(
                {**TEXT_LINE, "tenant_id": "fabrikam", "model": "other", "deadline_seconds": 10**6},
                {**TEXT_LINE, "not_before": "2026-05-03T00:00:00Z"},
                {**TEXT_LINE, "deadline": "2026-04-30T00:00:00Z"},
                {**TEXT_LINE, "parameters": {"simulate": {"permanent": True}}},
                {**TEXT_LINE, "document_id": "contract-7", "after": "r-0"},
                {**TEXT_LINE, "parameters": {f"p{n}": n for n in range(33)}},
            )
        )
    )
    fields = [{f.field for f in refusal.fields} for refusal in report.refusals]
    assert fields == [
        {"tenant_id", "model", "deadline_seconds"},
        {"not_before"},
        {"deadline"},
        {"parameters.simulate"},
        {"after"},
        {"parameters"},
    ]
    assert "model 'other' is not served here" in report.refusals[0].describe()
    assert report.exit_code == 1
    assert senders.queues == {}


def test_metadata_follows_the_contracts_rules() -> None:
    [bad] = parse_lines([json.dumps({**TEXT_LINE, "metadata": {"bad key": "v"}})])
    assert isinstance(bad, LineRefusal)
    assert [f.field for f in bad.fields] == ["metadata.bad key.[key]"]


def test_models_are_checked_only_where_the_settings_name_them() -> None:
    unnamed = Producer.from_settings(
        Settings.model_validate({"ProducerTenants": "contoso"}),
        FakeSenders(),
        clock=ManualClock(NOW),
    )
    report = unnamed.send([RequestLine.model_validate({**TEXT_LINE, "model": "gpt-4o"})])
    assert (report.sent, report.refusals) == (1, [])


# --- batching --------------------------------------------------------------------------------


def message(number: int, size: int = 90) -> OutgoingMessage:
    return OutgoingMessage(body=b"x" * size, message_id=f"m{number}", correlation_id="c")


def test_a_full_batch_is_sent_and_the_message_starts_the_next_one() -> None:
    sender = FakeSender(max_bytes=300)  # three messages of 100 bytes each
    sent: list[int] = []
    batcher = QueueBatcher(sender, sent.append)
    assert all(batcher.add(message(n)) for n in range(10))
    batcher.flush()

    assert sent == [3, 3, 3, 1]
    assert [m.message_id for batch in sender.sent for m in batch] == [f"m{n}" for n in range(10)]
    assert (batcher.accepted, batcher.sent, batcher.pending) == (10, 10, 0)


def test_a_message_too_large_for_an_empty_batch_is_handed_back_and_the_batch_kept() -> None:
    sender = FakeSender(max_bytes=300)
    batcher = QueueBatcher(sender, lambda count: None)
    assert batcher.add(message(1))
    assert not batcher.add(message(2, size=400))
    assert batcher.add(message(3))
    batcher.flush()
    assert [[m.message_id for m in batch] for batch in sender.sent] == [["m1", "m3"]]


def test_max_messages_caps_a_batch() -> None:
    sender = FakeSender(max_bytes=10_000)
    batcher = QueueBatcher(sender, lambda count: None, max_messages=1)
    for n in range(3):
        batcher.add(message(n))
    batcher.flush()
    assert [len(batch) for batch in sender.sent] == [1, 1, 1]


def test_the_producer_fills_batches_per_queue_and_counts_them() -> None:
    senders = FakeSenders(max_bytes=2000)
    lines = [
        {**TEXT_LINE, "input": {"text": f"text {n}"}, "priority": "high" if n % 4 == 0 else "low"}
        for n in range(40)
    ]
    report = producer(senders).send(parse_lines(jsonl(*lines)))

    assert report.sent == 40
    assert report.exit_code == 0
    assert report.queues["inference-priority"].sent == 10
    assert report.queues["inference-requests"].sent == 30
    assert report.batches == len(senders.queues["inference-requests"].sent) + len(
        senders.queues["inference-priority"].sent
    )
    assert report.queues["inference-requests"].batches > 1
    texts = [b.input.text for b in senders.bodies("inference-requests")]  # type: ignore[union-attr]
    assert texts == [f"text {n}" for n in range(40) if n % 4]  # input order kept


# --- claim checks for messages too large -----------------------------------------------------


def test_inline_text_too_large_for_a_message_is_stored_as_a_claim_check() -> None:
    senders, blobs = FakeSenders(max_bytes=2000), InMemoryBlobs()
    big = "x" * 5000
    report = producer(senders, blobs).send(
        parse_lines(jsonl(TEXT_LINE, {**TEXT_LINE, "input": {"text": big}}))
    )

    assert (report.sent, report.claim_checked, report.refusals) == (2, 1, [])
    small, moved = senders.bodies("inference-requests")
    assert isinstance(small.input, InlineText)
    assert isinstance(moved.input, ClaimCheck)
    assert moved.input.blob_uri == f"{ACCOUNT_URL}/inputs/contoso/{moved.request_id}"
    assert moved.input.size == 5000
    assert moved.input.media_type == "text/plain; charset=utf-8"
    assert blobs.read("inputs", f"contoso/{moved.request_id}") == big.encode()


def test_inline_text_above_max_inline_text_bytes_is_claim_checked_even_when_it_fits() -> None:
    senders, blobs = FakeSenders(max_bytes=10_000), InMemoryBlobs()
    report = producer(senders, blobs, MaxInlineTextBytes="100").send(
        parse_lines(jsonl({**TEXT_LINE, "input": {"text": "y" * 101}}))
    )
    [body] = senders.bodies("inference-requests")
    assert (report.claim_checked, report.refusals) == (1, [])
    assert isinstance(body.input, ClaimCheck)
    assert body.input.size == 101


def test_a_claim_check_outside_the_account_is_refused_where_storage_is_known() -> None:
    claim = {"blob_uri": "https://elsewhere.example/inputs/contoso/x", "sha256": "0" * 64}
    line = {**TEXT_LINE, "input": {**claim, "size": 1, "media_type": "text/plain"}}
    refused = producer(FakeSenders(), InMemoryBlobs()).send(parse_lines(jsonl(line)))
    unchecked = producer(FakeSenders()).send(parse_lines(jsonl(line)))

    [refusal] = refused.refusals
    assert "input.blob_uri is not acceptable" in refusal.reason
    assert (unchecked.sent, unchecked.refusals) == (1, [])


def test_what_does_not_fit_even_with_a_claim_check_is_refused_with_the_reason() -> None:
    senders, blobs = FakeSenders(max_bytes=2000), InMemoryBlobs()
    huge_metadata = {**TEXT_LINE, "metadata": {f"k{i}": "m" * 256 for i in range(12)}}
    big_text = {**TEXT_LINE, "input": {"text": "x" * 5000}}
    report = producer(senders, blobs).send(parse_lines(jsonl(huge_metadata, TEXT_LINE)))
    without_storage = producer(FakeSenders(max_bytes=2000)).send(parse_lines(jsonl(big_text)))

    [refusal] = report.refusals
    assert refusal.line == 1
    assert "larger than the 2,000 bytes the queue accepts even with its text in a claim check" in (
        refusal.reason
    )
    assert report.sent == 1
    [no_storage] = without_storage.refusals
    assert "no blob storage is configured" in no_storage.reason


def test_a_blob_reference_is_described_from_storage_and_checked_for_the_tenant() -> None:
    senders, blobs = FakeSenders(), InMemoryBlobs()
    blobs.upload("incoming", "contoso/scan.pdf", b"%PDF-1.7", "application/pdf", {})
    uri = f"{ACCOUNT_URL}/incoming/contoso/scan.pdf"
    report = producer(senders, blobs, ProducerTenants="contoso,fabrikam").send(
        parse_lines(
            jsonl(
                {**TEXT_LINE, "input": {"blob_uri": uri}},
                {**TEXT_LINE, "tenant_id": "fabrikam", "input": {"blob_uri": uri}},
            )
        )
    )
    [body] = senders.bodies("inference-requests")
    assert isinstance(body.input, ClaimCheck)
    assert (body.input.size, body.input.media_type) == (8, "application/pdf")
    [refusal] = report.refusals
    assert refusal.line == 2
    assert "tenant 'fabrikam/'" in refusal.reason


# --- repeats, failures, the report -----------------------------------------------------------


def test_repeated_lines_are_sent_once_and_a_reused_id_with_other_content_is_refused() -> None:
    senders = FakeSenders()
    report = producer(senders).send(
        parse_lines(
            jsonl(
                {**TEXT_LINE, "request_id": "r-1"},
                TEXT_LINE,
                TEXT_LINE,
                {**TEXT_LINE, "request_id": "r-1", "input": {"text": "other"}},
            )
        )
    )
    assert report.sent == 2
    assert [(r.line, r.first_line) for r in report.repeats] == [(3, 2)]
    [refusal] = report.refusals
    assert (refusal.line, refusal.request_id) == (4, "r-1")
    assert "already used by line 1" in refusal.reason


def test_an_unavailable_broker_stops_the_run_with_exit_code_3() -> None:
    senders = FakeSenders(max_bytes=300, **{"inference-requests": 2})
    lines = [{**TEXT_LINE, "input": {"text": f"t{n}"}} for n in range(10)]
    report = producer(senders).send(parse_lines(jsonl(*lines)))

    assert report.exit_code == 3
    assert report.stopped is not None
    assert report.stopped.startswith("unavailable")
    assert report.sent == len(senders.sent("inference-requests"))
    assert report.unsent > 0
    assert "Run the same input again" in report.summary_text()


def test_a_missing_queue_stops_the_run_with_exit_code_2() -> None:
    senders = FakeSenders()
    senders.sender("inference-requests").fail_on_send = 1
    senders.sender("inference-requests").failure = ConfigurationError("no such entity")
    report = producer(senders).send([RequestLine.model_validate(TEXT_LINE)])
    assert (report.exit_code, report.unsent) == (2, 1)


def test_the_summary_says_the_broker_drops_repeats_and_lists_refusals() -> None:
    report = producer(FakeSenders()).send(parse_lines(jsonl(TEXT_LINE, "oops")))
    text = report.summary_text()
    document = report.as_dict()

    assert "the broker drops ids it has seen in the last 10 minutes" in text
    assert "line 2: not JSON" in text
    assert document["sent"] == 1
    assert document["refusals"][0]["line"] == 2
    assert document["queues"] == {"inference-requests": {"sent": 1, "batches": 1}}
    assert "10 minutes" in document["note"]


def test_progress_is_rewritten_in_place_on_a_terminal_and_periodic_in_a_log() -> None:
    ticks = iter([0.0, 0.05, 0.2, 0.3])
    terminal = io.StringIO()
    display = ProgressDisplay(terminal, interactive=True, clock=lambda: next(ticks))
    report = SendReport()
    display(report)  # 0.05 s after start: too soon
    display(report)  # 0.2 s: shown
    report.finished = 1.0
    display(report)  # the end: always shown, with a newline
    assert terminal.getvalue().count("\r") == 2
    assert terminal.getvalue().endswith("\n")

    log = io.StringIO()
    ProgressDisplay(log, interactive=False)(report)
    assert log.getvalue().startswith("producer: 0 sent")
    assert "\r" not in log.getvalue()


# --- the command line (usage errors never reach a broker) ------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--file", "x.jsonl", "--priority", "high"],
        ["--text", "hi", "--tenant", "t", "--model", "m", "--parameters", "{oops"],
        ["--text", "hi", "--metadata", "novalue"],
        ["--file", "/nonexistent/requests.jsonl"],
    ],
)
def test_usage_errors_exit_with_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, settings()) == 2
    assert capsys.readouterr().err


def test_the_cli_needs_a_source() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--tenant", "t"], settings())
    assert exit_info.value.code == 2
