"""The producer: request lines in, batches on their lanes' queues out, a report back.

For each line, in input order: refuse it if it is invalid or breaks a rule the processor
would dead-letter it for (``planning.LinePolicy``); skip it if an earlier line had the same
request id and content (and refuse it if that id came with other content: the broker
would drop it); describe a blob reference (``ClaimChecks.reference``); build its message
and add it to its queue's open batch (``batching.QueueBatcher``). Inline text above
``MaxInlineTextBytes``, or too large for even an empty batch, is stored as a claim check
(``<inputs container>/<tenant>/<request id>``, as intake stores HTTP inputs) and the
message carries the reference instead. Whatever still does not fit is refused with the
reason. Nothing is dropped silently.

The run stops at the first failure of a dependency (Service Bus, or Blob storage for a
claim check) or a configuration error (a queue that does not exist, missing rights): the
report says what was sent and how many messages were left in unsent batches. Running the
same input again is safe: request ids are the same, and repeats are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from shared.blobs import BlobStore
from shared.clock import Clock, utc_now
from shared.contracts import BlobReferenceInput, ClaimCheck
from shared.errors import (
    ConfigurationError,
    FieldError,
    InvalidInput,
    PermanentError,
    TransientError,
)
from shared.intake.claim_checks import ClaimChecks
from shared.producer.batching import QueueBatcher
from shared.producer.lines import LineRefusal, ParsedLine, RequestLine
from shared.producer.planning import TEXT_MEDIA_TYPE, Planned, Planner
from shared.producer.ports import BatchSenders
from shared.producer.report import (
    EXIT_CONFIGURATION,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    RepeatedLine,
    SendReport,
)
from shared.settings import Settings

Progress = Callable[[SendReport], None]
Item = ParsedLine | LineRefusal | RequestLine


def numbered(items: Iterable[Item]) -> Iterator[ParsedLine | LineRefusal]:
    """Parsed lines as they are; bare ``RequestLine`` objects numbered from 1 in order."""
    for number, item in enumerate(items, start=1):
        yield ParsedLine.of(number, item) if isinstance(item, RequestLine) else item


class Producer:
    """Sends requests straight to the request queues (``send`` -> ``SendReport``).

    ``planner`` checks each line and picks its queue; ``senders`` gives each queue's batch
    sender (``adapters.servicebus_producer``); ``claim_checks`` stores large inputs in the
    app's storage account, needed only for claim checks and blob references (None: such
    lines are refused). ``max_batch_messages`` caps a batch's count (1: one message per
    send); ``keep_ids`` lists the ids sent in the report. ``from_settings`` builds the
    planner and the claim checks of a deployment's settings.
    """

    def __init__(
        self,
        planner: Planner,
        senders: BatchSenders,
        claim_checks: ClaimChecks | None = None,
        *,
        clock: Clock = utc_now,
        progress: Progress | None = None,
        max_batch_messages: int | None = None,
        keep_ids: bool = False,
    ) -> None:
        self.planner = planner
        self.senders = senders
        self.claim_checks = claim_checks
        self.clock = clock
        self.progress: Progress = progress or (lambda report: None)
        self.max_batch_messages = max_batch_messages
        self.keep_ids = keep_ids

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        senders: BatchSenders,
        blobs: BlobStore | None = None,
        *,
        clock: Clock = utc_now,
        progress: Progress | None = None,
        max_batch_messages: int | None = None,
        keep_ids: bool = False,
    ) -> Producer:
        """The producer of this deployment: its request rules and queues, and claim checks
        in ``blobs`` (the app's storage account; None: lines that need one are refused)."""
        return cls(
            Planner.from_settings(settings),
            senders,
            ClaimChecks.from_settings(blobs, settings) if blobs is not None else None,
            clock=clock,
            progress=progress,
            max_batch_messages=max_batch_messages,
            keep_ids=keep_ids,
        )

    def send(self, items: Iterable[Item]) -> SendReport:
        """Send every valid item; the report counts what happened to each."""
        run = _Run(self, SendReport())
        report = run.report
        try:
            for item in numbered(items):
                report.lines += 1
                run.take(item)
            run.flush()
        except TransientError as error:
            run.stop(f"unavailable: {error}", EXIT_UNAVAILABLE)
        except ConfigurationError as error:
            run.stop(f"configuration error: {error}", EXIT_CONFIGURATION)
        except PermanentError as error:
            run.stop(f"the broker refused a batch: {error}", EXIT_REFUSED)
        report.finished = time.monotonic()
        self.progress(report)
        return report


def too_large(batcher: QueueBatcher) -> str:
    limit = batcher.max_bytes
    return f"larger than the {limit:,} bytes the queue accepts" if limit else "too large"


class _Run:
    """The state of one ``Producer.send``: open batches and the ids seen so far."""

    def __init__(self, producer: Producer, report: SendReport) -> None:
        self.producer = producer
        self.planner = producer.planner
        self.claim_checks = producer.claim_checks
        self.report = report
        self.batchers: dict[str, QueueBatcher] = {}
        self.seen: dict[str, tuple[int, str]] = {}  # request id -> (line, fingerprint)

    def take(self, item: ParsedLine | LineRefusal) -> None:
        if isinstance(item, LineRefusal):
            self.refuse(item)
            return
        now = self.producer.clock()
        refusal = self.planner.policy.check(item, now)
        if refusal is not None:
            self.refuse(refusal)
            return
        first = self.seen.get(item.request_id)
        if first is not None:
            if first[1] == item.fingerprint:
                self.report.repeats.append(RepeatedLine(item.line, item.request_id, first[0]))
            else:
                self.refuse_line(
                    item, f"request_id is already used by line {first[0]} for other content"
                )
            return
        try:
            planned = self.plan(item, now)
        except InvalidInput as error:
            self.refuse_line(item, error.message, error.fields)
            return
        if planned is not None and self.enqueue(planned, now):
            self.seen[item.request_id] = (item.line, item.fingerprint)
            if self.producer.keep_ids:
                self.report.request_ids.append(item.request_id)

    def plan(self, item: ParsedLine, now: datetime) -> Planned | None:
        """The planned message, a blob reference described first; None when refused.
        InvalidInput when a blob URI is not one the processor would accept."""
        given = item.request.input
        tenant = item.request.tenant_id
        if isinstance(given, ClaimCheck) and self.claim_checks is not None:
            self.claim_checks.locate(given.blob_uri, tenant)
        if not isinstance(given, BlobReferenceInput):
            return self.planner.plan(item, now)
        if self.claim_checks is None:
            self.refuse_line(item, "a blob reference needs the app's storage (set Storage)")
            return None
        described = self.claim_checks.reference(given.blob_uri, tenant, given.sha256)
        return self.planner.plan(item, now, described)

    def enqueue(self, planned: Planned, now: datetime) -> bool:
        """Add the message to its queue's batch, moving inline text into a claim check
        when it is above MaxInlineTextBytes or too large for the batch; False when the
        line was refused."""
        batcher = self.batcher(planned.queue)
        text = planned.inline_text
        inline_limit = self.planner.policy.max_inline_text_bytes
        if text is not None and len(text) > inline_limit:
            why = f"input.text is {len(text):,} bytes, above MaxInlineTextBytes ({inline_limit:,})"
            return self.claim_check(planned, text, batcher, now, why)
        if batcher.add(planned.envelope):
            return True
        why = f"the message ({len(planned.envelope.body):,} bytes of body) is {too_large(batcher)}"
        if text is None:
            self.refuse_line(planned.parsed, why)
            return False
        return self.claim_check(planned, text, batcher, now, why)

    def claim_check(
        self, planned: Planned, text: bytes, batcher: QueueBatcher, now: datetime, why: str
    ) -> bool:
        """Store the text as a claim check and queue the message that carries it."""
        item = planned.parsed
        if self.claim_checks is None:
            self.refuse_line(item, f"{why}, and no blob storage is configured for a claim check")
            return False
        tenant = item.request.tenant_id
        stored = self.claim_checks.store(tenant, item.request_id, text, TEXT_MEDIA_TYPE)
        moved = self.planner.plan(item, now, stored)
        if not batcher.add(moved.envelope):
            self.refuse_line(
                item,
                f"the message is {too_large(batcher)} even with its text in a claim check "
                f"({len(moved.envelope.body):,} bytes of body without the text)",
            )
            return False
        self.report.claim_checked += 1
        return True

    def batcher(self, queue: str) -> QueueBatcher:
        if queue not in self.batchers:

            def sent(count: int, queue: str = queue) -> None:
                self.report.count_batch(queue, count)
                self.producer.progress(self.report)

            self.batchers[queue] = QueueBatcher(
                self.producer.senders.sender(queue), sent, self.producer.max_batch_messages
            )
        return self.batchers[queue]

    def flush(self) -> None:
        for batcher in self.batchers.values():
            batcher.flush()

    def refuse_line(
        self, item: ParsedLine, reason: str, fields: tuple[FieldError, ...] = ()
    ) -> None:
        self.refuse(LineRefusal(item.line, reason, fields, item.request_id))

    def refuse(self, refusal: LineRefusal) -> None:
        self.report.refusals.append(refusal)
        self.producer.progress(self.report)

    def stop(self, reason: str, code: int) -> None:
        self.report.stopped = reason
        self.report.stop_code = code
        self.report.unsent = sum(batcher.pending for batcher in self.batchers.values())
